"""What the TUI reads and drives: the `EngineView` Protocol and `LiveView` over an `Engine`.

`StoreView` (engine/attached) is the other one: a batch whose owner is another process, read
from the store. Keep the Protocol small so both fit it: every command goes through `send`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from flightdeck.engine.commands import Command, StopAll
from flightdeck.engine.model import EngineEvent, Snapshot

if TYPE_CHECKING:  # attach reads a store, with no engine of its own to import
    from flightdeck.engine.api import Engine

Listener = Callable[[EngineEvent], None]

log = logging.getLogger(__name__)


class EngineView(Protocol):
    """A batch as the UI sees it: frozen snapshots to poll, a few commands, discrete facts."""

    @property
    def read_only(self) -> str | None:
        """Why steer and stop cannot reach this batch (its owner is gone), or None."""
        ...

    @property
    def can_detach(self) -> bool:
        """Whether the UI can leave and the batch run on (its owner is another process)."""
        ...

    def snapshot(self) -> Snapshot:
        """An immutable view of every child and the totals; cheap enough to poll."""
        ...

    def send(self, command: Command) -> None:
        """Send an operator's command (engine/commands.py) to the batch; CommandError, nothing
        sent, if it cannot be applied (the TUI says why)."""
        ...

    def transcript_path(self, child_id: str) -> Path | None:
        """The child's live transcript file, or None if the child is unknown."""
        ...

    def secrets(self) -> tuple[str, ...]:
        """The batch's keys known here: a child's diff shows the files it wrote, and is redacted
        of them (everything else the engine shows of a child, it redacted itself)."""
        ...

    def subscribe(self, fn: Listener) -> Callable[[], None]:
        """Call `fn` for each engine event (on any thread); returns an unsubscribe function."""
        ...


class LiveView:
    """`EngineView` over an in-process `Engine`."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._paths: dict[str, Path] = {}

    read_only: str | None = None  # the engine is in this process: it hears every command
    can_detach: bool = False  # and ends with it

    def snapshot(self) -> Snapshot:
        return self.engine.snapshot()

    def send(self, command: Command) -> None:
        self.engine.send(command)

    def transcript_path(self, child_id: str) -> Path | None:
        if child_id not in self._paths:
            # The engine names each file; learn them all at once rather than guessing the layout.
            self._paths = {row.id: Path(row.transcript) for row in self.engine.snapshot().children}
        return self._paths.get(child_id)

    def secrets(self) -> tuple[str, ...]:
        return self.engine.secrets()

    def subscribe(self, fn: Listener) -> Callable[[], None]:
        return self.engine.subscribe(fn)

    def wind_down(self, timeout: float) -> None:
        """Stop every child, wait up to `timeout` for the batch to end, and commit what it
        recorded: for a process about to end with no app left to quit it (its terminal gone),
        so that the store says `stopped`, not `running` for a resume to find."""
        engine = self.engine
        with contextlib.suppress(RuntimeError):  # closed: every child has ended already
            engine.send(StopAll())
            if not engine.wait(timeout):
                log.warning(
                    "the terminal has gone: batch %s cut off with children still running "
                    "(flightdeck resume runs it on)",
                    engine.batch_id,
                )
        engine.flush(timeout)
