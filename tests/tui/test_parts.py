"""Unit tests of the TUI's pure parts: filter language, sort orders, cells, transcript reads."""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from flightdeck.engine.apilight import Forecast, forecast
from flightdeck.engine.model import (
    BatchStatus,
    ChildRow,
    ChildStatus,
    RouteHeadroom,
    RouteLimit,
    Snapshot,
    Usage,
)
from flightdeck.engine.records.meter import totals_of
from flightdeck.tui.fmt import fmt_age, fmt_cost, fmt_tokens
from flightdeck.tui.tail import Tail, read_all, read_chunk
from flightdeck.tui.widgets import meter as meter_module
from flightdeck.tui.widgets.columns import COLUMN_KEYS, fit_columns, fit_text
from flightdeck.tui.widgets.days import Days, day_of_last
from flightdeck.tui.widgets.detail import SHRINK_AFTER_S, ChildDetail, detail_text
from flightdeck.tui.widgets.meter import CostMeter
from flightdeck.tui.widgets.rows import SortOrder, parse_filter, row_cells, sort_key
from flightdeck.tui.widgets.status import StatusLine, fit_parts, status_parts
from flightdeck.tui.widgets.transcript import TranscriptHighlighter, wrap_line
from rich.text import Text
from textual.app import App, ComposeResult
from tui_fakes import NOW, T0, child, demo_rows
from tui_fakes import totals_of as fake_totals


def test_filter_terms(tmp_path: Path) -> None:
    rows = {r.id: r for r in demo_rows(tmp_path)}

    def ids(query: str, tagged: frozenset[str] = frozenset()) -> set[str]:
        f = parse_filter(query)
        return {i for i, r in rows.items() if f.matches(r, i in tagged)}

    assert ids("status:failed") == {"review-04"}
    assert ids("status:failed,stalled") == {"review-04", "review-09"}
    assert ids("status:retrying") == {"review-03"}
    assert ids("status:attention") == {"review-03", "review-04", "review-09"}
    assert ids("s:queued") == {"review-07", "review-08"}
    assert ids("MIGRATIONS") == {"review-05"}
    assert ids("review pr #10") == set(rows) - {"review-10"}  # every word must match
    assert ids("is:tagged", frozenset({"review-01"})) == {"review-01"}
    assert ids("route:sim status:live") == {
        "review-02",
        "review-03",
        "review-05",
        "review-07",
        "review-08",
    }
    assert ids("") == set(rows)
    with pytest.raises(ValueError, match="unknown status 'bogus'"):
        parse_filter("status:bogus")


def test_attention_order(tmp_path: Path) -> None:
    rows = demo_rows(tmp_path)
    order = [r.id for r in sorted(rows, key=lambda r: sort_key(SortOrder.ATTENTION, r))]
    # failed and stalled (latest first), retrying, running by age, queued, finished
    assert order == [
        "review-09", "review-04", "review-03", "review-02", "review-05",
        "review-07", "review-08", "review-01", "review-06", "review-10",
    ]  # fmt: skip
    by_cost = sorted(rows, key=lambda r: sort_key(SortOrder.COST, r))
    assert by_cost[0].id == "review-02" and by_cost[-1].cost_usd is None  # unknown cost last


def test_recent_tokens_id_and_batch_orders(tmp_path: Path) -> None:
    S = ChildStatus

    def row(seq: int, child_id: str, status: ChildStatus, **fields: Any) -> ChildRow:
        return dataclasses.replace(child(seq, "g", status, folder=tmp_path, **fields), id=child_id)

    # Batch order, id order and natural order all differ (c2 c10 c1; c1 c10 c2; c1 c2 c10), so
    # does every order below; the two queued children tie on everything but their place.
    rows = [
        row(1, "c2", S.RUNNING, tokens=(300, 30), started=1, last=50),
        row(2, "c10", S.COMPLETED, tokens=(5000, 500), started=1, last=20, finished=90),
        row(3, "c1", S.RUNNING, tokens=(100, 10), started=1, last=70),
        row(4, "q-b", S.QUEUED),
        row(5, "q-a", S.QUEUED),
    ]

    def order(by: SortOrder) -> list[str]:
        return [r.id for r in sorted(rows, key=lambda r: sort_key(by, r))]

    assert order(SortOrder.BATCH) == ["c2", "c10", "c1", "q-b", "q-a"]
    assert order(SortOrder.ID) == ["c1", "c10", "c2", "q-a", "q-b"]  # plain string order
    # latest first: a finished child by its end, a running one by its last activity
    assert order(SortOrder.RECENT) == ["c10", "c1", "c2", "q-b", "q-a"]
    assert order(SortOrder.TOKENS) == ["c10", "c2", "c1", "q-b", "q-a"]  # most first


