"""`TranscriptSink`: every child's transcript events on their way to one writer.

Like rows to the SQLite writer: worker threads never block on file I/O, and never contend to
create files in one folder. Sending an event wakes nothing (a deque append); a drain
thread moves events every `DRAIN_S`, so a burst costs no thread switch per line, and a
`tail -f` sees a line at most that much later.

A helper process formats and writes the lines (`appender.py` says why), fed framed batches of
events down a pipe (`writerproc.py`). The coordinator frames queued events between facts
(`pump`), while it holds the interpreter lock anyway, so the drain thread, which has to win the
lock back from busy workers, makes one pipe write per drain.

Without the helper (it cannot start, or it dies) the drain thread formats and writes the files
itself. If the helper dies, the events it had not confirmed writing are written here, then every
later event (`writerproc.py` says what that can still cost).
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

from flightdeck.engine.records.appender import Transcripts, apply_frames
from flightdeck.engine.records.events import Event, encode
from flightdeck.engine.records.writerproc import WriterProcess, log_failures

log = logging.getLogger("flightdeck.transcripts")


class _Close:
    """The last item: write everything, stop the helper, close every file."""


_CLOSE = _Close()
_Item = Event | threading.Event | _Close  # an event, or a flush or close marker


class TranscriptSink:
    """Carries transcript events from any thread to the writer process, or writes them itself."""

    MAX_OPEN = 128  # descriptors kept open (least recently used are closed first)
    DRAIN_S = 0.02
    HELPER_EXIT_S = 10.0  # close() waits this long for the helper to write its last lines

    def __init__(self) -> None:
        self._items: deque[_Item] = deque()
        # Queue one transcript event; any thread, never blocks: the deque's own append (atomic,
        # no lock, no wake-up), with no Python call around it (a child sends several).
        self.send: Callable[[Event], None] = self._items.append
        self._wake = threading.Event()
        self._frame_lock = threading.Lock()  # taking items off the queue and framing them
        self._out = bytearray()  # framed, not yet handed to the helper
        self._closed = False
        self._local = Transcripts(self.MAX_OPEN, index=True)
        self._helper: WriterProcess | None = None
        started = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(started,), name="flightdeck-transcripts"
        )
        self._thread.daemon = True  # close() drains it; a crash must not hang the exit
        self._thread.start()
        started.wait()

    @property
    def helper_pid(self) -> int | None:
        """The writer process, while one is in use."""
        helper = self._helper
        return None if helper is None else helper.pid

    def flush(self, timeout: float | None = None) -> bool:
        """Block until every line queued before this call has been written."""
        if self._closed:
            return True
        done = threading.Event()
        self._items.append(done)
        self._wake.set()
        return done.wait(timeout)

    def close(self) -> None:
        """Write everything sent, stop the writer process and close every file; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._items.append(_CLOSE)
        self._wake.set()
        self._thread.join()

    def pump(self) -> None:
        """Frame what is queued, on the calling thread; never blocks and does no I/O."""
        if self._helper is not None and self._frame_lock.acquire(blocking=False):
            try:
                marker = self._frame()
                if marker is not None:  # a flush or close from another thread: the drain
                    self._items.appendleft(marker)  # thread answers it, first in line
                    self._wake.set()
            finally:
                self._frame_lock.release()

    # --- the drain thread ----------------------------------------------------------------------

    def _frame(self) -> threading.Event | _Close | None:
        """Frame queued events into `_out` up to a flush or close marker, and return that marker
        (taken off the queue); None when the queue ran empty. Holds `_frame_lock`."""
        items = self._items
        events: list[Event] = []
        marker: threading.Event | _Close | None = None
        while items:
            item = items.popleft()
            if isinstance(item, threading.Event | _Close):
                marker = item
                break
            events.append(item)
        if events:
            try:
                self._out += encode(events)
            except Exception:  # a bug: it costs these lines, never a flush's answer
                log.exception("transcript lines could not be framed: %d event(s) lost", len(events))
        return marker

    def _run(self, started: threading.Event) -> None:
        # Started here, the writer process is this thread's child, not the main thread's: the
        # kernel hands a subreaper's orphans to the main thread, and a command child's end
        # reads each of its children (agents/tree.py `adopted`). This thread outlives it.
        try:
            self._helper = WriterProcess.start(self.MAX_OPEN)
        except Exception:  # a bug: the lines are written here instead, and this thread lives
            log.exception("the transcript writer process could not be started; writing in-process")
        started.set()
        while True:
            self._wake.wait(self.DRAIN_S)
            self._wake.clear()  # whatever set it queued its item first: drained below
            while True:
                with self._frame_lock:
                    marker = self._frame()
                    out, self._out = self._out, bytearray()
                # The drain thread's one error path: what goes wrong costs these lines (said,
                # with their count), never the thread, nor a flush's or a close's answer.
                try:
                    # a flush or a close first waits until everything before it is written
                    self._deliver(out, wait=marker is not None)
                except Exception:
                    log.exception("transcript lines could not be written: %d byte(s)", len(out))
                if marker is None:
                    break
                if isinstance(marker, _Close):
                    self._close_all()
                    return
                marker.set()

    def _close_all(self) -> None:
        try:
            self._stop_helper()
        except Exception:
            log.exception("the transcript writer process could not be stopped cleanly")
        try:
            self._local.close()
        except Exception:
            log.exception("transcript files could not be closed")

    def _deliver(self, out: bytearray, *, wait: bool) -> None:
        """Hand frames to the helper (`wait`: until it has written them), or apply them here."""
        helper = self._helper
        if helper is None:
            self._apply(out)
            return
        try:
            if out:
                helper.send(out)
            else:
                helper.poll()  # answers are read every drain (a send reads them too)
            if wait:
                helper.wait_written()
        except (OSError, EOFError) as exc:
            log.error("transcript writer process failed (%s); writing in-process", exc)
            self._helper = None
            self._apply(helper.kill())  # what it never wrote, this drain's frames included

    def _apply(self, frames: bytearray) -> None:
        """Format and write frames in this process."""
        if frames:
            apply_frames(frames, self._local)
            self._local.write_pending()
            log_failures(*self._local.take_errors())

    def _stop_helper(self) -> None:
        helper, self._helper = self._helper, None
        if helper is None:
            return
        left = helper.stop(self.HELPER_EXIT_S)
        if left:
            log.error(
                "transcript writer process ended before writing everything; writing in-process"
            )
            self._apply(left)
