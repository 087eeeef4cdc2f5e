"""The engine end to end on the sim provider: admission, control, retries, money, records."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import threading
import time
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine import api
from flightdeck.engine.api import Engine
from flightdeck.engine.inputs.settings import SIM_PRICE
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.model import ChildRow, ChildStatus, SteerState, Usage
from flightdeck.engine.owner import batchdir
from flightdeck.engine.owner import run as run_module
from flightdeck.engine.records.lines import parse
from flightdeck.engine.records.meter import Meter, cost_of, route_cost
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.report import build_report

from helpers import (
    HANG_S,
    HANGS,
    Hold,
    batch,
    run_to_end,
    settings,
    sim_route,
    start,
    stepped,
    tasks_batch,
    until,
)


def max_overlap(rows: list[ChildRow]) -> int:
    """Most children alive at one instant, from recorded start/finish times."""
    edges: list[tuple[float, int]] = []
    for r in rows:
        assert r.started_ts is not None and r.finished_ts is not None
        edges += [(r.started_ts, 1), (r.finished_ts, -1)]
    alive = peak = 0
    for _, delta in sorted(edges, key=lambda e: (e[0], e[1])):  # finishes sort before starts
        alive += delta
        peak = max(peak, alive)
    return peak


def test_two_hundred_tasks_on_eight_slots_all_complete(tmp_path: Path) -> None:
    engine = start(batch(200), settings(sim_route(tool_turns=1), pool=8), tmp_path)
    try:
        assert engine.wait(60)
        snap = engine.snapshot()
        assert snap.totals.completed == 200
        assert max_overlap(list(snap.children)) <= 8
        assert all(r.activity.api_calls == 2 and r.activity.tool_calls == 1 for r in snap.children)
    finally:
        engine.close()
    rows = StoreReader(tmp_path / "state" / "flightdeck.db").children(engine.batch_id)
    assert [r.status for r in rows] == [ChildStatus.COMPLETED] * 200


def test_a_snapshot_before_start_shows_every_task_queued(tmp_path: Path) -> None:
    # Found by a user of the Python API: before start() the snapshot had no children at all.
    b = tasks_batch([Task(id=f"c{i}", goal=f"Review item {i}", seq=i, group="g") for i in range(3)])
    engine = Engine(b, settings(sim_route()), state_dir=tmp_path / "state")
    try:
        snap = engine.snapshot()
        assert [r.id for r in snap.children] == ["c0", "c1", "c2"]
        assert {r.status for r in snap.children} == {ChildStatus.QUEUED}
        assert [r.group for r in snap.children] == ["g"] * 3
        assert snap.totals.children == 3 and snap.totals.queued == 3
        assert snap.totals.cost_usd == Decimal(0)
        engine.start()
        started = {r.id: r for r in engine.snapshot().children}
        before = {r.id: r.transcript for r in snap.children}
        assert before == {i: r.transcript for i, r in started.items()}  # the same files
        run_to_end(engine)
    finally:
        engine.close()


def test_the_manifest_names_every_child_and_ends_with_the_batch_status(
    tmp_path: Path, hold: Hold
) -> None:
    slow = sim_route("slow", tool_turns=0, **hold.options())
    fast = sim_route("fast", tool_turns=0)
    tasks = [Task(id="a-1", goal="g", seq=0, route="slow"), Task(id="b.2", goal="g", seq=1)]
    engine = start(tasks_batch(tasks), settings(fast, slow), tmp_path)
    manifest = engine.batch_dir / "manifest.json"
    try:
        running = json.loads(manifest.read_text(encoding="utf-8"))  # written by start()
        engine.stop_all()
        assert engine.wait(HANG_S)
    finally:
        engine.close()
    final = json.loads(manifest.read_text(encoding="utf-8"))
    assert running["status"] == "running" and final["status"] == "stopped"
    assert final["batch_id"] == engine.batch_id and final["name"] == "test"
    assert final["routes"] == {
        "fast": {"provider": "sim", "model": fast.model},
        "slow": {"provider": "sim", "model": slow.model},
    }
    expected = [
        {"id": "a-1", "route": "slow", "transcript": "a-1.log"},
        {"id": "b.2", "route": "fast", "transcript": "b.2.log"},
    ]
    assert running["children"] == final["children"] == expected
    for child in expected:  # transcript names are relative to the manifest's folder
        assert (engine.batch_dir / child["transcript"]).is_file()


def test_flush_commits_what_finished_while_others_still_run(tmp_path: Path, hold: Hold) -> None:
    slow = sim_route("slow", tool_turns=0, **hold.options())
    tasks = [Task(id="quick", goal="g", seq=0), Task(id="slow", goal="g", seq=1, route="slow")]
    engine = start(tasks_batch(tasks), settings(sim_route(tool_turns=0), slow), tmp_path)
    try:
        until(lambda: engine.snapshot().totals.completed == 1)
        assert engine.flush(5)
        rows = {
            r.id: r
            for r in StoreReader(tmp_path / "state" / "flightdeck.db").children(engine.batch_id)
        }
        assert rows["quick"].status is ChildStatus.COMPLETED
        assert rows["slow"].status is ChildStatus.RUNNING
        transcript = (engine.batch_dir / "quick.log").read_text(encoding="utf-8")
        assert transcript.rstrip().endswith("completed")
    finally:
        engine.close()


def test_two_batches_that_draw_the_same_id_get_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn = iter(["20261129-120000-aaaa", "20261129-120000-aaaa", "20261129-120000-bbbb"])
    monkeypatch.setattr(api, "new_batch_id", lambda clock: next(drawn))  # the first draw
    monkeypatch.setattr(batchdir, "new_batch_id", lambda clock: next(drawn))  # drawn again
    first = start(batch(2), settings(sim_route(tool_turns=0)), tmp_path)
    second = start(batch(3), settings(sim_route(tool_turns=0)), tmp_path)
    for engine in (first, second):
        run_to_end(engine)
    assert (first.batch_id, second.batch_id) == ("20261129-120000-aaaa", "20261129-120000-bbbb")
    reader = StoreReader(tmp_path / "state" / "flightdeck.db")
    assert len(reader.children(first.batch_id)) == 2 and len(reader.children(second.batch_id)) == 3
    assert second.batch_dir.name == second.batch_id and (second.batch_dir / "t0002.log").is_file()


def test_fifo_and_route_caps(tmp_path: Path) -> None:
    capped = sim_route("capped", max_concurrent=2, latency_ms=30_000, tool_turns=0)
    free = sim_route("free", latency_ms=30_000, tool_turns=0)
    # Six capped tasks first, then four for the free route: the free ones must not wait.
    tasks = [Task(id=f"c{i}", goal="g", seq=i, route="capped") for i in range(6)]
    tasks += [Task(id=f"f{i}", goal="g", seq=6 + i, route="free") for i in range(4)]
    engine = start(tasks_batch(tasks), settings(capped, free, pool=5), tmp_path)
    try:
        until(lambda: engine.snapshot().totals.completed == 10, HANG_S)
        rows = {r.id: r for r in engine.snapshot().children}
    finally:
        engine.close()
    capped_rows = [rows[f"c{i}"] for i in range(6)]
    free_rows = [rows[f"f{i}"] for i in range(4)]
    assert max_overlap(capped_rows) <= 2
    assert max_overlap(capped_rows + free_rows) <= 5
    # FIFO within the capped route: started in task order.
    starts = [r.started_ts for r in capped_rows]
    assert starts == sorted(starts)  # type: ignore[type-var]
    # The free route went ahead of capped tasks queued before it.
    assert all(f.started_ts < capped_rows[2].started_ts for f in free_rows[:3])  # type: ignore[operator]


def test_steer_is_delivered_at_the_next_turn_and_recorded(tmp_path: Path, hold: Hold) -> None:
    route = sim_route(tool_turns=3, **hold.options())
    engine = start(batch(1), settings(route), tmp_path)
    try:
        until(lambda: engine.snapshot().children[0].activity.api_calls >= 1)
        [rid] = engine.steer(["t0000"], "focus on the retry loop")
        until(lambda: len(engine.snapshot().children[0].steers) == 1)  # queued, its call held
        hold.release()
        assert engine.wait(HANG_S)
        row = engine.snapshot().children[0]
    finally:
        engine.close()
    assert row.status is ChildStatus.COMPLETED
    [receipt] = row.steers
    assert receipt.id == rid and receipt.state is SteerState.DELIVERED
    text = Path(row.transcript).read_text()
    assert "steer (at next turn): focus on the retry loop" in text
    assert "delivered: focus on the retry loop" in text
    assert "Understood — focus on the retry loop" in text  # the model saw it
    reader = StoreReader(tmp_path / "state" / "flightdeck.db")
    assert [c.state for c in reader.controls(engine.batch_id)] == [SteerState.DELIVERED]


def test_the_report_gives_the_operators_steers_and_stops_from_the_store(
    tmp_path: Path, hold: Hold
) -> None:
    route = sim_route(tool_turns=20, **hold.options())
    engine = start(batch(1), settings(route), tmp_path)
    try:
        until(lambda: engine.snapshot().children[0].activity.api_calls >= 1)
        engine.steer(["t0000"], "focus on the retry loop")
        until(lambda: len(engine.snapshot().children[0].steers) == 1)  # queued, its call held
        hold.release("t0000", 0)  # delivered at the end of that call; the next one held
        delivered = SteerState.DELIVERED
        until(lambda: any(r.state is delivered for r in engine.snapshot().children[0].steers))
        engine.stop(["t0000"])
        assert engine.wait(HANG_S)
    finally:
        engine.close()
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
        report = build_report(reader, engine.batch_id)
    [steer] = report["steers"]
    assert (steer["child_id"], steer["message"], steer["receipt"]) == (
        "t0000",
        "focus on the retry loop",
        "delivered",
    )
    assert steer["settled"] is not None
    [stop] = report["stops"]
    assert (stop["child_id"], stop["reason"]) == ("t0000", "stopped by operator")
    assert stop["requested"] >= steer["sent"]


def test_a_queued_child_stopped_before_it_started_is_in_the_reports_stops(
    tmp_path: Path, hold: Hold
) -> None:
    slow = sim_route(tool_turns=0, **hold.options())
    engine = start(batch(2), settings(slow, pool=1), tmp_path)
    try:
        until(lambda: engine.snapshot().children[0].status is ChildStatus.RUNNING)
        engine.stop(["t0001"])  # still queued: one slot, held by t0000
        until(lambda: engine.snapshot().children[1].status is ChildStatus.STOPPED)
        engine.stop_all()
        assert engine.wait(HANG_S)
    finally:
        engine.close()
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
        report = build_report(reader, engine.batch_id)
    stops = [(s["child_id"], s["reason"]) for s in report["stops"]]
    assert stops[0] == ("t0001", "stopped by operator")


def test_steer_now_interrupts_the_response_and_restarts_the_turn(tmp_path: Path) -> None:
    # The stream hangs mid-answer: it can only end by being interrupted.
    route = sim_route(tool_turns=0, **HANGS)
    engine = start(batch(1), settings(route), tmp_path)
    try:
        until(lambda: engine.snapshot().children[0].activity.text == "streaming")
        engine.steer(["t0000"], "stop and summarize", now=True)
        until(
            lambda: any(
                r.state is SteerState.DELIVERED for r in engine.snapshot().children[0].steers
            )
        )
        log = Path(engine.snapshot().children[0].transcript)
        until(lambda: log.exists() and "Understood — stop and summarize" in log.read_text())
        engine.stop(["t0000"])
        assert engine.wait(HANG_S)
    finally:
        engine.close()
    text = log.read_text()
    assert text.index("response interrupted by the operator") < text.index("Understood")


def test_steer_for_a_finished_child_is_missed_not_lost(tmp_path: Path) -> None:
    engine = start(batch(1), settings(sim_route(tool_turns=0)), tmp_path)
    try:
        assert engine.wait(60)
        engine.steer(["t0000"], "too late")
        until(lambda: len(engine.snapshot().children[0].steers) == 1)
        assert engine.snapshot().children[0].steers[0].state is SteerState.MISSED
    finally:
        engine.close()
    # Written into the transcript, as a delivered steer is.
    last = Path(engine.snapshot().children[0].transcript).read_text().splitlines()[-1]
    assert last.endswith("operator  │ missed: too late (the child had ended: completed)")


def test_stopping_a_queued_child_is_written_as_the_operators_action(
    tmp_path: Path, hold: Hold
) -> None:
    slow = sim_route(tool_turns=0, **hold.options())
    engine = start(batch(2), settings(slow, pool=1), tmp_path)
    try:
        until(lambda: engine.snapshot().children[0].status is ChildStatus.RUNNING)
        engine.stop(["t0001"])
        until(lambda: engine.snapshot().children[1].status is ChildStatus.STOPPED)
    finally:
        engine.close()
    lines = Path(engine.snapshot().children[1].transcript).read_text().splitlines()
    assert [line[14:] for line in lines] == [
        "operator  │ stop requested",
        "engine    │ stopped: stopped by operator before start",
    ]
    events = StoreReader(tmp_path / "state" / "flightdeck.db").events(engine.batch_id)
    assert ("t0001", "stop") in [(child, kind) for _, child, kind, _ in events]


def test_stop_mid_stream_interrupts_it_and_keeps_partial_work(tmp_path: Path) -> None:
    # The answer hangs mid-stream: it can only end by being interrupted.
    engine = start(batch(1), settings(sim_route(tool_turns=0, **HANGS)), tmp_path)
    try:
        until(lambda: engine.snapshot().children[0].activity.text == "streaming")
        log = Path(engine.snapshot().children[0].transcript)
        until(lambda: log.exists() and "Result for: Review item 0" in log.read_text())
        engine.stop(["t0000"])
        until(lambda: engine.snapshot().children[0].status.terminal)
        row = engine.snapshot().children[0]
    finally:
        engine.close()
    assert row.status is ChildStatus.STOPPED
    assert row.usage.output_tokens > 0 and row.cost_usd and row.cost_usd > 0  # what it wrote
    text = Path(row.transcript).read_text()
    assert "Result for: Review item 0" in text  # the partial answer is in the transcript
    assert "stop requested" in text and "stopped" in text.splitlines()[-1]


def test_the_snapshot_counts_what_streams_before_it_is_billed(tmp_path: Path) -> None:
    # The sim bills a call when it ends; its answer hangs mid-stream meanwhile.
    route = sim_route(tool_turns=0, **HANGS)
    engine = start(batch(2), settings(route), tmp_path)
    try:
        until(lambda: engine.snapshot().totals.in_flight.output_tokens >= 2)
        live = engine.snapshot()
        engine.stop_all()
        assert engine.wait(60)
        ended = engine.snapshot()
    finally:
        engine.close()
    assert live.totals.usage == Usage()  # nothing billed yet ...
    assert live.totals.live_usage.input_tokens > 0  # ... but the meter counts the prompts
    assert live.totals.live_cost_usd > 0
    assert (
        sum(r.in_flight.output_tokens for r in live.children) == live.totals.in_flight.output_tokens
    )
    # Once billed, only real usage is left, and it is what the store and the report keep.
    assert ended.totals.in_flight == Usage() and ended.totals.usage.output_tokens > 0
    stored = StoreReader(tmp_path / "state" / "flightdeck.db").children(engine.batch_id)
    assert sum((r.usage for r in stored), Usage()) == ended.totals.usage


def test_stop_during_retry_backoff_wakes_it(tmp_path: Path) -> None:
    # A backoff of ten minutes: ended within the wait's ceiling, the stop woke it.
    route = sim_route(error_rate=1.0, retry_after_s=600, time_scale=1.0)
    engine = start(batch(1), settings(route), tmp_path)
    try:
        until(lambda: engine.snapshot().children[0].activity.retries >= 1)
        activity = engine.snapshot().children[0].activity
        assert "429, retry in" in activity.text and activity.retrying
        engine.stop(["t0000"])
        until(lambda: engine.snapshot().children[0].status.terminal)
        assert engine.snapshot().children[0].status is ChildStatus.STOPPED
    finally:
        engine.close()


def test_burst_of_429s_is_recovered(tmp_path: Path) -> None:
    route = sim_route(error_rate=0.3, retry_after_s=0.5, seed=3)
    engine = start(batch(40), settings(route, pool=8), tmp_path)
    snap = run_to_end(engine)
    assert snap.totals.completed == 40
    assert sum(r.activity.retries for r in snap.children) >= 10


def test_retries_run_out_and_fail_with_the_reason(tmp_path: Path) -> None:
    engine = start(batch(1), settings(sim_route(server_error_rate=1.0)), tmp_path)
    row = run_to_end(engine).children[0]
    assert row.status is ChildStatus.FAILED
    assert row.error is not None and "503" in row.error
    assert row.activity.api_calls == 8  # attempts=8 in helpers.sim_route


def test_rate_limits_fail_a_child_only_after_max_wait_s_with_that_reason(tmp_path: Path) -> None:
    # Every call draws a 429 with Retry-After 20 s (scaled: 20 ms); max_wait_s 100 s (0.1 s).
    route = sim_route(error_rate=1.0, retry_after_s=20)
    route = dataclasses.replace(route, retry=dataclasses.replace(route.retry, max_wait_s=100))
    row = run_to_end(start(batch(1), settings(route), tmp_path)).children[0]
    assert row.status is ChildStatus.FAILED
    assert row.error is not None and "still rate limited after" in row.error
    assert "(max_wait_s 0.1s)" in row.error
    assert row.activity.api_calls > 1  # 429s use no attempt: far from the first one, ...
    assert row.activity.api_calls < 20  # ... and time-bound: about 0.1 s of 20 ms pauses


def test_a_retry_after_longer_than_max_wait_s_fails_the_child_at_once(tmp_path: Path) -> None:
    # Found by an audit: `retry-after: 30` with max_wait_s 5 was waited out in full (a
    # `retry-after: 3600` would have slept an hour). Retry-After 600 s (scaled: 0.6 s) against
    # max_wait_s 100 s (0.1 s): nothing is waited, and the reason says why.
    route = sim_route(error_rate=1.0, retry_after_s=600)
    route = dataclasses.replace(route, retry=dataclasses.replace(route.retry, max_wait_s=100))
    row = run_to_end(start(batch(1), settings(route), tmp_path)).children[0]
    assert row.status is ChildStatus.FAILED
    assert row.error is not None and "the server asking for 1s more" in row.error, row.error
    assert "(max_wait_s 0.1s)" in row.error
    assert row.activity.api_calls == 1


def test_fatal_error_fails_without_retry(tmp_path: Path) -> None:
    engine = start(batch(1), settings(sim_route(fail_rate=1.0)), tmp_path)
    row = run_to_end(engine).children[0]
    assert row.status is ChildStatus.FAILED and row.activity.retries == 0
    assert "FatalError" in (row.error or "")


def test_stop_all_stops_queued_and_running(tmp_path: Path, hold: Hold) -> None:
    route = sim_route(**hold.options())
    engine = start(batch(10), settings(route, pool=3), tmp_path)
    try:
        until(lambda: engine.snapshot().totals.running == 3)
        engine.stop_all()
        assert engine.wait(HANG_S)
        snap = engine.snapshot()
    finally:
        engine.close()
    assert {r.status for r in snap.children} == {ChildStatus.STOPPED}
    assert snap.status.value == "stopped"


def test_timeout_and_stall_are_detected(tmp_path: Path, hold: Hold) -> None:
    slow = sim_route("slow", **hold.options())
    stall = sim_route("stall", stall_rate=1.0, latency_ms=0, time_scale=1.0, read_timeout_s=60)
    tasks = [
        Task(id="late", goal="g", seq=0, route="slow", timeout_s=0.3),
        Task(id="stuck", goal="g", seq=1, route="stall"),
    ]
    s = settings(slow, stall, stall_after_s=0.3, stall_grace_s=1.0)
    engine = start(tasks_batch(tasks), s, tmp_path)
    try:
        assert engine.wait(HANG_S)
        rows = {r.id: r for r in engine.snapshot().children}
    finally:
        engine.close()
    assert rows["late"].status is ChildStatus.TIMED_OUT
    assert rows["stuck"].status is ChildStatus.STALLED


def test_waiting_on_the_routes_own_rate_limit_is_not_a_stall(tmp_path: Path) -> None:
    # rpm 60: one call a second. The third child waits about 2 s for its turn, longer than
    # stall_after_s: that wait is flightdeck's own, not a model that went quiet.
    import dataclasses

    route = dataclasses.replace(sim_route(tool_turns=0), rpm=60)
    engine = start(batch(3), settings(route, pool=3, stall_after_s=0.5), tmp_path)
    waiting = "rpm 60 configured: next slot in "  # what the table shows meanwhile
    until(lambda: any(r.activity.text.startswith(waiting) for r in engine.snapshot().children))
    rows = run_to_end(engine).children
    assert [(r.status, r.error) for r in rows] == [(ChildStatus.COMPLETED, None)] * 3
    starts = sorted(r.started_ts or 0 for r in rows)
    finishes = sorted(r.finished_ts or 0 for r in rows)
    assert finishes[-1] - starts[0] > 1.5  # the limit did hold the last one back


def test_the_engine_clock_ignores_steps_of_the_wall_clock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Stall and timeout checks subtract the engine's stamps: a step of the system clock (NTP)
    # would make every running child look stalled. The wall clock is read once, at the start.
    wall, mono = [1_000_000.0], [50.0]
    monkeypatch.setattr(time, "time", lambda: wall[0])
    monkeypatch.setattr(time, "monotonic", lambda: mono[0])
    engine = Engine(batch(1), settings(), state_dir=tmp_path)
    assert engine.clock() == 1_000_000.0
    wall[0] += 150.0  # the system clock steps forward
    mono[0] += 2.0  # two seconds pass
    assert engine.clock() == 1_000_002.0


def test_cost_totals_are_exact_from_64_threads() -> None:
    meter = Meter()
    route = sim_route()
    usages = [Usage(i % 97 + 1, i % 13 + 1, i % 7, i % 5) for i in range(64 * 500)]

    def work(part: int) -> None:
        for u in usages[part::64]:
            meter.add_priced(u, route_cost(u, route))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(64)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expected = sum((cost_of(u, SIM_PRICE) for u in usages), Decimal(0))
    totals = meter.totals()
    assert totals.cost_usd == expected
    assert totals.usage == sum(usages, Usage())


def test_child_costs_sum_to_the_batch_total(tmp_path: Path) -> None:
    engine = start(batch(30), settings(sim_route(), pool=16), tmp_path)
    snap = run_to_end(engine)
    child_sum = sum((r.cost_usd or Decimal(0) for r in snap.children), Decimal(0))
    assert child_sum == snap.totals.cost_usd == engine.meter.totals().cost_usd > 0
    assert snap.totals.usage.cache_read_tokens > 0  # the shared prefix was cached


def test_the_snapshot_ends_when_the_store_says_the_batch_ended(tmp_path: Path) -> None:
    from flightdeck.engine.records.report import build_report

    engine = start(batch(3), settings(sim_route(tool_turns=0)), tmp_path)
    snap = run_to_end(engine)
    assert snap.finished_ts is not None
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
        info = reader.batch(engine.batch_id)
        report = build_report(reader, engine.batch_id)
    assert info is not None and info.finished_ts == snap.finished_ts
    assert report["elapsed_s"] == round(snap.finished_ts - snap.started_ts, 3)


def test_each_child_is_durable_as_it_finishes(tmp_path: Path, hold: Hold) -> None:
    fast = sim_route("fast", tool_turns=0)
    slow = sim_route("slow", **hold.options())
    tasks = [Task(id="quick", goal="g", seq=0, route="fast")]
    tasks += [Task(id="slow", goal="g", seq=1, route="slow")]
    engine = start(tasks_batch(tasks), settings(fast, slow), tmp_path)
    try:
        until(lambda: engine.snapshot().child("quick").status.terminal)  # type: ignore[union-attr]
        reader = StoreReader(tmp_path / "state" / "flightdeck.db")

        def recorded() -> bool:
            # The queued rows may not be committed yet either: the child can finish first.
            row = {r.id: r for r in reader.children(engine.batch_id)}.get("quick")
            return row is not None and row.status is ChildStatus.COMPLETED

        until(recorded)
        assert {r.id: r for r in reader.children(engine.batch_id)}["slow"].status.live
    finally:
        engine.close()


def test_a_finish_is_announced_only_once_it_is_on_disk(tmp_path: Path) -> None:
    """A headless line promises the child is recorded: a process killed right after it was
    printed lost the row while another process held the database's write lock."""
    from flightdeck.engine.model import ChildFinished
    from flightdeck.engine.records.store import Store

    db = tmp_path / "state" / "flightdeck.db"
    db.parent.mkdir()
    Store(db).close()  # the schema exists, so opening the store below needs no lock
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's long write
    reader = StoreReader(db)
    announced: list[tuple[str, ChildStatus | None]] = []

    def on_event(event: object) -> None:
        if isinstance(event, ChildFinished):  # what did the store hold when it was announced?
            rows = {r.id: r.status for r in reader.children(engine.batch_id)}
            announced.append((event.row.id, rows.get(event.row.id)))

    engine = Engine(batch(2), settings(sim_route(tool_turns=0)), state_dir=tmp_path / "state")
    engine.subscribe(on_event)
    try:
        engine.start()
        until(lambda: engine.snapshot().totals.completed == 2)  # both final, in memory
        until(lambda: engine.snapshot().routes[0].alive == 0, what="both ends heard")
        stepped(engine)  # what the coordinator would have announced on them, it has
        assert announced == [] and not engine.wait(0)
        other.execute("COMMIT")
        assert engine.wait(60)
    finally:
        other.close()
        engine.close()
        reader.close()
    assert sorted(announced) == [(c, ChildStatus.COMPLETED) for c in ("t0000", "t0001")]


