"""Engine.resume in-process, on a store left as a dead owner leaves it (written with the real
Store, on disk): what is carried, re-run, missed, and counted against the budget."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.inputs.settings import Budget, CommandSpec, Route, Settings
from flightdeck.engine.inputs.settings.stored import settings_from_json, settings_json
from flightdeck.engine.inputs.tasks import Batch
from flightdeck.engine.model import (
    Activity,
    BatchStatus,
    ChildStatus,
    LoopEvidence,
    SteerReceipt,
    SteerState,
    Usage,
)
from flightdeck.engine.owner import assembly
from flightdeck.engine.owner.resume import NothingToResume
from flightdeck.engine.records.loops import evidence_json
from flightdeck.engine.records.markdown import render_markdown
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.report import build_report
from flightdeck.engine.records.rows import BatchInfo, process_start_time
from flightdeck.engine.records.store import Store
from flightdeck.tui.cli import main
from flightdeck.tui.exitcodes import ExitCode

from helpers import batch, run_to_end, settings, sim_route, stepped, until
from test_store import make_batch, make_child

LOST_USAGE = Usage(input_tokens=1000, output_tokens=500)
LOST = Decimal("0.0125")  # what LOST_USAGE was billed


def dead_owner() -> tuple[int, float | None]:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    start = process_start_time(proc.pid)
    proc.wait()
    return proc.pid, start


def dead_batch(state: Path, cfg: Settings, tasks: Batch, **more: Any) -> BatchInfo:
    """Batch b1's row of `tasks` on `cfg`, as an owner that has died left it."""
    pid, start = dead_owner()
    return make_batch(
        "b1",
        spec_json=assembly.spec_json(tasks),
        workspace=str(state / "ws"),
        state_dir=str(state),
        owner_pid=pid,
        owner_start=start,
        settings_json=settings_json(cfg),
        **more,
    )


def abandoned(
    state: Path,
    *,
    max_cost: Decimal | None = None,
    max_runs: int | None = None,
    lost_cost: Decimal | None = Decimal("0.003"),
    soft_cost: Decimal | None = None,
) -> tuple[str, Path]:
    """Batch b1 of 4 children as its dead owner left it: t0000 completed, t0001 running (with a
    queued steer, its attempt billed `lost_cost`: None for no price), t0002 and t0003 queued."""
    cfg = settings(sim_route())
    if max_cost is not None or max_runs is not None or soft_cost is not None:
        budget = Budget(max_cost_usd=max_cost, max_runs=max_runs, soft_cost_usd=soft_cost)
        cfg = dataclasses.replace(cfg, budget=budget)
    tasks = batch(4)
    bdir = state / "batches" / "b1"
    bdir.mkdir(parents=True)
    (bdir / "t0001.log").write_text("10:00:00.000  user      │ Review item 1\n")
    info = dead_batch(state, cfg, tasks, heartbeat_ts=1500.0, max_cost_usd=max_cost)
    rows = [
        make_child(
            0,
            id="t0000",
            goal="Review item 0",
            status=ChildStatus.COMPLETED,
            result="done",
            usage=Usage(input_tokens=10, output_tokens=10),
            cost_usd=Decimal("0.00005"),
            started_ts=1390.0,
            finished_ts=1400.0,
            transcript=str(bdir / "t0000.log"),
        ),
        make_child(
            1,
            id="t0001",
            goal="Review item 1",
            status=ChildStatus.RUNNING,
            usage=LOST_USAGE,
            cost_usd=lost_cost,  # sim price: 1000 * $1/M + 500 * $4/M
            activity=Activity(api_calls=1),
            started_ts=1450.0,
            transcript=str(bdir / "t0001.log"),
        ),
        *(
            make_child(
                i, id=f"t{i:04d}", goal=f"Review item {i}", transcript=str(bdir / f"t{i:04d}.log")
            )
            for i in (2, 3)
        ),
    ]
    steer = SteerReceipt(5, "t0001", "check the totals", False, SteerState.QUEUED, 1460.0)
    with Store(state / "flightdeck.db") as store:
        store.create_batch(info)
        store.add_children("b1", rows)
        store.record_control("b1", steer)
    return "b1", bdir


def test_the_snapshot_says_what_every_resume_lost_in_the_engine_and_an_attached_view(
    tmp_path: Path,
) -> None:
    from flightdeck.engine.attached.view import StoreView

    batch_id, _ = abandoned(tmp_path)
    # An earlier resume lost $0.001 of it: t0001's row ($0.003) carries that in, so this
    # resume lost $0.002 more (found by a review: the $0.001 was counted twice).
    with Store(tmp_path / "flightdeck.db") as store:
        detail = json.dumps({"cost_usd": "0.001", "rerun": True})
        store.record_event(batch_id, "t0001", 1300.0, "lost_attempt", detail)
        # ... and its lost attempt had been flagged as looping: the re-run starts over.
        flag = LoopEvidence("repeat", "x called 5 times", ("x {}",) * 5, 1350.0)
        store.record_event(batch_id, "t0001", 1350.0, "loop", evidence_json(flag))
    engine = Engine.resume(tmp_path, batch_id)
    engine.start()
    snap = run_to_end(engine)
    assert engine.resumed is not None and engine.resumed.lost_cost_usd == Decimal("0.002")
    assert snap.lost_cost_usd == Decimal("0.003")
    with StoreReader(tmp_path / "flightdeck.db") as reader:
        assert build_report(reader, batch_id)["recovery"]["lost_cost_usd"] == 0.003
    view = StoreView(tmp_path / "flightdeck.db", batch_id, watch=False)
    try:
        assert view.snapshot().lost_cost_usd == Decimal("0.003")
        rerun = view.snapshot().child("t0001")
        assert rerun is not None and rerun.loop is None
    finally:
        view.close()


