"""Completion units across a lost owner: `resume` announces each unit whose members have all
ended and that no owner announced before, once; one already announced is not said again."""

from __future__ import annotations

import signal
import threading
from pathlib import Path

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.model import ChildStatus, EngineEvent, GroupFinished, UnitStatus
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.report import build_report
from flightdeck.engine.records.store import Store

from helpers import (
    HANG_S,
    flightdeck,
    flightdeck_process,
    run_to_end,
    settings,
    sim_route,
    tasks_batch,
    until,
)
from test_resume import dead_batch
from test_store import make_child

DONE = {"started_ts": 1390.0, "finished_ts": 1400.0}


def died_with_units_ended(state: Path, *, all_ended: bool = False) -> None:
    """Batch b1 as an owner killed before it announced its units left it: unit `g`'s members
    all ended (a completed, b failed); unit `h`'s c completed and d running; x (no unit)
    running."""
    tasks = [
        Task(id="a", goal="a", seq=0, group="g"),
        Task(id="b", goal="b", seq=1, group="g"),
        Task(id="c", goal="c", seq=2, group="h"),
        Task(id="d", goal="d", seq=3, group="h"),
        Task(id="x", goal="x", seq=4),
    ]
    bdir = state / "batches" / "b1"
    bdir.mkdir(parents=True)

    def row(seq: int, status: ChildStatus, **kw: object) -> object:
        task = tasks[seq]
        log = str(bdir / f"{task.id}.log")
        return make_child(seq, id=task.id, group=task.group, status=status, transcript=log, **kw)

    rows = [
        row(0, ChildStatus.COMPLETED, result="ok", **DONE),
        row(1, ChildStatus.FAILED, error="boom", **DONE),
        row(2, ChildStatus.COMPLETED, result="ok", **DONE),
        row(3, ChildStatus.RUNNING, started_ts=1450.0),
        row(4, ChildStatus.RUNNING, started_ts=1450.0),
    ]
    if all_ended:  # every child's final row committed under the owner
        rows[3] = row(3, ChildStatus.COMPLETED, result="ok", **DONE)
        rows[4] = row(4, ChildStatus.COMPLETED, result="ok", **DONE)
    cfg = settings(sim_route(tool_turns=0))
    with Store(state / "flightdeck.db") as store:
        store.create_batch(dead_batch(state, cfg, tasks_batch(tasks), heartbeat_ts=1500.0))
        store.add_children("b1", rows)  # type: ignore[arg-type]


def unit_lines(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("▣ group")]


def test_resume_no_rerun_announces_each_unit_whose_members_all_ended_once(tmp_path: Path) -> None:
    # A unit whose last member is left `unknown` by --no-rerun (h) was never announced: the
    # resumed owner says it, once. One whose members had all ended before the owner died (g)
    # was, by that owner, as its last row was committed (one from before "unit" events were
    # kept recorded none): not again.
    died_with_units_ended(tmp_path / "state")
    done = flightdeck("resume", "b1", "--no-rerun", "--state-dir", "state", cwd=tmp_path)
    lines = unit_lines(done.stdout)
    assert len(lines) == 1, done.stdout + done.stderr
    (h,) = lines
    assert h.startswith("▣ group h  partial: 1/2 completed") and "✓c ?d" in h
    # The report says of each what the owner announced.
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
        report = build_report(reader, "b1")
    assert {u["group"]: u["status"] for u in report["groups"]} == {"g": "partial", "h": "partial"}


def test_a_resumed_engine_announces_a_carried_unit_once_and_records_it(tmp_path: Path) -> None:
    state = tmp_path / "state"
    died_with_units_ended(state)
    events: list[EngineEvent] = []
    engine = Engine.resume(state, "b1", rerun=False)  # x and d left unknown
    engine.subscribe(events.append)
    engine.start()
    run_to_end(engine)
    units = [e for e in events if isinstance(e, GroupFinished)]
    assert [(u.group, u.status) for u in units] == [
        ("h", UnitStatus.PARTIAL),  # carried, announced as the batch starts (g: by its owner)
    ]
    # Announced is recorded: a batch resumed (reopened) again says it no more.
    events.clear()
    engine = Engine.resume(state, "b1", reopen=True)
    engine.subscribe(events.append)
    engine.start()
    run_to_end(engine)
    assert not [e for e in events if isinstance(e, GroupFinished)]


