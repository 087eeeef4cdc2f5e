"""The attached view has the in-process view's figures: the owner (a real `flightdeck run
--headless` process) publishes what its rows do not keep, and the view reads it with them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.attached.store import StoreReader, build_report
from flightdeck.engine.model import BatchStatus, ChildRow, ChildStatus, Snapshot
from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.fmt import fmt_cost
from flightdeck.tui.output import summary_table
from rich.console import Console
from test_attach import OPTIONS
from tui_support import SIZE, until, view_when_ready

from helpers import summary_of

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

PY = json.dumps(sys.executable)

# Replies of 4 tokens a second: a first call streams for seconds before anything is billed.
# A 429 now and then (seeded), with a Retry-After long enough to be seen. And a command route
# whose process takes no steer.
CONFIG = f"""
[engine]
default_route = "sim"

[routes.sim]
time_scale = 1.0
latency_ms = 50
tokens_per_s = 4
tool_turns = 1
error_rate = 0.5
retry_after_s = 3
seed = 3

[routes.cli]
provider = "command"
model = "sleeper"
argv = [{PY}, "-c", "import time; time.sleep(120)"]
"""


def owner(
    folder: Path, config: str, tasks: list[dict[str, object]]
) -> tuple[subprocess.Popen[str], str]:
    """A real owner process on these tasks; its batch id once it has started."""
    (folder / "flightdeck.toml").write_text(config, encoding="utf-8")
    lines = "".join(json.dumps(t) + "\n" for t in tasks)
    (folder / "tasks.jsonl").write_text(lines, encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, "-m", "flightdeck.tui.cli", "run", "tasks.jsonl", "--headless"],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert process.stdout is not None
    first = process.stdout.readline()
    assert first.startswith("batch "), first
    return process, first.split()[1]


def streaming_first_call(snap: Snapshot) -> list[ChildRow]:
    """Rows of children whose first call streams: nothing billed yet, tokens in flight."""
    return [
        r
        for r in snap.children
        if r.status is ChildStatus.RUNNING and r.usage.total == 0 and r.in_flight.output_tokens
    ]


def stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
    assert process.stdout is not None
    process.stdout.close()


async def test_the_attached_view_shows_what_only_the_owner_knows(tmp_path: Path) -> None:
    tasks: list[dict[str, object]] = [
        {"id": f"c{i}", "goal": f"Review item {i}", "max_turns": 4} for i in range(1, 5)
    ]
    tasks.append({"id": "k1", "goal": "sleep", "route": "cli"})
    process, batch_id = owner(tmp_path, CONFIG, tasks)
    view = view_when_ready(tmp_path / ".flightdeck" / "flightdeck.db", batch_id, poll_s=0.05)
    try:
        app = FlightdeckApp(view, OPTIONS)
        async with app.run_test(size=SIZE) as pilot:
            table = app.main.table

            def shown_streaming() -> bool:
                # In the row the screen shows: tokens and a cost before any is billed.
                snap = app.main.snapshot
                rows = streaming_first_call(snap) if snap is not None else []
                return any(
                    table.displayed(r.id, "tokens") not in ("0/0", "")
                    and r.in_flight_cost_usd
                    and table.displayed(r.id, "cost") != "$0.00"
                    for r in rows
                )

            await until(pilot, shown_streaming, "a first call's tokens and cost, streaming")
            snap = view.snapshot()
            assert snap.totals.in_flight.output_tokens > 0  # the meter counts them too

            def retry_notice() -> bool:
                return any(r.activity.retry_reason for r in view.snapshot().children)

            await until(pilot, retry_notice, "a child's retry notice (a 429 it waits out)")

            def gauges() -> bool:
                sim = {hr.route: hr for hr in view.snapshot().routes}.get("sim")
                return sim is not None and sim.rate_limited_1m > 0

            await until(pilot, gauges, "the sim route's 429s in its gauge")
            k1 = view.snapshot().child("k1")
            assert k1 is not None and not k1.steerable  # a process that takes no steer
            c1 = view.snapshot().child("c1")
            assert c1 is not None and c1.steerable
    finally:
        stop(process)
        view.close()


def test_an_attached_summary_prints_the_cache_savings_the_report_has(tmp_path: Path) -> None:
    # Issue 29: after an attached run the summary printed `cache saved $0.00` where `report`
    # said $0.0268.
    quick = "[routes.sim]\ntime_scale = 0.01\n"
    tasks: list[dict[str, object]] = [{"id": f"c{i}", "goal": "Review item"} for i in range(6)]
    process, batch_id = owner(tmp_path, quick, tasks)
    assert process.wait(60) == 0
    stop(process)
    db = tmp_path / ".flightdeck" / "flightdeck.db"
    view = view_when_ready(db, batch_id, poll_s=0.05)
    snap = view.snapshot()
    view.close()
    assert snap.status is BatchStatus.COMPLETED
    with StoreReader(db) as reader:
        report = build_report(reader, batch_id)
    saved = Decimal(str(report["totals"]["cache_saved_usd"]))  # a JSON number
    assert saved > 0 and snap.totals.cache_saved_usd == saved
    console = Console(width=160, record=True, color_system=None)
    console.print(summary_table(snap))
    header, *rows = summary_of(console.export_text().splitlines())
    total = dict(zip(header, rows[-1], strict=True))
    assert total["cache saved"] == fmt_cost(saved) and fmt_cost(saved) != fmt_cost(Decimal(0))
