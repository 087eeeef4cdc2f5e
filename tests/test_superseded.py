"""Delegates of a parent's earlier attempt: once the parent runs again (a retry, a re-run after
its owner died), they stay in the records as they ended, their spend counted, but its last
attempt's delegates decide the batch's outcome, in the engine, the store's readers, the
report, `ls`, the headless summary and `wait`'s exit code."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.attached.view import StoreView
from flightdeck.engine.inputs.settings import Budget, Settings
from flightdeck.engine.model import BatchStatus, ChildStatus, Snapshot, Usage
from flightdeck.engine.records.markdown import render_markdown
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.report import build_report
from flightdeck.engine.records.store import Store

from helpers import (
    Hold,
    batch,
    flightdeck,
    flightdeck_process,
    run_to_end,
    settings,
    sim_route,
    until,
    wait_ended,
)
from test_resume import dead_batch
from test_store import make_child

DELEGATING = {"tool_turns": 0, "delegate_rate": 1.0, "delegates": 2}


def delegating(hold: Hold, **engine: Any) -> Settings:
    route = dataclasses.replace(sim_route(**DELEGATING, **hold.options()), delegate=True)
    return dataclasses.replace(settings(route, pool=4, **engine), budget=Budget(max_depth=1))


def stopped_with_its_delegates(tmp_path: Path, s: Settings, hold: Hold) -> Engine:
    """t0000's first call delegates two sub-tasks, held running; the parent is stopped, and
    its delegates with it: the batch ends stopped."""
    hold.release("t0000", 0)
    engine = Engine(batch(1), s, state_dir=tmp_path / "state")
    engine.start()
    until(lambda: engine.snapshot().totals.running == 3, what="the delegates running")
    engine.stop(["t0000"])
    assert engine.wait(60)
    assert engine.status is BatchStatus.STOPPED
    return engine


def stored(tmp_path: Path, batch_id: str) -> tuple[dict[str, Any], Snapshot, tuple[int, ...]]:
    """What readers of the store make of the batch: the report, an attached view's snapshot,
    and `ls`'s counts (completed, failed, stopped)."""
    db = tmp_path / "flightdeck.db"
    with StoreReader(db) as reader:
        report = build_report(reader, batch_id)
        info = reader.batch(batch_id)
    assert info is not None
    view = StoreView(db, batch_id, watch=False)
    try:
        snap = view.snapshot()
    finally:
        view.close()
    return report, snap, (info.completed, info.failed, info.stopped)


def test_a_retried_parents_earlier_delegates_are_history_and_the_batch_completes(
    tmp_path: Path, hold: Hold
) -> None:
    engine = stopped_with_its_delegates(tmp_path, delegating(hold), hold)
    try:
        hold.release()
        engine.retry(["t0000"])
        snap = run_to_end(engine)
    finally:
        engine.close()
    assert snap.status is BatchStatus.COMPLETED  # every task and the last attempt's delegates
    rows = {r.id: r for r in snap.children}
    assert [(i, r.status.value, r.superseded) for i, r in rows.items()] == [
        ("t0000", "completed", False),
        ("t0000.1", "stopped", True),
        ("t0000.2", "stopped", True),
        ("t0000.3", "completed", False),  # the new attempt delegated afresh
        ("t0000.4", "completed", False),
    ]
    t = snap.totals
    assert (t.children, t.completed, t.failed, t.stopped, t.superseded) == (5, 3, 0, 0, 2)
    assert t.cost_usd == sum(r.cost_usd or 0 for r in snap.children)  # their spend counts
    report, view, ls = stored(tmp_path / "state", engine.batch_id)
    assert report["status"] == "completed"
    assert (report["totals"]["stopped"], report["totals"]["superseded"]) == (0, 2)
    assert [c["id"] for c in report["children"] if c["superseded"]] == ["t0000.1", "t0000.2"]
    md = render_markdown(report)
    assert "| t0000.1 | t0000 | stopped (superseded) |" in md
    # The routes table adds up to its children too (found by a review: it left them out).
    assert "| sim | sim-1 | 5 | 3 | 0 | 0 | 2 |" in md, md
    assert view.status is BatchStatus.COMPLETED
    v = view.totals
    assert (v.children, v.completed, v.stopped, v.superseded) == (5, 3, 0, 2)
    assert v.cost_usd == t.cost_usd
    assert [r.id for r in view.children if r.superseded] == ["t0000.1", "t0000.2"]
    assert ls == (3, 0, 0)


@pytest.mark.slow
def test_a_delegate_that_fails_in_the_parents_last_attempt_still_fails_the_batch(
    tmp_path: Path, hold: Hold
) -> None:
    # A held call shows no activity: the new attempt's first delegate, never let go, stalls.
    s = delegating(hold, stall_after_s=3.0, tool_stall_after_s=600.0)
    engine = stopped_with_its_delegates(tmp_path, s, hold)
    try:
        hold.release("t0000")
        hold.release("t0000.4")
        engine.retry(["t0000"])
        snap = run_to_end(engine)
    finally:
        engine.close()
    rows = {r.id: r for r in snap.children}
    assert snap.status is BatchStatus.FAILED
    assert rows["t0000.3"].status is ChildStatus.STALLED
    assert rows["t0000"].status is rows["t0000.4"].status is ChildStatus.COMPLETED
    t = snap.totals
    assert (t.completed, t.failed, t.stopped) == (2, 1, 0)  # the earlier two counted apart
    assert t.superseded == 2 and not rows["t0000.3"].superseded
    report, view, ls = stored(tmp_path / "state", engine.batch_id)
    assert report["status"] == "failed" and view.status is BatchStatus.FAILED
    assert (report["totals"]["failed"], report["totals"]["superseded"]) == (1, 2)
    assert ls == (2, 1, 0)


