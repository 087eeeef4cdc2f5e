"""A child whose cost turned unknown (an agent CLI's run stopped before it reported its turn)
keeps the part that was known spent: its tally, its figures, its row, the totals, and what the
table, the meter and the report show. Spent went down when a stop made a cost unknown."""

from __future__ import annotations

import dataclasses
import sqlite3
from decimal import Decimal
from pathlib import Path

from flightdeck.engine.agents.formats import Live, Report
from flightdeck.engine.api import parse_filter
from flightdeck.engine.attached.store import build_report, render_markdown
from flightdeck.engine.attached.view import StoreView
from flightdeck.engine.child.clitally import CliTally
from flightdeck.engine.child.progress import Progress
from flightdeck.engine.inputs.settings import Price, Route
from flightdeck.engine.model import BatchStatus, ChildRow, ChildStatus, GroupFinished, Usage
from flightdeck.engine.records import schema
from flightdeck.engine.records.meter import Meter, RowTally, totals_of
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.store import Store
from flightdeck.tui.commands import LS_COLUMNS, ls_cells
from flightdeck.tui.fmt import Cell, fmt_row_cost, fmt_spent
from flightdeck.tui.output import completion_text
from flightdeck.tui.widgets.headers import group_header, group_summary
from flightdeck.tui.widgets.rows import SortOrder, sort_key, subtree_costs, tree_cells

from test_requests import version_6_schema
from test_store import make_batch, make_child  # the store tests' row builders

TURN = Usage(input_tokens=500, output_tokens=300)
CALL = Usage(input_tokens=400, output_tokens=20)


def price(usage: Usage) -> Decimal:
    return Decimal(usage.input_tokens) / 10**6 + Decimal(usage.output_tokens) * 10 / 10**6


def test_a_codex_turn_cut_short_after_one_reported_keeps_that_one_known() -> None:
    tally = CliTally(Meter(), price, Usage(), Decimal(0), Decimal(0))
    tally.begin()
    tally.report(Report(TURN, Decimal("0.03")))
    tally.begin()  # the next turn: Codex reports nothing before its end
    assert (tally.cost, tally.known, tally.pending) == (Decimal("0.03"), Decimal("0.03"), True)
    assert tally.cut_short() is None  # nothing of the turn came: its cost is unknown
    assert tally.cost is None and tally.known == Decimal("0.03")
    tally.report(Report(TURN, Decimal("0.01")))  # a later run's turn (a steer's resume)
    assert tally.cost is None and tally.known == Decimal("0.04")


def test_a_claude_run_cut_before_its_first_message_keeps_the_turns_before() -> None:
    meter = Meter()
    tally = CliTally(meter, price, Usage(), Decimal(0), Decimal(0))
    tally.live(Live("m1", CALL))
    assert tally.known == price(CALL)  # billed as it streams
    tally.report(Report(CALL, Decimal("0.02")))
    tally.begin()
    assert tally.cut_short() is None
    assert tally.cost is None and tally.known == Decimal("0.02")
    assert meter.totals().cost_usd == Decimal("0.02")  # the budget's meter never lost it


def test_a_tally_carried_in_unknown_starts_from_the_part_known() -> None:
    # A retry, or an adopted process, of a child whose cost was unknown in part already.
    tally = CliTally(Meter(), price, TURN, None, Decimal("0.05"))
    tally.live(Live("m1", CALL))
    assert tally.cost is None and tally.known == Decimal("0.05") + price(CALL)


def test_the_figures_carry_the_known_part_through_a_carry_and_an_end_before_running() -> None:
    progress = Progress(lambda: 1.0)
    progress.spend(TURN, None, Decimal("0.03"))
    figures = progress.figures()
    assert figures.cost_usd is None and figures.known_usd == Decimal("0.03")
    again = Progress(lambda: 1.0)  # its next attempt, carrying the spend
    again.carry(figures.usage, figures.cost_usd, figures.known_usd, None)
    again.ended("stopped", ran=False)  # stopped before it ran: what it carried, no more
    after = again.figures()
    assert after.cost_usd is None and after.known_usd == Decimal("0.03")
    copy = Progress(lambda: 1.0)
    copy.follow(progress.mirror())  # as a child on a cluster worker sends its figures home
    assert copy.figures().known_usd == Decimal("0.03")


