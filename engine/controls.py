"""The operator's controls as `Engine` takes them, from this process or as a client's request
recorded in the store (`flightdeck steer/stop/...`, an attached TUI): checked here, on the
caller's thread, then handed to the coordinator thread, which alone decides.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from flightdeck.engine.assembly import too_long
from flightdeck.engine.child.steering import missed_note
from flightdeck.engine.control.coordinator import Coordinator
from flightdeck.engine.control.inbox import (
    Pause,
    PauseAdmission,
    SetLimits,
    Steer,
    Stop,
    StopAll,
    Then,
)
from flightdeck.engine.inputs.messages import id_list
from flightdeck.engine.inputs.tasks import unicode_problem
from flightdeck.engine.limits import changed
from flightdeck.engine.model import ChildRow, Limits, SteerReceipt, SteerState
from flightdeck.engine.records.requests import RequestKind, RequestRow, RequestState
from flightdeck.engine.records.store import Store
from flightdeck.engine.records.transcripts import TranscriptWriter


class Controls:
    """One started batch's controls: its coordinator, its store, the rows a resume carried."""

    def __init__(
        self,
        coordinator: Coordinator,
        store: Store,
        batch_id: str,
        *,
        clock: Callable[[], float],
        carried: tuple[ChildRow, ...],  # final rows an earlier owner left (a resumed batch)
        max_chars: int,  # `[engine] max_task_chars`: a steer joins the prompt as a goal does
        request_of: dict[int, int],  # steer receipt id -> the client request, filled here
    ) -> None:
        self._co = coordinator
        self._store = store
        self._batch_id = batch_id
        self._clock = clock
        self._carried = {r.id: r for r in carried}
        self._max_chars = max_chars
        self._request_of = request_of

    def steer(self, child_ids: Iterable[str], message: str, now: bool) -> list[int]:
        c = self._co
        limit = self._max_chars
        if len(message) > limit:  # it joins the child's prompt, as a goal does: the same bound
            raise ValueError(f"steer message: {too_long(len(message), limit)}")
        problem = unicode_problem(message)
        if problem:  # it would fail the child's request and the store's write, far from here
            raise ValueError(f"steer message: {problem}")
        ids = self._known(child_ids)
        live = tuple(i for i in ids if i in c.by_id)
        receipts = [c.next_receipt_id() for _ in live]
        c.command(Steer(tuple(receipts), live, message, now))
        ended = [i for i in ids if i not in c.by_id]  # finished before a resume
        return receipts + self._missed_carried(ended, message, now)

    def stop(self, child_ids: Iterable[str]) -> None:
        c = self._co
        ids = self._known(child_ids)
        c.command(Stop(tuple(i for i in ids if i in c.by_id)))  # the others have ended

    def set_limits(self, change: Mapping[str, object]) -> Limits:
        c = self._co
        new = changed(c.limits(), change)
        c.command(SetLimits(dict(change)))
        return new

    def pause(self, child_ids: Iterable[str], *, resume: bool = False) -> None:
        c = self._co
        ids = self._known(child_ids)
        c.command(Pause(tuple(i for i in ids if i in c.by_id), resume=resume))

    def apply_request(self, request: RequestRow) -> None:
        """A client's command (owner duties thread): applied by the coordinator in order, and
        marked applied once what it made is recorded; an id this batch lacks, refused."""
        c, store = self._co, self._store
        unknown = [i for i in request.child_ids if i not in c.by_id and i not in self._carried]
        if unknown:
            reason = f"no child with id {', '.join(unknown[:5])} in batch {self._batch_id}"
            self._refuse(request, reason)
            return
        live = tuple(i for i in request.child_ids if i in c.by_id)
        receipts: list[int] = []
        if request.kind == RequestKind.STEER:
            message = request.message or ""
            receipts = [c.next_receipt_id() for _ in live]
            for rid in receipts:
                self._request_of[rid] = request.id
            c.command(Steer(tuple(receipts), live, message, request.now))
            ended = [i for i in request.child_ids if i not in c.by_id]
            receipts += self._missed_carried(ended, message, request.now, request.id)
        elif request.kind == RequestKind.STOP:
            c.command(Stop(live))
        elif request.kind == RequestKind.STOP_ALL:
            c.command(StopAll())
        elif request.kind == RequestKind.LIMITS:
            try:
                changed(c.limits(), request.payload or {})
            except ValueError as exc:
                self._refuse(request, str(exc))
                return
            c.command(SetLimits(dict(request.payload or {})))
        elif request.kind in (RequestKind.PAUSE, RequestKind.CONTINUE):
            c.command(Pause(live, resume=request.kind == RequestKind.CONTINUE))
        elif request.kind in (RequestKind.PAUSE_ADMISSION, RequestKind.CONTINUE_ADMISSION):
            c.command(PauseAdmission(request.kind == RequestKind.PAUSE_ADMISSION))
        else:  # a kind with no handler here: said, never taken for another
            self._refuse(request, f"this owner cannot apply a {request.kind.value!r} request")
            return

        def applied() -> None:
            store.settle_request(
                self._batch_id,
                request.id,
                RequestState.APPLIED,
                self._clock(),
                control_ids=receipts,
            )

        c.command(Then(applied))

    def _refuse(self, request: RequestRow, reason: str) -> None:
        self._store.settle_request(
            self._batch_id, request.id, RequestState.REFUSED, self._clock(), reason=reason
        )

    def _missed_carried(
        self, ids: Iterable[str], message: str, now: bool, request_id: int | None = None
    ) -> list[int]:
        """A steer for children an earlier owner finished (a resumed batch): each settled
        missed at once, as for any child that has ended."""
        out = []
        for child_id in ids:
            row = self._carried[child_id]
            rid, ts = self._co.next_receipt_id(), self._clock()
            missed = SteerReceipt(rid, child_id, message, now, SteerState.MISSED, ts, ts)
            self._store.record_control(self._batch_id, missed, "steer", request_id)
            writer = TranscriptWriter(row.transcript, self._clock)
            reason = f"the child had ended: {row.status.value}"
            writer.write("operator", missed_note(message, reason))
            writer.close()
            out.append(rid)
        return out

    def _known(self, child_ids: Iterable[str]) -> tuple[str, ...]:
        """The ids, all of children of this batch (running here, or carried from before a
        resume); ValueError naming those that are not."""
        # A mistyped id would otherwise be skipped in silence: the operator would wait for a
        # steer or a stop that was never going to happen.
        ids = id_list(child_ids)
        unknown = [i for i in ids if i not in self._co.by_id and i not in self._carried]
        if unknown:
            shown = ", ".join(repr(i) for i in unknown[:5]) + (" …" if len(unknown) > 5 else "")
            raise ValueError(f"no child with id {shown} in batch {self._batch_id}")
        return ids
