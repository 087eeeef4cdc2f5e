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
from flightdeck.engine.agents.tree import TAG_ENV
from flightdeck.engine.model import Usage
from flightdeck.engine.model.session import CliSession

GRACE_S = 2.0

# The guard itself: the standard library only, so it starts fast on any node. At the end it
# also looks, once, for processes carrying a watched child's tag (agents/tree.py's TAG_ENV) that
# left its group for a session of their own.
_GUARD = """
import os, signal, sys, time
groups = {}
for line in sys.stdin:
    sign, _, rest = line.strip().partition(" ")
    pgid, _, tag = rest.partition(" ")
    if pgid.isdigit():
        if sign == "+":
            groups[int(pgid)] = tag
        else:
            groups.pop(int(pgid), None)
tags = {("%s=%s" % (sys.argv[2], t)).encode() for t in groups.values()}
found = set()
if tags:
    for pid in os.listdir("/proc"):
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                if tags & set(f.read().split(b"\\0")):
                    found.add(int(pid))
        except (OSError, ValueError):
            pass
for sig in (signal.SIGTERM, signal.SIGKILL):
    for pgid in groups:
        try:
            os.killpg(pgid, sig)
        except OSError:
            pass
    for pid in found:
        try:
            os.kill(pid, sig)
        except OSError:
            pass
    if (groups or found) and sig == signal.SIGTERM:
        time.sleep(float(sys.argv[1]))
"""


_LAUNCH = (
    "import subprocess, sys\n"
    "guard = subprocess.Popen([sys.executable, '-c', *sys.argv[1:]], stdout=subprocess.DEVNULL,"
    " stderr=subprocess.DEVNULL)\n"
    "print(guard.pid)\n"
)


class Guard:
    """The guard of one worker process; `watch` a process group, `forget` it once it ended."""

    def __init__(self, grace_s: float = GRACE_S) -> None:
        read, self._write = os.pipe()  # not inherited: only this process holds the write end
        try:
            # Started by a launcher that exits at once: Ray kills a dead worker's children, and
            # the guard must not be one of them. In a session of its own, out of its group.
            launched = subprocess.run(
                [sys.executable, "-c", _LAUNCH, _GUARD, str(grace_s), TAG_ENV],
                stdin=read,
                capture_output=True,
                start_new_session=True,
                check=True,
                timeout=60,
            )
        finally:
            os.close(read)
        self.pid = int(launched.stdout)
        self._lock = threading.Lock()

    def tag(self, child: str) -> str:
        """The tag (TAG_ENV) of `child`'s processes on this worker: the child's own, and this
        guard's pid. A child this worker lost runs again elsewhere, maybe on this node, while
        this guard looks for what its processes left: that run's processes are not this
        guard's to end. (A pid is not reused while its process lives.)"""
        return f"{child}@{self.pid}"

    def _say(self, line: str) -> None:
        with self._lock, contextlib.suppress(OSError):
            os.write(self._write, line.encode())

    def watch(self, pgid: int, tag: str) -> None:
        """End this process group (and what carries `tag`) if the worker dies."""
        self._say(f"+ {pgid} {tag}\n")

    def forget(self, pgid: int) -> None:
        """The group has ended (its pgid may be another's from now on)."""
        self._say(f"- {pgid}\n")

    def close(self) -> None:
        """Close the lifeline now: every group still watched is ended."""
        with self._lock, contextlib.suppress(OSError):
            os.close(self._write)


class GuardBook:
    """A command child's process book on a worker (child/command.py's `ProcessBook`): not kept
    for adoption (a worker's processes end with it), but watched by the worker's guard."""

    def __init__(self, guard: Guard, tag: str) -> None:
        self._guard = guard
        self._tag = tag  # the child's processes' TAG_ENV
        self._groups: list[int] = []

    def started(
        self, record: Record, usage: Usage, cost: object, known: object, thread: Usage
    ) -> None:
        """A process (and its stdin holder) started: their groups are watched (it may run)."""
        self._groups = [record.root.pid] + ([record.holder.pid] if record.holder else [])
        for pgid in self._groups:
            self._guard.watch(pgid, self._tag)

    def read_to(self, record: Record) -> None:
        """No adopter reads on from here: nothing to keep."""

    def session(self, session: CliSession) -> None:
        """Not sent home yet: a `retry --continue` of a CLI that ran on a cluster starts it
        afresh (docs/ray.md)."""

    def ended(self) -> None:
        """Its tree has ended."""
        for pgid in self._groups:
            self._guard.forget(pgid)
        self._groups = []
