"""A Ray worker's guard (engine/executors/cluster/guard.py), without Ray: real guard processes,
real command processes, the pipe closed as a dead worker's would be."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from flightdeck.engine.agents.process import Files, Process
from flightdeck.engine.executors.cluster.guard import Guard

from helpers import HANG_S, ended, until

SLEEP = [sys.executable, "-c", "import time; time.sleep(600)"]


def spawn(folder: Path, tag: str) -> Process:
    folder.mkdir()
    files = Files(folder / "out", folder / "err")
    return Process.spawn(SLEEP, cwd=folder, env=dict(os.environ), files=files, tag=tag)


def test_a_lost_workers_guard_ends_its_own_run_of_a_child_not_the_run_that_replaced_it(
    tmp_path: Path,
) -> None:
    # A child's worker is lost; the child runs again on another worker of the same node before
    # the lost worker's guard has looked for the processes its run left.
    lost, other = Guard(grace_s=0.1), Guard(grace_s=0.1)
    child = "20261202-000000-ab12/t0000"
    old = spawn(tmp_path / "old", lost.tag(child))
    new = spawn(tmp_path / "new", other.tag(child))
    try:
        lost.watch(old.record().root.pid, lost.tag(child))
        other.watch(new.record().root.pid, other.tag(child))
        lost.close()  # as when the worker is SIGKILLed: its write end closes
        until(lambda: ended(lost.pid), HANG_S, what="the lost worker's guard done")
        assert ended(old.record().root.pid)
        assert not ended(new.record().root.pid), "the rerun was ended by the old guard"
    finally:
        other.close()
        assert not new.wait_gone(30), "the rerun's guard left it running"
        for proc in (old, new):
            proc.release()
