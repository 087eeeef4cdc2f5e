"""`resume` ends the process trees it cannot adopt all at once: each waits out its own grace
beside the others. It ended them one after another, so three CLIs that ignore SIGTERM under a
10 s grace held `resume`, silent, for 30 s before anything ran."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

from flightdeck.engine.agents.adopt import end_trees
from flightdeck.engine.agents.process import Files, Record
from flightdeck.engine.agents.tree import identify

from helpers import until

# Told SIGTERM, it notes it and runs on: only SIGKILL ends it.
STUBBORN = (
    "import pathlib, signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: pathlib.Path(sys.argv[1]).touch())\n"
    "print('ready', flush=True)\n"
    "time.sleep(300)\n"
)


def test_every_tree_is_told_to_end_before_any_grace_is_over(tmp_path: Path) -> None:
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", STUBBORN, str(tmp_path / f"term-{i}")],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own group, as a command child's
        )
        for i in range(3)
    ]
    try:
        records = []
        for i, proc in enumerate(procs):
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
            root = identify(proc.pid)
            assert root is not None
            files = Files(tmp_path / f"out-{i}", tmp_path / f"err-{i}")
            records.append((Record(root, None, files), 600.0))  # a grace no test waits out
        survived: list[list[object]] = []
        ending = threading.Thread(target=lambda: survived.extend(end_trees(records)))
        ending.start()
        # Told one after another, the second would hear SIGTERM only after the first's grace.
        until(lambda: all((tmp_path / f"term-{i}").exists() for i in range(3)), 30)
        for proc in procs:
            assert proc.poll() is None  # each is still within its grace
            proc.kill()
            proc.wait()
        ending.join(30)
        assert not ending.is_alive()
        assert survived == [[], [], []]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()