def test_untrusted_goal_never_puts_escapes_in_the_transcript(tmp_path: Path) -> None:
    goal = "Review \x1b]0;pwned\x07 this \x1b[31mred\x1b[0m and \x9b2J now"
    tasks = [Task(id="evil", goal=goal, seq=0)]
    engine = start(tasks_batch(tasks), settings(sim_route(tool_turns=0)), tmp_path)
    try:
        assert engine.wait(60)
        text = Path(engine.snapshot().children[0].transcript).read_text()
    finally:
        engine.close()
    assert "\x1b" not in text and "\x9b" not in text and "\x07" not in text
    assert "Review  this red and  now" in text  # the C1 CSI took its parameters with it


def test_tools_cannot_escape_the_workspace(tmp_path: Path) -> None:
    from flightdeck.engine.child.tools import Toolbox
    from flightdeck.engine.errors import ToolError

    (tmp_path / "ws").mkdir()
    (tmp_path / "secret.txt").write_text("s3cret")
    (tmp_path / "ws" / "link").symlink_to(tmp_path / "secret.txt")
    box = Toolbox(tmp_path / "ws")
    for bad in ("../secret.txt", "/etc/passwd", "link"):
        try:
            box.run("read_file", {"path": bad})
        except ToolError as exc:
            assert "outside the workspace" in str(exc)
        else:
            raise AssertionError(f"{bad} was readable")
    assert box.run("write_file", {"path": "a/b.txt", "content": "hi"}).startswith("wrote 2")
    assert box.run("read_file", {"path": "a/b.txt"}) == "hi"
    assert box.run("list_dir", {"path": "."}) == "a/\nlink"