GROUPED = """
[[tasks]]
id = "fast1"
goal = "one"
group = "quick"

[[tasks]]
id = "fast2"
goal = "two"
group = "quick"

[[tasks]]
id = "slow"
goal = "slow"
route = "slow"
"""

CONFIG = """
[engine]
max_concurrent = 3
state_dir = "state"

[routes.sim]
time_scale = 0.001
latency_ms = 20
tokens_per_s = 400
tool_turns = 0

[routes.slow]
provider = "sim"
time_scale = 100.0
tool_turns = 0
"""


@pytest.mark.slow
def test_a_unit_announced_before_the_owner_was_killed_is_not_announced_again(
    tmp_path: Path,
) -> None:
    (tmp_path / "b.toml").write_text(GROUPED)
    (tmp_path / "c.toml").write_text(CONFIG)
    owner = flightdeck_process("run", "b.toml", "--config", "c.toml", "--headless", cwd=tmp_path)
    assert owner.stdout is not None
    seen: list[str] = []
    announced = threading.Event()

    def read() -> None:
        assert owner.stdout is not None
        for line in owner.stdout:
            seen.append(line)
            if line.startswith("▣ group quick"):
                announced.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert announced.wait(60), "".join(seen)
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.communicate()
        reader.join(HANG_S)
    batch_id = next(line.split()[1] for line in seen if line.startswith("batch "))
    done = flightdeck("resume", batch_id, "--no-rerun", "--state-dir", "state", cwd=tmp_path)
    assert done.returncode in (0, 1), done.stderr
    assert "resumed: 0 re-run, 1 left unknown" in done.stdout, done.stdout
    assert unit_lines(done.stdout) == [], done.stdout
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
        report = build_report(reader, batch_id)
    assert [(u["group"], u["status"]) for u in report["groups"]] == [("quick", "completed")]


def test_an_attached_view_tells_the_units_a_resume_announced_as_the_engine_does(
    tmp_path: Path,
) -> None:
    from flightdeck.engine.attached.view import StoreView

    state = tmp_path / "state"
    died_with_units_ended(state)
    view = StoreView(state / "flightdeck.db", "b1", poll_s=0.05)  # on the dead owner's batch
    seen: list[EngineEvent] = []
    view.subscribe(seen.append)
    events: list[EngineEvent] = []
    engine = Engine.resume(state, "b1", rerun=False)
    engine.subscribe(events.append)
    engine.start()
    try:
        run_to_end(engine)

        def told() -> list[GroupFinished]:
            return [e for e in seen if isinstance(e, GroupFinished)]

        until(lambda: len(told()) == 1, what="the unit, through the store")
        view.refresh()
    finally:
        view.close()
    live = sorted((e for e in events if isinstance(e, GroupFinished)), key=lambda u: u.group)
    assert [(u.group, u.status) for u in live] == [
        ("h", UnitStatus.PARTIAL),  # d left unknown (g: told by its owner before it died)
    ]
    there = sorted(told(), key=lambda u: u.group)
    assert [(u.group, u.status, u.cost_usd) for u in there] == [
        (u.group, u.status, u.cost_usd) for u in live
    ]


@pytest.mark.parametrize("rerun", [True, False])
def test_a_batch_from_before_units_were_recorded_does_not_announce_its_ended_units_again(
    tmp_path: Path, rerun: bool
) -> None:
    # An owner from before "unit" events were kept announced each unit as its last row was
    # committed, and recorded none: every unit of its batch ended with no event. Resumed (or
    # reopened for a retry) by this version, each was announced again, all at once; none was
    # lost: a unit that a row a lost owner left `unknown` ends is still told (test above).
    state = tmp_path / "state"
    died_with_units_ended(state, all_ended=True)
    events: list[EngineEvent] = []
    engine = Engine.resume(state, "b1", rerun=rerun)
    engine.subscribe(events.append)
    engine.start()
    run_to_end(engine)
    assert [e.group for e in events if isinstance(e, GroupFinished)] == []
