"""`resume` ends the process trees it cannot adopt all at once: each waits out its own grace
beside the others. It ended them one after another, so three CLIs that ignore SIGTERM under a
10 s grace held `resume`, silent, for 30 s before anything ran."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
from pathlib import Path

from flightdeck.engine.agents.adopt import end_trees
from flightdeck.engine.agents.process import Files, Record
from flightdeck.engine.agents.tree import identify

from helpers import HANG_S, until

# Told SIGTERM, it notes it and runs on: only SIGKILL ends it.
STUBBORN = (
    "import pathlib, signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: pathlib.Path(sys.argv[1]).touch())\n"
    "print('ready', flush=True)\n"
    "time.sleep(300)\n"
)

# Told SIGTERM, it notes it and ends.
ENDS_ON_SIGTERM = (
    "import pathlib, signal, sys, time\n"
    "signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path(sys.argv[1]).touch(), sys.exit(0)))\n"
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
        until(lambda: all((tmp_path / f"term-{i}").exists() for i in range(3)), HANG_S)
        for proc in procs:
            assert proc.poll() is None  # each is still within its grace
            proc.kill()
            proc.wait()
        ending.join(HANG_S)
        assert not ending.is_alive()
        assert survived == [[], [], []]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()


def test_a_tree_its_dead_owner_suspended_for_a_pause_ends_on_sigterm(tmp_path: Path) -> None:
    # A paused command child's process is stopped (SIGSTOP); its owner dies; `resume` ends its
    # tree. SIGTERM alone stays pending on a stopped process: it waited out the whole grace,
    # then SIGKILL, never letting the process end as told.
    # How it ended is noted by it: `end_trees` reaps what it ended that is this process's
    # child (as a resume that is its subreaper), leaving its Popen no exit status to read.
    told = tmp_path / "term"
    proc = subprocess.Popen(
        [sys.executable, "-c", ENDS_ON_SIGTERM, str(told)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        root = identify(proc.pid)
        assert root is not None
        proc.send_signal(signal.SIGSTOP)
        until(lambda: Path(f"/proc/{proc.pid}/stat").read_text().split(") ")[1][0] == "T")
        files = Files(tmp_path / "out", tmp_path / "err")
        survived: list[list[object]] = []
        # A grace no test waits out: only SIGTERM can end it in time.
        ending = threading.Thread(
            target=lambda: survived.extend(end_trees([(Record(root, None, files), 600.0)])),
            daemon=True,
        )
        ending.start()
        ending.join(30)
        assert not ending.is_alive(), "end_trees waited out the grace of a suspended process"
        assert survived == [[]]
        proc.wait(30)
        assert told.exists()  # it ended on SIGTERM, within its grace
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()