def test_order_cycle_returns_to_start() -> None:
    order, seen = SortOrder.ATTENTION, []
    for _ in SortOrder:
        seen.append(order)
        order = order.next()
    assert order is SortOrder.ATTENTION and len(set(seen)) == len(SortOrder)


def test_cells_are_plain_and_sanitized(tmp_path: Path) -> None:
    row = demo_rows(tmp_path)[1]
    hostile = dataclasses.replace(row, goal="[b]x[/b]\x1b[2J\nnext", id="evil\x1b]0;t\x07")
    cells = dict(zip(("mark", "id", "goal"), row_cells(hostile, False, NOW), strict=False))
    assert cells["goal"][0] == "[b]x[/b] next"
    assert cells["id"][0] == "evil"
    running = row_cells(row, True, NOW)
    assert running[0][0] == "◆●"  # tagged, running
    assert running[5][0] == "tool: read_file 6s"
    assert running[6][0] == "2s ago"
    assert running[10][0] == "✓ delivered"


def test_a_child_on_its_last_allowed_turn_says_so(tmp_path: Path) -> None:
    row = demo_rows(tmp_path)[1]
    last = dataclasses.replace(row, activity=dataclasses.replace(row.activity, last_turn=True))
    assert row_cells(last, False, NOW)[5][0] == "last turn · tool: read_file 6s"
    streaming = dataclasses.replace(last.activity, current_tool=None, text="streaming")
    assert row_cells(dataclasses.replace(last, activity=streaming), False, NOW)[5][0] == (
        "last turn · streaming"
    )


def test_formats() -> None:
    assert [fmt_tokens(n) for n in (999, 12_345, 999_949, 999_950, 2_500_000)] == [
        "999",
        "12.3k",
        "999.9k",
        "1.00M",
        "2.50M",
    ]
    assert fmt_cost(Decimal("0.00004")) == "<$0.0001"
    assert fmt_cost(Decimal(0)) == "$0.00"
    assert fmt_cost(None) == "$?"
    assert fmt_cost(Decimal("0.0085")) == "$0.0085"
    assert fmt_cost(Decimal("0.1")) == "$0.10"
    assert fmt_cost(Decimal("1234.5")) == "$1,234.50"
    assert [fmt_age(s) for s in (0.4, 59, 61, 7300)] == ["0s ago", "59s ago", "1m ago", "2h ago"]


def test_read_chunk_holds_back_a_partial_line(tmp_path: Path) -> None:
    path = tmp_path / "c.log"
    assert read_chunk(path, None, max_lines=10, max_bytes=1000).lines == ()  # not yet created
    path.write_bytes(b"one\ntwo\nthr")
    first = read_chunk(path, None, max_lines=10, max_bytes=1000)
    assert first.lines == ("one", "two") and first.end == 8
    with path.open("ab") as fh:
        fh.write(b"ee\x1b[31m\nfour\n")
    more = read_chunk(path, first.end, max_lines=10, max_bytes=1000)
    assert more.lines == ("three", "four") and not more.cut


def test_read_chunk_bounds_lines_and_bytes(tmp_path: Path) -> None:
    path = tmp_path / "c.log"
    path.write_text("".join(f"line {i}\n" for i in range(1000)))
    tail = read_chunk(path, None, max_lines=5, max_bytes=1 << 20)
    assert tail.lines == tuple(f"line {i}" for i in range(995, 1000)) and tail.cut
    window = read_chunk(path, None, max_lines=1000, max_bytes=100)
    assert window.cut and window.lines[-1] == "line 999"
    assert all(line.startswith("line ") for line in window.lines)  # no torn first line
    path.write_text("new\n")  # replaced by a shorter file: start over
    again = read_chunk(path, tail.end, max_lines=5, max_bytes=1000)
    assert again.reset and again.lines == ("new",)


