"""Triage: G groups the table by task group, status, route, tool or error signature (headers
that count and cost their members, fold, and act on them), and outliers are marked."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
from pathlib import Path
from types import MappingProxyType

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.inputs.settings import Settings, default_sim_route
from flightdeck.engine.inputs.tasks import Batch, Task
from flightdeck.engine.model import ChildRow, ChildStatus
from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.screens.dialogs import ConfirmStopDialog, SteerDialog
from flightdeck.tui.screens.main import MainScreen, UiOptions
from flightdeck.tui.widgets.children import ChildrenTable
from flightdeck.tui.widgets.lines import GroupHeader
from flightdeck.tui.widgets.rows import GroupBy, SortOrder
from flightdeck.tui.widgets.status import StatusBar
from tui_fakes import StaticView, child, frozen_clock
from tui_support import SIZE, app_for, filter_rows, held, on_screen, until, view_when_ready

from helpers import HANG_S, Hold

pytestmark = pytest.mark.anyio

RUN = (sys.executable, "-m", "flightdeck.tui.cli", "run", "tasks.jsonl", "--headless")
RATE = "<n>, retry in <n>s (throttled <n>s of <n>s)"
TIMEOUT = "timeout after <n>s on <id>"


def _rows(folder: Path) -> tuple[ChildRow, ...]:
    def row(seq: int, status: ChildStatus, **fields: object) -> ChildRow:
        route = str(fields.pop("route", "sim"))
        group = fields.pop("group", None)
        base = child(seq, f"task {seq}", status, folder=folder, **fields)  # type: ignore[arg-type]
        return dataclasses.replace(base, route=route, model=route, group=group)

    retry = "429, retry in {}s (throttled {}s of 600s)"
    return (
        row(1, ChildStatus.RUNNING, tool="read_file", group="security", cost="0.0100",
            tokens=(1000, 100), started=100.0, last=130.0),
        row(2, ChildStatus.RUNNING, route="claude", retrying=True, text=retry.format(3.2, 4),
            group="security", cost="0.0020", tokens=(900, 90), started=110.0, last=131.0),
        row(3, ChildStatus.RUNNING, route="claude", retrying=True, text=retry.format(1.0, 12),
            cost="0.0030", tokens=(800, 80), started=111.0, last=132.0),
        row(4, ChildStatus.FAILED, error="timeout after 30s on req_8f3a2b", group="docs",
            cost=None, tokens=(700, 70), started=90.0, finished=120.0),
        row(5, ChildStatus.FAILED, error="timeout after 45s on req_99ffee", cost="0.0001",
            tokens=(600, 60), started=95.0, finished=125.0),
        # Its tokens are over 3x the batch's median: an outlier.
        row(6, ChildStatus.COMPLETED, cost="0.0400", tokens=(9000, 900), started=99.0,
            finished=129.0),
        row(7, ChildStatus.QUEUED),
    )  # fmt: skip


def _app(folder: Path) -> tuple[FlightdeckApp, StaticView]:
    view = StaticView(folder, _rows(folder))
    return FlightdeckApp(view, UiOptions(clock=frozen_clock, cursor_blink=False)), view


def _status_text(app: FlightdeckApp) -> str:
    return str(app.main.query_one("#status", StatusBar).render())


def _headers(table: ChildrenTable) -> list[str]:
    return [table.header_text(e) for e in table.lines if isinstance(e, GroupHeader)]


# grouping -> each header's text, then each group's members in the batch order
EXPECTED: dict[GroupBy, list[tuple[str, list[str]]]] = {
    GroupBy.GROUP: [
        ("▾ docs  1 child: 1 ✗  $?", ["review-04"]),
        ("▾ security  2 children: 2 ●  $0.012", ["review-01", "review-02"]),
        ("▾ no group  4 children: 1 ✓ 1 ✗ 1 ● 1 ○  $0.0431", ["review-03", "review-05",
                                                             "review-06", "review-07"]),
    ],
    GroupBy.STATUS: [
        # a cost unknown beside known ones: what is known and more (`+?`), as the meter sums it
        ("▾ failed  2 children: 2 ✗  $0.0001+?", ["review-04", "review-05"]),
        ("▾ retrying  2 children: 2 ●  $0.005", ["review-02", "review-03"]),
        ("▾ running  1 child: 1 ●  $0.01", ["review-01"]),
        ("▾ queued  1 child: 1 ○  $0.00", ["review-07"]),
        ("▾ completed  1 child: 1 ✓  $0.04", ["review-06"]),
    ],
    GroupBy.ROUTE: [
        ("▾ claude  2 children: 2 ●  $0.005", ["review-02", "review-03"]),
        ("▾ sim  5 children: 1 ✓ 2 ✗ 1 ● 1 ○  $0.0501+?", ["review-01", "review-04",
                                                          "review-05", "review-06", "review-07"]),
    ],
    GroupBy.TOOL: [
        ("▾ read_file  1 child: 1 ●  $0.01", ["review-01"]),
        ("▾ no tool  6 children: 1 ✓ 2 ✗ 2 ● 1 ○  $0.0451+?", ["review-02", "review-03",
                                                             "review-04", "review-05",
                                                             "review-06", "review-07"]),
    ],
    GroupBy.ERROR: [
        (f"▾ {RATE}  2 children: 2 ●  $0.005", ["review-02", "review-03"]),
        (f"▾ {TIMEOUT}  2 children: 2 ✗  $0.0001+?", ["review-04", "review-05"]),
        ("▾ no error  3 children: 1 ✓ 1 ● 1 ○  $0.05", ["review-01", "review-06",
                                                        "review-07"]),
    ],
}  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("by", list(GroupBy))
async def test_each_grouping_heads_counts_costs_folds_and_tags_its_groups(
    tmp_path: Path, by: GroupBy
) -> None:
    app, view = _app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        table = app.main.table
        await until(pilot, lambda: len(table.shown) == 7, "rows")
        table.set_order(SortOrder.BATCH)
        table.focus()
        while table.model.grouping is not by:  # G cycles: off, group, status, route, tool, error
            await pilot.press("G")
        assert f"grouped by {by.value}" in _status_text(app)
        expected = EXPECTED[by]
        assert _headers(table) == [text for text, _ in expected]
        headers = [e for e in table.lines if isinstance(e, GroupHeader)]
        for header, (_, members) in zip(headers, expected, strict=True):
            assert table.group_members(header) == members
            start = table.lines.index(header)  # its members follow it, in the sort order
            assert list(table.lines[start + 1 : start + 1 + len(members)]) == members
        assert len(table.shown) == 7  # headers are not children
        # The header renders as it reads (line 0 is the column header).
        first = headers[0]
        assert table.render_line(1).text.strip() == expected[0][0]

        table.pinned_top = False
        assert table.select(first)
        await pilot.pause()
        detail = str(app.main.query_one("#detail").render())
        assert detail.startswith(f"{by.value} {expected[0][0]}")
        await pilot.press("enter")  # fold: only its header stays
        assert table.header_text(first).startswith("▸ ")
        assert not set(expected[0][1]) & set(table.shown)
        assert table.selected_header == first
        await pilot.press("space")  # a header tags every member, folded or not
        assert table.tagged == set(expected[0][1])
        table.select(first)  # space moved the cursor down
        await pilot.press("space")
        assert table.tagged == set()
        table.select(first)
        await pilot.press("enter")  # unfold
        assert set(expected[0][1]) <= set(table.shown)

        # s and x on a header act on its live members only; the rest are counted as ended.
        live = [i for i in expected[0][1] if table.rows_by_id[i].status.live]
        if live:
            await pilot.press("x")
            await until(pilot, lambda: on_screen(app, ConfirmStopDialog), "dialog")
            dialog = app.screen
            assert isinstance(dialog, ConfirmStopDialog)
            assert dialog.child_ids == live
            await pilot.press("x")
            await until(pilot, lambda: on_screen(app, MainScreen), "closed")
            assert view.stopped == [live]
        else:
            assert app.main.check_action("stop", ()) is None  # every member ended: says why

        while table.model.grouping is not None:  # and round to not grouped: rows only
            await pilot.press("G")
        assert not any(isinstance(e, GroupHeader) for e in table.lines)
        assert "grouped by" not in _status_text(app)


async def test_a_grouping_follows_the_sort_order_within_its_groups(tmp_path: Path) -> None:
    app, _ = _app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        table = app.main.table
        await until(pilot, lambda: len(table.shown) == 7, "rows")
        table.set_grouping(GroupBy.ROUTE)
        table.set_order(SortOrder.TOKENS)  # the o orders stay: most tokens first in each
        await pilot.pause()
        sim = GroupHeader(GroupBy.ROUTE, "sim")
        start = table.lines.index(sim)
        assert list(table.lines[start + 1 :]) == [
            "review-06",
            "review-01",
            "review-04",
            "review-05",
            "review-07",
        ]


async def test_a_child_that_changes_groups_moves_under_its_new_header(tmp_path: Path) -> None:
    app, view = _app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        table = app.main.table
        await until(pilot, lambda: len(table.shown) == 7, "rows")
        table.set_grouping(GroupBy.ERROR)
        await pilot.pause()
        rows = list(view.rows)
        rows[0] = dataclasses.replace(
            rows[0],
            status=ChildStatus.FAILED,
            error="timeout after 99s on req_abc123",
            activity=dataclasses.replace(rows[0].activity, current_tool=None),
        )
        view.rows = tuple(rows)
        app.main.poll()
        await pilot.pause()
        timeout = GroupHeader(GroupBy.ERROR, TIMEOUT)
        assert table.group_members(timeout) == ["review-01", "review-04", "review-05"]
        assert table.header_text(timeout).startswith(f"▾ {TIMEOUT}  3 children: 3 ✗")
        start = table.lines.index(timeout)
        assert "review-01" in table.lines[start + 1 : start + 4]
        no_error = GroupHeader(GroupBy.ERROR, None)
        assert "review-01" not in table.group_members(no_error)


async def test_outliers_are_marked_and_kept_by_is_outlier(tmp_path: Path) -> None:
    app, _ = _app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        table = app.main.table
        await until(pilot, lambda: len(table.shown) == 7, "rows")
        assert table.displayed("review-06", "tokens") == "▲9.0k/900"
        assert table.displayed("review-01", "tokens") == "1.0k/100"
        table.pinned_top = False
        table.select("review-06")
        await pilot.pause()
        detail = str(app.main.query_one("#detail").render())
        assert "▲ outlier: tokens 10.6× the batch median" in detail
        await filter_rows(pilot, "is:outlier")
        await until(pilot, lambda: list(table.shown) == ["review-06"], "outliers kept")


@pytest.mark.slow
async def test_x_on_an_error_header_stops_every_child_failing_the_same_way(
    tmp_path: Path, hold: Hold
) -> None:
    """The 429 route's children retry with differently-numbered notices: one header, one x."""
    tasks = (
        Task(id="f1", goal="x", seq=0, route="flaky"),
        Task(id="ok1", goal="x", seq=1),
        Task(id="f2", goal="x", seq=2, route="flaky"),
        Task(id="f3", goal="x", seq=3, route="flaky"),
    )
    routes = {
        "sim": default_sim_route(**held(hold)),
        "flaky": default_sim_route("flaky", error_rate=1.0, retry_after_s=0.5, time_scale=1.0),
    }
    engine = Engine(
        Batch("errors", tasks),
        Settings(routes=MappingProxyType(routes)),
        state_dir=tmp_path,
        max_concurrent=4,
    )
    app = app_for(engine)
    try:
        async with app.run_test(size=SIZE) as pilot:
            engine.start()
            table = app.main.table
            await until(pilot, lambda: len(table.shown) == 4, "rows")
            table.set_grouping(GroupBy.ERROR)
            header = GroupHeader(GroupBy.ERROR, RATE)
            await until(
                pilot, lambda: table.group_members(header) == ["f1", "f2", "f3"], "all retrying"
            )
            table.pinned_top = False
            assert table.select(header)
            await pilot.pause()
            await pilot.press("x")
            await until(pilot, lambda: on_screen(app, ConfirmStopDialog), "dialog")
            dialog = app.screen
            assert isinstance(dialog, ConfirmStopDialog)
            assert dialog.child_ids == ["f1", "f2", "f3"]
            await pilot.press("x")

            def status(child_id: str) -> ChildStatus:
                return next(r.status for r in engine.snapshot().children if r.id == child_id)

            await until(
                pilot,
                lambda: {status(i) for i in ("f1", "f2", "f3")} == {ChildStatus.STOPPED},
                "the failing ones stopped",
            )
            assert status("ok1") is ChildStatus.RUNNING
    finally:
        engine.close()