def test_arguments_a_file_system_refuses_go_back_to_the_model(tmp_path: Path) -> None:
    from flightdeck.engine.child.tools import Toolbox
    from flightdeck.engine.errors import ToolError

    box = Toolbox(tmp_path)
    for name, arguments, message in (
        ("read_file", {"path": "a\x00b"}, "ValueError: embedded null byte"),
        ("list_dir", {"path": "\x00"}, "ValueError: embedded null byte"),
        ("write_file", {"path": "x\x00.txt", "content": "hi"}, "ValueError: embedded null byte"),
        ("write_file", {"path": "out.txt", "content": "bad \ud800"}, "UnicodeEncodeError"),
        ("write_file", {"path": "new/out.txt", "content": "bad \ud800"}, "UnicodeEncodeError"),
    ):
        with pytest.raises(ToolError, match=message):
            box.run(name, arguments)
    assert list(tmp_path.iterdir()) == []  # no file, no temp file, no folder left behind


def test_write_file_refuses_a_folder_before_writing_anything(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "." is the workspace itself: its temp file would have gone next to the workspace, in
    # the folder above it, before the replace failed.
    from flightdeck.engine.child.tools import Toolbox
    from flightdeck.engine.errors import ToolError

    written: list[Path] = []
    real = Path.write_bytes
    monkeypatch.setattr(Path, "write_bytes", lambda p, data: (written.append(p), real(p, data))[1])
    (tmp_path / "ws" / "sub").mkdir(parents=True)
    box = Toolbox(tmp_path / "ws")
    for folder in (".", "sub", "sub/..", "sub/"):
        with pytest.raises(ToolError, match="is a folder, not a file"):
            box.run("write_file", {"path": folder, "content": "x"})
    assert written == []
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["sub", "ws"]


def test_writes_to_one_path_take_turns_across_workspaces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two batches (two toolboxes) on one shared folder, the path spelled differently: one
    # registry lock per real path, so no two writes of that file overlap. Writes to
    # different files do overlap, which shows the check below can see an overlap.
    from flightdeck.engine.child.tools import Toolbox

    inside: dict[str, int] = {}
    most: dict[str, int] = {}
    guard = threading.Lock()
    real = Path.write_bytes

    def slow_write(p: Path, data: bytes) -> int:
        keys = (p.name.split(".")[1], "any")  # the temp file's target, and all writes
        with guard:
            for key in keys:
                inside[key] = inside.get(key, 0) + 1
                most[key] = max(most.get(key, 0), inside[key])
        time.sleep(0.01)
        with guard:
            for key in keys:
                inside[key] -= 1
        return real(p, data)

    monkeypatch.setattr(Path, "write_bytes", slow_write)
    (tmp_path / "ws" / "d").mkdir(parents=True)
    boxes = (Toolbox(tmp_path / "ws"), Toolbox(tmp_path / "ws" / "d" / ".."))
    jobs = [(boxes[i % 2], spelling) for i, spelling in enumerate(["shared", "d/../shared"] * 4)]
    jobs += [(boxes[0], f"own{i}") for i in range(4)]
    barrier = threading.Barrier(len(jobs))

    def write(box: Toolbox, path: str) -> None:
        barrier.wait()
        box.run("write_file", {"path": path, "content": path})

    threads = [threading.Thread(target=write, args=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_S)
    assert most["shared"] == 1
    assert most["any"] > 1  # the other files were written meanwhile
    assert (tmp_path / "ws" / "shared").read_text() in ("shared", "d/../shared")


def test_a_steer_racing_the_end_of_its_child_is_settled_missed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flightdeck.engine.child import state as child_module

    closing, gate = threading.Event(), threading.Event()
    real_close = child_module.TranscriptWriter.close

    def held_close(self: child_module.TranscriptWriter, *last: str) -> None:
        closing.set()  # inside finalize: the inbox is emptied for good, the status not yet final
        assert gate.wait(60)
        real_close(self, *last)

    monkeypatch.setattr(child_module.TranscriptWriter, "close", held_close)
    engine = start(batch(1), settings(sim_route(tool_turns=0)), tmp_path)
    try:
        assert closing.wait(60)
        [rid] = engine.steer(["t0000"], "too late")
        until(lambda: [r.state for r in engine.receipts()] == [SteerState.MISSED], timeout=60)
    finally:
        gate.set()
        engine.close()
    controls = StoreReader(tmp_path / "state" / "flightdeck.db").controls(engine.batch_id)
    assert [(c.id, c.state) for c in controls] == [(rid, SteerState.MISSED)]


def test_budgets_stop_admitting_work(tmp_path: Path) -> None:
    from dataclasses import replace

    from flightdeck.engine.inputs.settings import Budget

    s = replace(settings(sim_route(tool_turns=0), pool=1), budget=Budget(max_runs=3))
    engine = start(batch(6), s, tmp_path)
    rows = run_to_end(engine).children
    assert [r.status for r in rows[:3]] == [ChildStatus.COMPLETED] * 3
    assert all(
        r.status is ChildStatus.STOPPED and "max_runs (3)" in (r.error or "") for r in rows[3:]
    )

    s = replace(settings(sim_route(tool_turns=0), pool=1), budget=Budget(max_cost_usd=Decimal("0")))
    engine = start(batch(2), s, tmp_path / "b")
    rows = run_to_end(engine).children
    assert all("budget of $0.00 reached" in (r.error or "") for r in rows)
    assert engine.snapshot().totals.cost_usd == 0


def test_a_429_with_retry_after_pauses_the_route_in_the_snapshot(tmp_path: Path) -> None:
    # Five minutes' Retry-After (within max_wait_s): however long this machine takes from the
    # 429 to the check (HANG_S at most), the pause shown is still most of it ahead.
    route = sim_route(error_rate=1.0, retry_after_s=300, time_scale=1.0)
    engine = start(batch(1), settings(route), tmp_path)
    try:
        until(lambda: engine.snapshot().children[0].activity.retries >= 1)
        [headroom] = engine.snapshot().routes
        assert headroom.route == "sim"
        assert headroom.paused_until is not None
        assert 300 - HANG_S < headroom.paused_until - time.time() <= 300
    finally:
        engine.close()


class _ResetOnClose:
    """A provider whose stream, when closed, breaks like a network error (not Interrupted)."""

    name = "sim"
    model = "reset-on-close"
    secrets: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.opened = 0

    def open(self, request: object) -> object:
        from flightdeck.engine.errors import TransientError
        from flightdeck.engine.providers.base import TextDelta, UsageEvent

        self.opened += 1
        first = self.opened == 1
        closed = threading.Event()

        class Stream:
            def __iter__(self):  # type: ignore[no-untyped-def]
                yield TextDelta("partial ")
                if first and closed.wait(HANG_S):
                    raise TransientError("connection reset by peer")
                yield TextDelta("done\n")
                yield UsageEvent(Usage(10, 2))

            def close(self) -> None:
                closed.set()

        return Stream()

    def close(self) -> None:
        pass


def test_a_stream_we_closed_is_an_interruption_not_a_retry(tmp_path: Path) -> None:
    provider = _ResetOnClose()
    engine = start(
        batch(1), settings(sim_route(tool_turns=0)), tmp_path, providers={"sim": provider}
    )
    try:
        until(lambda: engine.snapshot().children[0].activity.text == "streaming")
        engine.steer(["t0000"], "wrap up", now=True)
        assert engine.wait(60)
        row = engine.snapshot().children[0]
    finally:
        engine.close()
    assert row.status is ChildStatus.COMPLETED
    assert row.activity.retries == 0 and provider.opened == 2
    assert [s.state for s in row.steers] == [SteerState.DELIVERED]


def test_a_sim_batch_replays_exactly_for_a_seed(tmp_path: Path) -> None:
    def run(folder: str) -> list[tuple[str, str, int, int, int, int]]:
        route = sim_route(error_rate=0.3, fail_rate=0.05, retry_after_s=0.2, seed=11)
        engine = start(batch(12), settings(route, pool=4), tmp_path / folder)
        rows = run_to_end(engine).children
        # Which child writes the shared prompt-cache prefix depends on thread timing, so the
        # split between fresh and cached input may differ; the totals may not.
        a = [(r.id, r.status.value, r.activity.api_calls, r.activity.retries) for r in rows]
        u = [(r.usage.prompt_tokens, r.usage.output_tokens) for r in rows]
        return [(*x, *y) for x, y in zip(a, u, strict=True)]

    first, second = run("a"), run("b")
    assert first == second
    assert sum(r[3] for r in first) > 0  # retries happened, and happened alike


def test_a_start_that_fails_leaves_no_worker_threads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_sink() -> None:
        raise OSError("too many open files")

    def workers() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name.startswith("flightdeck-child")}

    before = workers()
    monkeypatch.setattr(run_module, "TranscriptSink", broken_sink)
    engine = Engine(batch(5), settings(sim_route(), pool=3), state_dir=tmp_path / "state")
    with pytest.raises(OSError, match="too many open files"):
        engine.start()  # the worker pool had been made: it comes before the sink
    assert engine._pool is not None
    engine.close()
    until(lambda: not workers() - before, timeout=60)


def test_an_explicit_pool_size_is_bounded(tmp_path: Path) -> None:
    """The API refuses what the CLI and the config refuse: a thread per child alive."""
    for bad in (0, 1025):
        with pytest.raises(ValueError, match="between 1 and 1024"):
            Engine(batch(1), settings(), state_dir=tmp_path, max_concurrent=bad)
    assert Engine(batch(1), settings(), state_dir=tmp_path, max_concurrent=1024).pool_size == 1024


EXITS_WITHOUT_CLOSE = """
import sys
from pathlib import Path
from types import MappingProxyType
from flightdeck.engine.api import Engine
from flightdeck.engine.inputs.settings import EngineSettings, Settings, default_sim_route
from flightdeck.engine.inputs.tasks import Batch, Task
route = default_sim_route(time_scale=0.001, tool_turns=0)
s = Settings(engine=EngineSettings(max_concurrent=2), routes=MappingProxyType({"sim": route}))
tasks = tuple(Task(id=f"c{i}", goal="g", seq=i) for i in range(50))
Engine(Batch("b", tasks), s, state_dir=Path(sys.argv[1])).start()
"""


def test_a_program_that_never_calls_close_still_exits_with_its_children_settled(
    tmp_path: Path,
) -> None:
    """The coordinator thread answered commands until close(): without one, for ever."""
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", EXITS_WITHOUT_CLOSE, str(tmp_path)], timeout=30, capture_output=True
    )
    assert run.returncode == 0, run.stderr
    with StoreReader(tmp_path / "flightdeck.db") as reader:
        (info,) = reader.batches()
        statuses = {row.status for row in reader.children(info.id)}
    assert not any(status.live for status in statuses), statuses  # none left running or queued


