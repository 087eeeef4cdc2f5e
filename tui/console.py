"""Rich consoles for the command line: plain when piped, and quiet once the reader has gone."""

from __future__ import annotations

import contextlib
import os
import select
import stat
import sys
from typing import IO

from flightdeck.tui.exitcodes import OutputClosed, OutputFailed
from flightdeck.tui.terminal import gone
from rich.console import Console


class PipeSafeConsole(Console):
    """A Console that raises `OutputClosed` when its pipe closes, and writes nothing after."""

    def on_broken_pipe(self) -> None:
        # Rich's own answer is SystemExit(1), which reads as "some child failed".
        self.quiet = True  # nothing more is written to the closed pipe
        to_devnull(self.file)
        raise OutputClosed


def to_devnull(file: IO[str]) -> None:
    """Point `file` at /dev/null once its pipe has closed: the interpreter's last flush at exit
    would otherwise complain on stderr."""
    with contextlib.suppress(OSError, ValueError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, file.fileno())
        os.close(null)


def write_whole(text: str) -> None:
    """`text` on standard output, all of it. If it cannot all be written (a full disk), a file
    standard output is goes back to what it held before (a cut report must not pass for a
    whole one) and `OutputFailed` names it; BrokenPipeError is the caller's."""
    out = sys.stdout
    out.flush()
    try:
        fd = out.fileno()
    except (OSError, ValueError):  # not a real file (a test's capture)
        out.write(text)
        return
    data = memoryview(text.encode(out.encoding, out.errors or "strict"))
    start = os.lseek(fd, 0, os.SEEK_CUR) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    try:
        # os.write, not out.write: with PYTHONUNBUFFERED the text layer drops what a short
        # write left unwritten, and says nothing.
        while data:
            data = data[os.write(fd, data) :]
    except BrokenPipeError:
        raise
    except OSError as exc:
        try:
            where = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            where = "standard output"
        kept = ""
        if start is not None:
            os.ftruncate(fd, start)
            kept = ": nothing of it was kept"
        raise OutputFailed(f"cannot write to {where}: {exc.strerror or exc}{kept}") from None


def hung_up(*consoles: Console) -> None:
    """Their terminal has hung up (SIGHUP): what they write goes nowhere from now on, where it
    would fail (EIO) on the way to ending the batch. A file or pipe they write to keeps it."""
    for console in consoles:
        with contextlib.suppress(OSError, ValueError):
            fd = console.file.fileno()
            if os.isatty(fd) or gone(fd):
                to_devnull(console.file)


def console_for(stderr: bool = False) -> PipeSafeConsole:
    """Plain when piped: no colour codes, and wide enough that tables are not cut at 80."""
    console = PipeSafeConsole(stderr=stderr, highlight=False, soft_wrap=True)
    if not console.is_terminal:
        console = PipeSafeConsole(stderr=stderr, highlight=False, soft_wrap=True, width=200)
    return console


def draws_tui() -> bool:
    """Whether standard output is a terminal the TUI can draw on: a tty whose TERM is not
    `dumb` (Emacs's shell, a CI console: no cursor moves, no colour), where the TUI's escape
    sequences came out as they are, screens of them, and no view."""
    return sys.stdout.isatty() and os.environ.get("TERM") != "dumb"


def live_terminal(console: Console) -> bool:
    """Whether a live display (a progress bar redrawn in place) may be drawn: Rich takes
    FORCE_COLOR for a terminal, but a pipe or a CI log given colour still gets no cursor moves."""
    try:
        return console.is_interactive and os.isatty(console.file.fileno())
    except (OSError, ValueError, AttributeError):  # closed, or not a real file (a test's)
        return False


def reader_gone(file: IO[str]) -> bool:
    """Whether `file` is a pipe whose reader has gone, known without writing to it: a run
    whose children are all busy writes nothing for minutes, and spent them unread."""
    if not hasattr(select, "poll"):
        return False
    try:
        fd = file.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
        poll = select.poll()
        poll.register(fd, 0)  # no events asked: an error (no reader left) is said anyway
        return any(events & (select.POLLERR | select.POLLHUP) for _, events in poll.poll(0))
    except (OSError, ValueError, AttributeError):  # closed, or not a real file (a test's)
        return False
