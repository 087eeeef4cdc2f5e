"""The prompt-cache warm-up gate, on the sim (whose cache entry is readable once the response
that writes it starts streaming)."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.errors import ConfigError
from flightdeck.engine.inputs.settings import Route, load_settings
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.model import ChildStatus, Snapshot

from helpers import Hold, batch, run_to_end, settings, sim_route, tasks_batch, until

N = 8
# One call per child, 60-140 ms to the first token: long enough that siblings launched together
# would all miss the cache, short enough for a fast test.
ONE_CALL = {"tool_turns": 0, "time_scale": 0.25, "latency_ms": 400, "tokens_per_s": 4000}
NEVER = {"tool_turns": 0, "latency_ms": 60_000_000}  # the first token never comes in a test


def gated(route: Route, cap: float = 10.0) -> Route:
    return dataclasses.replace(route, cache_gate_s=cap)


def run(tmp_path: Path, route: Route, n: int = N) -> Snapshot:
    engine = Engine(batch(n), settings(route, pool=n), state_dir=tmp_path / "state")
    engine.start()
    return run_to_end(engine)


def cached_share(snap: Snapshot) -> float:
    read = sum(c.usage.cache_read_tokens for c in snap.children)
    written = sum(c.usage.cache_write_tokens for c in snap.children)
    return read / (read + written)


def test_siblings_read_the_prefix_the_leader_wrote(tmp_path: Path, hold: Hold) -> None:
    snap = run(tmp_path / "on", gated(sim_route(**ONE_CALL)))
    assert {c.status for c in snap.children} == {ChildStatus.COMPLETED}
    leader, *siblings = snap.children
    assert leader.usage.cache_write_tokens > 0 and leader.usage.cache_read_tokens == 0
    assert all(c.usage.cache_read_tokens > 0 for c in siblings)
    assert cached_share(snap) >= (N - 1) / N
    # What it saved: each cache read at $0.10 per million tokens instead of $1.00 as input
    read = sum(c.usage.cache_read_tokens for c in snap.children)
    assert snap.totals.cache_saved_usd == Decimal(read) * Decimal("0.90") / 1_000_000
    # Without the gate, the same batch launched at once misses the cache every time (all
    # eight calls held before their first token until every one has been made).
    engine = Engine(
        batch(N),
        settings(sim_route(**ONE_CALL, **hold.options()), pool=N),
        state_dir=tmp_path / "off",
    )
    engine.start()
    # Every call at the hold, past its cache read: a call counted as made may not be yet, and
    # one that got there after the release would read what the first to stream wrote.
    until(lambda: len(hold.held()) == N, what="every call held")
    hold.release()
    off = run_to_end(engine)
    assert cached_share(off) == 0  # against (N-1)/N with the gate


def test_siblings_wait_only_for_the_leaders_first_token(tmp_path: Path, hold: Hold) -> None:
    # The leader's first token is held; the cap is an hour: siblings that start within the
    # test's wait were woken by the leader's token, not by the cap.
    route = gated(sim_route(**ONE_CALL, **hold.options()), cap=3600.0)
    engine = Engine(batch(N), settings(route, pool=N), state_dir=tmp_path / "state")
    engine.start()
    try:
        status = lambda i: engine.snapshot().child(i).status  # noqa: E731
        siblings = [f"t{i:04d}" for i in range(1, N)]
        until(lambda: all(status(i) is ChildStatus.GATED for i in siblings))
        released = engine.clock()
        hold.release()
        snap = run_to_end(engine)
    finally:
        engine.close()
    for c in snap.children[1:]:
        assert c.started_ts is not None and c.started_ts >= released  # not before the token


def test_a_gated_child_holds_no_slot_and_a_stop_ends_it_at_once(tmp_path: Path) -> None:
    slow = gated(sim_route("slow", **NEVER))
    fast = sim_route("fast", **ONE_CALL)
    tasks = [
        Task(id="lead", goal="x", seq=0, route="slow"),
        Task(id="held", goal="x", seq=1, route="slow"),
        Task(id="held2", goal="x", seq=2, route="slow"),
        Task(id="other", goal="x", seq=3, route="fast"),
        Task(id="other2", goal="x", seq=4, route="fast"),
    ]
    engine = Engine(tasks_batch(tasks), settings(slow, fast, pool=2), state_dir=tmp_path / "s")
    engine.start()
    try:
        status = lambda i: engine.snapshot().child(i).status  # noqa: E731
        # two slots: the leader holds one, the gated children none, so both fast tasks run
        until(lambda: status("other") is status("other2") is ChildStatus.COMPLETED)
        assert status("held") is status("held2") is ChildStatus.GATED
        row = engine.snapshot().child("held")
        assert row is not None and "waiting for lead" in row.activity.text
        engine.stop(["held"])
        until(lambda: status("held") is ChildStatus.STOPPED)
        # the leader stopped before its first token: the gate opens for the rest
        engine.stop(["lead"])
        until(lambda: status("held2") is ChildStatus.RUNNING)
    finally:
        engine.stop_all()
        engine.close()
    snap = engine.snapshot()
    assert snap.child("held").status is ChildStatus.STOPPED  # type: ignore[union-attr]
    assert snap.child("held").started_ts is None  # type: ignore[union-attr]


def test_the_cap_opens_a_gate_whose_leader_never_streams(tmp_path: Path) -> None:
    route = gated(sim_route(**NEVER), cap=0.2)
    engine = Engine(batch(3), settings(route, pool=3), state_dir=tmp_path / "s")
    engine.start()
    try:
        status = lambda i: engine.snapshot().child(i).status  # noqa: E731
        until(lambda: status("t0001") is ChildStatus.GATED)
        # The leader never streams: only the cap can open the gate.
        until(lambda: status("t0001") is status("t0002") is ChildStatus.RUNNING)
    finally:
        engine.stop_all()
        engine.close()


def test_each_route_and_prefix_has_its_own_leader(tmp_path: Path) -> None:
    a, b = gated(sim_route("a", **ONE_CALL)), gated(sim_route("b", **ONE_CALL))
    tasks = [
        Task(id=f"{r}{i}", goal="x", seq=i * 2 + (r == "b"), route=r)
        for i in range(3)
        for r in "ab"
    ]
    engine = Engine(tasks_batch(tasks), settings(a, b, pool=6), state_dir=tmp_path / "s")
    engine.start()
    snap = run_to_end(engine)
    by_id = {c.id: c for c in snap.children}
    for r in "ab":  # the first admitted of each route wrote its cache; its siblings read it
        assert by_id[f"{r}0"].usage.cache_write_tokens > 0
        assert by_id[f"{r}1"].usage.cache_read_tokens > 0
        assert by_id[f"{r}2"].usage.cache_read_tokens > 0


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("cache_gate_s = -1", "must be 0 or more"),
        ('cache_gate_s = "10s"', "expected a number"),
        ("cache_gate_s = 5\ncache = false", "caches no prompts"),
    ],
)
def test_a_bad_cache_gate_is_an_error_at_its_line(tmp_path: Path, line: str, message: str) -> None:
    config = tmp_path / "flightdeck.toml"
    config.write_text(f"[routes.sim]\ntime_scale = 0.1\n{line}\n")
    with pytest.raises(ConfigError) as err:
        load_settings(config)
    text = str(err.value)
    assert f"{config}:3" in text and "routes.sim.cache_gate_s" in text and message in text


def test_a_good_cache_gate_is_read(tmp_path: Path) -> None:
    config = tmp_path / "flightdeck.toml"
    config.write_text("[routes.sim]\ncache_gate_s = 10\n")
    assert load_settings(config).routes["sim"].cache_gate_s == 10.0


def test_the_report_says_what_the_cache_saved_per_route(tmp_path: Path) -> None:
    from flightdeck.engine.records.markdown import render_markdown
    from flightdeck.engine.records.reader import StoreReader
    from flightdeck.engine.records.report import build_report

    engine = Engine(batch(N), settings(gated(sim_route(**ONE_CALL)), pool=N), state_dir=tmp_path)
    engine.start()
    snap = run_to_end(engine)
    assert snap.totals.cache_saved_usd > 0
    with StoreReader(tmp_path / "flightdeck.db") as reader:
        report = build_report(reader, engine.batch_id)
    (route,) = report["routes"]
    assert route["cache_saved_usd"] == float(snap.totals.cache_saved_usd)
    assert report["totals"]["cache_saved_usd"] == route["cache_saved_usd"]
    assert "| cache saved | $" in render_markdown(report)