SUBREAPER_AFTER_CLOSE = """
import ctypes, ctypes.util, sys
from pathlib import Path
from types import MappingProxyType
from flightdeck.engine.api import Engine
from flightdeck.engine.inputs.settings import CommandSpec, EngineSettings, Route, Settings
from flightdeck.engine.inputs.tasks import Batch, Task
libc = ctypes.CDLL(ctypes.util.find_library("c"))
def subreaper():
    now = ctypes.c_int(0)
    libc.prctl(37, ctypes.byref(now), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
    return now.value
if sys.argv[2] == "own":
    libc.prctl(36, 1, 0, 0, 0)  # the program is a subreaper of its own choosing
route = Route(name="cmd", provider="command", model="cmd", command=CommandSpec(argv=("true",)))
s = Settings(engine=EngineSettings(max_concurrent=1), routes=MappingProxyType({"cmd": route}))
for n in range(2):  # a second engine in the same process makes it a subreaper again
    tasks = (Task(id="c", goal="g", seq=0, route="cmd"),)
    engine = Engine(Batch("b", tasks), s, state_dir=Path(sys.argv[1]))
    engine.start()
    assert engine.wait(60)
    during = subreaper()
    engine.close()
    print(during, subreaper())
"""


@pytest.mark.parametrize(("program", "after"), [("plain", 0), ("own", 1)])
def test_a_closed_engine_leaves_its_program_a_subreaper_only_if_it_was_one(
    tmp_path: Path, program: str, after: int
) -> None:
    """A command child's orphans come to the engine's process while its batch runs; once the
    engine is closed, a program that embeds it must not go on collecting every orphan of what
    it runs later (each one a zombie it never reaps)."""
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", SUBREAPER_AFTER_CLOSE, str(tmp_path), program],
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[:2] == [f"1 {after}", f"1 {after}"]


