"""What the coordinator's inbox carries: the operator's orders, the engine's own requests, and
the facts workers report."""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass

from flightdeck.engine.child.facts import ChildFact
from flightdeck.engine.commands import Command
from flightdeck.engine.model import ChildRow


@dataclass(frozen=True, slots=True)
class Order:
    """An operator's command (engine/commands.py), checked by its sender, for the coordinator to
    apply: with the receipt ids its sender numbered (one per child of a steer), and the client
    request it came from, settled once it is applied."""

    command: Command
    receipt_ids: tuple[int, ...] = ()
    request_id: int | None = None


@dataclass(frozen=True, slots=True)
class RecordProgress:
    """Record every running child's current row now, then set `done`."""

    done: threading.Event


@dataclass(frozen=True, slots=True)
class Shutdown:
    """Stop answering commands: the engine is closing."""


@dataclass(frozen=True, slots=True)
class Recorded:
    """A final row is committed to the store: the child now counts as done."""

    row: ChildRow


@dataclass(frozen=True, slots=True)
class Unrecorded:
    """A final row the store gave up on: the child counts as done, but is never announced."""

    row: ChildRow


Message = Order | RecordProgress | Shutdown | Recorded | Unrecorded | ChildFact


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
