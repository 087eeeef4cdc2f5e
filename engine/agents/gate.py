"""A command held before it runs, so its owner can record the process first.

It is started under the shell, which waits on a pipe from the owner and then execs the command:
the same pid and start time, so the record made while it waits stays true. An owner killed
before it lets go leaves the pipe's end to read: the shell exits and the command never runs,
so nothing runs that a new owner could not find (`resume` reads the records). A marker file
says which: the owner writes it once the shell is spawned, before its record, naming that
process; the shell empties it just before the exec, so a process found ended with its marker
still naming it never ran (`never_ran`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from flightdeck.engine.agents import tree
from flightdeck.engine.agents.tree import Pid
from flightdeck.engine.records.liveness import stat_of

SH = "/bin/sh"


def runnable(program: str, env: Mapping[str, str]) -> None:
    """Raise what `execve` would for a program that cannot start (not there, not executable),
    as `subprocess.Popen` did before the shell held it: the shell would say it instead, in the
    command's stderr, exit 127 or 126. (A file with no `#!` line the shell would run as a
    script: a route's program is refused at the batch's start for that, `agents/launch.py`.)"""
    if "/" in program:
        # shutil.which's check less its `exists` (`access` fails on a missing file): each
        # system call, at every spawn, is a turn at the interpreter lock.
        found = os.access(program, os.X_OK) and not os.path.isdir(program)
    else:
        found = shutil.which(program, path=env.get("PATH", os.defpath)) is not None
    if found:
        return
    exists = "/" in program and os.path.exists(program)
    code = errno.EACCES if exists else errno.ENOENT
    raise OSError(code, os.strerror(code), program)


class Gate:
    """The pipe a held command waits on: `open` lets it run, `close` ends it unrun."""

    def __init__(self) -> None:
        self.read_fd, write = os.pipe()
        self._write: int | None = write

    def argv(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        marker: Path | None = None,
        *,
        on_stdin: bool = False,
    ) -> list[str]:
        """`argv`, held at this gate, run with `env`; `marker` (written by `mark_held` once it
        is spawned) emptied just before it runs. `on_stdin`: the read end is given as the
        shell's stdin, and the command gets /dev/null (read-write, as `Popen`'s DEVNULL);
        else the read end must be passed to it, and the command keeps the stdin it was given."""
        # The shell exports PWD: the command's environment stays the one it was given.
        unset = "" if "PWD" in env else "unset PWD; "
        # `read` fails at the pipe's end (closed unopened, or its owner died): no exec.
        if on_stdin:  # the shell opens /dev/null, not the owner: two system calls fewer there
            wait, run = f"{unset}read -r go", 'exec "$@" <> /dev/null'
        else:
            # By its path: dash's redirections take one digit, and the owner's fds run higher.
            # The command keeps that fd, a pipe nothing writes to any more.
            wait, run = f"{unset}read -r go < /proc/self/fd/{self.read_fd}", 'exec "$@"'
        if marker is None:
            return [SH, "-c", f"{wait} && {run}", "sh", *argv]
        # A marker that cannot be emptied runs nothing: a resume would run it again.
        return [SH, "-c", f'{wait} && : > "$1" && shift && {run}', "sh", str(marker), *argv]

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


class MarkerError(OSError):
    """A held process's marker could not be written (a full disk, say): it never runs."""

    what = "marker"  # as the child's error names it


def mark_held(marker: Path, proc: Pid) -> None:
    """After a held spawn, before its record: the marker its shell empties as it lets the
    command run. It names the process: the next one spawned with the same files writes its
    own, maybe before the end of this one is recorded. MarkerError if it cannot be written."""
    try:
        fd = os.open(marker, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, _naming(proc))
        finally:
            os.close(fd)
    except OSError as exc:
        raise MarkerError(exc.errno, exc.strerror, str(marker)) from None


def never_ran(marker: Path, proc: Pid) -> bool:
    """Whether held process `proc` has not run its command: its marker still names it. Final
    for one ended (one alive may be let go still, even by an owner as it died: `resume` ends
    it, then asks again); False with no marker, or another's (one recorded before markers were
    written, or followed by another: it may have run)."""
    try:
        return marker.read_bytes() == _naming(proc)
    except OSError:
        return False


def still_held(marker: Path, proc: Pid, wait_s: float = 5.0) -> bool:
    """Whether held process `proc`, found alive with its marker naming it, has not run its
    command: it is stopped (SIGSTOP) before the marker is read again, so it cannot be let go
    in between. True: it stays stopped, never to run (end it); False: it was let go (its owner
    did, as it died) and is continued, to be adopted as any process that runs."""
    tree.send(proc, signal.SIGSTOP)
    deadline = time.monotonic() + wait_s
    while (found := stat_of(proc.pid)) is not None and found[1] == proc.start:
        if found[0] in ("T", "t", "Z", "X") or time.monotonic() > deadline:
            break
        time.sleep(0.005)  # a signal is taken when it next runs: on a busy machine, a while
    if never_ran(marker, proc):
        return True
    tree.send(proc, signal.SIGCONT)
    return False


def _naming(proc: Pid) -> bytes:
    return f"held: process {proc.pid} started at {proc.start} was not let run\n".encode()