def test_an_abandoned_batch_s_report_says_its_running_rows_are_what_the_owner_left(
    tmp_path: Path,
) -> None:
    # Found by a review: the Markdown report of a batch whose owner died called its child
    # `running` with no word that nothing runs it, nor how to go on.
    batch_id, _ = abandoned(tmp_path)
    with StoreReader(tmp_path / "flightdeck.db") as reader:
        report = build_report(reader, batch_id)
    assert report["status"] == "abandoned"
    md = render_markdown(report)
    assert (
        "- status: **abandoned** (its owner died before 3 of its children ended; "
        "`flightdeck resume b1` runs it to the end)"
    ) in md
    assert "| running when the owner died | 1 |" in md
    assert "| t0001 | running when the owner died |" in md
    assert "| t0002 | queued |" in md
    # It never finished: the time the report has is the dead owner's last heartbeat.
    assert f"- owner last heard from: {report['finished']}\n" in md and "- finished:" not in md


def test_flightdeck_report_s_resume_command_names_its_state_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found by an audit: `flightdeck report --state-dir D` of an abandoned batch printed
    # `flightdeck resume b1` alone, which from any other folder finds no batch b1.
    state = tmp_path / "state"
    abandoned(state)
    monkeypatch.chdir(tmp_path)
    assert main(["report", "b1", "--state-dir", "state"]) == ExitCode.OK
    resume = f"`flightdeck resume b1 --state-dir {state}` runs it to the end"
    assert resume in capsys.readouterr().out


def test_retry_of_a_child_a_dead_owner_left_running_or_queued_names_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found by a walk-through: `retry B t0001` of an abandoned batch said "t0001 has not ended
    # (running): nothing to retry", of a child nothing runs, with no word of `resume`.
    state = tmp_path / "state"
    abandoned(state)
    monkeypatch.chdir(tmp_path)
    for child, status in (("t0001", "running"), ("t0002", "queued")):
        assert main(["retry", "b1", child, "--state-dir", "state"]) == ExitCode.USAGE
        assert capsys.readouterr().err == (
            f"flightdeck: {child} was {status} when its batch's owner died: "
            f"`flightdeck resume b1 --state-dir {state}` runs it (retry takes children that "
            "ended)\n"
        )
    with StoreReader(state / "flightdeck.db") as reader:
        assert reader.batch("b1").status is BatchStatus.ABANDONED  # type: ignore[union-attr]


def test_a_resumed_engines_snapshot_before_start_is_its_store_rows(tmp_path: Path) -> None:
    batch_id, _ = abandoned(tmp_path)
    engine = Engine.resume(tmp_path, batch_id)
    try:
        statuses = [(r.id, r.status) for r in engine.snapshot().children]
    finally:
        engine.close()
    assert statuses == [
        ("t0000", ChildStatus.COMPLETED),
        ("t0001", ChildStatus.RUNNING),  # as its dead owner left it, until start() settles it
        ("t0002", ChildStatus.QUEUED),
        ("t0003", ChildStatus.QUEUED),
    ]


def test_resume_carries_finished_children_and_reruns_the_lost_one(tmp_path: Path) -> None:
    batch_id, bdir = abandoned(tmp_path)
    with StoreReader(tmp_path / "flightdeck.db") as reader:
        found = reader.batch(batch_id)
        assert found is not None and found.status == BatchStatus.ABANDONED
    engine = Engine.resume(tmp_path, batch_id)
    engine.start()
    snap = run_to_end(engine)
    assert engine.resumed is not None and engine.resumed.rerun == 1
    assert engine.resumed.lost_cost_usd == Decimal("0.003")
    assert snap.status == BatchStatus.COMPLETED
    by_id = {r.id: r for r in snap.children}
    assert [r.id for r in snap.children] == ["t0000", "t0001", "t0002", "t0003"]
    assert by_id["t0000"].result is None or by_id["t0000"].result == "done"
    assert by_id["t0000"].finished_ts == 1400.0  # kept, never run again
    rerun = by_id["t0001"]
    assert rerun.status == ChildStatus.COMPLETED
    assert rerun.usage.input_tokens > LOST_USAGE.input_tokens  # both attempts
    assert rerun.cost_usd is not None and rerun.cost_usd > Decimal("0.003")
    # the queued steer reached the re-run child at its first turn boundary
    assert [s.state for s in rerun.steers if s.id == 5] == [SteerState.DELIVERED]
    log = (bdir / "t0001.log").read_text()
    assert "owner lost" in log and "restarts from the start" in log
    assert "delivered: check the totals" in log
    with StoreReader(tmp_path / "flightdeck.db") as reader:
        report = build_report(reader, batch_id)
        done = reader.batch(batch_id)
    assert done is not None and done.status == BatchStatus.COMPLETED
    assert report["recovery"]["rerun"] == 1 and report["recovery"]["lost_cost_usd"] == 0.003
    assert Decimal(str(report["totals"]["cost_usd"])) == snap.totals.cost_usd
    with pytest.raises(NothingToResume, match="nothing to do"):
        Engine.resume(tmp_path, batch_id)


