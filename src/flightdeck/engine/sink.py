"""`TranscriptSink`: every child's transcript events on their way to one writer.

Like rows to the SQLite writer: worker threads never block on file I/O, and 64 threads never
contend to create files in one folder. Sending an event wakes nothing (a deque append); a drain
thread moves events every `DRAIN_S`, so a burst costs no thread switch per line, and a
`tail -f` sees a line at most that much later.

A helper process formats and writes the lines (`appender.py` says why), fed framed batches of
events down a pipe. The coordinator frames queued events between facts (`pump`), while it holds
the interpreter lock anyway, so the drain thread, which has to win the lock back from busy
workers, makes one pipe write per drain.

Without the helper (it cannot start, or it dies) the drain thread formats and writes the files
itself. If the helper dies, events it had read but not yet written are lost, events of the
batch being sent at that moment may be written twice, and every later event is written in
this process.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import subprocess
import sys
import threading
from collections import deque

from flightdeck.engine import appender
from flightdeck.engine.appender import (
    ACK,
    FLUSH,
    Event,
    Transcripts,
    apply_frames,
    batch_frame,
    frame,
    write_all,
)

log = logging.getLogger("flightdeck.transcripts")

PIPE_SIZE = 1 << 20  # room for a burst while the helper starts (Linux; best effort)


class _Close:
    """The last item: write everything, stop the helper, close every file."""


_CLOSE = _Close()
_Item = Event | threading.Event | _Close  # an event, or a flush or close marker


class TranscriptSink:
    MAX_OPEN = 128  # descriptors kept open (least recently used are closed first)
    DRAIN_S = 0.02
    HELPER_EXIT_S = 10.0  # close() waits this long for the helper to write its last lines

    def __init__(self) -> None:
        self._items: deque[_Item] = deque()
        self._wake = threading.Event()
        self._frame_lock = threading.Lock()  # taking items off the queue and framing them
        self._out = bytearray()  # framed, not yet handed to the helper
        self._closed = False
        self._local = Transcripts(self.MAX_OPEN)
        self._helper = _start_helper(self.MAX_OPEN)
        self._thread = threading.Thread(target=self._run, name="flightdeck-transcripts")
        self._thread.daemon = True  # close() drains it; a crash must not hang the exit
        self._thread.start()

    @property
    def helper_pid(self) -> int | None:
        """The writer process, while one is in use."""
        helper = self._helper
        return None if helper is None else helper.pid

    def send(self, event: Event) -> None:
        """Queue one transcript event (`appender.WRITE`, ...); any thread, never blocks."""
        self._items.append(event)  # deque.append is atomic; no lock, no wake-up

    def flush(self, timeout: float | None = None) -> bool:
        """Block until every line queued before this call has been written."""
        if self._closed:
            return True
        done = threading.Event()
        self._items.append(done)
        self._wake.set()
        return done.wait(timeout)

    def close(self) -> None:
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
                self._frame()
            finally:
                self._frame_lock.release()

    # --- the drain thread ----------------------------------------------------------------------

    def _frame(self) -> threading.Event | _Close | None:
        """Frame queued events into `_out` up to a flush or close marker, and return that marker
        (taken off the queue); None when the queue ran empty. Holds `_frame_lock`."""
        items, events = self._items, []
        marker: threading.Event | _Close | None = None
        while items:
            item = items.popleft()
            if not isinstance(item, tuple):
                marker = item
                break
            events.append(item)
        if events:
            self._out += batch_frame(events)
        return marker

    def _run(self) -> None:
        while True:
            self._wake.wait(self.DRAIN_S)
            self._wake.clear()  # whatever set it queued its item first: drained below
            while True:
                with self._frame_lock:
                    marker = self._frame()
                    out, self._out = self._out, bytearray()
                if marker is None:
                    self._deliver(out, wait=False)
                    break
                out += frame(FLUSH)  # a flush or a close first writes everything before it
                self._deliver(out, wait=True)
                if isinstance(marker, _Close):
                    self._stop_helper()
                    self._local.close()
                    return
                marker.set()

    def _deliver(self, out: bytearray, *, wait: bool) -> None:
        """Hand frames to the helper (`wait`: until it has written them), or apply them here."""
        if not out:
            return
        helper = self._helper
        if helper is not None:
            assert helper.stdin is not None and helper.stdout is not None
            try:
                write_all(helper.stdin.fileno(), out)
                if wait:
                    failed, size = ACK.unpack(_read_exact(helper.stdout.fileno(), ACK.size))
                    text = _read_exact(helper.stdout.fileno(), size)
                    _log_failures(failed, text.decode("utf-8", "replace"))
                return
            except (OSError, EOFError) as exc:
                log.error("transcript writer process failed (%s); writing in-process", exc)
                self._helper = None
                helper.kill()
                _reap(helper)
        # The same frames, applied here: nothing framed is lost when the helper goes away.
        apply_frames(out, self._local, lambda: None)
        self._local.write_pending()
        _log_failures(*self._local.take_errors())

    def _stop_helper(self) -> None:
        helper, self._helper = self._helper, None
        if helper is None:
            return
        assert helper.stdin is not None
        helper.stdin.close()  # end of input: it writes what it holds and exits
        try:
            helper.wait(self.HELPER_EXIT_S)
        except subprocess.TimeoutExpired:
            log.error("transcript writer process did not exit; killing it")
            helper.kill()
        _reap(helper)


def _start_helper(max_open: int) -> subprocess.Popen[bytes] | None:
    """The writer process, or None (logged) when it cannot start: then this process writes."""
    if not sys.executable:  # an embedded interpreter may not know its own program
        log.warning("no Python executable to run the transcript writer; writing in-process")
        return None
    try:
        helper = subprocess.Popen(
            [sys.executable, "-I", "-S", appender.__file__, str(max_open)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # failures come back in flush answers, not on the screen
            start_new_session=True,  # a Ctrl+C for the engine does not reach it
            bufsize=0,
        )
    except OSError as exc:
        log.warning("cannot start the transcript writer process (%s); writing in-process", exc)
        return None
    assert helper.stdin is not None
    with contextlib.suppress(OSError):  # a smaller pipe only makes the drain thread wait more
        fcntl.fcntl(helper.stdin.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_SIZE)
    return helper


def _reap(helper: subprocess.Popen[bytes]) -> None:
    """Wait for an ended (or killed) helper and close our ends of its pipes."""
    helper.wait()
    for pipe in (helper.stdin, helper.stdout):
        if pipe is not None:
            with contextlib.suppress(OSError):  # a pipe to a dead process may fail to flush
                pipe.close()


def _read_exact(fd: int, size: int) -> bytes:
    out = bytearray()
    while len(out) < size:
        chunk = os.read(fd, size - len(out))
        if not chunk:
            raise EOFError("the transcript writer process closed its output")
        out += chunk
    return bytes(out)


def _log_failures(failed: int, error: str) -> None:
    if failed:
        log.error("%d transcript write(s) failed; last: %s", failed, error)