def test_a_subscriber_calling_sys_exit_does_not_end_the_coordinator(tmp_path: Path) -> None:
    # Found by an audit: sys.exit() in a subscriber ended the coordinator thread in silence;
    # wait() returned and the batch stayed "running" in the store, its children too.
    import sys

    engine = Engine(batch(3), settings(sim_route(tool_turns=0), pool=1), state_dir=tmp_path)
    engine.subscribe(lambda event: sys.exit("quit"))
    engine.start()
    snap = run_to_end(engine)
    assert snap.totals.completed == 3 and snap.status.value == "completed"


def test_subscribers_get_every_event_until_they_unsubscribe(tmp_path: Path) -> None:
    seen: list[object] = []
    dropped: list[object] = []
    engine = Engine(batch(3), settings(sim_route(tool_turns=0), pool=1), state_dir=tmp_path)
    engine.subscribe(seen.append)
    unsubscribe = engine.subscribe(dropped.append)
    engine.subscribe(lambda event: 1 / 0)  # a broken subscriber must not stop the batch
    unsubscribe()
    unsubscribe()  # twice is harmless
    engine.start()
    assert run_to_end(engine).totals.completed == 3
    kinds = [type(event).__name__ for event in seen]
    assert kinds.count("ChildStarted") == 3 and kinds.count("ChildFinished") == 3
    assert kinds[-1] == "BatchFinished"
    assert dropped == []