def test_the_totals_count_the_known_part_and_take_it_back_exactly() -> None:
    known = make_child(0, status=ChildStatus.COMPLETED, cost_usd=Decimal("0.05"))
    cut = make_child(1, status=ChildStatus.STOPPED, cost_usd=None, usage=TURN)
    cut = dataclasses.replace(cut, cost_floor_usd=Decimal("0.0262"))
    totals = totals_of([known, cut])
    assert (totals.cost_usd, totals.cost_unknown) == (Decimal("0.0762"), 1)
    assert fmt_spent(totals.cost_usd, totals.cost_unknown) == ("$0.0762", " (+1 unknown)")
    tally = RowTally()
    tally.add(cut)
    tally.remove(cut)
    assert tally.totals().cost_usd == 0 and tally.totals().cost_unknown == 0


def test_the_meter_counts_a_carried_unknown_cost_at_no_less_than_its_known_part() -> None:
    # On a priced route the meter priced the row's tokens instead: the part known was dropped
    # when they came to less (none at all: $0).
    route = Route(name="r", provider="command", model="cli", price=Price(Decimal(1), Decimal(10)))
    for usage, known, counted in (
        (Usage(), Decimal("0.003"), Decimal("0.003")),
        (TURN, Decimal("0.005"), Decimal("0.005")),  # its CLI said more than the price does
        (TURN, Decimal("0.001"), price(TURN)),  # its tokens at the price come to more
    ):
        meter = Meter()
        meter.add_spent(usage, None, known, route)
        assert meter.totals().cost_usd == counted, (usage, known)
    meter = Meter()
    meter.add_spent(TURN, None, Decimal("0.003"))  # no route to price it on
    assert meter.totals().cost_usd == Decimal("0.003")


def test_a_row_reads_its_known_part_and_more_and_nothing_known_reads_unknown() -> None:
    cut = make_child(0, status=ChildStatus.STOPPED, cost_usd=None, usage=TURN)
    assert fmt_row_cost(cut) == "$?"
    assert fmt_row_cost(dataclasses.replace(cut, cost_floor_usd=Decimal("0.0262"))) == "$0.0262+?"
    known = make_child(1, status=ChildStatus.COMPLETED, cost_usd=Decimal("0.0262"))
    assert fmt_row_cost(known) == "$0.0262"
    # The part known of a cost that is known is all of it, whatever the row carries beside.
    assert dataclasses.replace(known, cost_floor_usd=Decimal(1)).cost_known_usd == Decimal("0.0262")


def _stored(db: Path) -> None:
    """A batch of two stopped children, one of whose cost is known in part."""
    with Store(db) as store:  # both in group "g": one completion unit
        store.create_batch(make_batch("b1", spec_json='{"tasks": [{"id": "c0"}, {"id": "c1"}]}'))
        cut = make_child(0, status=ChildStatus.STOPPED, cost_usd=None, usage=TURN)
        rows = [
            dataclasses.replace(cut, cost_floor_usd=Decimal("0.0262")),
            make_child(1, status=ChildStatus.COMPLETED, cost_usd=Decimal("0.0524"), usage=TURN),
        ]
        store.add_children("b1", rows)
        store.finish_batch("b1", BatchStatus.STOPPED, 2000.0)


def test_the_store_keeps_the_known_part_for_report_ls_and_attached_views(tmp_path: Path) -> None:
    db = tmp_path / "flightdeck.db"
    _stored(db)
    with StoreReader(db) as reader:
        row = reader.child("b1", "c0")
        assert row is not None and row.cost_usd is None
        assert row.cost_floor_usd == Decimal("0.0262")
        info = reader.batch("b1")
        assert info is not None and (info.cost_usd, info.cost_unknown) == (Decimal("0.0786"), 1)
        report = build_report(reader, "b1")
    first = report["children"][0]
    assert first["cost_usd"] is None and first["cost_known_usd"] == 0.0262
    assert report["totals"]["cost_known_usd"] == 0.0786
    text = render_markdown(report)
    assert "| cost | $0.0786 + unknown for 1 child |" in text
    assert "| $0.0262+? |" in text
    assert ls_cells(db, info)[LS_COLUMNS.index("cost")] == "$0.0786+?"
    view = StoreView(db, "b1", watch=False)
    try:
        snap = view.snapshot()
        assert snap.totals.cost_usd == Decimal("0.0786") and snap.totals.cost_unknown == 1
        assert fmt_row_cost(snap.children[0]) == "$0.0262+?"
    finally:
        view.close()


