"""The route gauges: hidden until `r`, then per route in flight against the cap, 429s, pause,
cache ratio and rpm/tpm headroom; from a built snapshot, a real sim engine, and rows alone."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import MappingProxyType

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.inputs.settings import Settings, default_sim_route
from flightdeck.engine.inputs.tasks import Batch
from flightdeck.engine.model import RouteHeadroom, RouteLimit, Snapshot, Usage
from flightdeck.engine.records.meter import route_totals
from flightdeck.tui.widgets.routes import NOT_STORED, RouteRows, routes_text
from tui_fakes import NOW, StaticView
from tui_support import SIZE, app_for, held, make_tasks, until

from helpers import Hold


def _snapshot(tmp_path: Path, routes: tuple[RouteHeadroom, ...]) -> Snapshot:
    view = StaticView(tmp_path)
    rows = tuple(
        dataclasses.replace(r, usage=Usage(600, 50, 300, 100)) if r.seq in (1, 2) else r
        for r in view.rows
    )
    return dataclasses.replace(view.snapshot(), children=rows, routes=routes)


def test_the_panel_reads_each_routes_gauges_from_a_snapshot(tmp_path: Path) -> None:
    sim = RouteHeadroom(
        route="sim",
        remaining_requests=20,
        remaining_tokens=90_000,
        reset_requests_s=5.0,
        reset_tokens_s=1.0,
        paused_until=NOW + 2.5,
        observed_ts=NOW - 2.0,
        rpm=RouteLimit(240, "learned"),
        tpm=RouteLimit(100_000, "configured"),
        rate_limited_1m=7,
        banked_requests=3.7,
        banked_tokens=-1500.4,
        alive=3,
        max_concurrent=3,
    )
    hostile = RouteHeadroom(route="[bold]evil\x1b[31m\nroute", adaptive_concurrency=2, alive=1)
    snap = _snapshot(tmp_path, (sim, hostile))
    lines = routes_text(snap).plain.splitlines()
    assert lines[0].startswith("routes")
    assert lines[1] == "[bold]evil route  in flight 1/2 adapting to 429s  429s/min 0  cache —"
    # rows 1 and 2 read 300 from the cache of 1000 read; the others read only fresh input
    fresh = sum(r.usage.input_tokens for r in snap.children if r.seq not in (1, 2))
    ratio = 600 / (2 * 1000 + fresh)
    assert lines[2] == (
        f"sim sim-1  in flight 3/3 max_concurrent  paused 2.5s  429s/min 7  cache {ratio:.0%}"
        "  rpm 240 learned · ours 3 banked · server 20 left (resets in 3s)"
        "  tpm 100000 configured · ours 1.5k owed · server 90.0k left (resets in 0s)"
    )
    assert len(lines) == 3  # live: no "not stored" line


def test_without_the_owners_gauges_the_panel_counts_from_the_rows(tmp_path: Path) -> None:
    snap = _snapshot(tmp_path, ())  # attached: Snapshot.routes is not stored
    lines = routes_text(snap).plain.splitlines()
    running = snap.totals.running
    assert lines[1].startswith(f"sim sim-1  in flight {running}  cache ")
    assert "429s" not in lines[1] and "rpm" not in lines[1]
    assert lines[2] == NOT_STORED


def test_the_cache_ratio_is_reads_over_everything_read() -> None:
    assert RouteRows("m").cache_ratio is None
    assert RouteRows("m", 0, 50, 150, 50).cache_ratio == 0.6
    assert RouteRows("m", 0, 10, 0, 0).cache_ratio == 0.0


@pytest.mark.slow
@pytest.mark.anyio
async def test_r_opens_the_route_panel_on_a_live_engine(tmp_path: Path, hold: Hold) -> None:
    # Held children: two are seen running side by side, and the batch is stopped once the
    # prompt cache has been read (and billed, by a second call: a first call wrote it).
    route = default_sim_route(**held(hold))
    route = dataclasses.replace(route, max_concurrent=2)
    settings = Settings(routes=MappingProxyType({"sim": route}))
    tasks = make_tasks([f"review PR {i}" for i in range(3)])
    engine = Engine(Batch("routes", tasks), settings, state_dir=tmp_path, max_concurrent=4)
    app = app_for(engine)
    try:
        async with app.run_test(size=SIZE) as pilot:
            panel = app.main.query_one("#routes")
            engine.start()
            assert not panel.display  # hidden until asked for
            await pilot.press("r")
            assert panel.display

            def text() -> str:
                return str(panel.render())

            await until(pilot, lambda: "in flight 2/2 max_concurrent" in text(), "2 of 2")
            # Whichever of c1 and c2 opened its first call first writes the cache, readable once
            # that call streams: with c1's calls alone let go, a held c2 that won the race (on a
            # loaded machine) kept it unreadable. The writer's own second call reads it.
            for child in ("c1", "c2"):
                hold.release(child, 0)
                hold.release(child, 1)
            await until(
                pilot,
                lambda: engine.snapshot().totals.usage.cache_read_tokens > 0,
                "the sim's prompt cache read",
            )
            engine.stop_all()
            await until(pilot, lambda: engine.snapshot().totals.done == 3, "the batch stopped")
            (totals,) = route_totals(engine.snapshot().children)
            usage = totals.totals.usage  # the meter's own sums: the panel counts apart
            ratio = usage.cache_read_tokens / usage.prompt_tokens
            assert ratio > 0
            await until(
                pilot,
                lambda: f"in flight 0/2 max_concurrent  429s/min 0  cache {ratio:.0%}" in text(),
                "the stopped route's gauges",
            )
            await pilot.press("r")
            assert not panel.display
    finally:
        engine.close()