def test_what_the_cache_saved_before_the_crash_counts_as_the_report_counts_it(
    tmp_path: Path,
) -> None:
    # Found by an audit: after a resume the summary's "cache saved" held only what this owner's
    # calls saved, where its cost and tokens (and the report) count the earlier owner's too.
    batch_id, _ = abandoned(tmp_path)
    with StoreReader(tmp_path / "flightdeck.db") as reader:
        rows = {r.id: r for r in reader.children(batch_id)}
    with Store(tmp_path / "flightdeck.db") as store:
        for cid in ("t0000", "t0001"):  # one carried as it ended, one lost and run again
            cached = dataclasses.replace(rows[cid].usage, cache_read_tokens=40_000)
            store.update_child(batch_id, dataclasses.replace(rows[cid], usage=cached))
    engine = Engine.resume(tmp_path, batch_id)
    engine.start()
    snap = run_to_end(engine)
    with StoreReader(tmp_path / "flightdeck.db") as reader:
        report = build_report(reader, batch_id)
    saved = report["totals"]["cache_saved_usd"]
    assert saved is not None and saved >= 0.08 * 0.9  # 80,000 reads at sim's $1/M, less 90 %
    assert float(snap.totals.cache_saved_usd) == pytest.approx(saved)
    assert snap.totals.saved_unknown == 0


def test_a_resumed_batch_counts_its_progress_from_what_was_done(tmp_path: Path) -> None:
    # Found by an audit: a resume of 245 children, 49 done, counted `[2/196]` on its lines.
    from flightdeck.engine.model import ChildFinished

    batch_id, _ = abandoned(tmp_path)  # t0000 done; t0001 lost, run again; t0002-3 queued
    engine = Engine.resume(tmp_path, batch_id)
    counts: list[tuple[int, int]] = []
    engine.subscribe(
        lambda e: counts.append((e.done, e.total)) if isinstance(e, ChildFinished) else None
    )
    engine.start()
    run_to_end(engine)
    assert counts == [(2, 4), (3, 4), (4, 4)]


def test_no_rerun_leaves_the_lost_child_unknown_and_its_steer_missed(tmp_path: Path) -> None:
    batch_id, bdir = abandoned(tmp_path)
    engine = Engine.resume(tmp_path, batch_id, rerun=False)
    engine.start()
    snap = run_to_end(engine)
    by_id = {r.id: r for r in snap.children}
    assert by_id["t0001"].status == ChildStatus.UNKNOWN
    assert "owner lost" in (by_id["t0001"].error or "")
    assert snap.status == BatchStatus.FAILED  # an unknown end is nobody's success
    assert snap.totals.cost_usd >= Decimal("0.003") + Decimal("0.00005")  # spent is spent
    with StoreReader(tmp_path / "flightdeck.db") as reader:
        [steer] = [s for s in reader.controls(batch_id) if s.id == 5]
        reason = reader._conn.execute(
            "SELECT reason FROM controls WHERE batch_id = ? AND id = 5", (batch_id,)
        ).fetchone()[0]
    assert steer.state == SteerState.MISSED and reason == "owner lost"
    log = (bdir / "t0001.log").read_text()
    assert "missed: check the totals (owner lost)" in log


def test_spend_before_the_crash_counts_against_the_budget(tmp_path: Path) -> None:
    # $0.003 was spent by the lost attempt: a cap of $0.002 is already reached at resume.
    batch_id, _ = abandoned(tmp_path, max_cost=Decimal("0.002"))
    engine = Engine.resume(tmp_path, batch_id, rerun=False)
    engine.start()
    snap = run_to_end(engine)
    by_id = {r.id: r for r in snap.children}
    for queued in ("t0002", "t0003"):
        assert by_id[queued].status == ChildStatus.STOPPED
        assert "budget" in (by_id[queued].error or "")
        assert by_id[queued].activity.api_calls == 0


def test_max_runs_counts_the_runs_earlier_owners_made_retries_included(tmp_path: Path) -> None:
    # Found by an audit: a new owner counted each stored child once, so every reopen by a
    # retry (and every resume) forgot the retries before it, and max_runs was never reached.
    batch_id, _ = abandoned(tmp_path, max_runs=4)
    with Store(tmp_path / "flightdeck.db") as store:  # t0000 ran twice: the operator retried it
        detail = json.dumps({"attempt": 2, "mode": "fresh", "before": {"cost_usd": "0"}})
        store.record_event(batch_id, "t0000", 1300.0, "retry", detail)
    engine = Engine.resume(tmp_path, batch_id)
    engine.start()
    snap = run_to_end(engine)
    # t0000's two runs, then t0001 again (its lost attempt is not charged) and t0002: four.
    by_id = {r.id: r for r in snap.children}
    assert [by_id[i].status for i in ("t0001", "t0002")] == [ChildStatus.COMPLETED] * 2
    assert by_id["t0003"].status is ChildStatus.STOPPED
    assert "max_runs (4) reached" in (by_id["t0003"].error or "")


def test_a_soft_budget_hold_is_kept_across_a_resume(tmp_path: Path) -> None:
    # Found in a walkthrough: the new owner forgot the hold the operator had been asked about
    # and started what it held back (a schedule's next wave) until the projection crossed
    # the soft budget again, if it ever did.
    batch_id, _ = abandoned(tmp_path, soft_cost=Decimal("0.01"))
    why = "soft budget $0.01 reached: projected $0.012"
    with Store(tmp_path / "flightdeck.db") as store:
        store.set_held(batch_id, why)
    engine = Engine.resume(tmp_path, batch_id)
    engine.start()
    try:
        snap = engine.snapshot()
        assert snap.held == why
        assert [c.status for c in snap.children if c.id != "t0000"] == [ChildStatus.QUEUED] * 3
    finally:
        engine.close()


