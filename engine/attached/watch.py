"""Waking a reader when files change: watchfiles' events, with polling as the fallback.

A network share (NFS, SMB) gives no events for another machine's writes, and inotify can run
out of watches: whatever happens, `wake` is also called every `poll_s`, so a reader that checks
cheaply on each wake (SQLite's data_version, a file's size) sees every change, late at worst.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Collection
from pathlib import Path

import watchfiles

log = logging.getLogger(__name__)

# watchfiles gathers changes until none came for STEP_MS (or DEBOUNCE_MS in all): short, as a
# store commit or a transcript line is one write, and the change should show at once.
STEP_MS = 5
DEBOUNCE_MS = 50


class Waker:
    """Calls `wake()` on its own thread when a file named in `names` in `folder` changes, and at
    least every `poll_s` seconds."""

    def __init__(
        self,
        folder: Path,
        names: Collection[str],
        wake: Callable[[], object],
        *,
        poll_s: float = 0.25,
        force_polling: bool = False,
        min_interval_s: float = 0.0,
        max_share: float = 1.0,
    ) -> None:
        self.folder = folder
        self.names = frozenset(names)
        self.poll_s = poll_s
        self.force_polling = force_polling
        # A writer committing hundreds of times a second wakes a reader at most this often.
        self.min_interval_s = min_interval_s
        # A long wake-up (a large store's read) rests the longer after it: it takes at most this
        # share of the time, so the process's other threads get the GIL (and a loaded machine's
        # slower reads are the sparser).
        self.max_share = max_share
        self._next = 0.0  # no call before this (time.monotonic())
        self._wake = wake
        self._stop = threading.Event()
        self.events = True  # False once watching failed and only polling is left
        self._thread = threading.Thread(target=self._run, name="flightdeck-watch", daemon=True)

    def start(self) -> Waker:
        self._thread.start()
        return self

    def close(self, wait: bool = True) -> None:
        """Stop watching (within a few milliseconds; `wait` for it); idempotent."""
        self._stop.set()
        if wait and self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2.0)

    def _run(self) -> None:
        if not self.force_polling:
            try:
                self._watch()
                if self._stop.is_set():
                    return
            except Exception as exc:  # no inotify watches left, the folder gone, ...
                if self._stop.is_set():
                    return
                log.debug("flightdeck watch: %s: %s; polling instead", self.folder, exc)
        self.events = False
        while not self._stop.wait(self.poll_s):
            self._call()

    def _watch(self) -> None:
        def wanted(_: watchfiles.Change, path: str) -> bool:
            # Read each time: `names` may be replaced (another file of the same folder).
            return os.path.basename(path) in self.names

        for _ in watchfiles.watch(
            self.folder,
            watch_filter=wanted,
            debounce=DEBOUNCE_MS,
            step=STEP_MS,
            stop_event=self._stop,
            rust_timeout=max(1, int(self.poll_s * 1000)),
            yield_on_timeout=True,  # an empty set every poll_s: the polling fallback
            recursive=False,
            raise_interrupt=False,
        ):
            if self._stop.is_set():
                return
            self._call()

    def _call(self) -> None:
        wait = self._next - time.monotonic()
        if wait > 0 and self._stop.wait(wait):
            return
        began = time.monotonic()
        try:
            self._wake()
        except Exception:  # a reader's bug must not end the watching
            log.exception("flightdeck watch: a wake-up failed")
        ended = time.monotonic()
        rest = (ended - began) * (1 / self.max_share - 1)
        self._next = max(began + self.min_interval_s, ended + rest)