def test_a_version_6_state_folder_reads_as_it_did_then_keeps_the_known_part(
    tmp_path: Path,
) -> None:
    # A state folder from before the column: read as it is (nothing known of an unknown cost),
    # then migrated by the owner that opens it, its rows kept.
    db = tmp_path / "flightdeck.db"
    conn = sqlite3.connect(db)
    conn.executescript(version_6_schema())
    for statement in schema.REV_TRIGGERS:
        conn.execute(statement)
    conn.execute("PRAGMA user_version = 6")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute(
        "INSERT INTO batches (id, name, spec_json, workspace, state_dir, owner_pid, pool_size,"
        " status, created_ts) VALUES ('b1', 'b', '[]', '/w', '/s', 1, 1, 'stopped', 1.0)"
    )
    conn.execute(
        "INSERT INTO children (batch_id, id, seq, goal, route, model, status, cost_usd,"
        " queued_ts, transcript) VALUES ('b1', 'c0', 0, 'g', 'codex', 'm', 'stopped', NULL,"
        " 1.0, 't')"
    )
    conn.commit()
    conn.close()
    with StoreReader(db) as reader:  # read-only: nothing migrates the file
        row = reader.child("b1", "c0")
        assert row is not None and row.cost_usd is None and row.cost_known_usd == 0
        info = reader.batch("b1")
        assert info is not None and (info.cost_usd, info.cost_unknown) == (0, 1)
        assert len(reader.children("b1")) == 1
    view = StoreView(db, "b1", watch=False)
    try:
        assert fmt_row_cost(view.snapshot().children[0]) == "$?"
    finally:
        view.close()
    raw = sqlite3.connect(db)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == 6
    raw.close()
    with Store(db) as store:  # its owner migrates it
        assert row is not None
        store.update_child("b1", dataclasses.replace(row, cost_floor_usd=Decimal("0.01")))
    raw = sqlite3.connect(db)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
    raw.close()
    with StoreReader(db) as reader:
        again = reader.child("b1", "c0")
        assert again is not None and again.cost_known_usd == Decimal("0.01")


def _cut(seq: int, floor: str = "0.0262", **kw: object) -> ChildRow:
    """A child stopped mid-turn: its cost unknown, `floor` of it known."""
    row = make_child(seq, status=ChildStatus.STOPPED, cost_usd=None, usage=TURN, **kw)
    return dataclasses.replace(row, cost_floor_usd=Decimal(floor))


def test_a_group_header_and_a_subtree_sum_the_known_parts_and_more() -> None:
    # Found by a review: one partly known delegate made its group's and its parent's sums `$?`.
    parent = make_child(0, status=ChildStatus.COMPLETED, cost_usd=Decimal("0.01"))
    cut = _cut(1, parent="c0", depth=1)
    text, _ = group_header("g", group_summary([parent, cut], ()), folded=False)
    assert text.endswith("  $0.0362+?"), text
    blank: tuple[Cell, ...] = (("", ""),) * 11
    subtree = subtree_costs({"c0": parent, "c1": cut})
    assert tree_cells(blank, parent, subtree["c0"])[8] == ("Σ$0.0362+?", "bold")
    # Nothing known of a lone child's cost: `$?`, never `$0.00+?`.
    text, _ = group_header("h", group_summary([_cut(2, "0")], ()), folded=False)
    assert text.endswith("  $?"), text


def test_a_unit_carries_its_known_part_to_its_line_notice_and_report(tmp_path: Path) -> None:
    db = tmp_path / "flightdeck.db"
    _stored(db)
    with StoreReader(db) as reader:
        unit = GroupFinished.of("g", reader.children("b1"))
        report = build_report(reader, "b1")
    assert unit.cost_usd is None and unit.cost_known_usd == Decimal("0.0786")
    assert "  $0.0786+?  " in completion_text(unit)  # the headless line, the TUI's notice
    (group,) = report["groups"]
    assert group["cost_usd"] is None and group["cost_known_usd"] == 0.0786
    assert "| g | partial | 2 | 1 | $0.0786+? |" in render_markdown(report)
    whole = GroupFinished.of("g", [make_child(0, cost_usd=Decimal("0.01"))])
    assert whole.cost_floor_usd == 0 and whole.cost_known_usd == Decimal("0.01")
    assert "$?" in completion_text(GroupFinished.of("g", [_cut(0, "0")]))