def test_read_all_streams_every_line_a_block_at_a_time(tmp_path: Path) -> None:
    # `logs` read a whole transcript at once, peaking at about 6.5 times its size.
    path = tmp_path / "c.log"
    lines = [f"line {i} " + "x" * (i % 37) for i in range(2000)]
    long_line = "L" * 500  # longer than a block: read whole, never split
    path.write_text("\n".join([*lines[:1000], long_line, *lines[1000:]]) + "\nparti")
    chunks = list(read_all(path, block=256))
    assert [line for c in chunks for line in c.lines] == [*lines[:1000], long_line, *lines[1000:]]
    for chunk in chunks:  # bounded: a block's worth of lines, or the one long line
        size = sum(len(line) + 1 for line in chunk.lines)
        assert size <= 256 or chunk.lines == (long_line,), (size, chunk.lines[:2])
    assert chunks[-1].end == path.stat().st_size - len("parti")  # the partial line waits
    tail = Tail(path, block=256)  # the same reads, as logs -f makes them
    while tail.read().lines:
        pass
    assert tail.offset == chunks[-1].end and tail.read().lines == ()
    path.write_text("new\n")  # replaced by a shorter file: read from its start
    again = tail.read()
    assert again.reset and again.lines == ("new",)
    assert list(read_all(tmp_path / "missing.log")) == []


def test_wrap_keeps_the_text_column() -> None:
    line = "10:00:00.000  assistant │ " + "word " * 30
    parts = wrap_line(line, 60)
    assert len(parts) > 1 and all(len(p) <= 60 for p in parts)
    assert all(p.startswith(" " * 24 + "│ ") for p in parts[1:])
    assert wrap_line("short", 60) == ["short"]


def test_the_highlighter_styles_the_stamp_and_role_of_transcript_lines_only() -> None:
    def spans(plain: str) -> list[tuple[int, int, str]]:
        text = Text(plain)
        TranscriptHighlighter().highlight(text)
        return [(s.start, s.end, str(s.style)) for s in text.spans]

    assert spans("10:00:00.000  user      │ [b]hi[/b]") == [(0, 12, "dim"), (12, 23, "bold cyan")]
    assert spans("10:00:00.000  error     │ boom") == [
        (0, 12, "dim"),
        (12, 23, "bold red"),
        (26, 30, "bold red"),
    ]
    assert spans("10:00:00.000  assistant │ nothing blocks m↩") == [(0, 12, "dim"), (42, 43, "dim")]
    assert spans(" " * 24 + "│ a wrapped line") == []
    assert spans("no stamp │ here") == []


def stamped(*stamps: str) -> list[str]:
    return [f"{stamp}  assistant │ line {i}" for i, stamp in enumerate(stamps)]


def local(*when: int) -> float:
    """A local time (transcript stamps are local) as a timestamp."""
    return datetime(*when).timestamp()


def test_a_date_line_marks_where_the_day_changes_within_a_read() -> None:
    lines = stamped("23:59:58.000", "23:59:59.500", "00:00:01.000", "00:00:01.000")
    out = Days().add(lines, local(2026, 12, 2, 0, 0, 1, 200_000))
    assert out == [*lines[:2], "── 2026-12-02 Wednesday ──", *lines[2:]]


def test_a_date_line_marks_a_day_changing_between_reads() -> None:
    days = Days()
    first = stamped("23:50:00.000")
    assert days.add(first, local(2026, 12, 1, 23, 50, 0, 500_000)) == first
    later = stamped("00:10:00.000", "00:20:00.000")
    assert days.add(later, local(2026, 12, 2, 0, 20)) == ["── 2026-12-02 Wednesday ──", *later]


def test_the_days_are_counted_back_from_the_files_modification_time() -> None:
    # The start of the file was cut and the batch ended days ago: each day is still right.
    lines = stamped("22:00:00.000", "02:00:00.000", "23:30:00.000", "00:30:00.000")
    out = Days().add(lines, local(2026, 12, 5, 9, 0))
    assert [line for line in out if line.startswith("──")] == [
        "── 2026-12-04 Friday ──",
        "── 2026-12-05 Saturday ──",
    ]


def test_a_clock_set_back_an_hour_is_not_a_new_day() -> None:
    lines = stamped("01:59:59.000", "01:00:05.000")
    assert Days().add(lines, local(2026, 10, 25, 1, 0, 6)) == lines


def test_the_last_lines_day_allows_for_late_and_coarse_modification_times() -> None:
    # Written just before midnight, the file's time just after it: the line's day is the first.
    assert day_of_last("23:59:59.999", local(2026, 12, 2, 0, 0, 0, 10_000)).day == 1
    # A filesystem that rounds modification times down to the second.
    assert day_of_last("12:00:00.900", local(2026, 12, 2, 12, 0, 0)).day == 2