def test_a_live_owner_keeps_its_batch(tmp_path: Path) -> None:
    from flightdeck.engine.records.liveness import OwnerAlive

    batch_id, _ = abandoned(tmp_path)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        with Store(tmp_path / "flightdeck.db") as store:  # as if it were the owner
            start = process_start_time(sleeper.pid)
            store.create_batch(
                dataclasses.replace(
                    StoreReader(tmp_path / "flightdeck.db").batch(batch_id),  # type: ignore[arg-type]
                    owner_pid=sleeper.pid,
                    owner_start=start,
                    status=BatchStatus.RUNNING,
                    finished_ts=None,
                )
            )
        engine = Engine.resume(tmp_path, batch_id)
        with pytest.raises(OwnerAlive, match=f"pid {sleeper.pid}"):
            engine.start()
        engine.close()
    finally:
        sleeper.kill()
        sleeper.wait()
    with StoreReader(tmp_path / "flightdeck.db") as reader:
        rows = {r.id: r.status for r in reader.children(batch_id)}
    assert rows["t0001"] == ChildStatus.RUNNING  # nothing changed


def test_a_steer_for_a_child_finished_before_the_resume_is_missed_at_once(tmp_path: Path) -> None:
    batch_id, bdir = abandoned(tmp_path)
    engine = Engine.resume(tmp_path, batch_id)
    engine.start()
    try:
        [rid] = engine.steer(["t0000"], "too late")
        engine.stop(["t0000"])  # ended already: nothing to stop, no error
        with pytest.raises(ValueError, match="no child with id 'nope'"):
            engine.steer(["nope"], "hi")
    finally:
        run_to_end(engine)
    with StoreReader(tmp_path / "flightdeck.db") as reader:
        [steer] = [s for s in reader.controls(batch_id) if s.id == rid]
    assert steer.state == SteerState.MISSED and rid > 5  # ids go on past the stored ones
    assert "missed: too late (the child had ended: completed)" in (bdir / "t0000.log").read_text()


def test_a_steer_applied_but_not_marked_before_the_crash_is_not_applied_twice(
    tmp_path: Path,
) -> None:
    from flightdeck.engine.commands import Steer
    from flightdeck.engine.records.requests import request, submit

    batch_id, bdir = abandoned(tmp_path)
    db = tmp_path / "flightdeck.db"
    rid = submit(db, batch_id, Steer(("t0002",), "once only"))
    with Store(db) as store:  # what the dead owner had committed of applying it
        receipt = SteerReceipt(6, "t0002", "once only", False, SteerState.QUEUED, 1470.0)
        store.record_control(batch_id, receipt, request_id=rid)
    engine = Engine.resume(tmp_path, batch_id)
    engine.start()
    run_to_end(engine)
    row = request(db, batch_id, rid)
    assert row is not None and row.state.value == "applied" and row.control_ids == (6,)
    assert [(r.id, r.state) for r in row.receipts] == [(6, SteerState.DELIVERED)]
    assert (bdir / "t0002.log").read_text().count("delivered: once only") == 1


def test_the_settings_kept_for_resume_read_back_equal(tmp_path: Path) -> None:
    from flightdeck.engine.inputs.settings import load_settings

    config = tmp_path / "flightdeck.toml"
    config.write_text(
        """[engine]
max_concurrent = 3
default_route = "cli"

[routes.cli]
provider = "command"
model = "reviewer"
argv = ["python3", "reviewer.py", "{goal}"]
workspace = "copy"
price = { input_per_mtok = 1.5, output_per_mtok = 2 }

[routes.sim]
provider = "sim"
model = "sim-1"
time_scale = 0.5

[budget]
max_cost_usd = 1.25
"""
    )
    cfg = load_settings(config)
    assert settings_from_json(settings_json(cfg)) == cfg


def test_resuming_a_finished_batch_refuses_what_its_owner_left_pending(tmp_path: Path) -> None:
    from flightdeck.engine.commands import Stop
    from flightdeck.engine.records.requests import request, submit

    batch_id, _ = abandoned(tmp_path)
    db = tmp_path / "flightdeck.db"
    rid = submit(db, batch_id, Stop(("t0002",)))
    with Store(db) as store:  # the owner committed the end, then died before applying it
        store.finish_batch(batch_id, BatchStatus.COMPLETED, 1600.0)
    with pytest.raises(NothingToResume):
        Engine.resume(tmp_path, batch_id)
    row = request(db, batch_id, rid)
    assert row is not None and row.state.value == "refused"
    assert row.reason == "the batch had finished (completed)"


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (BatchStatus.COMPLETED, ExitCode.OK),
        (BatchStatus.FAILED, ExitCode.INCOMPLETE),
        (BatchStatus.STOPPED, ExitCode.INCOMPLETE),
    ],
)
def test_resuming_a_finished_batch_exits_as_run_and_wait_do(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    status: BatchStatus,
    code: ExitCode,
) -> None:
    # Found by an audit: it exited 0 for a failed batch, so `resume B && deploy` went on.
    batch_id, _ = abandoned(tmp_path)
    with Store(tmp_path / "flightdeck.db") as store:
        store.finish_batch(batch_id, status, 1600.0)
    assert main(["resume", batch_id, "--state-dir", str(tmp_path)]) == code
    out = capsys.readouterr().out
    assert out == f"batch b1 has already finished ({status.value}): nothing to do\n"


