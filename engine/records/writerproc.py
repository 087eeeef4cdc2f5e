"""`WriterProcess`: the engine's end of the transcript writer process (`appender.py`).

Frames go down the process's stdin. After each read it has applied and written, the process
answers on its stdout with how many bytes of frames it has written so far (`appender.DONE`).
Every frame stays here until an answer covers it, so when the process dies, what it never
wrote is still here (`kill`, `stop`), and the sink writes it itself. Nothing sent is lost. Two
things a dead process can still cost:
- lines it wrote in the instant before it could answer are written again (they appear twice);
- each open stream's unfinished line, which its formatter held, is lost (at most one line per
  streaming child; the rest of that stream is written here).

Both pipes are non-blocking: a send that finds the input pipe full reads answers while it waits,
so neither side can block the other with a full pipe. What is kept is bounded by what the
process can be behind: the pipe (1 MB), the read it is working on (at most 1 MB) and one send.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import select
import subprocess
import sys
import time
from collections import deque

from flightdeck.engine.records import appender
from flightdeck.engine.records.appender import DONE

log = logging.getLogger("flightdeck.transcripts")

PIPE_SIZE = 1 << 20  # room for a burst while the process starts (Linux; best effort)


def command(max_open: int) -> list[str]:
    """The writer process's command line: this interpreter, isolated from PYTHON* variables."""
    return [sys.executable, "-I", "-m", appender.__name__, str(max_open)]


class WriterProcess:
    """A started writer process, and the frames it has not yet confirmed writing."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.proc = proc
        self.pid = proc.pid
        self._in = proc.stdin.fileno()
        self._out = proc.stdout.fileno()
        os.set_blocking(self._in, False)
        os.set_blocking(self._out, False)
        self._sent = 0  # bytes of frames sent so far
        self._written = 0  # of those, bytes the process says it has written
        self._kept: deque[tuple[int, bytes | bytearray]] = deque()  # (end offset, frames)
        self._answers = bytearray()  # answers read but not yet complete

    @classmethod
    def start(cls, max_open: int) -> WriterProcess | None:
        """The writer process, or None (logged) when it cannot start: the caller writes."""
        if not sys.executable:  # an embedded interpreter may not know its own program
            log.warning("no Python executable to run the transcript writer; writing in-process")
            return None
        try:
            proc = subprocess.Popen(
                command(max_open),
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,  # failures come back in its answers, not on screen
                start_new_session=True,  # a Ctrl+C for the engine does not reach it
                bufsize=0,
            )
        except OSError as exc:
            log.warning("cannot start the transcript writer process (%s); writing in-process", exc)
            return None
        assert proc.stdin is not None
        with contextlib.suppress(OSError):  # a smaller pipe only makes sends wait more often
            fcntl.fcntl(proc.stdin.fileno(), getattr(fcntl, "F_SETPIPE_SZ", 1031), PIPE_SIZE)
        return cls(proc)

    def send(self, frames: bytes | bytearray) -> None:
        """Hand frames to the process (kept until it confirms them); OSError or EOFError if it
        is gone. Waits only while the pipe is full, reading its answers meanwhile."""
        self._sent += len(frames)
        self._kept.append((self._sent, frames))
        view = memoryview(frames)
        while view:
            try:
                view = view[os.write(self._in, view) :]
            except BlockingIOError:
                select.select([self._out], [self._in], [])
                self.poll()
        # The answers that came meanwhile, whether or not the pipe filled: sends that always
        # fit never read them, and kept every frame until the end (36 MB at 50,000 children).
        self.poll()

    def wait_written(self, timeout: float | None = None) -> bool:
        """Block until the process has written everything sent; False on timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        self.poll()
        while self._written < self._sent:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            select.select([self._out], [], [], left)
            self.poll()
        return True

    def poll(self) -> None:
        """Read the answers that have arrived, without blocking; EOFError once it has exited."""
        while True:
            try:
                chunk = os.read(self._out, 1 << 16)
            except BlockingIOError:
                break
            if not chunk:
                self._take_answers()
                raise EOFError("the transcript writer process closed its output")
            self._answers += chunk
        self._take_answers()

    def stop(self, timeout: float) -> bytearray:
        """End of input: it writes what it holds and exits. Returns what it did not confirm
        (nothing after a clean exit); it is killed if it has not exited within `timeout`."""
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        deadline = time.monotonic() + timeout
        with contextlib.suppress(EOFError):  # its answers up to exit, so it never blocks on one
            while (left := deadline - time.monotonic()) > 0:
                select.select([self._out], [], [], left)
                self.poll()
        try:
            self.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            log.error("transcript writer process did not exit; killing it")
        return self.kill()

    def kill(self) -> bytearray:
        """End the process (if it still runs) and return the frames it did not confirm."""
        self.proc.kill()
        self.proc.wait()
        with contextlib.suppress(OSError, EOFError):
            self.poll()  # answers it wrote before it died
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):  # a pipe to a dead process may fail to flush
                    pipe.close()
        left = bytearray()
        for end, frames in self._kept:
            if end > self._written:  # answers fall on frame boundaries: skip whole frames
                left += frames[max(0, len(frames) - (end - self._written)) :]
        self._kept.clear()
        return left

    def _take_answers(self) -> None:
        buf = self._answers
        pos = 0
        while len(buf) - pos >= DONE.size:
            written, failed, size = DONE.unpack_from(buf, pos)
            end = pos + DONE.size + size
            if end > len(buf):
                break
            self._written = written
            log_failures(failed, buf[pos + DONE.size : end].decode("utf-8", "replace"))
            pos = end
        del buf[:pos]
        kept = self._kept
        while kept and kept[0][0] <= self._written:
            kept.popleft()


def log_failures(failed: int, error: str) -> None:
    """Log the writes that failed, if any, with the last one's message."""
    if failed:
        log.error("%d transcript write(s) failed; last: %s", failed, error)
