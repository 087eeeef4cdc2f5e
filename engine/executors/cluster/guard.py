"""A worker's lifeline: its command children's process groups end when the worker does.

A command child runs in a session of its own, so nothing kills it when the worker process that
started it dies (`ray.kill`, a lost node's raylet, an owner gone: Ray ends those actors with
SIGKILL, and no code of theirs runs). A small guard process, started in a session of its own,
reads which groups to end from a pipe only the worker holds open; when the pipe closes, however
the worker ended, it sends each group SIGTERM, then SIGKILL a grace later, and exits.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading

from flightdeck.engine.agents.process import Record
from flightdeck.engine.model import Usage

GRACE_S = 2.0

# The guard itself: the standard library only, so it starts fast on any node.
_GUARD = """
import os, signal, sys, time
groups = set()
for line in sys.stdin:
    sign, _, pgid = line.strip().partition(" ")
    if pgid.isdigit():
        (groups.add if sign == "+" else groups.discard)(int(pgid))
for sig in (signal.SIGTERM, signal.SIGKILL):
    for pgid in groups:
        try:
            os.killpg(pgid, sig)
        except OSError:
            pass
    if groups and sig == signal.SIGTERM:
        time.sleep(float(sys.argv[1]))
"""


class Guard:
    """The guard of one worker process; `watch` a process group, `forget` it once it ended."""

    def __init__(self, grace_s: float = GRACE_S) -> None:
        read, self._write = os.pipe()  # not inherited: only this process holds the write end
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _GUARD, str(grace_s)],
                stdin=read,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,  # out of the worker's group, which Ray may kill first
            )
        finally:
            os.close(read)
        self._lock = threading.Lock()

    @property
    def pid(self) -> int:
        """The guard process."""
        return self._proc.pid

    def _say(self, line: str) -> None:
        with self._lock, contextlib.suppress(OSError):
            os.write(self._write, line.encode())

    def watch(self, pgid: int) -> None:
        """End this process group if the worker dies."""
        self._say(f"+ {pgid}\n")

    def forget(self, pgid: int) -> None:
        """The group has ended (its pgid may be another's from now on)."""
        self._say(f"- {pgid}\n")

    def close(self) -> None:
        """Close the lifeline now: every group still watched is ended."""
        with self._lock, contextlib.suppress(OSError):
            os.close(self._write)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(GRACE_S + 5)


class GuardBook:
    """A command child's process book on a worker (child/command.py's `ProcessBook`): not kept
    for adoption (a worker's processes end with it), but watched by the worker's guard."""

    def __init__(self, guard: Guard) -> None:
        self._guard = guard
        self._groups: list[int] = []

    def started(self, record: Record, usage: Usage, cost: object) -> None:
        """A process (and its stdin holder) started: their groups are watched."""
        self._groups = [record.root.pid] + ([record.holder.pid] if record.holder else [])
        for pgid in self._groups:
            self._guard.watch(pgid)

    def read_to(self, record: Record) -> None:
        """No adopter reads on from here: nothing to keep."""

    def ended(self) -> None:
        """Its tree has ended."""
        for pgid in self._groups:
            self._guard.forget(pgid)
        self._groups = []