def test_resume_keeps_the_delegates_that_ended_and_never_reuses_their_ids(
    tmp_path: Path,
) -> None:
    # t0000 had delegated three sub-tasks when its owner died: one done, one running, one queued.
    route = dataclasses.replace(
        sim_route(tool_turns=0, delegate_rate=1.0, delegates=2), delegate=True
    )
    cfg = dataclasses.replace(settings(route), budget=Budget(max_depth=1))
    tasks = batch(1)
    bdir = tmp_path / "batches" / "b1"
    bdir.mkdir(parents=True)
    info = dead_batch(tmp_path, cfg, tasks, heartbeat_ts=1500.0)

    def row(seq: int, child_id: str, status: ChildStatus, **kw: object) -> object:
        return make_child(
            seq,
            id=child_id,
            goal="g",
            status=status,
            transcript=str(bdir / f"{child_id}.log"),
            **kw,
        )

    rows = [
        row(0, "t0000", ChildStatus.RUNNING, started_ts=1400.0),
        row(1, "t0000.1", ChildStatus.COMPLETED, result="part one", finished_ts=1450.0),
        row(2, "t0000.2", ChildStatus.RUNNING, started_ts=1460.0, usage=LOST_USAGE, cost_usd=LOST),
        row(3, "t0000.3", ChildStatus.QUEUED),
    ]
    with Store(tmp_path / "flightdeck.db") as store:
        store.create_batch(info)
        store.add_children("b1", rows)  # type: ignore[arg-type]
    engine = Engine.resume(tmp_path, "b1")
    engine.start()
    snap = run_to_end(engine)
    by_id = {r.id: r for r in snap.children}
    assert by_id["t0000"].status is ChildStatus.COMPLETED  # re-run, and delegated afresh
    assert by_id["t0000.1"].status is ChildStatus.COMPLETED  # kept, never run again
    assert by_id["t0000.2"].status is ChildStatus.UNKNOWN
    assert by_id["t0000.3"].status is ChildStatus.STOPPED
    assert by_id["t0000.3"].error == "not started: owner lost"
    fresh = sorted(i for i in by_id if i not in {"t0000", "t0000.1", "t0000.2", "t0000.3"})
    assert fresh == ["t0000.4", "t0000.5"]  # new ids: the old rows keep theirs
    assert all(by_id[i].status is ChildStatus.COMPLETED for i in fresh)
    # ... and seqs after the kept rows', so one attempt's delegates stay together (found by an
    # audit: they took 1 and 2 again, and the tree interleaved the two attempts).
    assert [by_id[i].seq for i in fresh] == [4, 5]
    assert engine.resumed is not None and engine.resumed.lost == 1
    with StoreReader(tmp_path / "flightdeck.db") as reader:
        stored = {r.id: r.status for r in reader.children("b1", results=False)}
        recovery = build_report(reader, "b1")["recovery"]
    assert stored["t0000.3"] is ChildStatus.STOPPED and stored["t0000.2"] is ChildStatus.UNKNOWN
    # The report says what `resume` printed: the delegate left unknown and what it had cost.
    found = engine.resumed
    assert (recovery["rerun"], recovery["left_unknown"]) == (found.rerun, found.lost) == (1, 1)
    assert recovery["lost_cost_usd"] == float(found.lost_cost_usd) == float(LOST)


def test_a_batchs_schedules_and_delegation_are_kept_for_resume() -> None:
    from flightdeck.engine.inputs.tasks import Batch, Schedule, Task

    template = (Task(id="scan", goal="scan {wave}", seq=0, group="ops"),)
    original = Batch(
        name="n",
        tasks=(Task(id="a", goal="x", seq=0),),
        workspace=Path("/w"),
        delegate=True,
        schedules=(Schedule(id="scan", tasks=template, every_s=60.0, at_start=True),),
    )
    back = assembly.batch_from_store("n", assembly.spec_json(original), None, "/w")
    assert back == original
    plain = dataclasses.replace(original, delegate=False, schedules=())
    assert json.loads(assembly.spec_json(plain))[0]["id"] == "a"  # a plain list, as before
    assert assembly.batch_from_store("n", assembly.spec_json(plain), None, "/w") == plain


def test_header_values_are_not_kept_and_a_batch_that_needs_them_is_not_resumed(
    tmp_path: Path,
) -> None:
    from flightdeck.engine.inputs.settings import load_settings
    from flightdeck.engine.owner.resume import ResumeError, load

    config = tmp_path / "flightdeck.toml"
    config.write_text(
        '[routes.gw]\nprovider = "openai"\nmodel = "m"\nbase_url = "http://localhost:9/v1"\n'
        'api_key_env = "GW_KEY"\nheaders = { Authorization = "Bearer sk-gateway-secret-99" }\n'
    )
    cfg = load_settings(config)
    kept = settings_json(cfg)
    assert "sk-gateway-secret-99" not in kept and "Authorization" in kept
    info = dead_batch(tmp_path, cfg, batch(1))
    with Store(tmp_path / "flightdeck.db") as store:
        store.create_batch(info)
    with pytest.raises(ResumeError, match="'gw' send headers, whose values are not kept"):
        load(tmp_path, "b1")