def test_cost_above_a_bound_keeps_a_child_whose_known_part_is_above_it() -> None:
    # Its cost is at least its known part: over the bound for certain, under it never known.
    cut = _cut(0)

    def keeps(query: str, row: ChildRow) -> bool:
        return parse_filter(query).matches(row)

    assert keeps("cost>0.02", cut) and keeps("cost>=0.0262", cut) and keeps("cost>$0", cut)
    assert not keeps("cost>0.0262", cut) and not keeps("cost>0.03", cut)
    assert not keeps("cost<1", cut) and not keeps("cost<=1", cut)
    assert not keeps("cost>=0", _cut(1, "0"))  # nothing known: no comparison holds


def test_sort_by_cost_puts_a_partly_known_cost_at_its_known_part() -> None:
    rows = [
        make_child(0, status=ChildStatus.COMPLETED, cost_usd=Decimal("0.01")),
        _cut(1),
        _cut(2, "0"),  # nothing known: last, as before
        make_child(3, status=ChildStatus.COMPLETED, cost_usd=Decimal("0.05")),
    ]
    order = sorted(rows, key=lambda r: sort_key(SortOrder.COST, r))
    assert [r.id for r in order] == ["c3", "c1", "c0", "c2"]


def test_a_group_header_and_a_subtree_say_more_to_come_while_a_turn_reports_nothing() -> None:
    # A running agent CLI child whose turn has reported no usage reads `$0.01+?` in its row: its
    # group's header and its parent's Σ said `$0.02`, as if nothing more were coming.
    parent = make_child(0, status=ChildStatus.COMPLETED, cost_usd=Decimal("0.01"))
    running = make_child(1, status=ChildStatus.RUNNING, cost_usd=Decimal("0.01"), parent="c0")
    running = dataclasses.replace(
        running, depth=1, activity=dataclasses.replace(running.activity, unreported=True)
    )
    assert fmt_row_cost(running) == "$0.01+?"
    text, _ = group_header("g", group_summary([parent, running], ()), folded=False)
    assert text.endswith("  $0.02+?"), text
    blank: tuple[Cell, ...] = (("", ""),) * 11
    subtree = subtree_costs({"c0": parent, "c1": running})
    assert tree_cells(blank, parent, subtree["c0"])[8] == ("Σ$0.02+?", "bold")


def test_a_group_of_a_turn_that_reported_nothing_yet_reads_as_its_row() -> None:
    # Found by a review: a lone agent CLI child whose first turn had reported nothing read
    # `$0.00+?` in its row (known $0, more to come, as the meter's `$0.00 (+1 pending)`) and
    # `$?` in its group's header, which says a price is unknown.
    def running(seq: int, parent: str | None = None) -> ChildRow:
        row = make_child(seq, status=ChildStatus.RUNNING, cost_usd=Decimal(0), parent=parent)
        pending = dataclasses.replace(row.activity, unreported=True)
        return dataclasses.replace(row, depth=0 if parent is None else 1, activity=pending)

    lone = running(0)
    assert fmt_row_cost(lone) == "$0.00+?"
    assert fmt_spent(Decimal(0), 0, pending=1) == ("$0.00", " (+1 pending)")
    text, _ = group_header("g", group_summary([lone], ()), folded=False)
    assert text.endswith("  $0.00+?"), text
    blank: tuple[Cell, ...] = (("", ""),) * 11
    subtree = subtree_costs({"c0": lone, "c1": running(1, parent="c0")})
    assert tree_cells(blank, lone, subtree["c0"])[8] == ("Σ$0.00+?", "bold")
    # Beside a child of unknown price, nothing is known of the sum: `$?`, as the meter's amount.
    text, _ = group_header("h", group_summary([lone, _cut(2, "0")], ()), folded=False)
    assert text.endswith("  $?"), text
    assert fmt_spent(Decimal(0), 1, pending=1)[0] == "$?"
