"""A command child's process is never left running with nobody watching it: a failure after it
was let go (its stdin's thread refused by a pids limit, say) ends its tree before the child
fails, and the batch's process book forgets it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from flightdeck.engine.agents.process import Process
from flightdeck.engine.api import Engine
from flightdeck.engine.inputs.settings import CommandSpec, Route
from flightdeck.engine.inputs.tasks import Batch, Task
from flightdeck.engine.model import ChildStatus

from helpers import run_to_end, settings, until

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