def test_paused_children_and_paused_admission_stay_paused(tmp_path: Path) -> None:
    # The owner died with t0001 paused mid-run, t0002 paused before it started, and the
    # batch's admission paused by the operator. Found by an audit: the children's pauses were
    # dropped, and they ran once admission was continued, though nobody continued them.
    import sqlite3

    batch_id, bdir = abandoned(tmp_path)
    conn = sqlite3.connect(tmp_path / "flightdeck.db")
    with conn:
        conn.execute("UPDATE children SET status = 'paused' WHERE id IN ('t0001', 't0002')")
        conn.execute("UPDATE batches SET held = 'paused by the operator'")
    conn.close()
    engine = Engine.resume(tmp_path, batch_id)
    engine.start()
    try:
        assert engine.resumed is not None
        assert (engine.resumed.rerun, engine.resumed.lost) == (1, 0)  # t0002 lost nothing
        snap = engine.snapshot()
        assert snap.held == "paused by the operator"
        stepped(engine)  # admission has looked: nothing starts while it stays paused
        assert engine.wait(0) is False
        paused = {"t0001": ChildStatus.PAUSED, "t0002": ChildStatus.PAUSED}
        assert {r.id: r.status for r in engine.snapshot().children if r.status.live} == {
            **paused,
            "t0003": ChildStatus.QUEUED,
        }
        engine.pause_admission(False)
        until(lambda: (c := engine.snapshot().child("t0003")) is not None and c.status.terminal)
        assert {r.id: r.status for r in engine.snapshot().children if r.status.live} == paused
        assert engine.flush(30)
        with StoreReader(tmp_path / "flightdeck.db") as reader:  # as attached views read them
            stored = {r.id: r.status for r in reader.children(batch_id) if r.status.live}
        assert stored == paused
        assert "still paused" in (bdir / "t0001.log").read_text()
        engine.continue_(["t0001", "t0002"])
        snap = run_to_end(engine)
    finally:
        engine.close()
    assert snap.status == BatchStatus.COMPLETED and snap.held is None


def test_resume_words_an_unpriced_lost_attempt_as_the_summary_does(tmp_path: Path) -> None:
    # It printed `lost attempts: $?` and then `their lost attempts cost $0.00`.
    from helpers import flightdeck

    batch_id, _ = abandoned(tmp_path / "state", lost_cost=None)
    done = flightdeck("resume", batch_id, "--no-rerun", "--state-dir", "state", cwd=tmp_path)
    lines = done.stdout.splitlines()
    assert "lost attempts: $? (re-runs after a lost owner or worker), in the cost" in lines, lines
    assert lines[-1] == "resumed: 0 re-run, 1 left unknown; their lost attempts cost $? (1 unknown)"
    assert "cost $0.00" not in done.stdout


@pytest.mark.slow
def test_a_child_a_resume_queued_again_is_run_after_that_resume_dies_too(tmp_path: Path) -> None:
    # Found by the kill/resume chaos loop: a resume marked the lost child `unknown` in the store
    # until it started again. Killed in between, the next resume took `unknown` for an end, and
    # the child never ran. Admission paused here holds it queued for as long as the test needs.
    import signal
    import sqlite3

    from helpers import flightdeck_process

    state = tmp_path / "state"
    batch_id, _ = abandoned(state)
    db = state / "flightdeck.db"
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE batches SET held = 'paused by the operator'")
    conn.close()
    owner = flightdeck_process("resume", batch_id, "--state-dir", str(state), cwd=tmp_path)
    try:

        def queued_again() -> bool:
            with StoreReader(db) as reader:
                info, rows = reader.batch(batch_id), reader.children(batch_id)
            row = next(r for r in rows if r.id == "t0001")
            return (
                info is not None
                and info.owner_pid == owner.pid
                and row.status is not ChildStatus.RUNNING
            )

        until(lambda: lost_attempts(db) == 1 and queued_again(), timeout=60)
        with StoreReader(db) as reader:
            row = next(r for r in reader.children(batch_id) if r.id == "t0001")
        # As the resumed owner has it: queued again, its lost attempt's spend carried.
        assert (row.status, row.usage, row.cost_usd) == (
            ChildStatus.QUEUED,
            LOST_USAGE,
            Decimal("0.003"),
        )
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.communicate()
    engine = Engine.resume(state, batch_id)
    engine.start()
    try:
        assert engine.resumed is not None
        assert (engine.resumed.rerun, engine.resumed.lost) == (0, 0)  # nothing ran: none lost
        engine.pause_admission(False)
        snap = run_to_end(engine)
    finally:
        engine.close()
    rerun = snap.child("t0001")
    assert rerun is not None and rerun.status is ChildStatus.COMPLETED
    assert rerun.usage.input_tokens > LOST_USAGE.input_tokens  # the lost attempt's, carried
    assert snap.status is BatchStatus.COMPLETED
    assert snap.lost_cost_usd == Decimal("0.003")  # one attempt lost, counted once


def lost_attempts(db: Path) -> int:
    import sqlite3

    with sqlite3.connect(db) as conn:
        found = conn.execute("SELECT count(*) FROM events WHERE kind = 'lost_attempt'").fetchone()
    conn.close()
    return int(found[0])


def test_a_retried_child_still_queued_keeps_its_earlier_attempts_spend(tmp_path: Path) -> None:
    # An operator's retry queues the child again with its earlier attempts' spend in its row;
    # the owner died before it started. Resumed, it still counts that spend.
    import sqlite3

    batch_id, _ = abandoned(tmp_path)
    with sqlite3.connect(tmp_path / "flightdeck.db") as conn:
        conn.execute(
            "UPDATE children SET tokens_in = 1000, tokens_out = 500, cost_usd = '0.003'"
            " WHERE id = 't0002'"
        )
    conn.close()
    engine = Engine.resume(tmp_path, batch_id)
    engine.start()
    try:
        snap = run_to_end(engine)
    finally:
        engine.close()
    again = snap.child("t0002")
    assert again is not None and again.status is ChildStatus.COMPLETED
    assert again.usage.input_tokens > 1000 and again.cost_usd is not None
    assert again.cost_usd > Decimal("0.003")
    assert snap.totals.cost_usd == sum((r.cost_usd or Decimal(0)) for r in snap.children)


