"""One command run as a process in its own session: its output lines, its process tree, and
the stop that leaves no survivor (SIGTERM to the group, then SIGKILL, with os.killpg)."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Literal

import psutil

Stream = Literal["stdout", "stderr"]

# A line longer than this is cut into pieces, so output with no newline is never held whole.
# Not much less: one JSON event is one line, Claude Code's tool results and Codex's command
# output run to hundreds of kilobytes, and a piece of an event parses as nothing.
MAX_LINE_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Line:
    """One line the process wrote (without its newline), or None at the end of `stream`."""

    stream: Stream
    text: str | None


class Process:
    """A started process and the descendants seen under it.

    Descendants that left its process group (a grandchild that called `setsid`) are not hit by
    `os.killpg`: `track()` records every descendant while the tree is intact, so they are
    found, and killed, after their parent has gone. psutil's Process remembers each one's
    creation time, so a pid the system has since reused is never signalled.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: Mapping[str, str],
        stdin: bool,
    ) -> None:
        self.argv = list(argv)
        self._popen = subprocess.Popen(
            self.argv,
            cwd=cwd,
            env=dict(env),
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own session and process group: pgid == pid
        )
        self.pid = self._popen.pid
        self.lines: queue.SimpleQueue[Line] = queue.SimpleQueue()
        self._tracked: dict[int, psutil.Process] = {}
        try:
            self._root: psutil.Process | None = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            self._root = None  # it has already exited (and is a zombie we reap below)
        self._stdin_lock = threading.Lock()
        assert self._popen.stdout is not None and self._popen.stderr is not None
        self._readers = [
            _reader(self._popen.stdout, "stdout", self.lines),
            _reader(self._popen.stderr, "stderr", self.lines),
        ]

    # --- output --------------------------------------------------------------------------------

    def write(self, text: str) -> bool:
        """Write to its stdin; False once the process no longer reads it."""
        with self._stdin_lock:
            pipe = self._popen.stdin
            if pipe is None or pipe.closed:
                return False
            try:
                pipe.write(text.encode("utf-8", "replace"))
                pipe.flush()
            except (BrokenPipeError, OSError, ValueError):
                return False
            return True

    def feed(self, text: str, *, then_close: bool) -> None:
        """Write `text` to its stdin from a thread of its own (a prompt larger than the pipe
        holds would block until the process reads it, and it may never), then close it."""

        def write() -> None:
            self.write(text)
            if then_close:
                self.close_stdin()

        threading.Thread(target=write, name="flightdeck-stdin", daemon=True).start()

    def close_stdin(self) -> None:
        """End its input (a CLI reading user turns exits when it ends)."""
        with self._stdin_lock:
            pipe = self._popen.stdin
            if pipe is not None and not pipe.closed:
                with contextlib.suppress(OSError):
                    pipe.close()

    # --- the tree ------------------------------------------------------------------------------

    def poll(self) -> int | None:
        """Its exit status (negative: killed by that signal), or None while it runs."""
        return self._popen.poll()

    def track(self) -> None:
        """Record the descendants alive now (call it often while the process runs)."""
        if self._root is None:
            return
        try:
            children = self._root.children(recursive=True)
        except psutil.Error:
            return
        for child in children:
            self._tracked.setdefault(child.pid, child)

    def signal(self, sig: signal.Signals) -> None:
        """Send `sig` to its process group and to every descendant seen outside it."""
        self.track()
        # ProcessLookupError: the group is empty (all exited).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, sig)
        for proc in list(self._tracked.values()):
            with contextlib.suppress(psutil.Error):
                proc.send_signal(sig)  # psutil refuses a pid reused since it was seen

    def survivors(self) -> list[psutil.Process]:
        """The process and its descendants seen, still running (zombies do not count)."""
        self.poll()  # reap the process itself if it has exited
        alive = []
        for proc in [*([self._root] if self._root else []), *self._tracked.values()]:
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
            except psutil.Error:
                pass
        return alive

    def wait_gone(self, timeout: float) -> list[psutil.Process]:
        """Wait up to `timeout` for the tree to end; returns the survivors.

        Not psutil.wait_procs: a descendant whose parent has gone is reaped by init, and a
        zombie init has not reaped yet would count as alive for the whole timeout."""
        deadline = time.monotonic() + timeout
        while (alive := self.survivors()) and time.monotonic() < deadline:
            time.sleep(0.02)
        return alive

    def readers_done(self, timeout: float = 0.0) -> bool:
        """True once both output pipes have ended."""
        for reader in self._readers:
            reader.join(timeout)
        return not any(reader.is_alive() for reader in self._readers)

    def wait(self, timeout: float | None = None) -> int | None:
        """Its exit status, waiting up to `timeout`; None if it still runs."""
        try:
            return self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def release(self) -> None:
        """Close our ends of its pipes (after it and its tree have ended)."""
        self.close_stdin()
        self.wait(0)
        pipes = (self._popen.stdout, self._popen.stderr)
        for pipe, reader in zip(pipes, self._readers, strict=True):
            # A reader still blocked holds the buffer's lock: closing would wait for it. Only
            # a process we never saw keeps a pipe open that long; its thread is a daemon.
            if pipe is not None and not reader.is_alive():
                pipe.close()


def _reader(pipe: IO[bytes], stream: Stream, out: queue.SimpleQueue[Line]) -> threading.Thread:
    def read() -> None:
        try:
            while chunk := pipe.readline(MAX_LINE_BYTES):
                text = chunk.decode("utf-8", "replace")
                out.put(Line(stream, text.removesuffix("\n").removesuffix("\r")))
        except (OSError, ValueError):
            pass  # the pipe was closed under us
        finally:
            out.put(Line(stream, None))

    # Daemon: a descendant that keeps the pipe open after its tree was killed (one we never
    # saw) must not hold the interpreter at exit.
    thread = threading.Thread(target=read, name=f"flightdeck-{stream}", daemon=True)
    thread.start()
    return thread