def test_the_batch_row_names_the_process_that_runs_it(tmp_path: Path) -> None:
    # Crash recovery tells a live owner from a dead one (or a reused pid) by these two.
    import os

    from flightdeck.engine.records.rows import process_start_time

    engine = start(batch(1), settings(sim_route(tool_turns=0)), tmp_path)
    run_to_end(engine)
    info = StoreReader(tmp_path / "state" / "flightdeck.db").batch(engine.batch_id)
    assert info is not None
    assert info.owner_pid == os.getpid()
    assert info.owner_start is not None and info.owner_start == process_start_time()


class _QuietOnClose:
    """A provider whose stream, when closed, just ends: no error and no usage (as an SSE
    stream can when its socket is shut down)."""

    name = "sim"
    model = "quiet-on-close"
    secrets: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.streaming = threading.Event()

    def open(self, request: object) -> object:
        from flightdeck.engine.providers.base import TextDelta

        closed = threading.Event()
        streaming = self.streaming

        class Stream:
            def __iter__(self):  # type: ignore[no-untyped-def]
                yield TextDelta("x" * 40)
                streaming.set()
                closed.wait(HANG_S)

            def close(self) -> None:
                closed.set()

        return Stream()

    def close(self) -> None:
        pass


def test_a_stopped_call_whose_stream_ends_quietly_is_billed_an_estimate(tmp_path: Path) -> None:
    provider = _QuietOnClose()
    engine = start(
        batch(1), settings(sim_route(tool_turns=0)), tmp_path, providers={"sim": provider}
    )
    try:
        assert provider.streaming.wait(60)
        live = engine.snapshot().children[0]
        engine.stop(["t0000"])
        assert engine.wait(60)
        row = engine.snapshot().children[0]
    finally:
        engine.close()
    [stored] = StoreReader(tmp_path / "state" / "flightdeck.db").children(engine.batch_id)
    assert row.status is ChildStatus.STOPPED
    # What the meter showed while it streamed is what is billed once it stopped.
    assert row.usage == live.in_flight == stored.usage
    assert row.usage.input_tokens > 0 and row.usage.output_tokens == 10  # 40 characters
    assert row.cost_usd is not None and row.cost_usd > 0 and stored.cost_usd == row.cost_usd


