"""Completion units: tasks sharing a `group` are reported together the moment the last ends."""

from __future__ import annotations

import json
from dataclasses import replace as dataclasses_replace
from decimal import Decimal
from pathlib import Path

from flightdeck.engine.api import Engine
from flightdeck.engine.inputs.settings import Budget
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.model import (
    BatchStatus,
    ChildFinished,
    ChildStatus,
    EngineEvent,
    GroupFinished,
    UnitStatus,
)
from flightdeck.engine.records.markdown import render_markdown
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.report import build_report

from helpers import flightdeck, run_to_end, settings, sim_route, tasks_batch, until
from test_store import make_child

# group: the routes of its members, in batch order ("bad" always fails)
PLAN = {
    "all-good": ["sim", "sim", "sim"],
    "mixed": ["sim", "bad", "sim"],
    "all-bad": ["bad", "bad"],
}


def plan_tasks() -> list[Task]:
    tasks, seq = [], 0
    # interleave the groups, so a unit's members are not neighbours in the batch
    for i in range(3):
        for group, routes in PLAN.items():
            if i < len(routes):
                tasks.append(
                    Task(id=f"{group}-{i}", goal=f"item {i}", seq=seq, route=routes[i], group=group)
                )
                seq += 1
    tasks.append(Task(id="loner", goal="no group", seq=seq))
    return tasks


def ended(events: list[EngineEvent], child_id: str) -> bool:
    """Whether `child_id`'s final row is committed (its ChildFinished has come)."""
    return any(isinstance(e, ChildFinished) and e.row.id == child_id for e in events)


def the_unit(events: list[EngineEvent]) -> GroupFinished:
    """The one unit reported."""
    [unit] = [e for e in events if isinstance(e, GroupFinished)]
    return unit


def stop_scheduled(engine: Engine) -> None:
    """A scheduled batch runs until stopped: still running, it is stopped and ends."""
    assert engine.status is BatchStatus.RUNNING
    engine.stop_all()
    assert engine.wait(60)


def run_plan(tmp_path: Path) -> tuple[list[EngineEvent], Engine]:
    s = settings(sim_route("sim"), sim_route("bad", fail_rate=1.0), pool=3)
    engine = Engine(tasks_batch(plan_tasks()), s, state_dir=tmp_path / "state")
    events: list[EngineEvent] = []
    engine.subscribe(events.append)  # the coordinator thread, in the order things happened
    engine.start()
    run_to_end(engine)
    return events, engine


def test_a_unit_is_reported_once_right_after_its_last_member(tmp_path: Path) -> None:
    events, _ = run_plan(tmp_path)
    units = [e for e in events if isinstance(e, GroupFinished)]
    assert sorted(u.group for u in units) == sorted(PLAN)
    for unit in units:
        at = events.index(unit)
        members = [e for e in events if isinstance(e, ChildFinished) and e.row.group == unit.group]
        # every member announced before the unit, and the last of them just before it
        assert all(events.index(m) < at for m in members)
        assert events[at - 1] == members[-1]
        # members in batch order, not in the order they ended
        assert [m.id for m in unit.members] == [
            f"{unit.group}-{i}" for i in range(len(PLAN[unit.group]))
        ]
    by_group = {u.group: u for u in units}
    assert by_group["all-good"].status is UnitStatus.COMPLETED
    assert by_group["mixed"].status is UnitStatus.PARTIAL
    assert by_group["all-bad"].status is UnitStatus.FAILED
    mixed = by_group["mixed"]
    assert [m.status for m in mixed.members] == [
        ChildStatus.COMPLETED,
        ChildStatus.FAILED,
        ChildStatus.COMPLETED,
    ]
    known = [m.cost_usd for m in mixed.members]
    assert None not in known
    assert mixed.cost_usd == sum(known, Decimal(0)) and mixed.cost_usd > 0
    starts = [m.started_ts for m in mixed.members if m.started_ts is not None]
    ends = [m.finished_ts for m in mixed.members if m.finished_ts is not None]
    assert mixed.duration_s == max(ends) - min(starts)