def test_a_parent_rerun_on_resume_leaves_its_lost_attempts_delegates_as_history(
    tmp_path: Path,
) -> None:
    # t0000 had delegated when its owner died: t0000.1 completed (its own delegate t0000.1.1
    # still running), t0000.2 running, t0000.3 queued. Re-run, t0000 delegates afresh.
    route = dataclasses.replace(sim_route(**DELEGATING), delegate=True)
    cfg = dataclasses.replace(settings(route), budget=Budget(max_depth=1))
    bdir = tmp_path / "batches" / "b1"
    bdir.mkdir(parents=True)
    info = dead_batch(tmp_path, cfg, batch(1), heartbeat_ts=1500.0)
    spent: dict[str, object] = {"usage": Usage(input_tokens=10, output_tokens=10)}
    rows: list[tuple[str, str | None, ChildStatus, dict[str, object]]] = [
        ("t0000", None, ChildStatus.RUNNING, {"started_ts": 1400.0}),
        ("t0000.1", "t0000", ChildStatus.COMPLETED, {"result": "one", "finished_ts": 1450.0}),
        ("t0000.2", "t0000", ChildStatus.RUNNING, spent),
        ("t0000.3", "t0000", ChildStatus.QUEUED, {}),
        ("t0000.1.1", "t0000.1", ChildStatus.RUNNING, spent),
    ]
    with Store(tmp_path / "flightdeck.db") as store:
        store.create_batch(info)
        for seq, (child_id, parent, status, kw) in enumerate(rows):
            log = str(bdir / f"{child_id}.log")
            row = make_child(seq, id=child_id, goal="g", status=status, transcript=log, **kw)
            store.add_children("b1", [row])
            if parent is not None:  # as the owner that made them recorded them
                store.record_event("b1", child_id, 1400.0 + seq, "delegate", parent)
    engine = Engine.resume(tmp_path, "b1")
    engine.start()
    snap = run_to_end(engine)
    assert snap.status is engine.status is BatchStatus.COMPLETED
    got = {r.id: (r.status.value, r.superseded) for r in snap.children}
    assert got == {
        "t0000": ("completed", False),
        "t0000.1": ("completed", True),
        "t0000.2": ("unknown", True),
        "t0000.3": ("stopped", True),
        "t0000.1.1": ("unknown", True),  # a delegate of a delegate of the lost attempt
        "t0000.4": ("completed", False),
        "t0000.5": ("completed", False),
    }
    t = snap.totals
    assert (t.children, t.completed, t.failed, t.stopped, t.superseded) == (7, 3, 0, 0, 4)
    assert engine.resumed is not None and engine.resumed.lost == 2  # still said, and costed
    report, view, ls = stored(tmp_path, "b1")
    assert report["status"] == "completed" and report["totals"]["superseded"] == 4
    assert view.status is BatchStatus.COMPLETED and view.totals.superseded == 4
    assert ls == (3, 0, 0)


@pytest.mark.slow
def test_retry_of_a_stopped_parent_from_the_command_line_ends_completed(tmp_path: Path) -> None:
    hold = Hold(tmp_path / "hold")
    hold.release("a", 0)
    (tmp_path / "flightdeck.toml").write_text(
        "[engine]\nmax_concurrent = 4\nstall_after_s = 3600\n[routes.sim]\ntime_scale = 0.01\n"
        + hold.toml()
        + "delegate = true\ndelegate_rate = 1.0\ndelegates = 2\n[budget]\nmax_depth = 1\n"
    )
    (tmp_path / "tasks.jsonl").write_text(json.dumps({"id": "a", "goal": "Task A"}) + "\n")
    state = ("--state-dir", str(tmp_path / "state"))
    owner = flightdeck_process("run", "--headless", "tasks.jsonl", *state, cwd=tmp_path)
    try:
        db = tmp_path / "state" / "flightdeck.db"

        def running() -> int:
            if not db.exists():
                return 0
            with StoreReader(db) as reader:
                found = reader.batches()
                rows = reader.children(found[0].id) if found else []
            return sum(r.status is ChildStatus.RUNNING for r in rows)

        until(lambda: running() == 3, what="the parent waiting on its two delegates")
        with StoreReader(db) as reader:
            batch_id = reader.batches()[0].id
        assert flightdeck("stop", batch_id, "a", *state, cwd=tmp_path).returncode == 0
        owner.communicate(timeout=60)
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.communicate()
    hold.release()
    retried = flightdeck("retry", batch_id, "--where", "status:stopped", *state, cwd=tmp_path)
    assert retried.returncode == 0, retried.stderr
    waited = flightdeck("wait", batch_id, *state, cwd=tmp_path)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    assert f"batch {batch_id} completed" in waited.stdout
    reopened = re.search(r"had ended: owner pid (\d+) started", retried.stderr)
    assert reopened is not None and wait_ended(int(reopened[1]), 60)  # its summary written
    # The reopened owner's summary counts the earlier delegates apart, and names them.
    log = (tmp_path / "state" / "batches" / batch_id / "owner.log").read_text()
    assert f"batch {batch_id} — completed" in log
    assert "superseded: 2 delegates of an earlier attempt of their parent (a.1, a.2)" in log
