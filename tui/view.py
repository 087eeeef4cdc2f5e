"""What the TUI reads and drives: the `EngineView` Protocol and `LiveView` over an `Engine`.

`StoreView` (storeview.py) is the other one: a batch whose owner is another process, read from
the store. Keep the Protocol small so both fit it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

from flightdeck.engine.api import Engine
from flightdeck.engine.model import EngineEvent, Snapshot

Listener = Callable[[EngineEvent], None]


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

    def steer(self, child_ids: Sequence[str], message: str, now: bool) -> None:
        """Queue an operator message for each child (`now`: interrupt the current response)."""
        ...

    def stop(self, child_ids: Sequence[str]) -> None:
        """Interrupt these children."""
        ...

    def stop_all(self) -> None:
        """Interrupt every live child; queued ones never start."""
        ...

    def set_limits(self, change: Mapping[str, object]) -> None:
        """Change the live limits (see engine/limits.py); LimitError, nothing changed, for a
        bad change (the dialog shows why)."""
        ...

    def pause(self, child_ids: Sequence[str], resume: bool) -> None:
        """Pause these children (`resume`: continue them)."""
        ...

    def pause_admission(self, on: bool) -> None:
        """Pause the batch's admission (`on`), or continue it."""
        ...

    def transcript_path(self, child_id: str) -> Path | None:
        """The child's live transcript file, or None if the child is unknown."""
        ...

    @property
    def loop_steer(self) -> str:
        """The canned steer `n` sends a looping child (`[steer.canned] loop`), placeholders
        unfilled (engine/inputs/settings/loops.py fills them)."""
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

    def steer(self, child_ids: Sequence[str], message: str, now: bool) -> None:
        self.engine.steer(child_ids, message, now=now)

    def stop(self, child_ids: Sequence[str]) -> None:
        self.engine.stop(child_ids)

    def stop_all(self) -> None:
        self.engine.stop_all()

    def pause(self, child_ids: Sequence[str], resume: bool) -> None:
        if resume:
            self.engine.continue_(child_ids)
        else:
            self.engine.pause(child_ids)

    def pause_admission(self, on: bool) -> None:
        self.engine.pause_admission(on)

    @property
    def loop_steer(self) -> str:
        return self.engine.settings.canned.loop

    def set_limits(self, change: Mapping[str, object]) -> None:
        self.engine.set_limits(change)

    def transcript_path(self, child_id: str) -> Path | None:
        if child_id not in self._paths:
            # The engine names each file; learn them all at once rather than guessing the layout.
            self._paths = {row.id: Path(row.transcript) for row in self.engine.snapshot().children}
        return self._paths.get(child_id)

    def subscribe(self, fn: Listener) -> Callable[[], None]:
        return self.engine.subscribe(fn)