def test_the_report_has_each_unit_with_its_members(tmp_path: Path) -> None:
    _, engine = run_plan(tmp_path)
    with StoreReader(engine.state_dir / "flightdeck.db") as reader:
        report = build_report(reader, engine.batch_id)
    groups = {g["group"]: g for g in report["groups"]}
    assert list(groups) == list(PLAN)  # the order of each unit's first member
    assert groups["mixed"]["status"] == "partial"
    assert groups["mixed"]["children"] == 3 and groups["mixed"]["completed"] == 2
    assert [m["status"] for m in groups["mixed"]["members"]] == [
        "completed",
        "failed",
        "completed",
    ]
    assert groups["all-bad"]["status"] == "failed"
    assert groups["all-good"]["cost_usd"] > 0 and groups["all-good"]["finished"]
    assert {c["id"]: c["group"] for c in report["children"]}["loner"] is None
    json.dumps(report)  # JSON-ready
    md = render_markdown(report)
    assert "## Groups" in md
    assert "| mixed | partial | 3 | 2 |" in md


def test_a_unit_still_running_is_open_in_the_report(tmp_path: Path) -> None:
    # a route that never answers in time keeps one member running
    s = settings(sim_route("sim"), sim_route("slow", latency_ms=60_000_000), pool=2)
    tasks = [
        Task(id="a", goal="x", seq=0, route="sim", group="g"),
        Task(id="b", goal="x", seq=1, route="slow", group="g"),
    ]
    engine = Engine(tasks_batch(tasks), s, state_dir=tmp_path / "state")
    engine.start()
    try:
        until(lambda: engine.snapshot().totals.completed == 1)
        engine.flush()
        with StoreReader(engine.state_dir / "flightdeck.db") as reader:
            report = build_report(reader, engine.batch_id)
        (g,) = report["groups"]
        assert g["status"] == "open" and g["duration_s"] is None and g["finished"] is None
    finally:
        engine.stop_all()
        engine.close()


GROUPED = """
[batch]
name = "units"

[[tasks]]
id = "r1"
goal = "review one"
group = "security"

[[tasks]]
id = "r2"
goal = "review two"
group = "security"
route = "broken"
"""

CONFIG = """
[routes.sim]
time_scale = 0.001
latency_ms = 20
tokens_per_s = 400

[routes.broken]
provider = "sim"
fail_rate = 1.0
"""


def test_a_unit_the_operator_stopped_whole_reads_stopped(tmp_path: Path) -> None:
    # Found by running the demo: Ctrl+C early printed `▣ group review failed: 0/18 completed`
    # while the batch read stopped. A stop is nobody's failure, for a unit as for the batch.
    from flightdeck.engine.model.units import UNIT_EVENT
    from flightdeck.tui.output import completion_text

    from helpers import Hold

    hold = Hold(tmp_path / "hold")
    tasks = [  # g: both stopped; h: one failed, one stopped; p: one completed, one stopped
        Task(id="a", goal="x", seq=0, group="g"),
        Task(id="b", goal="x", seq=1, group="g"),
        Task(id="c", goal="x", seq=2, group="h"),
        Task(id="d", goal="x", seq=3, route="bad", group="h"),
        Task(id="e", goal="x", seq=4, group="p"),
        Task(id="f", goal="x", seq=5, group="p"),
    ]
    s = settings(sim_route(**hold.options()), sim_route("bad", fail_rate=1.0), pool=6)
    engine = Engine(tasks_batch(tasks), s, state_dir=tmp_path / "state")
    events: list[EngineEvent] = []
    engine.subscribe(events.append)
    engine.start()
    try:
        until(lambda: {"a@0", "b@0", "c@0", "e@0", "f@0"} <= hold.held() and ended(events, "d"))
        hold.release("e")
        until(lambda: ended(events, "e"))
        engine.stop_all()
        assert engine.wait(60)
    finally:
        engine.close()
    units = {e.group: e for e in events if isinstance(e, GroupFinished)}
    assert {g: u.status for g, u in units.items()} == {
        "g": UnitStatus.STOPPED,
        "h": UnitStatus.FAILED,  # a stop does not hide a failure
        "p": UnitStatus.PARTIAL,
    }
    assert completion_text(units["g"]).startswith("▣ group g  stopped: 0/2 completed")
    with StoreReader(engine.state_dir / "flightdeck.db") as reader:
        report = build_report(reader, engine.batch_id)
        told = [
            json.loads(d) for _, _, kind, d in reader.events(engine.batch_id) if kind == UNIT_EVENT
        ]
    assert report["status"] == "stopped"
    assert {g["group"]: g["status"] for g in report["groups"]} == {
        "g": "stopped",
        "h": "failed",
        "p": "partial",
    }
    assert {t["group"]: t["status"] for t in told} == {
        "g": "stopped",
        "h": "failed",
        "p": "partial",
    }
    assert "| g | stopped | 2 | 0 |" in render_markdown(report)


