"""When the operator last looked, and when the "since you last looked" digest is due.

The screen tells it each snapshot and each key; it answers with the digest to show. Two marks:
`seen` (the last key: where an idle digest starts, and what is kept on disk for the next
attach) and `acked` (the attach, or the last time a digest was dismissed: where `d` starts).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from flightdeck.engine.apilight import TuiSettings
from flightdeck.engine.model import Snapshot
from flightdeck.tui.digest import Digest, Mark, digest
from flightdeck.tui.lastlooked import LastLooked

KEEP_EVERY_S = 30.0  # the last-looked mark is written this often (and on quit)


class Attention:
    """The operator's attention to one batch, on the screen's clock."""

    def __init__(
        self, settings: TuiSettings, looked: LastLooked | None, clock: Callable[[], float]
    ) -> None:
        self.settings = settings
        self.looked = looked
        self.clock = clock
        self.seen: Mark | None = None
        self.acked: Mark | None = None
        self.since: Mark | None = None  # where the digest on screen starts (None: none shown)
        self._last_key = clock()
        self._kept: Mark | None = None  # what the file holds
        self._kept_at = self._last_key

    def opened(self, snap: Snapshot) -> Digest | None:
        """The first snapshot: the digest since the last attach, if one was kept and anything
        happened since."""
        before = self.looked.read() if self.looked is not None else None
        self.seen = self.acked = self._mark(snap)
        if before is None:
            return None
        self.acked = before
        found = self._digest(before, snap)
        if found.empty:
            return None
        self.since = before
        return found

    def key(self, snap: Snapshot | None) -> None:
        """The operator pressed a key: they are looking now."""
        self._last_key = self.clock()
        if snap is not None:
            self.seen = self._mark(snap)

    def polled(self, snap: Snapshot) -> Digest | None:
        """Each snapshot: the digest to show (kept up to date while one shows), or None."""
        now = self.clock()
        if self.seen is not None and now - self._kept_at >= KEEP_EVERY_S:
            self._keep(self.seen)
        if self.since is not None:
            return self._digest(self.since, snap)
        idle_s = self.settings.digest_idle_s
        if not idle_s or self.seen is None or now - self._last_key < idle_s:
            return None
        found = self._digest(self.seen, snap)
        if found.empty:
            return None  # asked again next poll: it shows once something happens
        self.since = self.seen
        return found

    def on_demand(self, snap: Snapshot) -> Digest:
        """`d`: the digest since the attach or the last dismissal, even if nothing happened."""
        self.since = self.acked or self._mark(snap)
        return self._digest(self.since, snap)

    def dismissed(self, snap: Snapshot | None) -> None:
        """The digest was dismissed: what it told has been seen."""
        self.since = None
        if snap is not None:
            self.seen = self.acked = self._mark(snap)
            self._keep(self.seen)
        self._last_key = self.clock()

    def closed(self, snap: Snapshot | None) -> None:
        """The screen goes (detach, quit): the operator saw it up to now."""
        if snap is not None:
            self._keep(self._mark(snap))

    def _mark(self, snap: Snapshot) -> Mark:
        """What the operator sees now. An ended batch's snapshot is dated at its end: a look
        at it is taken now, however long after."""
        mark = Mark.of(snap)
        if snap.finished_ts is None:
            return mark
        return dataclasses.replace(mark, ts=max(mark.ts, self.clock()))

    def _digest(self, since: Mark, snap: Snapshot) -> Digest:
        """The digest from `since`, its "ago" up to now: an ended batch's snapshot is dated at
        its end, however long ago that was."""
        found = digest(since, snap)
        return dataclasses.replace(found, until=max(found.until, self.clock()))

    def _keep(self, mark: Mark) -> None:
        self._kept_at = self.clock()
        if self.looked is None or mark == self._kept:
            return
        self.looked.write(mark)
        self._kept = mark