def test_unknown_status_glyphs_cover_every_status(tmp_path: Path) -> None:
    row = demo_rows(tmp_path)[0]
    for status in ChildStatus:
        assert row_cells(dataclasses.replace(row, status=status), False, NOW)[0][0].strip()


def _snapshot(rows: tuple[ChildRow, ...]) -> Snapshot:
    return Snapshot("b", BatchStatus.RUNNING, T0, NOW, rows, fake_totals(rows), pool_size=4)


class MeterApp(App[None]):
    def compose(self) -> ComposeResult:
        yield CostMeter(id="meter")


def meter_text(snap: Snapshot, width: int = 160) -> str:
    """What the meter shows for `snap`, rendered in a bare app `width` columns wide."""

    async def run() -> str:
        app = MeterApp()
        async with app.run_test(size=(width, 10)):
            meter = app.query_one(CostMeter)
            meter.show(snap, snap.now)
            return str(meter.render())

    return asyncio.run(run())


def test_the_detail_pane_grows_at_once_and_shrinks_back_only_after_a_rest() -> None:
    """Each change of its height lays the whole screen out: a cursor moved between children
    with and without a loop's evidence (or changed files) must not pay it every key."""

    class DetailApp(App[None]):
        CSS = "#detail { height: 2; }"  # as main.tcss

        def compose(self) -> ComposeResult:
            yield ChildDetail(id="detail")

    short, tall = Text("c1 running\ngoal"), Text("c2 running\ngoal\n∞ looping\n1 a\n2 a")

    async def run() -> list[tuple[int, str]]:
        app = DetailApp()
        seen = []
        async with app.run_test(size=(80, 20)) as pilot:
            pane = app.query_one(ChildDetail)
            for text, now in [
                (short, 0.0),
                (tall, 1.0),  # the cursor onto a looping child: grown at once
                (short, 1.5),  # and off it: the height kept
                (short, 1.5 + SHRINK_AFTER_S - 0.1),
                (tall, 1.5 + SHRINK_AFTER_S - 0.05),  # back onto it: the wait starts again
                (short, 4.0),
                (short, 4.0 + SHRINK_AFTER_S),  # at rest long enough: shrunk
            ]:
                pane.show_text(text, now)
                await pilot.pause()
                seen.append((pane.size.height, str(pane.render()).splitlines()[0]))
        return seen

    assert asyncio.run(run()) == [
        (2, "c1 running"),
        (5, "c2 running"),
        (5, "c1 running"),
        (5, "c1 running"),
        (5, "c2 running"),
        (5, "c1 running"),
        (2, "c1 running"),
    ]


def test_a_turn_that_has_reported_no_usage_yet_is_pending_never_shown_as_spent(
    tmp_path: Path,
) -> None:
    # Codex reports a turn's usage at its end: its row read `$0.42` (or `$0.00`) for minutes,
    # as if that turn were free, and the meter said nothing.
    quiet = child(1, "g", ChildStatus.RUNNING, folder=tmp_path, calls=1, cost="0.42")
    waits = dataclasses.replace(
        quiet, activity=dataclasses.replace(quiet.activity, unreported=True)
    )
    cost = COLUMN_KEYS.index("cost")
    assert row_cells(waits, False, NOW)[cost][0] == "$0.42+?"
    assert row_cells(quiet, False, NOW)[cost][0] == "$0.42"
    assert "spent $0.84 (+1 pending) " in meter_text(_real_totals((waits, quiet)))
    assert "spent $0.84 " in meter_text(_real_totals((quiet, quiet)))
    # An unknown price is unknown already: said once, not also pending.
    unpriced = dataclasses.replace(waits, cost_usd=None)
    assert row_cells(unpriced, False, NOW)[cost][0] == "$?"
    assert "spent $0.42 (+1 unknown, 1 pending) " in meter_text(_real_totals((waits, unpriced)))
    # Ended, nothing is under way, whatever the figures its worker sent last said.
    ended = dataclasses.replace(waits, status=ChildStatus.STOPPED)
    assert row_cells(ended, False, NOW)[cost][0] == "$0.42"
    assert "spent $0.84 " in meter_text(_real_totals((ended, quiet)))


def test_a_pending_cost_is_shown_whole_at_any_width() -> None:
    # Seen on a 160-column tmux: a Codex child's turn under way read `$0.0262…`, its `+?` cut
    # off by the 8-cell cost column, so the row looked like any other.
    for width in range(60, 260):
        cost = widths(width)["cost"]
        for text in ("$0.0262+?", "$123.45+?", "$1,234.56"):
            assert fit_text(text, cost).rstrip() == text, (width, text)


