"""What the coordinator's inbox carries: the operator's orders, the engine's own requests, and
the facts workers report."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Mapping

from flightdeck.engine.child.facts import ChildFact
from flightdeck.engine.commands import Command
from flightdeck.engine.model import ChildRow, GroupFinished
from flightdeck.engine.model.record import record
from flightdeck.engine.review.values import Changes


class Answer:
    """Set once the coordinator has applied an order, or refused it (`refused`: why): what an
    in-process sender of a command that `waits` waits on."""

    def __init__(self) -> None:
        self.refused: str | None = None
        self._done = threading.Event()

    def settle(self, refused: str | None) -> None:
        self.refused = refused
        self._done.set()

    def wait(self, timeout: float) -> bool:
        """True once settled (within `timeout` seconds)."""
        return self._done.wait(timeout)


@record
class Order:
    """An operator's command (engine/commands.py), checked by its sender, for the coordinator to
    apply: with the receipt ids its sender numbered (one per child of a steer), the client
    request it came from, settled once it is applied, and what its sender waits on (if it does)."""

    command: Command
    receipt_ids: tuple[int, ...] = ()
    request_id: int | None = None
    answer: Answer | None = None


@record
class Reviewed:
    """An accept or discard was applied off the coordinator thread: each child's changes as
    now decided, or why it was refused (nothing applied)."""

    order: Order
    decided: Mapping[str, Changes]
    refused: str | None = None


@record
class RecordProgress:
    """Record every running child's current row now, then set `done`."""

    done: threading.Event


@record
class Shutdown:
    """Stop answering commands: the engine is closing."""


@record
class Recorded:
    """A final row is committed to the store: the child now counts as done."""

    row: ChildRow


@record
class Unrecorded:
    """A final row the store gave up on: the child counts as done, but is never announced."""

    row: ChildRow


@record
class UnitRecorded:
    """A unit's "unit" event is committed (or given up on): it is announced only if it was."""

    unit: GroupFinished
    committed: bool


Message = (
    Order | Reviewed | RecordProgress | Shutdown | Recorded | Unrecorded | UnitRecorded | ChildFact
)


class ReceiptIds:
    """Steer receipt ids no other steer of the batch has (any thread: a sender numbers its
    steers before the coordinator applies them)."""

    def __init__(self, first: int = 1) -> None:
        self._ids = itertools.count(first)
        self._lock = threading.Lock()

    def next(self) -> int:
        """The next id."""
        with self._lock:
            return next(self._ids)
