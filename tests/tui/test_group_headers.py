"""The group order's headers: counts and cost per group (a task group's as its completion unit
is counted), fold and unfold, stop and steer a group."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.attached.view import StoreView
from flightdeck.engine.inputs.settings import Budget
from flightdeck.engine.inputs.tasks import Batch, Schedule, Task
from flightdeck.engine.model import ChildRow, ChildStatus, GroupFinished
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.report import build_report
from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.fmt import fmt_cost
from flightdeck.tui.output import completion_text
from flightdeck.tui.screens import targets
from flightdeck.tui.screens.dialogs import ConfirmPauseDialog, ConfirmStopDialog, SteerDialog
from flightdeck.tui.screens.main import MainScreen, UiOptions
from flightdeck.tui.widgets.children import ChildrenTable
from flightdeck.tui.widgets.headers import GroupSummary, group_header, group_summary
from flightdeck.tui.widgets.lines import ChildLines, GroupHeader
from flightdeck.tui.widgets.rows import GroupBy, SortOrder
from flightdeck.tui.widgets.status import StatusBar
from tui_fakes import StaticView, child, frozen_clock
from tui_support import FAST, SIZE, EngineFactory, app_for, held, on_screen, until

from helpers import Hold, settings, sim_route

pytestmark = pytest.mark.anyio


def _rows(folder: Path) -> tuple[ChildRow, ...]:
    def row(seq: int, status: ChildStatus, group: str | None, cost: str | None) -> ChildRow:
        base = child(seq, f"task {seq}", status, folder=folder, cost=cost, started=1.0)
        return dataclasses.replace(base, group=group)

    return (
        row(1, ChildStatus.COMPLETED, "security", "0.0100"),
        row(2, ChildStatus.RUNNING, "security", "0.0020"),
        row(3, ChildStatus.QUEUED, None, "0"),
        row(4, ChildStatus.COMPLETED, "security", "0.0003"),
        row(5, ChildStatus.FAILED, "docs", None),
    )


def test_a_header_counts_its_members_by_status_and_sums_their_cost(tmp_path: Path) -> None:
    rows = _rows(tmp_path)
    security = [r for r in rows if r.group == "security"]
    text, _ = group_header("security", group_summary(security, ()), folded=False)
    assert text == "▾ security  3 children: 2 ✓ 1 ●  $0.0123"
    docs = [r for r in rows if r.group == "docs"]
    text, _ = group_header("docs", group_summary(docs, ()), folded=True)
    assert text == "▸ docs  1 child: 1 ✗  $?"  # a price unknown: never guessed
    tagged = group_summary(security, {"review-01", "review-02"})
    assert group_header("security", tagged, folded=False) == (
        "▾ security  3 children: 2 ✓ 1 ●  $0.0123  ◆ 2 tagged",
        "bold magenta",
    )
    # An untrusted name reaches the screen as one plain line, its escapes and newlines gone.
    text, _ = group_header("[b]x\x1b[31m\ny", GroupSummary(), folded=False)
    assert "\x1b" not in text and "\n" not in text and text.startswith("▾ [b]x")


def test_a_header_counts_superseded_delegates_apart_as_the_meter_does(tmp_path: Path) -> None:
    # Found walking the fleet: a retried parent's first delegates, stopped with it, read
    # `8 children: 6 ✓ 2 ■` under the meter's `■ 0 stopped` and the report's `stopped 0`.
    def row(seq: int, status: ChildStatus, superseded: bool = False) -> ChildRow:
        base = child(seq, f"task {seq}", status, folder=tmp_path, cost="0.0010", started=1.0)
        return dataclasses.replace(base, superseded=superseded)

    rows = [
        row(1, ChildStatus.COMPLETED),
        row(2, ChildStatus.STOPPED, superseded=True),
        row(3, ChildStatus.STOPPED, superseded=True),
        row(4, ChildStatus.STOPPED),
    ]
    text, _ = group_header("no group", group_summary(rows, ()), folded=False)
    assert text == "▾ no group  4 children: 1 ✓ 1 ■, 2 superseded  $0.004"
    text, _ = group_header("no group", group_summary(rows[1:3], ()), folded=False)
    assert text == "▾ no group  2 children: 2 superseded  $0.002"


def test_the_lines_place_each_row_in_its_unit_in_whatever_order_the_rows_come(
    tmp_path: Path,
) -> None:
    # A delegate is placed after its parent (model/units.py), even listed before it; a wave
    # (not one of the batch's own tasks) and its delegate are in no unit, whatever their group.
    def row(seq: int, name: str, parent: str | None = None) -> ChildRow:
        base = child(seq, name, ChildStatus.COMPLETED, folder=tmp_path, cost="0.0010")
        return dataclasses.replace(base, id=name, group="g", parent=parent)

    rows = [row(4, "w-w1.1", "w-w1"), row(3, "a.1", "a"), row(2, "w-w1"), row(1, "a")]
    lines = ChildLines()
    lines.take(rows, 0.0, own=frozenset({"a"}))
    lines.set_grouping(GroupBy.GROUP)
    unit, loose = GroupHeader(GroupBy.GROUP, "g"), GroupHeader(GroupBy.GROUP, None)
    assert lines.group_members(unit) == ["a", "a.1"]
    assert lines.group_members(loose) == ["w-w1", "w-w1.1"]
    assert lines.header_text(unit) == "▾ g  1 child: 1 ✓, 1 delegate  $0.002"
    assert lines.header_text(loose) == "▾ no group  2 children: 2 ✓  $0.002"
    assert lines.unit_of("a.1") == "g" and lines.unit_of("w-w1.1") is None


def status_shown(table: ChildrenTable, child_id: str) -> ChildStatus | None:
    row = table.rows_by_id.get(child_id)
    return row.status if row is not None else None


def _static_app(folder: Path) -> tuple[FlightdeckApp, StaticView]:
    view = StaticView(folder, _rows(folder))
    return FlightdeckApp(view, UiOptions(clock=frozen_clock, cursor_blink=False)), view


def _status_text(app: FlightdeckApp) -> str:
    return str(app.main.query_one("#status", StatusBar).render())


async def test_headers_lead_each_group_and_fold_to_themselves(tmp_path: Path) -> None:
    app, _ = _static_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        table = app.main.table
        await until(pilot, lambda: len(table.shown) == 5, "rows")
        table.set_order(SortOrder.BATCH)
        table.set_grouping(GroupBy.GROUP)
        await pilot.pause()
        security, docs = GroupHeader(GroupBy.GROUP, "security"), GroupHeader(GroupBy.GROUP, "docs")
        loose = GroupHeader(GroupBy.GROUP, None)
        assert list(table.lines) == [
            docs,
            "review-05",
            security,
            "review-01",
            "review-02",
            "review-04",
            loose,  # ungrouped last, under a header of their own
            "review-03",
        ]
        assert table.header_text(loose) == "▾ no group  1 child: 1 ○  $0.00"
        assert table.header_text(security) == "▾ security  3 children: 2 ✓ 1 ●  $0.0123"
        assert list(table.shown) == [
            "review-05",
            "review-01",
            "review-02",
            "review-04",
            "review-03",
        ]
        assert "5 of 5 shown" in _status_text(app)  # headers are not children
        # The header renders as it reads (line 0 is the column header).
        y = table.lines.index(security) + 1
        assert table.render_line(y).text.strip() == "▾ security  3 children: 2 ✓ 1 ●  $0.0123"

        table.pinned_top = False
        assert table.select(security)
        await pilot.pause()
        assert table.selected_id is None and table.selected_header == security
        assert app.main.transcript.child_id is None  # no member's transcript passed off as it
        detail = str(app.main.query_one("#detail").render())
        assert "security  3 children" in detail and "x stops its 1 live member" in detail

        await pilot.press("enter")  # fold
        assert list(table.lines) == [docs, "review-05", security, loose, "review-03"]
        assert table.header_text(security).startswith("▸ security  3 children")
        assert table.selected_header == security  # the cursor stays on the header
        assert list(table.shown) == ["review-05", "review-03"]
        assert "2 of 5 shown" in _status_text(app)
        await pilot.press("t")  # tag every visible child: a folded group's are not visible
        assert table.tagged == {"review-05", "review-03"}
        await pilot.press("t")
        await pilot.press("enter")  # unfold
        assert list(table.lines)[3:6] == ["review-01", "review-02", "review-04"]
        assert "5 of 5 shown" in _status_text(app)

        table.select("review-02")  # enter on a member folds its group, the cursor to its header
        await pilot.press("enter")
        assert table.selected_header == security and "review-02" not in table.shown
        await pilot.press("enter")

        await pilot.press("space")  # tagging a header tags its members
        assert table.tagged == {"review-01", "review-02", "review-04"}
        table.select(security)
        await pilot.press("space")
        assert table.tagged == set()

        table.set_grouping(None)  # not grouped: rows only, as before
        await pilot.pause()
        assert list(table.lines) == [f"review-0{i}" for i in range(1, 6)]
        assert app.main.check_action("fold", ()) is False


async def test_s_on_a_header_steers_the_groups_live_members(tmp_path: Path) -> None:
    app, view = _static_app(tmp_path)
    async with app.run_test(size=SIZE) as pilot:
        table = app.main.table
        await until(pilot, lambda: len(table.shown) == 5, "rows")
        table.set_order(SortOrder.BATCH)
        table.set_grouping(GroupBy.GROUP)
        table.pinned_top = False
        assert table.select(GroupHeader(GroupBy.GROUP, "security"))
        await pilot.pause()
        await pilot.press("s")
        await until(pilot, lambda: on_screen(app, SteerDialog), "steer dialog")
        dialog = app.screen
        assert isinstance(dialog, SteerDialog)
        assert dialog.child_ids == ["review-02"]  # the one of three still running
        assert dialog.heading == "Steer 1 child under group security (2 in the group have ended)"
        await pilot.press("escape")
        await until(pilot, lambda: on_screen(app, MainScreen), "dialog closed")
        table.select(GroupHeader(GroupBy.GROUP, "docs"))  # every member ended: the key says why
        await pilot.pause()
        assert app.main.check_action("stop", ()) is None
        assert view.steered == [] and view.stopped == []


async def test_x_on_a_header_stops_exactly_the_groups_live_members(
    engine_factory: EngineFactory, hold: Hold
) -> None:
    tasks = (
        Task(id="r1", goal="x", seq=0, group="security"),
        Task(id="solo", goal="x", seq=1),
        Task(id="r2", goal="x", seq=2, group="security"),
        Task(id="r3", goal="x", seq=3, group="security"),
        Task(id="d1", goal="x", seq=4, group="docs"),
    )
    engine = engine_factory(tasks, pool=5, sim=held(hold))
    app = app_for(engine)

    def status(child_id: str) -> ChildStatus:
        return next(r.status for r in engine.snapshot().children if r.id == child_id)

    async with app.run_test(size=SIZE) as pilot:
        table = app.main.table
        await until(pilot, lambda: all(status(t.id) is ChildStatus.RUNNING for t in tasks), "run")
        engine.stop(["r3"])  # a member that has ended before the group is stopped
        await until(pilot, lambda: status("r3") is ChildStatus.STOPPED, "r3 stopped")
        await until(pilot, lambda: status_shown(table, "r3") is ChildStatus.STOPPED, "r3 shown")
        table.set_order(SortOrder.BATCH)
        table.set_grouping(GroupBy.GROUP)
        table.pinned_top = False  # as a key press would: the cursor stays where it is put
        assert table.select(GroupHeader(GroupBy.GROUP, "security"))
        await until(pilot, lambda: app.main.check_action("stop", ()), "stop enabled")
        # Each dialog names the group as its header does ("Pause 2 children?" named none).
        await pilot.press("p")
        await until(pilot, lambda: on_screen(app, ConfirmPauseDialog), "pause dialog")
        dialog = app.screen
        assert isinstance(dialog, ConfirmPauseDialog)
        assert dialog.heading == "Pause 2 children under group security (1 in the group has ended)?"
        await pilot.press("escape")
        await until(pilot, lambda: on_screen(app, MainScreen), "pause dialog closed")
        await pilot.press("x")
        await until(pilot, lambda: on_screen(app, ConfirmStopDialog), "confirm dialog")
        dialog = app.screen
        assert isinstance(dialog, ConfirmStopDialog)
        assert dialog.child_ids == ["r1", "r2"]
        assert dialog.heading == "Stop 2 children under group security (1 in the group has ended)?"
        await pilot.press("x")
        await until(
            pilot, lambda: {status("r1"), status("r2")} == {ChildStatus.STOPPED}, "group stopped"
        )
        assert status("solo") is ChildStatus.RUNNING and status("d1") is ChildStatus.RUNNING
        await until(
            pilot,
            lambda: (
                "3 children: 3 ■  $" in table.header_text(GroupHeader(GroupBy.GROUP, "security"))
            ),
            "hdr",
        )


async def test_a_group_header_counts_its_unit_as_the_engine_report_and_headless_line_do(
    tmp_path: Path,
) -> None:
    # Found by an audit: grouped by task group, the table put every row naming the group under
    # its header and counted each as a child: a member's delegates (the engine counts them as
    # the unit's delegates, not its members) and a schedule's wave sharing the group and its
    # delegates (in no unit at all). `9 children: 9 ✓` where the report and the `▣ group` line
    # said 2 children, 2 completed, 4 delegates.
    route = dataclasses.replace(
        sim_route("sim", tool_turns=0, delegate_rate=1.0, delegates=2, **FAST), delegate=True
    )
    wave = (Task(id="w", goal="wave {wave}", seq=0, group="g"),)
    b = Batch(
        name="t",
        tasks=(
            Task(id="a", goal="a", seq=0, group="g"),
            Task(id="c", goal="c", seq=1),
            Task(id="b", goal="b", seq=2, group="g"),
        ),
        schedules=(Schedule(id="s", tasks=wave, every_s=3600, at_start=True),),
    )
    s = dataclasses.replace(settings(route, pool=3), budget=Budget(max_depth=1))
    engine = Engine(b, s, state_dir=tmp_path / "state")
    units: list[GroupFinished] = []
    engine.subscribe(lambda e: units.append(e) if isinstance(e, GroupFinished) else None)
    engine.start()
    unit = GroupHeader(GroupBy.GROUP, "g")
    loose = GroupHeader(GroupBy.GROUP, None)
    wave_rows = ["w-w1", "w-w1.1", "w-w1.2"]  # the wave and its delegates: in no unit

    def ended(table: ChildrenTable) -> bool:
        """Every child's final row shown, and the unit told (after its last row's commit)."""
        rows = table.rows_by_id.values()
        return bool(units) and len(rows) == 12 and all(r.status.terminal for r in rows)

    try:
        app = app_for(engine)
        async with app.run_test(size=SIZE) as pilot:
            table = app.main.table
            await until(pilot, lambda: ended(table), "every child ended, shown")
            table.set_order(SortOrder.BATCH)
            table.set_grouping(GroupBy.GROUP)
            await pilot.pause()
            [told] = units
            assert [m.id for m in told.members] == ["a", "b"] and len(told.delegates) == 4
            line = completion_text(told)  # the headless `▣ group` line
            assert "completed: 2/2 completed, 4 delegates" in line, line
            live = table.header_text(unit)
            assert live == f"▾ g  2 children: 2 ✓, 4 delegates  {fmt_cost(told.cost_usd)}"
            members = table.group_members(unit)
            assert sorted(members) == sorted(m.id for m in (*told.members, *told.delegates))
            assert set(table.group_members(loose)) == {"c", "c.1", "c.2", *wave_rows}
            # g tags a delegate's whole unit; a wave sharing the group is in none: nothing tagged.
            table.pinned_top = False
            table.select("a.1")
            await pilot.press("g")
            assert sorted(table.tagged) == sorted(members)
            await pilot.press("g")
            table.select("w-w1.1")
            assert targets.tag_group(table) == (
                "w-w1.1 is in no completion unit: a schedule's wave and its delegates are in none,"
                " not g's"
            )
            assert table.tagged == set()
        engine.stop_all()
        assert engine.wait(60)
        engine.flush()
        with StoreReader(engine.state_dir / "flightdeck.db") as reader:
            [g] = build_report(reader, engine.batch_id)["groups"]
        # The attached view of the same batch: its header says the same.
        view = StoreView(engine.state_dir / "flightdeck.db", engine.batch_id, poll_s=0.05)
        attached = FlightdeckApp(view, UiOptions(poll_s=0.05, cursor_blink=False))
        async with attached.run_test(size=SIZE) as pilot:
            table = attached.main.table
            await until(pilot, lambda: ended(table), "rows from the store")
            table.set_grouping(GroupBy.GROUP)
            await pilot.pause()
            read = table.header_text(unit)
            read_members = table.group_members(unit)
        view.close()
    finally:
        engine.close()
    assert g["children"] == 2 and g["completed"] == 2 and len(g["delegates"]) == 4
    assert fmt_cost(Decimal(str(g["cost_usd"]))) == fmt_cost(told.cost_usd)
    assert read == live  # attached, the same header
    unit_ids = [m["id"] for m in g["members"]] + [d["id"] for d in g["delegates"]]
    assert sorted(members) == sorted(read_members) == sorted(unit_ids)  # shown: what is counted


@pytest.mark.parametrize("grouped_first", [False, True])
def test_a_delegate_read_before_its_parent_link_joins_its_unit_once_linked(
    tmp_path: Path, grouped_first: bool
) -> None:
    # Attached, a delegate's row (add_queued) and its "delegate" event (its parent) are two
    # writes: a read between them has its row with no parent yet (reading.py relinks it at the
    # next). Placed then, it was in no unit for good: shown under `no group`, not its unit's.
    def row(seq: int, name: str, parent: str | None = None) -> ChildRow:
        base = child(seq, name, ChildStatus.RUNNING, folder=tmp_path, cost="0.0010")
        return dataclasses.replace(base, id=name, group="g", parent=parent)

    lines = ChildLines()
    if grouped_first:
        lines.set_grouping(GroupBy.GROUP)
    lines.take([row(1, "a")], 0.0, own=frozenset({"a"}))
    lines.take([row(1, "a"), row(2, "a.1")], 1.0, own=frozenset({"a"}))  # not linked yet
    lines.take([row(1, "a"), row(2, "a.1", "a")], 2.0, own=frozenset({"a"}))
    lines.set_grouping(GroupBy.GROUP)
    unit, loose = GroupHeader(GroupBy.GROUP, "g"), GroupHeader(GroupBy.GROUP, None)
    assert lines.unit_of("a.1") == "g"
    assert lines.group_members(unit) == ["a", "a.1"]
    assert lines.group_members(loose) == []
    assert lines.header_of("a.1") == unit