def test_headless_prints_the_unit_line_after_its_members(tmp_path: Path) -> None:
    (tmp_path / "b.toml").write_text(GROUPED)
    (tmp_path / "c.toml").write_text(CONFIG)
    out = flightdeck("run", "b.toml", "--config", "c.toml", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    unit = [i for i, line in enumerate(lines) if line.startswith("▣ group security")]
    assert len(unit) == 1, out.stdout
    members = [i for i, line in enumerate(lines) if " r1 " in line or " r2 " in line]
    assert len(members) == 2 and max(members) < unit[0]
    assert "partial: 1/2 completed" in lines[unit[0]]
    assert "✓r1 ✗r2" in lines[unit[0]]


def test_a_unit_retried_after_it_was_reported_is_reported_again_when_it_ends(
    tmp_path: Path,
) -> None:
    # Found by an audit of the Python API: a member retried after its group was reported left
    # the group reported as partial for good, while the report said completed.
    from helpers import Hold

    hold = Hold(tmp_path / "hold")
    tasks = [Task(id=i, goal="g", seq=n, group="g") for n, i in enumerate(("a", "b"))]
    s = settings(sim_route(**hold.options()), pool=2)
    engine = Engine(tasks_batch(tasks), s, state_dir=tmp_path / "state")
    events: list[EngineEvent] = []
    engine.subscribe(events.append)
    engine.start()
    try:
        until(lambda: engine.snapshot().totals.running == 2)
        engine.stop(["a"])
        hold.release("b")
        until(lambda: any(isinstance(e, GroupFinished) for e in events))
        engine.retry(["a"])
        hold.release()
        run_to_end(engine)
    finally:
        engine.close()
    units = [e for e in events if isinstance(e, GroupFinished)]
    assert [u.status for u in units] == [UnitStatus.PARTIAL, UnitStatus.COMPLETED]
    assert [m.status for m in units[-1].members] == [ChildStatus.COMPLETED] * 2


def test_a_member_s_delegates_belong_to_its_unit_their_spend_counted(tmp_path: Path) -> None:
    # Found by an audit: delegates had no group, so a unit's cost left out what its members
    # delegated, and the unit could be reported while a stopped parent's delegates still ran.
    import dataclasses

    route = dataclasses.replace(
        sim_route(tool_turns=0, delegate_rate=1.0, delegates=2), delegate=True
    )
    tasks = [
        Task(id="a", goal="x", seq=0, group="g"),
        Task(id="b", goal="y", seq=1, group="g"),
        Task(id="c", goal="z", seq=2),
    ]
    s = dataclasses.replace(settings(route, pool=3), budget=Budget(max_depth=1))
    engine = Engine(tasks_batch(tasks), s, state_dir=tmp_path / "state")
    events: list[EngineEvent] = []
    engine.subscribe(events.append)
    engine.start()
    snap = run_to_end(engine)
    rows = {r.id: r for r in snap.children}
    made = {"a.1", "a.2", "b.1", "b.2"}
    assert {i for i, r in rows.items() if r.group == "g"} == {"a", "b"} | made
    assert rows["c.1"].group is None and rows["c.2"].group is None
    unit = the_unit(events)
    assert [m.id for m in unit.members] == ["a", "b"]
    assert {d.id for d in unit.delegates} == made
    assert unit.status is UnitStatus.COMPLETED
    spent = sum((rows[i].cost_usd or Decimal(0) for i in {"a", "b"} | made), Decimal(0))
    members = sum((rows[i].cost_usd or Decimal(0) for i in ("a", "b")), Decimal(0))
    assert unit.cost_usd == spent and spent > members
    finished = [e for e in events if isinstance(e, ChildFinished) and e.row.group == "g"]
    assert len(finished) == 6 and all(events.index(f) < events.index(unit) for f in finished)
    with StoreReader(engine.state_dir / "flightdeck.db") as reader:
        report = build_report(reader, engine.batch_id)
    [g] = report["groups"]
    assert g["children"] == 2 and g["completed"] == 2 and g["status"] == "completed"
    assert {d["id"] for d in g["delegates"]} == made
    assert Decimal(str(g["cost_usd"])) == spent
    assert "a (completed) b (completed); 4 delegates" in render_markdown(report)


def test_a_unit_waits_for_a_delegate_its_stopped_parent_did_not() -> None:
    from flightdeck.engine.control.units import Units

    units = Units([("c1", "g")])
    units.joined("c1.1", "c1", "g")
    parent = make_child(1, status=ChildStatus.STOPPED, cost_usd=Decimal("0.01"))
    assert units.ended(parent) is None  # its delegate is still running
    kid = make_child(2, id="c1.1", parent="c1", depth=1, cost_usd=Decimal("0.02"))
    unit = units.ended(dataclasses_replace(kid, status=ChildStatus.STOPPED))
    assert unit is not None and [d.id for d in unit.delegates] == ["c1.1"]
    assert [m.id for m in unit.members] == ["c1"] and unit.status is UnitStatus.STOPPED
    assert unit.cost_usd == Decimal("0.03")
    assert units.ended(parent) is None  # reported once


def test_a_wave_task_in_a_group_of_the_batch_does_not_fail_the_engine(tmp_path: Path) -> None:
    # Found by an audit: a schedule's task that shares a group with the batch's tasks counted
    # as one of its members once it ended, so the unit looked complete while a member still
    # ran, and building it raised KeyError on the coordinator thread: the batch failed.
    from flightdeck.engine.inputs.tasks import Batch, Schedule

    from helpers import Hold

    hold = Hold(tmp_path / "hold")
    held, free = sim_route("held", **hold.options()), sim_route("free", tool_turns=0)
    wave = (Task(id="w", goal="wave {wave}", seq=0, group="g", route="free"),)
    b = Batch(
        name="t",
        tasks=tuple(Task(id=i, goal=i, seq=n, group="g", route="held") for n, i in enumerate("ab")),
        schedules=(Schedule(id="s", tasks=wave, every_s=3600, at_start=True),),
    )
    engine = Engine(b, settings(held, free, pool=3), state_dir=tmp_path / "state")
    events: list[EngineEvent] = []
    engine.subscribe(events.append)

    engine.start()
    try:
        until(lambda: ended(events, "w-w1"))
        hold.release("a")
        until(lambda: ended(events, "a"))
        hold.release("b")
        until(lambda: ended(events, "b") or engine.status is not BatchStatus.RUNNING)
        stop_scheduled(engine)
    finally:
        engine.close()
    unit = the_unit(events)
    assert [m.id for m in unit.members] == ["a", "b"]
    assert events.index(unit) > max(
        i for i, e in enumerate(events) if isinstance(e, ChildFinished) and e.row.id == "b"
    )


def test_a_member_retried_in_an_ended_batch_reports_its_unit_with_the_members_before(
    tmp_path: Path,
) -> None:
    # Found by an audit: the owner a retry starts for an ended batch made its units of the
    # children it ran itself, none (the retried one is added later): no unit line at all.
    import re

    from helpers import wait_ended

    (tmp_path / "b.toml").write_text(GROUPED)
    (tmp_path / "c.toml").write_text(CONFIG)
    state = ("--state-dir", str(tmp_path / "state"))
    ran = flightdeck("run", "b.toml", "--config", "c.toml", *state, cwd=tmp_path)
    assert ran.returncode == 1, ran.stderr
    batch_id = re.search(r"^batch (\S+)$", ran.stdout, re.M)[1]  # type: ignore[index]
    retried = flightdeck("retry", batch_id, "r2", *state, cwd=tmp_path)
    assert retried.returncode == 0, retried.stderr
    owner = re.search(r"owner pid (\d+) started", retried.stderr)
    assert owner is not None and wait_ended(int(owner[1]), 60), retried.stderr
    log = (tmp_path / "state" / "batches" / batch_id / "owner.log").read_text()
    units = [line for line in log.splitlines() if line.startswith("▣ group security")]
    assert len(units) == 1, log
    assert "partial: 1/2 completed" in units[0] and "✓r1 ✗r2" in units[0]


def test_a_wave_an_earlier_owner_ran_in_a_group_of_the_batch_is_no_member_after_resume(
    tmp_path: Path,
) -> None:
    # Found by an audit: a resumed batch made its units of every carried row of no parent, a
    # schedule's waves among them, where the owner that ran them counted them in no unit: the
    # unit listed the wave as a member, and its failure made the unit partial.
    from flightdeck.engine.inputs.tasks import Batch, Schedule
    from flightdeck.engine.records.store import Store

    from test_resume import dead_batch

    wave = (Task(id="w", goal="wave {wave}", seq=0, group="g"),)
    b = Batch(
        name="t",
        tasks=tuple(Task(id=i, goal=i, seq=n, group="g") for n, i in enumerate("ab")),
        schedules=(Schedule(id="s", tasks=wave, every_s=3600),),
    )
    bdir = tmp_path / "batches" / "b1"
    bdir.mkdir(parents=True)
    done = {"started_ts": 1390.0, "finished_ts": 1400.0}
    rows = [
        make_child(0, id="a", status=ChildStatus.COMPLETED, transcript=str(bdir / "a.log"), **done),
        make_child(1, id="b", transcript=str(bdir / "b.log")),
        make_child(2, id="w-w1", status=ChildStatus.FAILED, transcript=str(bdir / "w.log"), **done),
    ]
    with Store(tmp_path / "flightdeck.db") as store:
        store.create_batch(dead_batch(tmp_path, settings(sim_route(tool_turns=0)), b))
        store.add_children("b1", rows)
    engine = Engine.resume(tmp_path, "b1")
    events: list[EngineEvent] = []
    engine.subscribe(events.append)
    engine.start()
    try:
        until(lambda: any(isinstance(e, GroupFinished) for e in events))
        stop_scheduled(engine)
    finally:
        engine.close()
    unit = the_unit(events)
    assert [m.id for m in unit.members] == ["a", "b"]
    assert unit.status is UnitStatus.COMPLETED


def test_a_wave_s_delegates_are_no_part_of_the_unit_it_shares_a_group_with(tmp_path: Path) -> None:
    # Found by an audit: every delegate of a group joined its unit, a schedule's wave's too
    # (the wave is no member): the unit waited for the wave's delegate to end, and counted it.
    import dataclasses

    from flightdeck.engine.inputs.tasks import Batch, Schedule

    from helpers import Hold

    hold = Hold(tmp_path / "hold")
    plain = sim_route("plain", tool_turns=0, **hold.options())
    splits = dataclasses.replace(
        sim_route("splits", tool_turns=0, delegate_rate=1.0, delegates=1, **hold.options()),
        delegate=True,
    )
    wave = (Task(id="w", goal="wave {wave}", seq=0, group="g", route="splits"),)
    b = Batch(
        name="t",
        tasks=(Task(id="a", goal="a", seq=0, group="g", route="plain"),),
        schedules=(Schedule(id="s", tasks=wave, every_s=3600, at_start=True),),
    )
    s = dataclasses.replace(settings(plain, splits, pool=3), budget=Budget(max_depth=1))
    engine = Engine(b, s, state_dir=tmp_path / "state")
    events: list[EngineEvent] = []
    engine.subscribe(events.append)

    engine.start()
    try:
        hold.release("w-w1")  # it delegates w-w1.1, held
        until(lambda: any(r.id == "w-w1.1" for r in engine.snapshot().children))
        hold.release("a")
        until(lambda: ended(events, "a"))
        hold.release()
        until(lambda: ended(events, "w-w1"))
        stop_scheduled(engine)
    finally:
        engine.close()
    unit = the_unit(events)
    assert [m.id for m in unit.members] == ["a"] and unit.delegates == ()
    finished_a = next(
        i for i, e in enumerate(events) if isinstance(e, ChildFinished) and e.row.id == "a"
    )
    assert events.index(unit) == finished_a + 1  # right after its last member, not the wave's


def test_the_report_and_an_attached_view_leave_a_wave_out_of_the_unit_as_the_engine_does(
    tmp_path: Path,
) -> None:
    # Found by an audit: the report and an attached view made a unit of every row of its group,
    # a schedule's wave sharing it too, where the engine's unit holds the batch's own tasks: the
    # report said `open` (the wave still ran) with the wave among the members, and the view told
    # the unit only once the wave had ended, with the wave as a member.
    from flightdeck.engine.attached.view import StoreView
    from flightdeck.engine.inputs.tasks import Batch, Schedule

    from helpers import Hold

    hold = Hold(tmp_path / "hold")
    wave = (Task(id="w", goal="wave {wave}", seq=0, group="g", route="held"),)
    b = Batch(
        name="t",
        tasks=(Task(id="a", goal="a", seq=0, group="g", route="free"),),
        schedules=(Schedule(id="s", tasks=wave, every_s=3600, at_start=True),),
    )
    held, free = sim_route("held", **hold.options()), sim_route("free", **hold.options())
    engine = Engine(b, settings(held, free, pool=3), state_dir=tmp_path / "state")
    events: list[EngineEvent] = []
    engine.subscribe(events.append)
    engine.start()
    try:
        db = engine.state_dir / "flightdeck.db"
        until(lambda: any(r.id == "w-w1" for r in engine.snapshot().children))
        engine.flush()  # the batch's row and the wave's, committed
        view = StoreView(db, engine.batch_id, poll_s=0.05)
        seen: list[EngineEvent] = []
        view.subscribe(seen.append)
        hold.release("a")  # the wave is held: it runs on
        until(lambda: any(isinstance(e, GroupFinished) for e in events))
        [live] = [e for e in events if isinstance(e, GroupFinished)]
        with StoreReader(db) as reader:
            [g] = build_report(reader, engine.batch_id)["groups"]
        assert g["status"] == "completed" and g["children"] == 1
        until(lambda: any(isinstance(e, GroupFinished) for e in seen), what="the view's unit")
        [told] = [e for e in seen if isinstance(e, GroupFinished)]
        hold.release()
        until(lambda: ended(events, "w-w1"))
        until(lambda: view.snapshot().totals.completed == 2, what="the wave, through the store")
        view.refresh()
        stop_scheduled(engine)
        view.close()
    finally:
        engine.close()
    assert [m.id for m in live.members] == ["a"] and live.status is UnitStatus.COMPLETED
    assert [m.id for m in told.members] == ["a"] and told.status is UnitStatus.COMPLETED
    assert told.cost_usd == live.cost_usd
    assert [m["id"] for m in g["members"]] == ["a"] and g["delegates"] == []
    assert Decimal(str(g["cost_usd"])) == live.cost_usd
    # the wave's end tells no unit again, there as here
    assert len([e for e in seen if isinstance(e, GroupFinished)]) == 1
    assert len([e for e in events if isinstance(e, GroupFinished)]) == 1
