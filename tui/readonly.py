"""`ReadOnlyView`: a batch shown in full, with every command refused (`flightdeck serve
--read-only`).

The one place read-only lives. The screens already refuse a key when `read_only` gives a reason
(screens/actions.py `refused`); the wrapper also refuses every command itself, so no key, dialog
or crafted input reaching the app can send one, whatever the screens check.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

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

    @property
    def loop_steer(self) -> str:
        return self.view.loop_steer

    def subscribe(self, fn: Listener) -> Callable[[], None]:
        return self.view.subscribe(fn)

    # Every command, refused here and nowhere else.

    def steer(self, child_ids: Sequence[str], message: str, now: bool) -> None:
        self._refuse("steer")

    def stop(self, child_ids: Sequence[str]) -> None:
        self._refuse("stop")

    def stop_all(self) -> None:
        self._refuse("stop all")

    def set_limits(self, change: Mapping[str, object]) -> None:
        self._refuse("limits")

    def pause(self, child_ids: Sequence[str], resume: bool) -> None:
        self._refuse("continue" if resume else "pause")

    def pause_admission(self, on: bool) -> None:
        self._refuse("pause admission" if on else "continue admission")

    def _refuse(self, what: str) -> None:
        log.warning("%s not sent: %s", what, READ_ONLY)