class _WritesTheKey:
    """A provider whose model writes its key to a workspace file, then answers."""

    name = "sim"
    model = "writes-the-key"
    secrets = ("sk-live-0123456789",)

    def __init__(self) -> None:
        self.opened = 0

    def open(self, request: object) -> object:
        from flightdeck.engine.providers.base import TextDelta, ToolCall, ToolCallEvent, UsageEvent

        self.opened += 1
        key = self.secrets[0]
        events: list[object] = (
            [ToolCallEvent(ToolCall("t1", "write_file", {"path": "k.txt", "content": f"k={key}"}))]
            if self.opened == 1
            else [TextDelta("done"), UsageEvent(Usage(10, 2))]
        )

        class Stream:
            def __iter__(self):  # type: ignore[no-untyped-def]
                yield from events

            def close(self) -> None:
                pass

        return Stream()

    def close(self) -> None:
        pass


def test_a_key_the_model_writes_to_a_file_is_redacted(tmp_path: Path) -> None:
    engine = start(
        batch(1), settings(sim_route(tool_turns=0)), tmp_path, providers={"sim": _WritesTheKey()}
    )
    try:
        assert engine.wait(60)
        assert engine.snapshot().children[0].status is ChildStatus.COMPLETED
        written = (engine.workspace / "k.txt").read_text()
    finally:
        engine.close()
    assert written == "k=[REDACTED]"


