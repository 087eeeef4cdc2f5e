"""`ReadOnlyView`: a batch shown in full, with every command refused (`flightdeck serve
--read-only`).

The one place read-only lives. The screens already refuse a key when `read_only` gives a reason
(`MainScreen.order`); the wrapper also refuses every command itself, so no key, dialog
or crafted input reaching the app can send one, whatever the screens check.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from flightdeck.engine.commands import Command
from flightdeck.engine.model import Snapshot
from flightdeck.tui.view import EngineView, Listener

READ_ONLY = (
    "read-only: this view watches the batch; steer, stop, pause, limits and retry send nothing"
)

log = logging.getLogger(__name__)  # under "flightdeck": the TUI shows warnings as notifications


class ReadOnlyView:
    """`EngineView` over another one: everything it shows, none of its commands."""

    def __init__(self, view: EngineView) -> None:
        self.view = view

    @property
    def read_only(self) -> str:
        return READ_ONLY

    @property
    def can_detach(self) -> bool:
        return self.view.can_detach

    def snapshot(self) -> Snapshot:
        return self.view.snapshot()

    def transcript_path(self, child_id: str) -> Path | None:
        return self.view.transcript_path(child_id)

    def secrets(self) -> tuple[str, ...]:
        return self.view.secrets()

    def subscribe(self, fn: Listener) -> Callable[[], None]:
        return self.view.subscribe(fn)

    def send(self, command: Command) -> None:
        """Every command, refused here and nowhere else."""
        log.warning("%s not sent: %s", command.title, READ_ONLY)
