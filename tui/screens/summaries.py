"""A steer, stop or pause sent to every child matching a filter: one summary of how it went,
once every child has taken it, instead of a notice per child (there may be thousands).

The bulk sends are values an order hands the screen to track (decisions.Track); each settle_*
returns the summaries now due, for the screen to say."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from flightdeck.engine.model import ChildRow, ChildStatus, SteerReceipt, SteerState


@dataclass(frozen=True, slots=True)
class BulkStop:
    """A stop sent to every child matching a filter: the ones sent, and how many had ended."""

    ids: tuple[str, ...]
    ended: int


@dataclass(frozen=True, slots=True)
class BulkSteer:
    """A steer sent to every child matching a filter: the receipts each child had before it,
    its message (as recorded: redacted) and `now`, and how many had ended."""

    before: dict[str, frozenset[int]]
    ended: int
    message: str
    now: bool

    def made(self, receipt: SteerReceipt) -> bool:
        """Whether this steer made `receipt`: a receipt new since it was sent is not enough,
        as another operator attached to the batch (or a loop policy) may steer the same
        child meanwhile, and that steer's receipt is theirs to be told of."""
        known = self.before.get(receipt.child_id)
        return (
            known is not None
            and receipt.id not in known
            and receipt.by == "operator"
            and receipt.now == self.now
            and receipt.message == self.message
        )


@dataclass(frozen=True, slots=True)
class BulkPause:
    """A pause (or continue) sent to every child matching a filter: the ones sent, and how
    many had ended."""

    ids: tuple[str, ...]
    ended: int
    resume: bool


Bulk = BulkStop | BulkSteer | BulkPause


def had_ended(n: int) -> str:
    """`, 2 had already ended` (nothing when none had)."""
    return f", {n} had already ended" if n else ""


Rows = Mapping[str, ChildRow]


def later(row: ChildRow) -> bool:
    """Its pause is pending until its delegates return (which may take long)."""
    return row.pausing and row.waits_on_delegates


class Summaries:
    """The bulk sends not all taken yet; each settle_* returns how the ones now done went, once
    every child of one has taken it."""

    def __init__(self) -> None:
        self._stops: list[BulkStop] = []  # stops of everything matching, not all landed yet
        self._steers: list[BulkSteer] = []  # steers of everything matching, not all settled
        self._pauses: list[BulkPause] = []  # pauses of everything matching, not all taken
        self._summed: set[int] = set()  # receipts a steer's summary has counted

    def track(self, bulk: Bulk) -> None:
        """Sum `bulk` up once every child of it has taken it."""
        match bulk:
            case BulkStop():
                self._stops.append(bulk)
            case BulkSteer():
                self._steers.append(bulk)
            case BulkPause():
                self._pauses.append(bulk)

    def counts(self, receipt: SteerReceipt) -> bool:
        """Whether a steer's receipt is one of a steer to everything matching: summed up
        when all have settled, never a notice of its own."""
        return receipt.id in self._summed or any(bulk.made(receipt) for bulk in self._steers)

    def settle_steers(self, rows: Rows) -> list[str]:
        """A steer of everything matching, every receipt settled: one summary of them."""
        if not self._steers:
            return []
        said: list[str] = []
        waiting: list[BulkSteer] = []
        for bulk in self._steers:
            states: list[SteerState] = []
            receipts: list[int] = []
            for child_id in bulk.before:
                mine = next((r for r in rows[child_id].steers if bulk.made(r)), None)
                if mine is None or mine.state is SteerState.QUEUED:
                    break
                states.append(mine.state)
                receipts.append(mine.id)
            else:
                self._summed.update(receipts)  # their own notices may still be on the way
                delivered = states.count(SteerState.DELIVERED)
                text = f"steer: {delivered} delivered, {len(states) - delivered} missed"
                said.append(text + had_ended(bulk.ended))
                continue
            waiting.append(bulk)
        self._steers = waiting
        return said

    def settle_stops(self, rows: Rows) -> list[str]:
        """A stop of everything matching, every child of it ended: one summary of how."""
        if not self._stops:
            return []
        said: list[str] = []
        waiting: list[BulkStop] = []
        for bulk in self._stops:
            if any(i in rows and rows[i].status.live for i in bulk.ids):
                waiting.append(bulk)
                continue
            stopped = sum(1 for i in bulk.ids if rows[i].status is ChildStatus.STOPPED)
            # A child that finished on its own before the stop reached it had ended too.
            said.append(f"{stopped} stopped" + had_ended(bulk.ended + len(bulk.ids) - stopped))
        self._stops = waiting
        return said

    def settle_pauses(self, rows: Rows) -> list[str]:
        """A pause (or continue) of everything matching, every child of it paused (continued)
        or ended: one summary of how."""
        if not self._pauses:
            return []
        said: list[str] = []
        waiting: list[BulkPause] = []
        for bulk in self._pauses:
            found = [rows[i] for i in bulk.ids if i in rows]
            if bulk.resume:
                pending = any(r.status is ChildStatus.PAUSED or r.pausing for r in found)
            else:
                # A running child pauses at its next turn boundary: until then, not yet. One
                # waiting on its delegates may wait for long: it counts, its pause pending.
                pending = any(
                    r.status.live and r.status is not ChildStatus.PAUSED and not later(r)
                    for r in found
                )
            if pending:
                waiting.append(bulk)
                continue
            done = sum(1 for r in found if r.status.live)
            verb = "continued" if bulk.resume else "paused"
            text = f"{done} {verb}"
            if not bulk.resume and (n := sum(1 for r in found if later(r))):
                text += f" ({n} once their delegates return)"
            said.append(text + had_ended(bulk.ended + len(bulk.ids) - done))
        self._pauses = waiting
        return said