def _real_totals(rows: tuple[ChildRow, ...]) -> Snapshot:
    return dataclasses.replace(_snapshot(rows), totals=totals_of(rows))


def test_tokens_in_are_input_alone_with_cache_beside_them(tmp_path: Path) -> None:
    usage = Usage(input_tokens=12_000, output_tokens=3_000, cache_read_tokens=30_000,
                  cache_write_tokens=10_000)  # fmt: skip
    row = dataclasses.replace(child(1, "g", ChildStatus.RUNNING, folder=tmp_path), usage=usage)
    # The report's "input tokens" is input alone: the meter and the row say the same.
    assert "tokens 12.0k in · 3.0k out · 40.0k cached" in meter_text(_snapshot((row,)))
    assert "12.0k/3.0k" in [c[0] for c in row_cells(row, False, NOW)]


def test_the_meter_says_tokens_and_dollars_at_80_columns(tmp_path: Path) -> None:
    row = child(
        1, "g", ChildStatus.RUNNING, folder=tmp_path, tokens=(123_000, 13_000), cost="12.25"
    )
    snap = dataclasses.replace(_snapshot((row,)), max_cost_usd=Decimal("100.00"))
    lines = meter_text(snap, width=80).splitlines()
    assert len(lines) == 2
    counts, money = lines
    assert "0/1 done" in counts and "●1 run" in counts and "■0 stopped" in counts
    for part in ("123.0k in", "13.0k out", "$12.25", "/min", "budget 12%", "2:15"):
        assert part in money, part
    assert "pool" not in money  # the least needed figure is left out
    assert all(len(line) <= 78 for line in lines)  # nothing cut: 80 columns less the padding


def test_the_meter_keeps_every_figure_whole_at_80_and_60_columns(tmp_path: Path) -> None:
    """Observed in tmux at 80x24: five-figure token counts, a cache count, a budget and a
    forecast took the compact form's second line past 78 columns, and the elapsed time was cut
    (`4:…`); at 60 the counts' line ran past the edge. Tighter still, the cached count goes,
    and the counts are said by their glyphs alone."""
    rows = _forecast_batch(tmp_path)
    usage = Usage(input_tokens=160_400, output_tokens=119_300, cache_read_tokens=199_100)
    rows = (dataclasses.replace(rows[0], usage=usage), *rows[1:])
    snap = dataclasses.replace(
        _snapshot(rows), totals=totals_of(rows), max_cost_usd=Decimal(100), started_ts=NOW - 253
    )
    # The bare app has no padding: 78 and 58 columns are the meter's at 80 and 60 (main.tcss).
    counts, money = meter_text(snap, width=78).splitlines()
    assert all(len(line) <= 78 for line in (counts, money)), (counts, money)
    assert money.endswith("4:13"), money  # the elapsed time, whole
    assert "160.4k in" in money and "$1.12" in money, money
    counts, money = meter_text(snap, width=58).splitlines()  # under the 80 it is made for:
    assert counts == "█████░░░ 4/6 done  ●1 ○1 ✓4 ✗0 ■0", counts  # the counts whole,
    assert "160.4k in" in money and "$1.12" in money, money  # and the money's start


def test_the_meter_takes_its_compact_form_before_a_figure_falls_off_the_edge(
    tmp_path: Path,
) -> None:
    # A budget, a forecast and lost attempts make the full form 176 columns long: at 160 (the
    # demo's screen) the elapsed time and the pool fell off the right edge.
    rows = _forecast_batch(tmp_path)
    snap = dataclasses.replace(
        _snapshot(rows), totals=totals_of(rows), max_cost_usd=Decimal(100),
        lost_cost_usd=Decimal("0.07"),
    )  # fmt: skip
    shown = {width: meter_text(snap, width).splitlines() for width in (200, 160, 120)}
    for width, lines in shown.items():
        assert all(len(line) <= width - 2 for line in lines), (width, lines)
    wide, lean, narrow = shown[200][1], shown[160][1], shown[120][1]
    assert "budget ░░░░░░░░░░░░ 1% of $100.00" in wide and wide.endswith("elapsed 2:15   pool 4")
    # 160: every labelled figure, without the budget's bar, then the compact form below that
    assert "budget 1% of $100.00" in lean and lean.endswith("lost attempts $0.07   elapsed 2:15")
    assert narrow.endswith("budget 1%  → $1.62  2:15  lost $0.07")


