"""TUI scale: the cost of one table refresh, of clearing a filter, key-press-to-screen latency
and the CPU the app adds to a batch.

Refresh: the real app (headless, 160x50) is fed engine-like snapshots of 100 / 1,000 / 5,000
children with a fifth of them running (every running row changes on every poll, a few children
start and finish). One refresh = apply the snapshot by difference + render the visible table.
The baseline, measured in the same run on the same app, rebuilds every row instead; the ratio
is what updating by difference buys. The largest size runs once more grouped by task group (G),
its children in 50 groups, each led by a header that counts its members and cost; and once
grouped by status, whose groups change as children start and finish, with the query below
applied and then kept on for refreshes (the triage case: grouped and filtered). Clearing a
filter: from a filter that keeps a few rows back to all of them, applied and rendered.

Latency: keys are posted while polls apply 5,000 children (200 running), at phases unrelated
to the poll timer; latency is from posting the key to the first frame that shows the moved
cursor. Reported beside the same measurement on a frozen table (no refresh work at all), and on
a real sim engine running 200 of 5,000 children in this process (its threads share the GIL).

Throughput: 2,000 instant sim children with the app attached, as a ratio of the same engine
alone: the interpreter time the app takes from a batch. Its files go where BENCH_DIR says (as
the engine benchmark's do): on a disk whose file creation is slow, that bounds both runs.
CPU: a paced batch of the same size (200 at a time, each child a few turns of a second) run
alone and with the app attached, alternately: the process's CPU time with the app over without.
BENCH_TUI_CHILDREN sets both batch sizes (the smoke test in `make test` uses 20).

The same file runs against another checkout's code (PYTHONPATH to a folder whose `flightdeck`
holds its engine/ and tui/) for side-by-side figures; see docs/performance.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import Any

from flightdeck.engine.api import Engine
from flightdeck.engine.commands import Command
from flightdeck.engine.control.pool import tune_interpreter
from flightdeck.engine.inputs.settings import DEFAULT_LOOP_STEER, Settings, default_sim_route
from flightdeck.engine.inputs.tasks import Batch, Task
from flightdeck.engine.model import (
    Activity,
    BatchStatus,
    ChildRow,
    ChildStatus,
    EngineEvent,
    Snapshot,
    Totals,
    Usage,
)
from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.screens.main import UiOptions
from flightdeck.tui.view import LiveView
from flightdeck.tui.widgets.filter import FilterInput
from flightdeck.tui.widgets.rows import SortOrder, parse_filter

try:
    from flightdeck.tui.widgets.rows import GroupBy
except ImportError:  # an older checkout: the group order was a sort order (side-by-side runs)
    GroupBy = None  # type: ignore[assignment,misc]
from rich.console import RenderableType
from textual import events
from textual.geometry import Region

# The scales below can be shrunk from the environment: `make test` runs every part this way
# (tests/test_bench_smoke.py), so none can break unnoticed.
SIZES = tuple(int(n) for n in os.environ.get("BENCH_TUI_SIZES", "100,1000,5000").split(","))
LIVE = int(os.environ.get("BENCH_TUI_LIVE", "5000"))  # children in the key latency scenarios
RUNNING_SHARE = 0.2  # of the refresh scenarios' children
RUNNING = min(200, int(LIVE * RUNNING_SHARE))  # in the key latency scenarios
TICKS = 30
BASELINE_TICKS = 5
FILTER_CLEARS = 5
# Every kind of term the query language has, ANDed; `idle` makes it re-check rows each poll.
QUERY = 'status:running,queued route:sim cost>=0 tokens>=0 idle<1h depth<1 "child"'
KEYS = int(os.environ.get("BENCH_TUI_KEYS", "100"))
GROUPS = 50  # in the group order's refresh, at the largest size: a header per group
SCREEN = (160, 50)
RESULTS = Path(__file__).parent / "results"


class SyntheticView:
    """Engine-like snapshots: running rows change every call; some children start or end."""

    loop_steer = DEFAULT_LOOP_STEER
    read_only: str | None = None  # an EngineView that hears commands, as an engine's does
    can_detach = False

    def __init__(self, n: int, folder: Path, running: int | None = None, groups: int = 0) -> None:
        self.folder = folder
        self.groups = groups  # children spread over this many groups (0: none)
        self.t = 1_800_000_000.0
        self.rows: dict[str, ChildRow] = {}
        running = int(n * RUNNING_SHARE) if running is None else running
        for seq in range(n):
            if seq < running:
                status = ChildStatus.RUNNING
            elif seq < running + (n - running) // 2:
                status = ChildStatus.QUEUED
            else:
                status = ChildStatus.COMPLETED
            row = self._row(seq, status)
            self.rows[row.id] = row
        self.live = [r.id for r in self.rows.values() if r.status is ChildStatus.RUNNING]
        self.waiting = [r.id for r in self.rows.values() if r.status is ChildStatus.QUEUED]

    def _row(self, seq: int, status: ChildStatus) -> ChildRow:
        child_id = f"child-{seq:05d}"
        return ChildRow(
            id=child_id,
            seq=seq,
            goal=f"Review pull request #{seq}: read the changed files and report risks",
            group=f"group-{seq % self.groups:02d}" if self.groups else None,
            route="sim",
            model="sim-1",
            status=status,
            activity=Activity(last_activity_ts=self.t, text=status.value),
            usage=Usage(),
            cost_usd=Decimal(0),
            queued_ts=self.t,
            started_ts=self.t if status is not ChildStatus.QUEUED else None,
            finished_ts=self.t if status.terminal else None,
            error=None,
            result=None,
            transcript=str(self.folder / f"{child_id}.log"),
        )

    def tick(self) -> None:
        self.t += 0.3
        for child_id in self.live:
            row = self.rows[child_id]
            a = row.activity
            self.rows[child_id] = dataclasses.replace(
                row,
                activity=dataclasses.replace(
                    a, api_calls=a.api_calls + 1, last_activity_ts=self.t, text="streaming"
                ),
                usage=row.usage + Usage(input_tokens=120, output_tokens=40),
                cost_usd=(row.cost_usd or Decimal(0)) + Decimal("0.0003"),
            )
        # One in fifty running children finishes and a queued one takes its place.
        for _ in range(max(1, len(self.live) // 50)):
            if not self.waiting:
                break
            done, start = self.live.pop(0), self.waiting.pop(0)
            self.rows[done] = dataclasses.replace(
                self.rows[done], status=ChildStatus.COMPLETED, finished_ts=self.t
            )
            self.rows[start] = dataclasses.replace(
                self.rows[start], status=ChildStatus.RUNNING, started_ts=self.t
            )
            self.live.append(start)

    def snapshot(self) -> Snapshot:
        self.tick()
        rows = tuple(self.rows.values())
        return Snapshot(
            batch_id="bench",
            status=BatchStatus.RUNNING,
            started_ts=1_800_000_000.0,
            now=self.t,
            children=rows,
            totals=Totals(children=len(rows), running=len(self.live)),
            pool_size=len(self.live),
        )

    def steer(self, child_ids: Sequence[str], message: str, now: bool) -> None: ...
    def stop(self, child_ids: Sequence[str]) -> None: ...
    def stop_all(self) -> None: ...

    def send(self, command: Command) -> None:
        raise AssertionError(f"the benchmark presses no key that sends a command: {command}")

    def transcript_path(self, child_id: str) -> Path | None:
        return self.folder / f"{child_id}.log"

    def secrets(self) -> tuple[str, ...]:
        return ()

    def subscribe(self, fn: Callable[[EngineEvent], None]) -> Callable[[], None]:
        return lambda: None


def ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


async def refresh_costs(
    n: int, folder: Path, groups: int = 0, *, routes: bool = False, by_status: bool = False
) -> dict[str, Any]:
    """`groups`: the children in that many groups, grouped by them (with headers); `routes`:
    with the route gauges shown (a pass over the rows per poll); `by_status`: grouped by
    status (None on a checkout without G)."""
    view = SyntheticView(n, folder, groups=groups)
    app = FlightdeckApp(view, UiOptions(poll_s=3600, cursor_blink=False))  # polls are driven below
    async with app.run_test(size=SCREEN) as pilot:
        screen, table = app.main, app.main.table
        await pilot.pause(0.1)
        if groups and GroupBy is not None:
            table.set_grouping(GroupBy.GROUP)
            await pilot.pause(0)
        elif groups:
            table.set_order(SortOrder.GROUP)  # type: ignore[attr-defined]
            await pilot.pause(0)
        if by_status:
            if GroupBy is None:
                return {}
            table.set_grouping(GroupBy.STATUS)
            await pilot.pause(0)
        if routes:
            screen.action_routes()
            await pilot.pause(0)
        region = Region(0, 0, table.size.width, table.size.height)

        def render() -> None:
            table.render_lines(region)

        diff, applied = [], []
        for _ in range(TICKS):
            snap = view.snapshot()
            t0 = time.perf_counter()
            screen.apply(snap)
            t1 = time.perf_counter()
            render()
            diff.append(time.perf_counter() - t0)
            applied.append(t1 - t0)
            await pilot.pause(0)
        rebuild = []
        for _ in range(BASELINE_TICKS):
            snap = view.snapshot()
            t0 = time.perf_counter()
            with app.batch_update():
                table.rows_by_id.update({row.id: row for row in snap.children})
                table.rebuild()
            render()
            rebuild.append(time.perf_counter() - t0)
            await pilot.pause(0)
        assert len(table.shown) == n
        clears = []
        few = FilterInput.Applied(parse_filter("child-0000"))  # keeps ten rows or fewer
        everything = FilterInput.Applied(parse_filter(""))
        for _ in range(FILTER_CLEARS):
            screen.on_filter_input_applied(few)
            render()
            await pilot.pause(0)
            t0 = time.perf_counter()
            screen.on_filter_input_applied(everything)
            render()
            clears.append(time.perf_counter() - t0)
            await pilot.pause(0)
        assert len(table.shown) == n
        # A query of every kind of term, from no filter (rows and render as for a clear); then
        # refreshes with an idle term on, which checks every row again on each poll.
        queries, timed = [], []
        try:
            query = FilterInput.Applied(parse_filter(QUERY))
        except ValueError:  # an older checkout's filter language (side-by-side runs)
            query = None
        for _ in range(FILTER_CLEARS if query is not None else 0):
            assert query is not None
            t0 = time.perf_counter()
            screen.on_filter_input_applied(query)
            render()
            queries.append(time.perf_counter() - t0)
            await pilot.pause(0)
            screen.on_filter_input_applied(everything)
            await pilot.pause(0)
        kept = None
        if query is not None:
            screen.on_filter_input_applied(query)
            kept = len(table.shown)
            for _ in range(TICKS):
                snap = view.snapshot()
                t0 = time.perf_counter()
                screen.apply(snap)
                render()
                timed.append(time.perf_counter() - t0)
                await pilot.pause(0)
            screen.on_filter_input_applied(everything)
    d, r = statistics.median(diff), statistics.median(rebuild)
    scenario = {"scenario": f"group order, {groups} groups"} if groups else {}
    if routes:
        scenario = {"scenario": "route gauges shown"}
    if by_status:
        scenario = {"scenario": "grouped by status, query on"}
    return {
        "bench": "tui_refresh",
        **scenario,
        "children": n,
        "running": int(n * RUNNING_SHARE),
        "refresh_ms_median": ms(d),
        "apply_only_ms_median": ms(statistics.median(applied)),
        "refresh_ms_max": ms(max(diff)),
        "rebuild_ms_median": ms(r),
        "rebuild_over_refresh": round(r / d, 1),
        "filter_clear_ms_median": ms(statistics.median(clears)),
        "filter_clear_ms_max": ms(max(clears)),
        "query_ms_median": ms(statistics.median(queries)) if queries else None,
        "query_ms_max": ms(max(queries)) if queries else None,
        "query_kept": kept,
        "timed_query_refresh_ms_median": ms(statistics.median(timed)) if timed else None,
    }


async def key_latencies(app: FlightdeckApp, settle: Callable[[], bool]) -> list[float]:
    """Post cursor keys at odd intervals; time each until a frame shows the cursor moved."""
    frames: list[float] = []
    display = app._display

    def timed_display(screen: Any, renderable: RenderableType | None) -> None:
        if renderable is not None:
            frames.append(time.perf_counter())
        display(screen, renderable)

    app._display = timed_display  # type: ignore[method-assign]
    out: list[float] = []
    async with app.run_test(size=SCREEN) as pilot:
        while not settle():
            await pilot.pause(0.05)
        table = app.main.table
        table.focus()
        for i in range(KEYS):
            await asyncio.sleep(0.137)  # unrelated to the 0.3 s poll period
            before = table.cursor_row
            key = "down" if i % 2 == 0 else "up"
            frames.clear()
            t0 = time.perf_counter()
            app.post_message(events.Key(key, None))
            while table.cursor_row == before or not frames:
                await asyncio.sleep(0.0005)
                if time.perf_counter() - t0 > 5:
                    raise RuntimeError("key not handled within 5 s")
            out.append(frames[-1] - t0)
    return out


def summary(name: str, samples: list[float], **extra: Any) -> dict[str, Any]:
    ordered = sorted(samples)
    return {
        "bench": name,
        **extra,
        "key_to_frame_ms_median": ms(statistics.median(ordered)),
        "key_to_frame_ms_p95": ms(ordered[max(0, int(len(ordered) * 0.95) - 1)]),
        "key_to_frame_ms_p99": ms(ordered[max(0, int(len(ordered) * 0.99) - 1)]),
        "key_to_frame_ms_max": ms(ordered[-1]),
    }


async def latency_synthetic(folder: Path) -> list[dict[str, Any]]:
    results = []
    for frozen in (False, True):
        view = SyntheticView(LIVE, folder, running=RUNNING)
        app = FlightdeckApp(view, UiOptions(cursor_blink=False))  # the shipped 0.3 s poll
        if frozen:

            def settle(app: FlightdeckApp = app) -> bool:
                if len(app.main.table.shown) < LIVE:
                    return False
                app.main.frozen = True
                return True
        else:

            def settle(app: FlightdeckApp = app) -> bool:
                return len(app.main.table.shown) == LIVE

        samples = await key_latencies(app, settle)
        label = "frozen table" if frozen else f"live, {RUNNING:,} of {LIVE:,} running"
        results.append(summary("tui_key_latency", samples, scenario=label))
    return results


async def latency_engine(folder: Path) -> dict[str, Any]:
    route = default_sim_route(time_scale=1.0, latency_ms=500.0, tokens_per_s=20.0, tool_turns=50)
    settings = Settings(routes=MappingProxyType({"sim": route}))
    tasks = tuple(
        Task(id=f"c{i:04d}", goal=f"Review change {i}", seq=i, max_turns=60) for i in range(LIVE)
    )
    engine = Engine(Batch("bench", tasks), settings, state_dir=folder, max_concurrent=RUNNING)
    engine.start()
    try:
        snap_times = []
        for _ in range(10):
            t0 = time.perf_counter()
            engine.snapshot()
            snap_times.append(time.perf_counter() - t0)
        app = FlightdeckApp(LiveView(engine), UiOptions(cursor_blink=False))

        def settle() -> bool:
            running = engine.snapshot().totals.running
            return running >= RUNNING and len(app.main.table.shown) == LIVE

        samples = await key_latencies(app, settle)
    finally:
        engine.close()
    return summary(
        "tui_key_latency",
        samples,
        scenario=f"real sim engine, {RUNNING:,} of {LIVE:,} running",
        engine_snapshot_ms_median=ms(statistics.median(snap_times)),
    )


INSTANT = int(os.environ.get("BENCH_TUI_CHILDREN", "2000"))  # run with and without the app


async def throughput_under_tui(folder: Path) -> dict[str, Any]:
    """2,000 instant sim children with the app attached vs the same engine alone.

    The app shares the interpreter with the engine: what it spends (the first paint of every
    row, polls, engine events) is what the batch loses. Alternating rounds, medians.
    """
    route = default_sim_route(time_scale=1.0, latency_ms=0, tokens_per_s=1e9, tool_turns=0)
    settings = Settings(routes=MappingProxyType({"sim": route}))
    tasks = tuple(Task(id=f"c{i:05d}", goal=f"Answer question {i}", seq=i) for i in range(INSTANT))
    alone, attached = [], []
    for i in range(3):
        engine = Engine(
            Batch("bench", tasks), settings, state_dir=folder / f"a{i}", max_concurrent=64
        )
        t0 = time.perf_counter()
        engine.start()
        assert engine.wait(600)
        alone.append(INSTANT / (time.perf_counter() - t0))
        assert engine.snapshot().totals.completed == INSTANT
        engine.close()
        engine = Engine(
            Batch("bench", tasks), settings, state_dir=folder / f"t{i}", max_concurrent=64
        )
        app = FlightdeckApp(LiveView(engine), UiOptions(cursor_blink=False))
        try:
            async with app.run_test(size=SCREEN) as pilot:
                await pilot.pause()
                t0 = time.perf_counter()
                engine.start()
                while not engine.wait(0):
                    await asyncio.sleep(0.01)
                attached.append(INSTANT / (time.perf_counter() - t0))
            assert engine.snapshot().totals.completed == INSTANT
        finally:
            engine.close()
    a, t = statistics.median(alone), statistics.median(attached)
    return {
        "bench": "tui_throughput",
        "children": INSTANT,
        "engine_alone_children_per_s": round(a),
        "with_tui_children_per_s": round(t),
        "with_tui_over_alone": round(t / a, 2),
    }


async def cpu_under_tui(folder: Path) -> dict[str, Any]:
    """The same paced batch alone and with the app attached: process CPU time, alternately.

    The headless runner's own cost (a line per finished child, printed in batches) is small
    beside the engine's; the engine alone is the baseline.
    """
    route = default_sim_route(time_scale=1.0, latency_ms=150.0, tokens_per_s=400.0, tool_turns=2)
    settings = Settings(routes=MappingProxyType({"sim": route}))
    tasks = tuple(Task(id=f"p{i:05d}", goal=f"Review change {i}", seq=i) for i in range(INSTANT))
    pool = min(200, INSTANT)
    alone, attached = [], []
    for i in range(2):
        engine = Engine(
            Batch("bench", tasks), settings, state_dir=folder / f"ca{i}", max_concurrent=pool
        )
        c0 = time.process_time()
        engine.start()
        while not engine.wait(0.05):
            await asyncio.sleep(0)
        alone.append(time.process_time() - c0)
        engine.close()
        engine = Engine(
            Batch("bench", tasks), settings, state_dir=folder / f"ct{i}", max_concurrent=pool
        )
        app = FlightdeckApp(LiveView(engine), UiOptions(cursor_blink=False))
        try:
            async with app.run_test(size=SCREEN) as pilot:
                await pilot.pause()
                c0 = time.process_time()
                engine.start()
                while not engine.wait(0):
                    await asyncio.sleep(0.05)
                attached.append(time.process_time() - c0)
        finally:
            engine.close()
    a, t = statistics.median(alone), statistics.median(attached)
    return {
        "bench": "tui_cpu",
        "children": INSTANT,
        "pool": pool,
        "engine_alone_cpu_s": round(a, 2),
        "with_tui_cpu_s": round(t, 2),
        "with_tui_cpu_over_alone": round(t / a, 2),
    }


def table(results: list[dict[str, Any]]) -> str:
    lines = ["refresh (apply by difference + render) vs full rebuild:"]
    head = (
        "children",
        "running",
        "refresh ms",
        "apply ms",
        "max",
        "rebuild ms",
        "ratio",
        "unfilter",
    )
    lines.append("  {:>8} {:>7} {:>11} {:>9} {:>8} {:>11} {:>6} {:>9}".format(*head))
    for r in results:
        if r["bench"] == "tui_refresh":
            ratio = f"{r['rebuild_over_refresh']}x"
            lines.append(
                f"  {r['children']:>8,} {r['running']:>7,} {r['refresh_ms_median']:>11} "
                f"{r['apply_only_ms_median']:>9} {r['refresh_ms_max']:>8} "
                f"{r['rebuild_ms_median']:>11} {ratio:>6} {r['filter_clear_ms_median']:>9}"
                + (f"  ({r['scenario']})" if "scenario" in r else "")
            )
    lines.append("key press to frame:")
    lines.append(f"  {'scenario':<42} {'median ms':>9} {'p95':>8} {'p99':>8} {'max':>8}")
    for r in results:
        if r["bench"] == "tui_key_latency":
            lines.append(
                f"  {r['scenario']:<42} {r['key_to_frame_ms_median']:>9} "
                f"{r['key_to_frame_ms_p95']:>8} {r['key_to_frame_ms_p99']:>8} "
                f"{r['key_to_frame_ms_max']:>8}"
            )
    for r in results:
        if r["bench"] == "tui_throughput":
            lines.append(
                f"{r['children']:,} instant children: {r['with_tui_children_per_s']:,}/s with "
                f"the app, {r['engine_alone_children_per_s']:,}/s alone "
                f"({r['with_tui_over_alone']}x)"
            )
        if r["bench"] == "tui_cpu":
            lines.append(
                f"{r['children']:,} paced children, {r['pool']} at a time: "
                f"{r['with_tui_cpu_s']} s CPU with the app, {r['engine_alone_cpu_s']} s alone "
                f"({r['with_tui_cpu_over_alone']}x)"
            )
    return "\n".join(lines)


async def run() -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in SIZES:
            results.append(await refresh_costs(n, Path(tmp)))
        results.append(await refresh_costs(SIZES[-1], Path(tmp), groups=GROUPS))
        results.append(await refresh_costs(SIZES[-1], Path(tmp), routes=True))
        grouped = await refresh_costs(SIZES[-1], Path(tmp), by_status=True)
        if grouped:
            results.append(grouped)
        results.extend(await latency_synthetic(Path(tmp)))
        results.append(await latency_engine(Path(tmp) / "engine"))
        # Where the engine bench puts its files (BENCH_DIR), so the engine alone is measured on
        # the same footing: on a disk, file creation speed decides much of it.
        with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as files:
            results.append(await throughput_under_tui(Path(files)))
            results.append(await cpu_under_tui(Path(files)))
    live = next(r for r in results if r.get("scenario", "").startswith("live"))
    frozen = next(r for r in results if r.get("scenario") == "frozen table")
    live["median_over_frozen"] = round(
        live["key_to_frame_ms_median"] / frozen["key_to_frame_ms_median"], 2
    )
    return results


def main() -> int:
    tune_interpreter()  # as `flightdeck run` does before it opens the TUI
    results = asyncio.run(run())
    print(table(results))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "bench_tui.json").write_text(json.dumps(results, indent=2) + "\n")
    print(json.dumps(results))  # last line: read by tests/bench/run.py
    return 0


if __name__ == "__main__":
    sys.exit(main())
