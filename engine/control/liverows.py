"""The running children's rows on a tick: recorded every PROGRESS_EVERY_S (an attached view
reads them from the store), and published with their live figures every LIVE_EVERY_S."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping

from flightdeck.engine.child.state import Child
from flightdeck.engine.control.recorder import ROW_WAIT_S, Recorder
from flightdeck.engine.model import ChildRow

PROGRESS_EVERY_S = 0.1  # how often running children's counters reach the store (for attach)
# How often the alive children's live figures (calls in flight, retry notices) are published
# for attached views: with their reading, well within half a second.
LIVE_EVERY_S = 0.2


class LiveRows:
    """The alive children's rows, recorded when they changed, and their live figures
    published."""

    def __init__(
        self,
        recorder: Recorder,
        publish_live: Callable[[tuple[ChildRow, ...]], None],
    ) -> None:
        self._recorder = recorder
        self._publish_live = publish_live
        self._last_progress = 0.0
        self._last_live = 0.0
        self._versions: dict[str, int] = {}  # alive children's versions, as last recorded

    def tick(self, alive: Mapping[str, Child], now: float) -> None:
        """Record and publish what is due at `now`."""
        if now - self._last_progress < PROGRESS_EVERY_S:
            return
        self._last_progress = now
        if now - self._last_live < LIVE_EVERY_S:
            self.record(alive)
            return
        self._last_live = now
        # The rows published are the rows recorded, built here and not at their commit:
        # `resume` bills a call in flight only to the row stored beside these figures, and a row
        # built before a bill that the figures count had neither (the call's cost was lost).
        versions = self._versions
        rows = []
        for child in alive.values():
            version = child.version  # before its row: a change after it is recorded next time
            row = child.row()
            rows.append(row)
            if versions.get(child.task.id) != version:
                versions[child.task.id] = version
                self._recorder.record_running(child.task.id, functools.partial(_as_built, row))
        self._prune(alive)
        self._publish_live(tuple(rows))

    def forget(self, child_id: str) -> None:
        """A child runs again (a retry): its next row is recorded whatever its version."""
        self._versions.pop(child_id, None)

    def record(self, alive: Mapping[str, Child]) -> None:
        """Record every alive child's row that changed since it was last recorded: built as the
        store commits it, and not at all if the child's final row comes with it (an instant
        child's often does)."""
        versions = self._versions
        for child in alive.values():
            if versions.get(child.task.id) != child.version:
                versions[child.task.id] = child.version
                self._recorder.record_running(
                    child.task.id, functools.partial(child.row, ROW_WAIT_S)
                )
        self._prune(alive)

    def _prune(self, alive: Mapping[str, Child]) -> None:
        if len(self._versions) > len(alive):
            self._versions = {cid: v for cid, v in self._versions.items() if cid in alive}


def _as_built(row: ChildRow) -> ChildRow:
    return row
