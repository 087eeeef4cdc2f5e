"""A command child's process is never left running with nobody watching it: a failure after it
was let go (its stdin's thread refused by a pids limit, say) ends its tree before the child
fails, and the batch's process book forgets it. One that cannot be killed (an uninterruptible
wait) is named in the transcript as left running, on that path and when a process's
descendants outlive it."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from flightdeck.engine.agents.process import Process
from flightdeck.engine.api import Engine
from flightdeck.engine.inputs.settings import CommandSpec, Route
from flightdeck.engine.inputs.tasks import Batch, Task
from flightdeck.engine.model import ChildStatus

from helpers import HANG_S, run_to_end, settings, until, wait_ended

# It notes that it runs, then waits for the gate (the other child, to keep the batch running).
SCRIPT = 'touch "$0.runs"; while [ ! -e gate ]; do sleep 0.02; done'


def test_a_process_whose_setup_fails_once_let_go_is_ended_before_its_child_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    feed = Process.feed
    refused_pids: list[int] = []

    def refused(self: Process, text: str, *, then_close: bool) -> None:
        if "refused" in text:
            refused_pids.append(self.pid)
            raise RuntimeError("can't start new thread")
        feed(self, text, then_close=then_close)

    monkeypatch.setattr(Process, "feed", refused)
    spec = CommandSpec(argv=("sh", "-c", SCRIPT, "{id}"), stdin=True)
    route = Route(name="cmd", provider="command", model="cmd", command=spec)
    tasks = (
        Task(id="t0", goal="refused", seq=0, route="cmd"),
        Task(id="t1", goal="runs on", seq=1, route="cmd"),
    )
    engine = Engine(
        Batch("b", tasks, workspace=tmp_path),
        settings(route, pool=2),
        state_dir=tmp_path / "state",
        env={"PATH": os.environ["PATH"]},
    )
    engine.start()
    try:
        rows = lambda: {r.id: r for r in engine.snapshot().children}  # noqa: E731
        until(lambda: rows()["t0"].status is ChildStatus.FAILED, what="t0 failed")
        until(lambda: (tmp_path / "t1.runs").exists(), what="t1 running")
        [pid] = refused_pids
        # Ended by the time its child failed, while the batch (t1) runs on: nothing but its
        # child's end would have ended it before the batch's.
        with pytest.raises(ChildProcessError):  # reaped, too
            os.waitpid(pid, os.WNOHANG)
        assert "can't start new thread" in (rows()["t0"].error or "")
    finally:
        (tmp_path / "gate").touch()
        snap = run_to_end(engine)
    assert [r.status for r in snap.children] == [ChildStatus.FAILED, ChildStatus.COMPLETED]


# Ignores SIGTERM; once it says so (its pid in the ready file, argv[1]), it waits for the gate.
STUBBORN = """import os, pathlib, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
ready = pathlib.Path(sys.argv[1])
ready.with_suffix(".tmp").write_text(str(os.getpid()))
ready.with_suffix(".tmp").rename(ready)
while not pathlib.Path("gate").exists():
    time.sleep(0.02)
"""

# Starts STUBBORN and exits once it is ready: a descendant that outlives its process.
LEAVES_IT = """import pathlib, subprocess, sys, time
subprocess.Popen([sys.executable, sys.argv[2], sys.argv[1]])
while not pathlib.Path(sys.argv[1]).exists():
    time.sleep(0.01)
"""


@pytest.fixture
def unkillable(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """SIGKILL ends none of a command's tree: each stands for a process in an uninterruptible
    wait (which no test can make to order). The pids to kill at the end are added to the list
    the test gets; they are, for real, whatever the test's outcome."""
    send = Process.signal

    def no_sigkill(self: Process, sig: signal.Signals) -> None:
        if sig != signal.SIGKILL:
            send(self, sig)

    monkeypatch.setattr(Process, "signal", no_sigkill)
    left: list[int] = []
    yield left
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        assert wait_ended(pid, HANG_S), pid


def transcript_of(engine: Engine, child: str) -> str:
    engine.flush(1.0)
    row = engine.snapshot().child(child)
    assert row is not None
    path = Path(row.transcript)
    return path.read_text() if path.exists() else ""


# Its Popen let go while it runs, as the transcript says: Python warns of it too.
@pytest.mark.filterwarnings("ignore:subprocess .* is still running:ResourceWarning")
def test_a_process_that_cannot_be_killed_as_its_setup_fails_is_named_left_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, unkillable: list[int]
) -> None:
    # It was let go, released and forgotten in silence: running on, nobody watching it.
    monkeypatch.setattr(Process, "feed", _refused)
    (tmp_path / "stubborn.py").write_text(STUBBORN)
    argv = (sys.executable, str(tmp_path / "stubborn.py"), str(tmp_path / "{id}.ready"))
    spec = CommandSpec(argv=argv, stdin=True)
    route = Route(name="cmd", provider="command", model="cmd", command=spec)
    tasks = (Task(id="t0", goal="refused", seq=0, route="cmd"),)
    engine = Engine(
        Batch("b", tasks, workspace=tmp_path),
        settings(route),
        state_dir=tmp_path / "state",
        env={"PATH": os.environ["PATH"]},
    )
    engine.start()
    try:
        until(lambda: (tmp_path / "t0.ready").exists(), what="it runs, ignoring SIGTERM")
        pid = int((tmp_path / "t0.ready").read_text())
        unkillable.append(pid)
        said = f"process {pid} could not be killed: left running, unwatched"
        until(lambda: said in transcript_of(engine, "t0"), what=said)
    finally:
        (tmp_path / "gate").touch()
        snap = run_to_end(engine)
    [row] = snap.children
    assert row.status is ChildStatus.FAILED and "can't start new thread" in (row.error or "")


def _refused(self: Process, text: str, *, then_close: bool) -> None:
    raise RuntimeError("can't start new thread")


def test_a_descendant_that_cannot_be_killed_after_its_process_exits_is_named_left_running(
    tmp_path: Path, unkillable: list[int]
) -> None:
    (tmp_path / "stubborn.py").write_text(STUBBORN)
    (tmp_path / "leaves_it.py").write_text(LEAVES_IT)
    ready = str(tmp_path / "{id}.ready")
    argv = (sys.executable, str(tmp_path / "leaves_it.py"), ready, str(tmp_path / "stubborn.py"))
    spec = CommandSpec(argv=argv, kill_grace_s=0.1)
    route = Route(name="cmd", provider="command", model="cmd", command=spec)
    engine = Engine(
        Batch("b", (Task(id="t0", goal="leave one", seq=0, route="cmd"),), workspace=tmp_path),
        settings(route),
        state_dir=tmp_path / "state",
        env={"PATH": os.environ["PATH"]},
    )
    engine.start()
    try:
        until(lambda: (tmp_path / "t0.ready").exists(), what="its descendant, ignoring SIGTERM")
        pid = int((tmp_path / "t0.ready").read_text())
        unkillable.append(pid)
        said = f"process {pid} could not be killed: left running, unwatched"
        until(lambda: said in transcript_of(engine, "t0"), what=said)
        text = transcript_of(engine, "t0")
        assert "SIGTERM sent (the process exited; its descendants)" in text
        assert "SIGKILL sent: it outlived the grace period" in text
    finally:
        (tmp_path / "gate").touch()
        snap = run_to_end(engine)
    assert [r.status for r in snap.children] == [ChildStatus.COMPLETED]