def test_the_meter_and_the_row_count_the_call_in_progress(tmp_path: Path) -> None:
    billed = child(1, "g", ChildStatus.RUNNING, folder=tmp_path, tokens=(1_000, 100), cost="0.01")
    row = dataclasses.replace(
        billed, in_flight=Usage(input_tokens=2_000, output_tokens=300),
        in_flight_cost_usd=Decimal("0.005"),
    )  # fmt: skip
    snap = dataclasses.replace(_snapshot((row,)), totals=totals_of((row,)))
    shown = meter_text(snap)
    assert "tokens 3.0k in · 400 out · 0 cached" in shown
    assert "spent $0.015 " in shown
    cells = [c[0] for c in row_cells(row, False, NOW)]
    assert "3.0k/400" in cells and "$0.015" in cells


def _forecast_batch(folder: Path) -> tuple[ChildRow, ...]:
    """Four finished at $0.10 to $0.40, one running at $0.12, one queued: a known forecast."""
    done = [
        child(i + 1, "g", ChildStatus.COMPLETED, folder=folder, cost=c, started=0, finished=60)
        for i, c in enumerate(("0.10", "0.20", "0.30", "0.40"))
    ]
    running = child(5, "g", ChildStatus.RUNNING, folder=folder, cost="0.12", started=75)
    return (*done, running, child(6, "g", ChildStatus.QUEUED, folder=folder))


def test_the_meter_projects_the_cost_at_completion_with_its_range(tmp_path: Path) -> None:
    rows = _forecast_batch(tmp_path)
    snap = dataclasses.replace(_snapshot(rows), totals=totals_of(rows))
    # spent $1.12, plus the average $0.25 (quartiles $0.175, $0.325) for the two not finished
    assert "forecast $1.62 ($1.47–$1.77)" in meter_text(snap)
    lines = meter_text(dataclasses.replace(snap, max_cost_usd=Decimal(100)), 80).splitlines()
    assert "budget 1%  → $1.62  2:15" in lines[1] and all(len(line) <= 78 for line in lines)
    unpriced = (*rows[:4], dataclasses.replace(rows[4], cost_usd=None), rows[5])
    assert "forecast $? " in meter_text(_snapshot(unpriced))  # never a guess, never $0
    assert "forecast — " in meter_text(_snapshot(rows[4:]))  # nothing finished yet
    assert "forecast" not in meter_text(_snapshot(rows[:4]))  # all finished: spent is the total
    lost = dataclasses.replace(snap, lost_cost_usd=Decimal("0.07"))
    assert "forecast $1.62 ($1.47–$1.77)   lost attempts $0.07" in meter_text(lost)
    assert meter_text(lost, 80).splitlines()[1].endswith("2:15  lost $0.07")
    assert "lost attempts $?" in meter_text(dataclasses.replace(snap, lost_cost_usd=None))
    assert "lost" not in meter_text(snap)  # none lost: nothing said