class _LongAnswer:
    """A provider whose one answer is 250,000 characters, streamed in 1,000-character chunks."""

    name = "sim"
    model = "long-answer"
    secrets: tuple[str, ...] = ()

    def open(self, request: object) -> object:
        from flightdeck.engine.providers.base import TextDelta, UsageEvent

        class Stream:
            def __iter__(self):  # type: ignore[no-untyped-def]
                for n in range(250):
                    yield TextDelta(f"{n:03d}" + "y" * 997)
                yield UsageEvent(Usage(10, 60_000))

            def close(self) -> None:
                pass

        return Stream()

    def close(self) -> None:
        pass


def test_a_long_answer_is_stored_cut_with_a_note_and_kept_whole_in_the_transcript(
    tmp_path: Path,
) -> None:
    route = sim_route(tool_turns=0)
    engine = start(batch(1), settings(route), tmp_path, providers={"sim": _LongAnswer()})
    live = run_to_end(engine).children[0]
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
        stored = reader.children(engine.batch_id)[0]
    assert live.status is ChildStatus.COMPLETED and stored.result == live.result
    result = stored.result or ""
    assert result.startswith("000" + "y" * 997 + "001")
    assert result[:100_000] == "".join(f"{n:03d}" + "y" * 997 for n in range(100))
    note = result[100_000:]
    assert note == (
        f"\n\n[cut here: 150,000 more characters; the whole answer is in the transcript, "
        f"{stored.transcript}]"
    )
    lines = Path(stored.transcript).read_text(encoding="utf-8").splitlines()
    said = "".join(p.text for p in map(parse, lines) if p is not None and p.role == "assistant")
    assert said == "".join(f"{n:03d}" + "y" * 997 for n in range(250))
