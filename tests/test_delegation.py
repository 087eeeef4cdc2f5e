"""Children that delegate: sub-tasks run as their children in the same engine, under the same
queue, slots and budgets, and come back as the `delegate` tool's result."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.errors import ConfigError, SpecError
from flightdeck.engine.inputs.settings import Budget, Settings, load_settings
from flightdeck.engine.inputs.tasks import load_batch
from flightdeck.engine.model import ChildFinished, ChildRow, ChildStatus, Snapshot
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.report import build_report

from helpers import HANG_S, Hold, batch, run_to_end, settings, sim_route, until

FAST = {"tool_turns": 0, "delegate_rate": 1.0, "delegates": 3}


def delegating(pool: int, *, depth: int = 1, max_delegates: int = 8, **sim: Any) -> Settings:
    route = dataclasses.replace(sim_route(**{**FAST, **sim}), delegate=True)
    s = settings(route, pool=pool)
    return dataclasses.replace(s, budget=Budget(max_depth=depth, max_delegates=max_delegates))


def run(tmp_path: Path, n: int, s: Settings) -> tuple[Snapshot, Engine]:
    engine = Engine(batch(n), s, state_dir=tmp_path / "state")
    engine.start()
    return run_to_end(engine), engine


def test_parents_that_wait_on_delegates_hold_no_slot_they_need(tmp_path: Path) -> None:
    # Four parents and two slots: were a waiting parent to keep its slot, two parents would
    # hold both and their delegates could never start.
    snap, _ = run(tmp_path, 4, delegating(pool=2))
    rows = {c.id: c for c in snap.children}
    assert len(rows) == 4 + 4 * 3
    assert {c.status for c in snap.children} == {ChildStatus.COMPLETED}
    for i in range(4):
        parent = rows[f"t{i:04d}"]
        kids = [rows[f"t{i:04d}.{k}"] for k in (1, 2, 3)]
        assert all(k.parent == parent.id and k.depth == 1 for k in kids)
        assert parent.parent is None and parent.depth == 0
        # the delegates' answers came back to the parent as the tool's result
        transcript = Path(parent.transcript).read_text()
        for k in kids:
            assert f"[{k.id}] completed" in transcript
    assert snap.pool_size == 2


def test_nesting_stops_at_max_depth(tmp_path: Path) -> None:
    snap, _ = run(tmp_path, 1, delegating(pool=4, depth=2, delegates=2))
    depths = sorted(c.depth for c in snap.children)
    assert depths == [0, 1, 1, 2, 2, 2, 2]  # depth 2 is not offered the tool
    assert {c.status for c in snap.children} == {ChildStatus.COMPLETED}
    assert {c.id for c in snap.children if c.depth == 2} == {
        "t0000.1.1",
        "t0000.1.2",
        "t0000.2.1",
        "t0000.2.2",
    }


def test_too_many_sub_tasks_is_an_error_the_model_sees(tmp_path: Path) -> None:
    snap, _ = run(tmp_path, 1, delegating(pool=2, max_delegates=2, delegates=3))
    (parent,) = snap.children  # nothing was delegated
    assert parent.status is ChildStatus.COMPLETED
    transcript = Path(parent.transcript).read_text()
    assert "error: 3 sub-tasks asked for; at most 2 per call (max_delegates)" in transcript


@pytest.mark.slow
def test_stopping_a_parent_stops_its_subtree_and_steering_it_does_not_steer_them(
    tmp_path: Path, hold: Hold
) -> None:
    # The first calls of the root and its two children delegate; the four leaves are held.
    for parent in ("t0000", "t0000.1", "t0000.2"):
        hold.release(parent, 0)
    s = delegating(pool=8, depth=2, delegates=2, **hold.options())
    engine = Engine(batch(1), s, state_dir=tmp_path / "state")
    engine.start()
    try:
        until(lambda: len(engine.snapshot().children) == 7)
        engine.steer(["t0000"], "focus on tests")
        # A parent and one of its delegates, as `stop --where` can pick both.
        engine.stop(["t0000", "t0000.1"])
        until(lambda: engine.snapshot().totals.done == 7)
    finally:
        engine.close()
    snap = engine.snapshot()
    assert {c.status for c in snap.children} == {ChildStatus.STOPPED}
    assert [len(c.steers) for c in snap.children] == [1] + [0] * 6  # only the parent's
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
        stops = [s["child_id"] for s in build_report(reader, engine.batch_id)["stops"]]
    assert sorted(stops) == sorted(c.id for c in snap.children)  # each stopped once


def test_the_report_names_each_childs_parent(tmp_path: Path) -> None:
    _, engine = run(tmp_path, 2, delegating(pool=2, delegates=2))
    with StoreReader(engine.state_dir / "flightdeck.db") as reader:
        report = build_report(reader, engine.batch_id)
    parents = {c["id"]: c["parent"] for c in report["children"]}
    assert parents == {
        "t0000": None,
        "t0001": None,
        "t0000.1": "t0000",
        "t0000.2": "t0000",
        "t0001.1": "t0001",
        "t0001.2": "t0001",
    }


def test_the_sim_delegates_the_same_way_for_a_seed(tmp_path: Path) -> None:
    s = delegating(pool=4, delegate_rate=0.5, delegates=2, seed=7)
    first, _ = run(tmp_path / "a", 8, s)
    second, _ = run(tmp_path / "b", 8, s)
    ids = sorted(c.id for c in first.children)
    assert ids == sorted(c.id for c in second.children)
    assert 8 < len(ids) < 8 + 8 * 2  # some parents delegated, not all


def test_without_the_option_no_child_is_offered_the_tool(tmp_path: Path) -> None:
    route = sim_route(**FAST)  # delegate_rate 1, but delegate not enabled
    snap, _ = run(tmp_path, 2, settings(route, pool=2))
    assert len(snap.children) == 2


def test_a_batch_file_can_enable_delegation_for_all_its_routes(tmp_path: Path) -> None:
    path = tmp_path / "b.toml"
    path.write_text('[batch]\ndelegate = true\n\n[[tasks]]\ngoal = "x"\n')
    assert load_batch(path).delegate is True
    path.write_text('[batch]\ndelegate = "yes"\n\n[[tasks]]\ngoal = "x"\n')
    with pytest.raises(SpecError) as err:
        load_batch(path)
    assert f"{path}:2" in str(err.value) and "batch.delegate" in str(err.value)


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ('[routes.sim]\ndelegate = "yes"\n', "routes.sim.delegate", "expected true or false"),
        ("[budget]\nmax_delegates = 0\n", "budget.max_delegates", "between 1 and 1000"),
        ("[budget]\nmax_depth = -1\n", "budget.max_depth", "at least 0"),
    ],
)
def test_bad_delegation_settings_are_errors_at_their_line(
    tmp_path: Path, text: str, where: str, message: str
) -> None:
    config = tmp_path / "flightdeck.toml"
    config.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    assert f"{config}:2" in str(err.value) and where in str(err.value)
    assert message in str(err.value)


class _Clock:
    """A clock the test moves: timeouts come when it says, not when a loaded machine lets them."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_a_retried_parent_waiting_on_its_delegates_keeps_its_slot_free_when_the_old_ones_end(
    tmp_path: Path, hold: Hold
) -> None:
    # Found by an audit: when the delegates of a parent's timed-out attempt ended while its
    # retry waited on delegates of its own, the old attempt's call took a slot for the new
    # attempt (same id), which then held it while it waited: a child queued meanwhile could not
    # start until the new delegates ended.
    from flightdeck.engine.inputs.tasks import Batch, Task

    clock = _Clock()
    held = sim_route("held", **{**FAST, "delegates": 1}, **hold.options())
    held = dataclasses.replace(held, delegate=True)
    tasks = (
        Task(id="a", goal="split this", seq=0, route="held", timeout_s=10),
        Task(id="b", goal="quick", seq=1, route="bad"),
    )
    s = settings(held, sim_route("bad", fail_rate=1.0), pool=2)
    s = dataclasses.replace(s, budget=Budget(max_depth=1))
    engine = Engine(Batch("t", tasks), s, state_dir=tmp_path / "state", clock=clock)

    ended: list[ChildRow] = []  # final rows, once committed (a retry needs that)
    engine.subscribe(lambda e: ended.append(e.row) if isinstance(e, ChildFinished) else None)

    def status(child_id: str) -> ChildStatus | None:
        row = engine.snapshot().child(child_id)
        return None if row is None else row.status

    def committed(child_id: str, attempt: int = 1) -> bool:
        return any(r.id == child_id and r.attempt == attempt for r in list(ended))

    engine.start()
    try:
        until(lambda: committed("b"), what="b's first attempt, failed at once")
        clock.now += 5  # a's first call is held: 5 s of its 10 pass before it delegates
        hold.release("a", 0)
        until(lambda: status("a.1") is ChildStatus.RUNNING, what="a's delegate, held")
        clock.now += 6  # a is past its timeout, a.1 (started 5 s later) is not
        until(lambda: committed("a"), what="a timed out")
        assert status("a") is ChildStatus.TIMED_OUT and status("a.1") is ChildStatus.RUNNING
        engine.retry(["a"])
        hold.release("a", 1)  # the retry's first call: it delegates again, and waits
        until(lambda: status("a.2") is ChildStatus.RUNNING, what="the retry's delegate, held")
        hold.release("a.1")
        until(lambda: committed("a.1"), what="the old delegate ended")
        engine.retry(["b"])  # a.2 runs, a waits holding none: one slot of two is free for b
        until(lambda: committed("b", 2), HANG_S, what="b's second attempt")
        hold.release()
        snap = run_to_end(engine)
    finally:
        engine.close()
    row = snap.child("a")
    assert row is not None and row.status is ChildStatus.COMPLETED and row.attempt == 2
