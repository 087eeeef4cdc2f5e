"""A command child's process tree, read from /proc without scanning the machine's process table.

A process is named by its pid and its start time (clock ticks since boot, /proc/<pid>/stat), so
a pid the system has reused is never taken for it. Its descendants are found by following
`/proc/<pid>/task/*/children` down from it: the cost is the size of its tree, not the number of
processes on the machine. A descendant that outlived its parent (a daemon that forked twice) is
no longer under it: the owner makes itself a child subreaper, so such orphans become its own
children, and each process a command child starts carries its tag in its environment
(`TAG_ENV`), by which the owner tells whose it is while it runs. Once one ends, its environment
can no longer be read: the owner reaps it by its session (the command's own, unless it left it)
or as a process seen before, never a process of its own `subprocess.Popen` objects, whose exit
status they wait for.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from flightdeck.engine.records.liveness import (
    Pid,
    alive,
    identify,
    read_proc,
    stat_fields,
    stat_of,
)

__all__ = [
    "TAG_ENV",
    "Adopted",
    "Pid",
    "adopted",
    "alive",
    "children",
    "descendants",
    "identify",
    "orphans",
]

TAG_ENV = "FLIGHTDECK_CHILD"  # "<batch id>/<child id>" (on a Ray worker "...@<its guard pid>")


def children(pid: int) -> list[int]:
    """The direct children of `pid` (every thread's)."""
    out: list[int] = []
    with contextlib.suppress(OSError):
        for task in os.listdir(f"/proc/{pid}/task"):
            out += map(int, (read_proc(f"/proc/{pid}/task/{task}/children") or b"").split())
    return out


def descendants(root: Pid) -> Iterator[Pid]:
    """Every process under `root` now (not `root` itself), parents before their children."""
    if not alive(root):
        return
    stack = children(root.pid)
    seen: set[int] = set()
    while stack:
        pid = stack.pop()
        if pid in seen:
            continue
        seen.add(pid)
        proc = identify(pid)
        if proc is not None:
            yield proc
            stack += children(pid)


def tag_of(pid: int) -> str | None:
    """The command child a process belongs to (its `TAG_ENV`), if it has one we can read."""
    environ = read_proc(f"/proc/{pid}/environ")
    if environ is None:
        return None
    prefix = TAG_ENV.encode() + b"="
    for item in environ.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix) :].decode("utf-8", "replace")
    return None


@dataclass(frozen=True, slots=True)
class Adopted:
    """One of this process's main thread's children, as it was read."""

    proc: Pid
    session: int
    ended: bool  # a zombie, left to be reaped


def adopted() -> list[Adopted]:
    """This process's main thread's children now: where the kernel hands a subreaper's orphans.
    Only its list is read, not every worker thread's (whose lists hold the processes they
    started). One look serves `orphans` and `reap` alike: each read of /proc costs tens of
    microseconds, and a command child's end looks at them all."""
    main = os.getpid()
    listed = read_proc(f"/proc/{main}/task/{main}/children")
    found: list[Adopted] = []
    for pid in map(int, (listed or b"").split()):
        fields = stat_fields(pid)
        if fields is None:
            continue  # gone since the list was read
        with contextlib.suppress(IndexError, ValueError):
            found.append(Adopted(Pid(pid, int(fields[19])), int(fields[3]), fields[0] == b"Z"))
    return found


# The tags of this process's children, each read once (a program embedding an `Engine` may have
# children of its own, looked at as every command child ends): a child is known by its start
# time too, so a reused pid is read again. Those no longer among its children are forgotten at
# every look.
_tags: dict[Pid, str | None] = {}
_tags_lock = threading.Lock()


def orphans(tag: str, known: Iterable[int], among: list[Adopted]) -> list[Pid]:
    """This process's running children (`among`, one look) tagged `tag`, other than `known`
    (the ones it started): the descendants of a command child whose parents have gone (this
    process is their subreaper)."""
    skip = set(known)
    found = []
    with _tags_lock:
        for a in among:
            if a.proc not in _tags:
                _tags[a.proc] = tag_of(a.proc.pid)
            if not a.ended and a.proc.pid not in skip and _tags[a.proc] == tag:
                found.append(a.proc)
        for gone in _tags.keys() - {a.proc for a in among}:
            del _tags[gone]
    return found


def exists(proc: Pid) -> bool:
    """True while `proc` (that very process) is in the process table: running or a zombie."""
    found = stat_of(proc.pid)
    return found is not None and found[1] == proc.start


def reap(session: int, seen: Iterable[Pid], among: list[Adopted]) -> None:
    """Collect the exit status of this process's children (`among`, one look) that were a
    command child's and have ended, so none is left a zombie: those in its session (`session`,
    the pid of its process, which leads it) and those `seen` under it (one may have left the
    session). The leader itself, and every other child, is left to the `Popen` that waits for
    it."""
    known = set(seen)
    for a in among:
        pid = a.proc.pid
        if a.ended and ((a.session == session and pid != session) or a.proc in known):
            with contextlib.suppress(ChildProcessError, OSError):
                os.waitpid(pid, os.WNOHANG)


def send(proc: Pid, sig: signal.Signals) -> None:
    """Signal `proc` if its pid still names that process."""
    found = stat_of(proc.pid)
    if found is not None and found[1] == proc.start:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(proc.pid, sig)


def group_alive(pgid: int) -> bool:
    """True while any process is left in process group `pgid`."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class _Subreaper:
    """Whether this process is the subreaper of what its batches start. It becomes one at a
    command child's first spawn and stops being one when its last open batch closes, unless it
    was one before: a program that embeds an `Engine` gets its own process back as it was
    (otherwise every orphan of anything it runs later would become its child and, unreaped,
    a zombie)."""

    _SET, _GET = 36, 37  # PR_SET_CHILD_SUBREAPER, PR_GET_CHILD_SUBREAPER

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._batches = 0
        self._made: bool | None = None  # None: not tried since the last release
        self._was = False  # it was a subreaper before (the program's own choice)

    def _prctl(self, option: int, arg: object) -> bool:
        # The process's own symbols, libc's among them: `ctypes.util.find_library` would run
        # `ldconfig` as a subprocess at each call, while every spawn waits on this lock.
        with contextlib.suppress(OSError, AttributeError):
            return bool(ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0) == 0)
        return False

    def become(self) -> bool:
        with self._lock:
            if self._made is None:
                now = ctypes.c_int(0)
                self._was = self._prctl(self._GET, ctypes.byref(now)) and now.value != 0
                self._made = not self._was and self._prctl(self._SET, 1)
            return self._was or self._made

    def opened(self) -> None:
        with self._lock:
            self._batches += 1

    def closed(self) -> None:
        with self._lock:
            self._batches = max(0, self._batches - 1)
            if self._batches == 0 and self._made:
                self._prctl(self._SET, 0)
                self._made = None


_subreaper = _Subreaper()


def become_subreaper() -> bool:
    """Make this process the child subreaper of what it starts (Linux); True if it is."""
    return _subreaper.become()


def batch_opened() -> None:
    """A batch runs in this process: it stays a subreaper (once it is one) until it closes."""
    _subreaper.opened()


def batch_closed() -> None:
    """A batch has closed: with no other open, the process stops being the subreaper it became."""
    _subreaper.closed()
