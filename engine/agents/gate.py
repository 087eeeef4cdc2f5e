"""A command held before it runs, so its owner can record the process first.

It is started under the shell, which waits on a pipe from the owner and then execs the command:
the same pid and start time, so the record made while it waits stays true. An owner killed
before it lets go leaves the pipe's end to read: the shell exits and the command never runs,
so nothing runs that a new owner could not find (`resume` reads the records).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Mapping, Sequence

SH = "/bin/sh"


def runnable(program: str, env: Mapping[str, str]) -> None:
    """Raise what `execve` would for a program that cannot start (not there, not executable),
    as `subprocess.Popen` did before the shell held it: the shell would say it instead, in the
    command's stderr, exit 127 or 126. (A file with no `#!` line the shell would run as a
    script: a route's program is refused at the batch's start for that, `agents/launch.py`.)"""
    found = shutil.which(program, path=env.get("PATH", os.defpath))
    if found is None:
        exists = "/" in program and os.path.exists(program)
        code = errno.EACCES if exists else errno.ENOENT
        raise OSError(code, os.strerror(code), program)


class Gate:
    """The pipe a held command waits on: `open` lets it run, `close` ends it unrun."""

    def __init__(self) -> None:
        self.read_fd, write = os.pipe()
        self._write: int | None = write

    def argv(self, argv: Sequence[str], env: Mapping[str, str]) -> list[str]:
        """`argv`, held at this gate (the read end must be passed to it), run with `env`."""
        # The shell exports PWD: the command's environment stays the one it was given.
        unset = "" if "PWD" in env else "unset PWD; "
        # `read` fails at the pipe's end (closed unopened, or its owner died): no exec. By its
        # path: dash's redirections take one digit, and the owner's fds run higher. The command
        # keeps that fd, a pipe nothing writes to any more.
        script = f'{unset}read -r go < /proc/self/fd/{self.read_fd} && exec "$@"'
        return [SH, "-c", script, "sh", *argv]

    def passed(self) -> None:
        """The held process has its copy of the read end (or was not started)."""
        with contextlib.suppress(OSError):
            os.close(self.read_fd)

    def open(self) -> None:
        """Let the command run."""
        if self._write is not None:
            with contextlib.suppress(OSError):  # EPIPE: the shell was killed while held
                os.write(self._write, b"\n")
        self.close()

    def close(self) -> None:
        """End the wait: a command not let run by now never runs."""
        fd, self._write = self._write, None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)