def test_the_meter_works_out_the_forecast_again_only_for_other_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It reads every row (5,000 of them each 0.3 s poll); a poll with no store read since
    hands the meter the same rows, and the forecast of other rows is theirs, never stale."""
    rows = _forecast_batch(tmp_path)
    snap = dataclasses.replace(_snapshot(rows), totals=totals_of(rows))
    worked: list[int] = []

    def counted(children: tuple[ChildRow, ...]) -> Forecast:
        worked.append(len(children))
        return forecast(children)

    monkeypatch.setattr(meter_module, "forecast", counted)
    cheaper = (*rows[:4], dataclasses.replace(rows[4], cost_usd=Decimal("0.02")), rows[5])

    async def run() -> list[str]:
        app = MeterApp()
        seen = []
        async with app.run_test(size=(160, 10)):
            meter = app.query_one(CostMeter)
            for s in (snap, dataclasses.replace(snap, now=NOW + 1), _snapshot(cheaper)):
                meter.show(s, s.now)
                seen.append(str(meter.render()))
        return seen

    first, polled, other = asyncio.run(run())
    assert worked == [6, 6]  # the poll with the same rows (a later clock) worked out none
    assert "forecast $1.62 ($1.47–$1.77)" in first and "forecast $1.62 ($1.47–$1.77)" in polled
    assert "forecast $1.52 ($1.37–$1.67)" in other


def test_the_compact_meter_never_cuts_lost_from_its_figure(tmp_path: Path) -> None:
    """At 80 columns a resumed batch's line (six-figure tokens, a forecast, lost attempts, ten
    hours in) ran past the edge: it ended `2:45  lost`, the amount cut off (seen attached after
    `flightdeck resume`). Lost attempts are said whole, or left out whole as the pool is."""
    usage = Usage(input_tokens=264_000, output_tokens=8_100, cache_read_tokens=61_700)
    rows = _forecast_batch(tmp_path)
    rows = (dataclasses.replace(rows[0], usage=usage), *rows[1:])
    snap = dataclasses.replace(
        _snapshot(rows),
        totals=totals_of(rows),
        lost_cost_usd=Decimal("0.1401"),
        started_ts=T0 - 36_000,
    )
    line = meter_text(snap, 80).splitlines()[1]
    assert len(line) <= 80, line
    assert "lost" not in line or line.endswith("lost $0.1401"), line
    assert meter_text(snap, 100).splitlines()[1].endswith("lost $0.1401")  # room: said


def test_headless_says_the_forecast_and_the_lost_attempts_in_words(tmp_path: Path) -> None:
    from flightdeck.tui.output import money_lines, progress_label

    rows = _forecast_batch(tmp_path)
    snap = dataclasses.replace(_snapshot(rows), totals=totals_of(rows))
    assert progress_label(snap) == "running  $1.12 → $1.62"
    assert [t.plain for t in money_lines(snap)] == [
        "forecast: $1.62 ($1.47–$1.77) at completion, 2 not finished"
    ]
    ended = dataclasses.replace(_snapshot(rows[:4]), lost_cost_usd=Decimal("0.07"))
    assert [t.plain for t in money_lines(ended)] == [
        "lost attempts: $0.07 (re-runs after a lost owner or worker), in the cost"
    ]
    assert money_lines(_snapshot(rows[:4])) == []  # all finished, nothing lost: nothing to add


# --- any width ----------------------------------------------------------------------------------


def widths(width: int) -> dict[str, int]:
    return {key: w for key, _, w in fit_columns(width)}


def test_columns_are_dropped_by_importance_and_the_goal_shrinks_first() -> None:
    for width in range(60, 260):
        shown = widths(width)
        assert {"mark", "id", "doing", "cost"} <= shown.keys(), width  # status, activity, cost
        assert sum(shown.values()) + len(shown) - 1 <= width, width
    wide, narrow = widths(200), widths(120)
    assert wide.keys() == narrow.keys()  # at 120 columns every column still fits...
    assert narrow["goal"] < wide["goal"] and narrow["goal"] <= 13  # ...the goal shrank first
    assert wide["doing"] == 60 and wide["goal"] >= 50  # a wide screen gives "doing" its share
    at_80 = widths(78)  # 80 columns less the padding
    assert set(at_80) == {"mark", "id", "goal", "doing", "tokens", "cost"}
    assert list(widths(98)) == ["mark", "id", "goal", "doing", "last", "tokens", "cost", "steer"]


def test_a_cell_is_cut_with_an_ellipsis_to_its_width() -> None:
    assert fit_text("streaming", 12) == "streaming   "
    assert fit_text("tool: read_file 12s", 10) == "tool: rea…"
    assert fit_text("日本語のテキスト", 7) == "日本語…"


def test_the_status_bar_leaves_out_whole_parts_by_priority() -> None:
    line = StatusLine(
        batch_id="20270115-080000-demo", order="attention", query="status:failed",
        shown=4, total=5000, tagged=2, resort_pending=True,
    )  # fmt: skip
    full = fit_parts(status_parts(line), 200).plain
    assert full.index("re-sort pending") < full.index("sort attention") < full.index("filter")
    narrow = fit_parts(status_parts(line), 78).plain
    assert len(narrow) <= 78
    assert "re-sort pending" in narrow and "2 tagged" in narrow and "filter" not in narrow
    assert not narrow.endswith("…")  # nothing cut mid-word


def test_a_filter_in_force_outranks_the_sort_order_on_a_narrow_status_bar() -> None:
    # Found by an audit at 80 columns: the bar kept `sort attention` and left out the filter,
    # which is what decides the children s and x act on.
    line = StatusLine(
        batch_id="20261205-055115-af79", order="attention", query="hostile",
        shown=2, total=245, needs=4,
    )  # fmt: skip
    narrow = fit_parts(status_parts(line), 80).plain
    assert "4 need you (!)" in narrow and "filter hostile" in narrow, narrow
    unfiltered = fit_parts(status_parts(dataclasses.replace(line, query="")), 80).plain
    assert "sort attention" in unfiltered and "filter" not in unfiltered


def test_the_detail_line_says_the_selected_child_in_full(tmp_path: Path) -> None:
    rows = {r.id: r for r in demo_rows(tmp_path)}
    failed = detail_text(rows["review-04"], NOW).plain.splitlines()
    assert failed[0] == "✗ review-04  failed: FatalError: sim: simulated fatal error"
    assert failed[1] == "goal Review PR #104: [@click=app.quit]x[/] markup in a goal"
    long = dataclasses.replace(rows["review-05"], activity=dataclasses.replace(
        rows["review-05"].activity, text="route paused after a 429 " + "x" * 80))  # fmt: skip
    running = detail_text(long, NOW).plain.splitlines()[0]
    assert "route paused after a 429 " + "x" * 80 in running  # not cut at the column's width
    assert running.endswith("steer … queued")
    burning = dataclasses.replace(rows["review-05"], cost_usd=Decimal("0.30"), started_ts=NOW - 90)
    assert "  burn $0.20/min" in detail_text(burning, NOW).plain  # $0.30 in a minute and a half
    unpriced = dataclasses.replace(burning, cost_usd=None)
    assert "  burn $?/min" in detail_text(unpriced, NOW).plain
    assert "burn" not in detail_text(rows["review-04"], NOW).plain  # ended: its rate is history


def test_the_meter_says_whether_a_routes_limit_is_configured_or_learned(tmp_path: Path) -> None:
    row = child(1, "g", ChildStatus.RUNNING, folder=tmp_path)
    routes = (
        RouteHeadroom("gpt", rpm=RouteLimit(240, "learned")),
        RouteHeadroom("claude", tpm=RouteLimit(40_000, "configured")),
        RouteHeadroom("local", adaptive_concurrency=3),
        RouteHeadroom("sim"),
    )
    snap = dataclasses.replace(_snapshot((row,)), routes=routes)
    shown = meter_text(snap, width=220)
    # An adapted cap reads as one (the row's words), not as calls in flight: a route with
    # nothing running once said "local 3 in flight".
    assert (
        "gpt rpm 240 learned   claude tpm 40000 configured   local concurrency 3 adapted to 429s"
        in shown
    )
    assert "in flight" not in shown
    assert "sim" not in shown.split("pool")[-1]
    # Narrower, the last figures are left out whole, never cut at the edge.
    line = meter_text(snap, width=160).splitlines()[1]
    assert line.endswith("claude tpm 40000 configured") and len(line) <= 158


def test_a_paused_child_continued_and_waiting_for_a_slot_says_so(tmp_path: Path) -> None:
    """Continued with the pool full, a child stays paused until a slot frees; its row read
    "paused by the operator" all along, so the continue looked lost."""
    from flightdeck.engine.model import CONTINUED_WAITING
    from flightdeck.tui.widgets.rows import doing

    paused = child(1, "g", ChildStatus.PAUSED, folder=tmp_path, text="paused by the operator")
    assert doing(paused, NOW)[0] == "paused by the operator"
    waiting = child(1, "g", ChildStatus.PAUSED, folder=tmp_path, text=CONTINUED_WAITING)
    assert doing(waiting, NOW)[0] == "continued: waiting for a slot"


def test_the_meter_says_tokens_nobody_counted_as_a_question_mark_not_zero(tmp_path: Path) -> None:
    # A command child whose CLI reports no usage: its row reads `?/?` and the headless summary
    # `?`; the meter read "tokens 0 in · 0 out · 0 cached" beside them.
    cli = child(1, "g", ChildStatus.RUNNING, folder=tmp_path, calls=1, cost=None)
    rows: tuple[ChildRow, ...] = (cli,)
    shown = meter_text(dataclasses.replace(_snapshot(rows), totals=totals_of(rows)))
    assert "tokens ? in · ? out · ? cached" in shown
    counted = child(2, "g", ChildStatus.RUNNING, folder=tmp_path, calls=1, tokens=(12_000, 3_000))
    rows = (cli, counted)
    shown = meter_text(dataclasses.replace(_snapshot(rows), totals=totals_of(rows)))
    assert "tokens 12.0k+? in · 3.0k+? out · ? cached" in shown
