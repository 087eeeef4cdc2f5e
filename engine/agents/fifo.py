"""A command's stdin: a FIFO in its batch folder, its write end held open by a small holder
process (`sleep`, in a session of its own), so the command never reads the end of its input
because an owner died; a new owner reopens it."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
from collections.abc import Mapping
from pathlib import Path

from flightdeck.engine.agents import sent, tree
from flightdeck.engine.agents.gate import Gate

_HOLDER = ("sleep", "infinity")  # holds the FIFO's write end open; it never writes


def fifo(path: Path) -> tuple[int, int]:
    """A fresh FIFO at `path` (0600), opened at both ends: (read, write); no copy is left of
    what an earlier process was written there."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    sent.forget(path)
    os.mkfifo(path, 0o600)
    # Non-blocking, the read end opens at once; then the write end finds its reader.
    read = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    write = os.open(path, os.O_WRONLY)
    os.set_blocking(read, True)
    return read, write


def reopen(path: Path) -> int | None:
    """The write end of a live command's FIFO, reopened by a new owner; None if it is not a
    FIFO or nothing reads it any more."""
    try:
        if not stat.S_ISFIFO(os.stat(path).st_mode):
            return None
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO: no reader
    except OSError:
        return None
    os.set_blocking(fd, True)
    return fd


def holder(
    stdin_w: int, env: Mapping[str, str], gate: Gate | None = None
) -> subprocess.Popen[bytes] | None:
    """A process that holds the command's input open while no owner does (held at `gate`
    with its command, if given)."""
    program = shutil.which(_HOLDER[0], path=env.get("PATH")) or shutil.which(_HOLDER[0])
    if program is None:
        return None  # without one, a dead owner ends the command's input
    argv, held_env = [program, *_HOLDER[1:]], {tree.TAG_ENV: env[tree.TAG_ENV]}
    return subprocess.Popen(
        argv if gate is None else gate.argv(argv, held_env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        pass_fds=(stdin_w,) if gate is None else (stdin_w, gate.read_fd),
        # A session of its own: a group in the command's session cannot be joined from here.
        # It is signalled by pid (`close_stdin`, `end_tree`), never with the group.
        start_new_session=True,
        env=held_env,
    )
