"""A process a dead owner started, as the owner that resumes its batch finds it: adopted if it
can be, or ended, its whole tree, before its task runs again."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from flightdeck.engine.agents import sent, tree
from flightdeck.engine.agents.fifo import reopen
from flightdeck.engine.agents.gate import never_ran
from flightdeck.engine.agents.process import Record
from flightdeck.engine.agents.tree import Pid


def adoptable(record: Record) -> str | None:
    """Why a dead owner's process cannot be adopted; None when it can. One that has ended since
    can be: its output is read to its end (its format says how it ended), never run again."""
    if not (record.files.out.exists() and record.files.err.exists()):
        return "its output files are gone"
    if record.files.stdin is not None and tree.alive(record.root):
        fd = reopen(record.files.stdin)
        if fd is None:
            return "its input is closed"
        os.close(fd)
    return None


@dataclass(frozen=True, slots=True)
class TreeEnd:
    """What `end_tree` left running, and whether the command never ran: its marker, read once
    the tree had ended, still named the process (`gate.never_ran`)."""

    left: list[Pid]
    never_ran: bool


def end_tree(record: Record, grace_s: float) -> TreeEnd:
    """End a dead owner's process and what is found of its tree (its group, its descendants,
    the holder of its input): SIGTERM, SIGKILL after `grace_s`. Its files go too, its marker
    once read; what ended is reaped if it is this process's child."""
    found = [record.root, *tree.descendants(record.root)]
    if record.holder is not None:
        found.append(record.holder)

    def signal_all(sig: signal.Signals) -> None:
        # Its group, named by its pid: unless that pid is another process's now (its group is
        # another's). No process holding it, the group is its own still: a pid naming a group is
        # never given out.
        now = tree.identify(record.root.pid)
        if now in (None, record.root) and tree.group_alive(record.root.pid):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(record.root.pid, sig)
        for proc in found:
            tree.send(proc, sig)

    left = found
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 2.0)):
        signal_all(sig)
        if sig == signal.SIGTERM:
            # One its dead owner suspended for a pause acts on no SIGTERM until it goes on.
            signal_all(signal.SIGCONT)
        deadline = time.monotonic() + wait_s
        while (left := [p for p in found if tree.alive(p)]) and time.monotonic() < deadline:
            time.sleep(0.02)
        if not left:
            break
    # Those it ended are this process's to reap when it is their subreaper.
    tree.reap(record.root.pid, found, tree.adopted())
    unrun = never_ran(record.files.held, record.root)
    record.files.remove()
    if record.files.stdin is not None:
        sent.forget(record.files.stdin)
    return TreeEnd(left, unrun)


def end_trees(records: list[tuple[Record, float]]) -> list[TreeEnd]:
    """`end_tree` for each (record, its grace), all at once: each waits out its own grace
    beside the others (three CLIs that ignore SIGTERM cost one grace, not three); what survived
    of each, in their order."""
    if not records:
        return []
    with ThreadPoolExecutor(min(32, len(records)), thread_name_prefix="end-tree") as pool:
        return list(pool.map(lambda job: end_tree(*job), records))
