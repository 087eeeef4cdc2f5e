"""Noticing that the app's terminal has gone (its window closed, an SSH connection dropped)
when no SIGHUP says so: the app quits as a SIGTERM would have it.

Without a hangup signal (the app run by `make`, whose shell keeps it; a connection that died
without one), Textual's app outlives its terminal: the thread writing the screen dies on the
first write (EIO), the next writes fill its queue and block the event loop for good, and the
input thread reads end-of-file in a loop, a core busy for ever (Textualize/textual#6690).
An ioctl on a terminal that has hung up fails with EIO: one `tcgetattr` a second finds it.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import signal
import termios
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)

EVERY_S = 1.0
GRACE_S = 3.0  # for the app's own way out, before the process ends as a hangup would end it
HANGUP_EXIT = 128 + signal.SIGHUP  # as a shell shows a process a SIGHUP ended


def gone(fd: int) -> bool:
    """True once the terminal `fd` refers to has hung up."""
    try:
        termios.tcgetattr(fd)
    except termios.error as exc:
        return bool(exc.args[0] == errno.EIO)
    return False


def watch(
    fd: int,
    quit_app: Callable[[], object],
    *,
    every_s: float = EVERY_S,
    grace_s: float = GRACE_S,
    end: Callable[[int], object] = os._exit,
    before_end: Callable[[], object] | None = None,
) -> threading.Event:
    """Look at the terminal `fd` every `every_s` seconds; once it has gone, `quit_app()` (from
    this thread: it must only schedule the app's exit), then, unless the app is over within
    `grace_s` (its event loop blocked on the dead terminal), `before_end()` (an engine in this
    process stopped and recorded: it must return, in bounded time) and end the process with
    HANGUP_EXIT, unless the app was over by then too. Returns the event to set once the app is
    over: the watch ends, and the process goes on its own way (an engine in it winding down,
    say)."""
    over = threading.Event()

    def run() -> None:
        while not gone(fd):
            if over.wait(every_s):
                return
        log.warning("the terminal has gone: quitting")
        with contextlib.suppress(RuntimeError):  # the app's loop closed: it is over already
            quit_app()
        if not over.wait(grace_s):
            if before_end is not None:
                try:
                    before_end()
                except Exception:  # the process ends all the same: it has no terminal left
                    log.exception("the terminal has gone: winding down failed")
                if over.is_set():  # the app returned meanwhile: its own way out is under way
                    return
            end(HANGUP_EXIT)

    threading.Thread(target=run, name="flightdeck-terminal", daemon=True).start()
    return over
