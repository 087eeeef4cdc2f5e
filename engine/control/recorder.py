"""`Recorder`: what the coordinator and its parts keep, as the owner's store takes it.

One narrow seam instead of a callable per kind of record: the owner hands the coordinator an
object that records a batch's rows, receipts, events and live limits (owner/recording.py, over
the SQLite store), and the parts record through it without knowing where it goes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from flightdeck.engine.commands import Command
from flightdeck.engine.model import ChildRow, GroupFinished, Limits, SteerReceipt
from flightdeck.engine.records.faults import StoreTrouble

# How long the store's writer waits for a child's lock to build its running row (`row(wait)`):
# past it, that row is not written. A thread holding it that long is stopped there: the main
# thread, in `row()` when a signal came, whose handler waits for the writer (a second Ctrl+C).
ROW_WAIT_S = 0.25


class Recorder(Protocol):
    """Where a running batch's records go (called on the coordinator thread)."""

    def record(self, row: ChildRow, events: Sequence[tuple[str, str]] = ()) -> None:
        """A child's row as it is now; `events` (kind, detail) of that child, committed in the
        row's transaction: an owner killed between a row and the event that explains it left
        one without the other."""

    def record_running(self, child_id: str, row: Callable[[], ChildRow]) -> None:
        """A running child's row as `row()` gives it when it is written (on another thread),
        never its end; not made at all if the child's next row comes with it."""

    def record_final(
        self, row: ChildRow, then: Callable[[bool], None], unit: GroupFinished | None = None
    ) -> None:
        """A child's final row; `then(committed)` once the store has it (or gave up). `unit`:
        the unit it ends, whose event is committed with the row (never one without the other)."""

    def record_unit(self, unit: GroupFinished, then: Callable[[bool], None] | None) -> None:
        """A unit announced; `then(committed)`, if given, once the store has it (or gave up)."""

    def record_receipt(self, receipt: SteerReceipt, request_id: int | None) -> None:
        """A steer's receipt, and the client's request that asked for it, if one did."""

    def record_event(self, child_id: str | None, kind: str, detail: str) -> None:
        """An operator's (or a policy's) action, for the report and attached views."""

    def record_held(self, held: str | None) -> None:
        """Why admission is held now (None: it is not)."""

    def record_limits(self, limits: Limits, held: str | None) -> None:
        """The live limits changed, or a hold began or ended: for attached views and resume."""

    def settle_request(
        self,
        request_id: int,
        receipts: tuple[int, ...],
        refused: str | None,
        command: Command | None = None,
        *,
        ended: bool = False,
    ) -> None:
        """A client's request applied (with the steer receipts it made) or refused (why;
        `ended`: only because what it named had ended first, which its client says as a
        notice); `command` as the owner took it (a key typed into a message redacted), kept
        in its stead."""

    def trouble(self) -> StoreTrouble | None:
        """What keeps the store from committing now; None while it commits."""
