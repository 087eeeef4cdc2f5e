"""`StoreRecorder`: what a running batch records (control/recorder.py's `Recorder`), into the
owner's SQLite store, under the batch's id."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from flightdeck.engine.commands import Answer, Command, Steer, encode
from flightdeck.engine.model import ChildRow, GroupFinished, Limits, SteerReceipt
from flightdeck.engine.model.livelimits import limits_json
from flightdeck.engine.model.units import UNIT_EVENT, told_json
from flightdeck.engine.records.faults import StoreTrouble
from flightdeck.engine.records.requests import Refusal, RequestState
from flightdeck.engine.records.store import Store


class StoreRecorder:
    """One batch's records, queued to the store's writer thread (none of these blocks)."""

    def __init__(self, store: Store, batch_id: str, clock: Callable[[], float]) -> None:
        self._store = store
        self._batch_id = batch_id
        self._clock = clock

    def record(self, row: ChildRow, events: Sequence[tuple[str, str]] = ()) -> None:
        """A child's row as it is now, with its `events` (kind, detail) in the same transaction."""
        told = [(row.id, self._clock(), kind, detail) for kind, detail in events]
        self._store.update_child(self._batch_id, row, events=told)

    def record_running(self, child_id: str, row: Callable[[], ChildRow]) -> None:
        """A running child's row as `row()` gives it when the store's writer commits it, never
        its end; not made if the child's next row is committed with it."""
        self._store.update_running(self._batch_id, child_id, row)

    def record_final(
        self, row: ChildRow, then: Callable[[bool], None], unit: GroupFinished | None = None
    ) -> None:
        """A child's final row; `then(committed)` once the store has it (or gave up). `unit`:
        the unit it ends, its "unit" event in the row's transaction."""
        events = () if unit is None else ((None, self._clock(), UNIT_EVENT, told_json(unit)),)
        self._store.update_child(self._batch_id, row, then, events=events)

    def record_unit(self, unit: GroupFinished, then: Callable[[bool], None] | None) -> None:
        """A unit announced (a "unit" event: what a resume reads to announce no unit twice);
        `then(committed)`, if given, once the store has it (or gave up)."""
        detail = told_json(unit)
        self._store.record_event(self._batch_id, None, self._clock(), UNIT_EVENT, detail, then)

    def record_receipt(self, receipt: SteerReceipt, request_id: int | None) -> None:
        """A steer's receipt, and the client's request that asked for it, if one did."""
        self._store.record_control(self._batch_id, receipt, "steer", request_id)

    def record_event(self, child_id: str | None, kind: str, detail: str) -> None:
        """An operator's (or a policy's) action, for the report and attached views."""
        self._store.record_event(self._batch_id, child_id, self._clock(), kind, detail)

    def record_held(self, held: str | None) -> None:
        """Why admission is held now (None: it is not)."""
        self._store.set_held(self._batch_id, held)

    def record_limits(self, limits: Limits, held: str | None) -> None:
        """The live limits and the hold, for attached views and resume."""
        self._store.set_limits(self._batch_id, limits.pool_size, limits_json(limits))
        self._store.set_held(self._batch_id, held)

    def settle_request(
        self,
        request_id: int,
        receipts: tuple[int, ...],
        refused: str | None,
        command: Command | None = None,
        *,
        ended: bool = False,
    ) -> None:
        """A client's request applied (with the steer receipts it made) or refused (why, and
        `ended`: only because what it named had ended first): settled in the store after what
        it made. A steer or an answer is kept as the owner took it: a key the client could not
        redact (a header's value) is redacted there."""
        payload = encode(command)[1] if isinstance(command, Steer | Answer) else None
        refusal = None if refused is None else Refusal.ENDED if ended else Refusal.ERROR
        self._store.settle_request(
            self._batch_id,
            request_id,
            RequestState.APPLIED if refused is None else RequestState.REFUSED,
            self._clock(),
            control_ids=receipts if refused is None else (),
            reason=refused,
            refusal=refusal,
            payload=payload,
        )

    def trouble(self) -> StoreTrouble | None:
        """What keeps the store from committing now; None while it commits."""
        return self._store.trouble