def test_a_batch_of_schedules_alone_prices_its_carried_waves(tmp_path: Path) -> None:
    # Found by an audit: with no task, resume knew no route, and the waves an earlier owner
    # ran lost what their cache reads saved (the summary read `$1.14+?`, the report $1.60).
    from flightdeck.engine.inputs.tasks import Schedule, Task

    wave = (Task(id="scan", goal="Scan (wave {wave})", seq=0),)
    tasks = Batch(name="scheduled", tasks=(), schedules=(Schedule("scan", wave, every_s=3600),))
    with Store(tmp_path / "flightdeck.db") as store:
        store.create_batch(dead_batch(tmp_path, settings(sim_route()), tasks))
        ran = make_child(
            1,
            id="scan-w1",
            status=ChildStatus.COMPLETED,
            usage=Usage(input_tokens=10, output_tokens=10, cache_read_tokens=1000),
            started_ts=1390.0,
            finished_ts=1400.0,
        )
        store.add_children("b1", [ran])
    engine = Engine.resume(tmp_path, "b1")
    engine.start()
    try:
        (row,) = engine.snapshot().children
        assert row.id == "scan-w1" and row.cache_saved_usd is not None
    finally:
        engine.close()


@pytest.mark.parametrize(
    "earlier",
    [
        {},  # an earlier resume
        # A Ray worker lost before the owner died (control/lost.py): no resume before this one.
        {"why": "its worker on node vm:3fa2c1 was lost (ActorDiedError)"},
    ],
)
def test_resume_says_what_every_lost_attempt_cost_beside_its_own(
    tmp_path: Path, earlier: dict[str, str]
) -> None:
    # Found by an audit: the summary's `lost attempts: $2.44` (every resume's) stood above
    # `their lost attempts cost $1.22` (this one's) with nothing to tell the two apart. The
    # whole was called "every resume's", also when a lost worker's attempt made it.
    from helpers import flightdeck

    batch_id, _ = abandoned(tmp_path / "state")
    with Store(tmp_path / "state" / "flightdeck.db") as store:  # an attempt that cost $0.001
        detail = json.dumps({"cost_usd": "0.001", "rerun": True, **earlier})
        store.record_event(batch_id, "t0001", 1300.0, "lost_attempt", detail)
    done = flightdeck("resume", batch_id, "--state-dir", "state", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    last = done.stdout.splitlines()[-1]
    assert last == (
        "resumed: 1 re-run, 0 left unknown; their lost attempts cost $0.002"
        " ($0.003 over every lost attempt of the batch)"
    ), last


def test_a_child_left_unknown_never_ends_before_it_started(tmp_path: Path) -> None:
    # Found by kill_resume_fleet.py: a child left `unknown` was given the dead owner's last
    # heartbeat as its end, so one that started (or ran on) in the 2 s after it read as ending
    # before it began (its delegates' rows, in every run of the chaos).
    route = dataclasses.replace(
        sim_route(tool_turns=0, delegate_rate=1.0, delegates=1), delegate=True
    )
    cfg = dataclasses.replace(settings(route), budget=Budget(max_depth=1))
    bdir = tmp_path / "batches" / "b1"
    bdir.mkdir(parents=True)
    info = dead_batch(tmp_path, cfg, batch(1), heartbeat_ts=1500.0)
    rows = [
        make_child(0, id="t0000", goal="g", status=ChildStatus.RUNNING, started_ts=1400.0),
        make_child(
            1,
            id="t0000.1",
            goal="g",
            status=ChildStatus.RUNNING,
            started_ts=1501.0,
            activity=Activity(api_calls=1, last_activity_ts=1501.5),
            transcript=str(bdir / "t0000.1.log"),
        ),
    ]
    with Store(tmp_path / "flightdeck.db") as store:
        store.create_batch(info)
        store.add_children("b1", rows)
    engine = Engine.resume(tmp_path, "b1")
    engine.start()
    run_to_end(engine)
    with StoreReader(tmp_path / "flightdeck.db") as reader:
        left = reader.child("b1", "t0000.1")
    assert left is not None and left.status is ChildStatus.UNKNOWN
    assert left.finished_ts == 1501.5  # its last sign of life, after the heartbeat


def test_a_name_holding_a_key_refuses_a_new_batch_but_not_the_resume_of_a_recorded_one(
    tmp_path: Path,
) -> None:
    """Names a key (or a value the batch redacts) is in are refused before a batch starts; a
    batch already recorded keeps its names: a key that matches one now (the environment
    changed since) must not keep it from being resumed."""
    from flightdeck.engine.errors import SpecError
    from flightdeck.engine.providers.sim import SimProvider

    keyed = SimProvider(sim_route())
    keyed.secrets = ("t0002",)  # one of the batch's task ids, exactly
    with pytest.raises(SpecError, match="id: holds a value the batch redacts"):
        Engine(
            batch(4), settings(sim_route()), state_dir=tmp_path / "new", providers={"sim": keyed}
        )
    batch_id, _ = abandoned(tmp_path)
    engine = Engine.resume(tmp_path, batch_id, providers={"sim": keyed})
    engine.start()
    assert run_to_end(engine).status == BatchStatus.COMPLETED


def test_a_child_its_dead_owner_was_stopping_ends_stopped_not_run_again(tmp_path: Path) -> None:
    # The owner applied the operator's stop (its event recorded) and died before the child's
    # end was: the child was re-run from the start, undoing the stop. Found in a walkthrough
    # (`stop --all`, then the owner killed while a command child took its SIGTERM).
    batch_id, bdir = abandoned(tmp_path)
    with Store(tmp_path / "flightdeck.db") as store:  # after t0001 started at 1450
        store.record_event(batch_id, "t0001", 1455.0, "stop", "stopped by operator (stop all)")
        store.record_event(batch_id, "t0000", 1395.0, "stop", "an earlier run's: not this one")
    engine = Engine.resume(tmp_path, batch_id)
    engine.start()
    snap = run_to_end(engine)
    assert engine.resumed is not None and engine.resumed.rerun == 0
    stopped = snap.child("t0001")
    assert stopped is not None and stopped.status is ChildStatus.STOPPED
    assert stopped.error == "stopped by operator (stop all)"
    assert stopped.usage == LOST_USAGE and stopped.cost_usd == Decimal("0.003")  # spent is spent
    assert [r.status for r in snap.children].count(ChildStatus.COMPLETED) == 3
    assert "after the operator's stop: it is not run again" in (bdir / "t0001.log").read_text()
    with StoreReader(tmp_path / "flightdeck.db") as reader:
        report = build_report(reader, batch_id)
    assert report["recovery"]["rerun"] == 0 and report["totals"]["stopped"] == 1


@pytest.mark.parametrize("published_with", [LOST_USAGE, Usage(input_tokens=900, output_tokens=500)])
def test_the_call_in_flight_when_the_owner_died_is_billed_once(
    tmp_path: Path, published_with: Usage
) -> None:
    # Found by a walk-through: the calls in flight at a kill -9 (a quarter of the spend of a
    # young batch) were billed by the server but dropped by resume, from the totals, the lost
    # attempts' cost and the budget. Its figures, published beside the row's billed tokens, are
    # billed; published before the row billed more (the call in it already), they are not.
    from flightdeck.engine.records.live import live_json

    batch_id, bdir = abandoned(tmp_path)
    flying = make_child(
        1,
        id="t0001",
        usage=published_with,
        in_flight=Usage(input_tokens=200, output_tokens=10),
        in_flight_cost_usd=Decimal("0.00024"),
    )
    with Store(tmp_path / "flightdeck.db") as store:
        store.set_live(batch_id, live_json([flying], (), None, ()))
    engine = Engine.resume(tmp_path, batch_id)
    engine.start()
    snap = run_to_end(engine)
    assert engine.resumed is not None and engine.resumed.rerun == 1
    billed = published_with == LOST_USAGE
    assert engine.resumed.lost_cost_usd == Decimal("0.003") + (Decimal("0.00024") if billed else 0)
    log = (bdir / "t0001.log").read_text()
    assert ("200 input and 10 output tokens billed" in log) is billed
    with StoreReader(tmp_path / "flightdeck.db") as reader:
        report = build_report(reader, batch_id)
    assert Decimal(str(report["recovery"]["lost_cost_usd"])) == engine.resumed.lost_cost_usd
    assert Decimal(str(report["totals"]["cost_usd"])) == snap.totals.cost_usd


@pytest.mark.parametrize("known", [None, Decimal("0.003")], ids=["cost-known", "part-known"])
def test_an_agent_cli_childs_reported_spend_counts_against_the_budget_after_a_resume(
    tmp_path: Path, known: Decimal | None
) -> None:
    """A command route has no price: what its children spent is what their CLIs reported, as
    stored (all of it, or, where a stop left the rest unknown, the part known). Priced again on
    the route at resume, it was unknown, and the cap counted none of it."""
    claude = CommandSpec(argv=("true",), format="claude-stream-json")  # it reports its cost
    route = Route(name="cli", provider="command", model="cli", command=claude)
    cfg = dataclasses.replace(settings(route), budget=Budget(max_cost_usd=Decimal("0.002")))
    tasks = batch(3)
    info = dead_batch(tmp_path, cfg, tasks, heartbeat_ts=1500.0, max_cost_usd=Decimal("0.002"))
    spent = dict(cost_usd=Decimal("0.003")) if known is None else dict(cost_usd=None)
    rows = [
        make_child(
            0,
            id="t0000",
            route="cli",
            status=ChildStatus.COMPLETED if known is None else ChildStatus.STOPPED,
            usage=Usage(input_tokens=1000, output_tokens=500),
            cost_floor_usd=known or Decimal(0),
            started_ts=1390.0,
            finished_ts=1400.0,
            transcript=str(tmp_path / "t0000.log"),
            **spent,
        ),
        *(
            make_child(i, id=f"t{i:04d}", route="cli", transcript=str(tmp_path / f"t{i}.log"))
            for i in (1, 2)
        ),
    ]
    with Store(tmp_path / "flightdeck.db") as store:
        store.create_batch(info)
        store.add_children("b1", rows)
    engine = Engine.resume(tmp_path, "b1")
    engine.start()
    snap = run_to_end(engine)
    for queued in ("t0001", "t0002"):  # $0.003 spent: the $0.002 cap is reached already
        row = snap.child(queued)
        assert row is not None and row.status is ChildStatus.STOPPED, row
        assert "budget" in (row.error or "")
