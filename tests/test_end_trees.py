"""`resume` ends the process trees it cannot adopt all at once: each waits out its own grace
beside the others. It ended them one after another, so three CLIs that ignore SIGTERM under a
10 s grace held `resume`, silent, for 30 s before anything ran."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

from flightdeck.engine.agents.adopt import TreeEnd, end_trees
from flightdeck.engine.agents.process import Files, Record
from flightdeck.engine.agents.tree import Pid, identify

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

# Told SIGRTMIN, it notes it; any signal sent before it is taken first (SIGTERM: it ends).
SYNCS_ON_SIGRTMIN = (
    "import pathlib, signal, sys, time\n"
    "signal.signal(signal.SIGRTMIN, lambda *a: pathlib.Path(sys.argv[1]).touch())\n"
    "print('ready', flush=True)\n"
    "time.sleep(300)\n"
)


@contextlib.contextmanager
def ready(script: str, noted: Path) -> Iterator[tuple[subprocess.Popen[str], Pid]]:
    """`script` (noting its signal in `noted`) in a group of its own, as a command child's, once
    it says it is ready: the process, and its pid with its start; killed at the end if need be."""
    proc = subprocess.Popen(
        [sys.executable, "-c", script, str(noted)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        root = identify(proc.pid)
        assert root is not None
        yield proc, root
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        assert proc.stdout is not None
        proc.stdout.close()


def test_every_tree_is_told_to_end_before_any_grace_is_over(tmp_path: Path) -> None:
    with contextlib.ExitStack() as stack:
        started = [stack.enter_context(ready(STUBBORN, tmp_path / f"term-{i}")) for i in range(3)]
        records = []
        for i, (_, root) in enumerate(started):
            files = Files(tmp_path / f"out-{i}", tmp_path / f"err-{i}")
            records.append((Record(root, None, files), 600.0))  # a grace no test waits out
        survived: list[TreeEnd] = []
        ending = threading.Thread(target=lambda: survived.extend(end_trees(records)))
        ending.start()
        # Told one after another, the second would hear SIGTERM only after the first's grace.
        until(lambda: all((tmp_path / f"term-{i}").exists() for i in range(3)), HANG_S)
        for proc, _ in started:
            assert proc.poll() is None  # each is still within its grace
            proc.kill()
            proc.wait()
        ending.join(HANG_S)
        assert not ending.is_alive()
        assert [end.left for end in survived] == [[], [], []]


def test_a_tree_its_dead_owner_suspended_for_a_pause_ends_on_sigterm(tmp_path: Path) -> None:
    # A paused command child's process is stopped (SIGSTOP); its owner dies; `resume` ends its
    # tree. SIGTERM alone stays pending on a stopped process: it waited out the whole grace,
    # then SIGKILL, never letting the process end as told.
    # How it ended is noted by it: `end_trees` reaps what it ended that is this process's
    # child (as a resume that is its subreaper), leaving its Popen no exit status to read.
    told = tmp_path / "term"
    with ready(ENDS_ON_SIGTERM, told) as (proc, root):
        proc.send_signal(signal.SIGSTOP)
        until(lambda: Path(f"/proc/{proc.pid}/stat").read_text().split(") ")[1][0] == "T")
        files = Files(tmp_path / "out", tmp_path / "err")
        survived: list[TreeEnd] = []
        # A grace no test waits out: only SIGTERM can end it in time.
        ending = threading.Thread(
            target=lambda: survived.extend(end_trees([(Record(root, None, files), 600.0)])),
            daemon=True,
        )
        ending.start()
        ending.join(30)
        assert not ending.is_alive(), "end_trees waited out the grace of a suspended process"
        assert [end.left for end in survived] == [[]]
        proc.wait(30)
        assert told.exists()  # it ended on SIGTERM, within its grace


def test_a_recorded_pid_another_process_leads_a_group_with_now_is_never_signalled(
    tmp_path: Path,
) -> None:
    # Found by a review: the recorded process had ended and its pid had been given to another
    # process, the leader of a group of its own (any command a shell starts is one). `resume`
    # told that whole group SIGTERM, then SIGKILL: the start time was checked for each process
    # signalled alone, not for the group. Here the pid is a process the test started, recorded
    # with another start time.
    synced = tmp_path / "synced"
    with ready(SYNCS_ON_SIGRTMIN, synced) as (other, now):
        gone = Pid(other.pid, now.start - 1)  # the process once recorded with this pid
        files = Files(tmp_path / "out", tmp_path / "err")
        assert [e.left for e in end_trees([(Record(gone, None, files), 0.2)])] == [[]]
        # A signal sent before is pending or taken by now, and taken first (the lowest first).
        other.send_signal(signal.SIGRTMIN)
        until(lambda: synced.exists() or other.poll() is not None, what="its answer")
        assert other.poll() is None  # not ours: never signalled