ATTACHED_CONFIG = """
[budget]
max_depth = 1

[routes.sim]
time_scale = 0.01
tool_turns = 6
delegate = true
delegate_rate = 1.0
delegates = 1

[routes.broken]
provider = "sim"
fail_rate = 1.0
"""


@pytest.mark.slow
async def test_attached_tui_groups_by_error_and_tool_and_stops_a_tools_children(
    tmp_path: Path,
) -> None:
    """An owner in another process; the TUI reads the store: errors and tools come through,
    and x on a header reaches the owner through the requests table."""
    hold = Hold(tmp_path / "hold")
    config = ATTACHED_CONFIG.replace("[routes.sim]\n", "[routes.sim]\n" + hold.toml())
    (tmp_path / "flightdeck.toml").write_text(config, encoding="utf-8")
    hold.release("s1", 0)  # each s child's first call delegates; the delegates are held
    hold.release("s2", 0)
    tasks = [f'{{"id": "b{i}", "goal": "Break {i}", "route": "broken"}}' for i in (1, 2)]
    tasks += [f'{{"id": "s{i}", "goal": "Review {i}"}}' for i in (1, 2)]
    (tmp_path / "tasks.jsonl").write_text("\n".join(tasks) + "\n", encoding="utf-8")
    state = tmp_path / "state"
    owner = subprocess.Popen(
        [*RUN, "--state-dir", str(state)],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    try:
        assert owner.stdout is not None
        first = owner.stdout.readline()  # "batch <id>", once it has started
        assert first.startswith("batch "), first
        view = view_when_ready(state / "flightdeck.db", first.split()[1])
        app = FlightdeckApp(view, UiOptions(poll_s=0.05, cursor_blink=False))
        async with app.run_test(size=SIZE) as pilot:
            table = app.main.table
            await until(pilot, lambda: len(table.shown) >= 4, "rows from the store")
            table.set_order(SortOrder.BATCH)
            table.set_grouping(GroupBy.ERROR)
            fatal = GroupHeader(
                GroupBy.ERROR, "FatalError: sim: simulated fatal error (invalid request)"
            )
            await until(pilot, lambda: table.group_members(fatal) == ["b1", "b2"], "errors read")
            assert table.header_text(fatal).startswith(f"▾ {fatal.name}  2 children: 2 ✗")
            # Each s child waits on its delegate (held) in the `delegate` tool.
            table.set_grouping(GroupBy.TOOL)
            waiting = GroupHeader(GroupBy.TOOL, "delegate")
            await until(pilot, lambda: table.group_members(waiting) == ["s1", "s2"], "tools read")
            table.pinned_top = False
            assert table.select(waiting)
            await pilot.pause()
            await pilot.press("x")
            await until(pilot, lambda: on_screen(app, ConfirmStopDialog), "dialog")
            dialog = app.screen
            assert isinstance(dialog, ConfirmStopDialog)
            assert dialog.child_ids == ["s1", "s2"]
            await pilot.press("x")

            def ended(child_id: str) -> bool:
                row = view.snapshot().child(child_id)
                return row is not None and row.status is ChildStatus.STOPPED

            await until(pilot, lambda: ended("s1") and ended("s2"), "stopped by the owner")
        view.close()
    finally:
        if owner.poll() is None:
            owner.send_signal(signal.SIGTERM)
            owner.wait(HANG_S)
        assert owner.stdout is not None
        owner.stdout.close()


def test_grouped_by_status_every_status_has_its_place_in_the_attention_order() -> None:
    # A status missing from the order sorted after `stopped`: paused children went last.
    from flightdeck.engine.model import ChildStatus
    from flightdeck.tui.widgets.rows import GroupBy, group_rank

    ranks = {s.value: group_rank(GroupBy.STATUS, s.value) for s in ChildStatus}
    ranks["retrying"] = group_rank(GroupBy.STATUS, "retrying")
    order = sorted(ranks, key=lambda s: ranks[s])
    assert order.index("paused") < order.index("queued") < order.index("completed")
    assert len({rank[1] for rank in ranks.values()}) == len(ranks)  # none shares "not listed"


async def test_a_child_put_under_the_cursor_keeps_it_as_rows_move(tmp_path: Path) -> None:
    # select() is the operator's pick (a click, follow, a test standing for a key): the cursor
    # must stay on that child when the order changes, not go back to the top row, or the next
    # key (x, p) acts on another child. It went to the top until a key had been pressed.
    app, view = _app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        table = app.main.table
        await until(pilot, lambda: len(table.shown) == 7, "rows")
        picked = table.shown[3]
        assert table.select(picked) and table.selected_id == picked
        rows = list(view.rows)
        top = next(i for i, r in enumerate(rows) if r.id == table.shown[-1])
        rows[top] = dataclasses.replace(rows[top], status=ChildStatus.FAILED, error="boom")
        view.rows = tuple(rows)
        app.main.poll()
        await pilot.pause()
        assert table.shown[0] == rows[top].id  # a failure went to the top
        assert table.selected_id == picked


async def test_the_top_row_acted_on_keeps_the_cursor_when_it_moves_down(tmp_path: Path) -> None:
    # Found by an audit: the cursor stays pinned to the top row until a key moves it. A steer
    # to that child made it stop looping and move down; the cursor stayed at the top, on
    # another child, and the next `s` or `x` would have acted on that one.
    app, view = _app(tmp_path)
    running = ChildStatus.RUNNING  # none failed yet: the top row is a running child
    view.rows = tuple(dataclasses.replace(r, status=running, error=None) for r in view.rows)
    async with app.run_test(size=SIZE) as pilot:
        table = app.main.table
        await until(pilot, lambda: len(table.shown) == 7, "rows")
        acted = table.selected_id
        assert acted == table.shown[0]
        await pilot.press("s")
        await until(pilot, lambda: on_screen(app, SteerDialog), "steer dialog")
        await pilot.press(*"wrap up", "enter")
        await until(pilot, lambda: view.steered, "the steer sent")
        assert view.steered[0][0] == [acted]
        rows = list(view.rows)  # another child fails: it goes to the top
        moved = next(i for i, r in enumerate(rows) if r.id == table.shown[-1])
        rows[moved] = dataclasses.replace(rows[moved], status=ChildStatus.FAILED, error="boom")
        view.rows = tuple(rows)
        app.main.poll()
        await pilot.pause()
        assert table.shown[0] == rows[moved].id
        assert table.selected_id == acted
