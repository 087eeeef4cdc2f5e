"""The running children's rows on a tick: recorded every PROGRESS_EVERY_S (an attached view
reads them from the store), and published with their live figures every LIVE_EVERY_S."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from flightdeck.engine.child.state import Child
from flightdeck.engine.control.recorder import Recorder
from flightdeck.engine.model import ChildRow

PROGRESS_EVERY_S = 0.1  # how often running children's counters reach the store (for attach)
# How often the alive children's live figures (calls in flight, retry notices) are published
# for attached views: with their reading, well within half a second.
LIVE_EVERY_S = 0.2


class LiveRows:
    """The alive children's rows as last recorded; only a child that changed is recorded again."""

    def __init__(
        self,
        recorder: Recorder,
        publish_live: Callable[[tuple[ChildRow, ...]], None],
    ) -> None:
        self._recorder = recorder
        self._publish_live = publish_live
        self._last_progress = 0.0
        self._last_live = 0.0
        self._versions: dict[str, int] = {}
        self._rows: dict[str, ChildRow] = {}  # alive children's rows, as last recorded

    def tick(self, alive: Mapping[str, Child], now: float) -> None:
        """Record and publish what is due at `now`."""
        if now - self._last_progress >= PROGRESS_EVERY_S:
            self._last_progress = now
            self.record(alive)
            if now - self._last_live >= LIVE_EVERY_S:
                self._last_live = now
                self._publish_live(tuple(self._rows.values()))

    def forget(self, child_id: str) -> None:
        """A child runs again (a retry): its next row is recorded whatever its version."""
        self._versions.pop(child_id, None)

    def record(self, alive: Mapping[str, Child]) -> None:
        """Record every alive child's row that changed since it was last recorded, now."""
        rows = self._rows
        for child in alive.values():
            if self._versions.get(child.task.id) != child.version:
                self._versions[child.task.id] = child.version
                row = rows[child.task.id] = child.row()
                self._recorder.record(row)
        if len(rows) > len(alive) or any(cid not in alive for cid in rows):
            self._rows = {cid: row for cid, row in rows.items() if cid in alive}
