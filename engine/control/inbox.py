"""What the coordinator's inbox carries: callers' commands and the facts workers report."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from flightdeck.engine.child.facts import ChildFact
from flightdeck.engine.model import ChildRow


@dataclass(frozen=True, slots=True)
class Steer:
    """Queue `message` for each child in `ids`, under the receipt id at the same position."""

    receipt_ids: tuple[int, ...]
    ids: tuple[str, ...]
    message: str
    now: bool


@dataclass(frozen=True, slots=True)
class Stop:
    """Stop these children; queued ones never start."""

    ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class StopAll:
    """Stop every child that has not ended."""


@dataclass(frozen=True, slots=True)
class SetLimits:
    """The operator's change to the live limits (see engine/limits.py), checked already."""

    change: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Pause:
    """Pause these children (`resume`: continue them); queued ones never start until then."""

    ids: tuple[str, ...]
    resume: bool = False


@dataclass(frozen=True, slots=True)
class PauseAdmission:
    """Pause the batch's admission (`on`), or continue it."""

    on: bool


@dataclass(frozen=True, slots=True)
class RecordProgress:
    """Record every running child's current row now, then set `done`."""

    done: threading.Event


@dataclass(frozen=True, slots=True)
class Then:
    """Run `call` on the coordinator thread once the commands queued before it are applied
    (a client request is marked applied only after what it asked for is recorded)."""

    call: Callable[[], object]


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


OperatorCommand = Steer | Stop | StopAll | SetLimits | Pause | PauseAdmission  # controls.py's
Command = OperatorCommand | RecordProgress | Then | Shutdown
Message = Command | Recorded | Unrecorded | ChildFact
