"""Reports: totals, exact-then-rounded costs, unknown prices, tables that cannot break."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import tracemalloc
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.inputs.settings.stored import settings_json
from flightdeck.engine.model import (
    Activity,
    BatchStatus,
    ChildStatus,
    SteerReceipt,
    SteerState,
    Usage,
)
from flightdeck.engine.records.markdown import render_markdown
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.report import build_report, render_json
from flightdeck.engine.records.store import Store

from helpers import settings, sim_route
from test_store import make_batch, make_child  # the store tests' row builders

CREATED = 1_714_564_800.0  # 2024-05-01T12:00:00Z


@pytest.fixture
def reader(tmp_path: Path) -> Iterator[StoreReader]:
    db = tmp_path / "flightdeck.db"
    with Store(db) as store:
        store.create_batch(make_batch("old", created_ts=CREATED - 100))
        store.create_batch(make_batch("b1", created_ts=CREATED, name="review | sweep"))
        store.add_children(
            "b1",
            [
                make_child(
                    0,
                    status=ChildStatus.COMPLETED,
                    activity=Activity(api_calls=3, tool_calls=2, retries=1),
                    usage=Usage(100, 50, 1000, 10),
                    cost_usd=Decimal("0.1234565"),
                    started_ts=CREATED + 1,
                    finished_ts=CREATED + 31.25,
                ),
                make_child(
                    1,
                    status=ChildStatus.FAILED,
                    goal="fix | the\nparser \x1b[31mnow\x1b[0m \\",
                    usage=Usage(10, 5, 0, 0),
                    cost_usd=None,
                    error="429 | rate limited\nretry-after: 3",
                    started_ts=CREATED + 2,
                    finished_ts=CREATED + 4,
                ),
                make_child(2, status=ChildStatus.STOPPED, cost_usd=Decimal("0.2")),
                make_child(3, status=ChildStatus.RUNNING, id="c3|x"),
                make_child(4, status=ChildStatus.GATED),
                make_child(5, status=ChildStatus.QUEUED),
            ],
        )
        store.finish_batch("b1", BatchStatus.FAILED, CREATED + 3725)
    reader = StoreReader(db)
    yield reader
    reader.close()


def test_build_report(reader: StoreReader) -> None:
    report = build_report(reader)  # the latest batch
    assert report["batch_id"] == "b1"
    assert report["status"] == "failed"
    assert report["created"] == "2024-05-01T12:00:00+00:00"
    assert report["finished"] == "2024-05-01T13:02:05+00:00"
    assert report["elapsed_s"] == 3725.0
    assert report["totals"] == {
        "children": 6,
        "completed": 1,
        "failed": 1,
        "stopped": 1,
        "superseded": 0,
        "paused": 0,
        "running": 1,
        "queued": 2,  # the gated child holds no slot: it is queued
        "tokens_in": 110,
        "tokens_out": 55,
        "cache_read_tokens": 1000,
        "cache_write_tokens": 10,
        "tokens_unknown_children": 0,
        "cost_usd": None,  # one child's price is unknown: so is the total
        "cost_known_usd": 0.3234565,  # the exact Decimal sum, not a sum of rounded parts
        "cost_unknown_children": 1,
        "cost_pending_children": 0,
        "cache_saved_usd": None,  # no settings kept in this row: the prices are unknown
        "cache_saved_known_usd": 0.0,
    }
    first, second = report["children"][:2]
    assert first == {
        "id": "c0",
        "status": "completed",
        "group": "g",
        "parent": None,
        "goal": "goal 0",
        "route": "sim",
        "model": "sim-1",
        "node": None,  # its work ran in the owner process (a cluster names the node)
        "api_calls": 3,
        "tool_calls": 2,
        "retries": 1,
        "tokens_in": 100,
        "tokens_out": 50,
        "cache_read_tokens": 1000,
        "cache_write_tokens": 10,
        "cost_usd": 0.1234565,
        "cost_known_usd": 0.1234565,  # all of it: its cost is known
        "cost_pending": False,
        "duration_s": 30.25,
        "error": None,
        "transcript": "batches/b1/c0.log",
        "attempt": 1,
        "superseded": False,
    }
    assert second["cost_usd"] is None and second["error"].startswith("429")
    assert second["cost_known_usd"] == 0.0  # nothing of it is known
    assert [c["duration_s"] for c in report["children"][2:]] == [None] * 4


def test_running_batch_elapsed_uses_now(reader: StoreReader) -> None:
    report = build_report(reader, "old", now=CREATED)
    assert report["finished"] is None and report["elapsed_s"] == 100.0
    assert report["totals"]["children"] == 0 and report["totals"]["cost_usd"] == 0.0
    assert report["totals"]["cost_known_usd"] == 0.0 and report["routes"] == []


def test_missing_batches(reader: StoreReader, tmp_path: Path) -> None:
    with pytest.raises(LookupError, match="no batch 'nope'"):
        build_report(reader, "nope")
    Store(tmp_path / "empty.db").close()
    with (
        StoreReader(tmp_path / "empty.db") as empty,
        pytest.raises(LookupError, match="no batches"),
    ):
        build_report(empty)


def test_render_json_round_trips_and_is_terminal_safe(reader: StoreReader) -> None:
    report = build_report(reader)
    text = render_json(report)
    assert json.loads(text) == report
    assert "\x1b" not in text and text.startswith('{\n  "batch_id"')


def _cells(row: str) -> list[str]:
    # Split on pipes that are not escaped (a backslash escapes the next character).
    return re.findall(r"((?:\\.|[^|\\])*)\|", row)[1:]


def test_render_markdown_tables_cannot_break(reader: StoreReader) -> None:
    md = render_markdown(build_report(reader))
    assert md.startswith("# flightdeck batch review | sweep\n")
    assert "\x1b" not in md
    lines = md.splitlines()
    header = lines.index("## Children") + 2
    rows = lines[header : header + 2 + 6]
    widths = {len(_cells(row)) for row in rows}
    assert widths == {15}, rows
    bad = rows[3]  # c1: pipes, a newline, escapes and a trailing backslash in the goal
    assert "fix \\| the parser now \\\\" in bad
    assert "429 \\| rate limited retry-after: 3" in bad
    assert "| unknown |" in bad
    assert "c3\\|x" in md
    totals = lines[lines.index("## Totals") + 2 : lines.index("## Routes") - 1]
    assert {len(_cells(row)) for row in totals} == {2}
    assert "| cost | $0.3235 + unknown for 1 child |" in md
    assert "| budget | $2.50 |" in md


def test_render_markdown_names_each_delegates_parent(reader: StoreReader) -> None:
    # Found by an audit: only the JSON said who delegated whom.
    report = build_report(reader)
    assert "| parent |" not in render_markdown(report)  # nobody delegated: no column
    report["children"][1]["parent"] = report["children"][0]["id"]
    lines = render_markdown(report).splitlines()
    header = lines.index("## Children") + 2
    assert _cells(lines[header])[:3] == [" id ", " parent ", " status "]
    rows = lines[header : header + 2 + 6]
    assert {len(_cells(row)) for row in rows} == {16}, rows
    parents = {_cells(row)[0].strip(): _cells(row)[1].strip() for row in rows[2:]}
    assert parents["c1"] == "c0" and parents["c0"] == ""


def test_render_markdown_childrens_tokens_add_up_to_their_lines(reader: StoreReader) -> None:
    # Found by a user: a child's row left its cache writes out, so its tokens came short of
    # the `tok` on its line (and of the Totals' cache write row).
    report = build_report(reader)
    child = report["children"][0]
    child.update(tokens_in=6, tokens_out=0, cache_read_tokens=0, cache_write_tokens=249)
    lines = render_markdown(report).splitlines()
    header = lines.index("## Children") + 2
    names = [cell.strip() for cell in _cells(lines[header])]
    (row,) = [line for line in lines if line.startswith(f"| {child['id']} |")]
    cells = dict(zip(names, (cell.strip() for cell in _cells(row)), strict=True))
    kinds = ("tokens in", "tokens out", "cache read", "cache write")
    assert [cells[k] for k in kinds] == ["6", "0", "0", "249"]


def test_render_markdown_truncates_long_goals(reader: StoreReader) -> None:
    report = build_report(reader)
    report["children"][0]["goal"] = "word " * 100
    md = render_markdown(report)
    (row,) = [line for line in md.splitlines() if line.startswith("| c0 |")]
    goal = _cells(row)[13].strip()
    assert len(goal) == 80 and goal.endswith("…")


def test_render_markdown_prose_carries_no_raw_html(tmp_path: Path) -> None:
    with Store(tmp_path / "f.db") as store:
        store.create_batch(make_batch("b1", name="<img src=x onerror=alert(1)> sweep"))
        store.add_children("b1", [make_child(0)])
    with StoreReader(tmp_path / "f.db") as r:
        md = render_markdown(build_report(r))
    assert md.startswith("# flightdeck batch &lt;img src=x onerror=alert(1)> sweep\n")
    assert "<" not in md


def test_render_markdown_makes_no_link_or_image_of_untrusted_text(tmp_path: Path) -> None:
    with Store(tmp_path / "f.db") as store:
        store.create_batch(make_batch("b1", name="![pixel](http://127.0.0.1:1/t.png) sweep"))
        child = dataclasses.replace(make_child(0), goal="see [click](javascript:alert(1)) \\")
        store.add_children("b1", [child])
    with StoreReader(tmp_path / "f.db") as r:
        md = render_markdown(build_report(r))
    assert md.startswith("# flightdeck batch !\\[pixel\\](http://127.0.0.1:1/t.png) sweep\n")
    assert "see \\[click\\](javascript:alert(1)) \\\\" in md
    assert not re.search(r"(?<!\\)\[", md)  # every bracket escaped: no link, no image


def _two_routes(tmp_path: Path) -> StoreReader:
    """A batch on a priced route and on one whose model has no known price."""
    unpriced = {"route": "gpt", "model": "no-such-model-zz", "cost_usd": None}
    with Store(tmp_path / "r.db") as store:
        store.create_batch(make_batch("b1", created_ts=CREATED))
        store.add_children(
            "b1",
            [
                make_child(0, status=ChildStatus.COMPLETED, usage=Usage(1, 2, 3, 4), **unpriced),
                make_child(1, status=ChildStatus.COMPLETED, cost_usd=Decimal("0.1")),
                make_child(2, status=ChildStatus.FAILED, usage=Usage(10, 20, 30, 40), **unpriced),
                make_child(3, status=ChildStatus.COMPLETED, cost_usd=Decimal("0.2")),
                make_child(4, route="a|b", model="m<1>", cost_usd=Decimal("0.25")),
            ],
        )
    return StoreReader(tmp_path / "r.db")


def test_routes_are_totalled_from_the_rows_exactly(tmp_path: Path) -> None:
    with _two_routes(tmp_path) as r:
        report = build_report(r)
    assert report["routes"] == [
        {
            "route": "a|b",
            "model": "m<1>",
            "children": 1,
            "completed": 0,
            "failed": 0,
            "stopped": 0,
            "superseded": 0,
            "paused": 0,
            "running": 0,
            "queued": 1,
            "tokens_in": 0,
            "tokens_out": 0,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "tokens_unknown_children": 0,
            "cost_usd": 0.25,
            "cost_known_usd": 0.25,
            "cost_unknown_children": 0,
            "cost_pending_children": 0,
            "cache_saved_usd": None,
            "cache_saved_known_usd": 0.0,
        },
        {
            "route": "gpt",
            "model": "no-such-model-zz",
            "children": 2,
            "completed": 1,
            "failed": 1,
            "stopped": 0,
            "superseded": 0,
            "paused": 0,
            "running": 0,
            "queued": 0,
            "tokens_in": 11,
            "tokens_out": 22,
            "cache_read_tokens": 33,
            "cache_write_tokens": 44,
            "tokens_unknown_children": 0,
            "cost_usd": None,  # unknown, never $0
            "cost_known_usd": 0.0,
            "cost_unknown_children": 2,
            "cost_pending_children": 0,
            "cache_saved_usd": None,
            "cache_saved_known_usd": 0.0,
        },
        {
            "route": "sim",
            "model": "sim-1",
            "children": 2,
            "completed": 2,
            "failed": 0,
            "stopped": 0,
            "superseded": 0,
            "paused": 0,
            "running": 0,
            "queued": 0,
            "tokens_in": 0,
            "tokens_out": 0,
            "cache_read_tokens": 0,
            "cache_write_tokens": 0,
            "tokens_unknown_children": 0,
            "cost_usd": 0.3,  # Decimal 0.1 + 0.2, where floats would give 0.30000000000000004
            "cost_known_usd": 0.3,
            "cost_unknown_children": 0,
            "cost_pending_children": 0,
            "cache_saved_usd": None,
            "cache_saved_known_usd": 0.0,
        },
    ]
    totals = report["totals"]
    assert (totals["cost_usd"], totals["cost_unknown_children"]) == (None, 2)
    assert totals["cost_known_usd"] == 0.55


def test_tokens_nobody_counted_are_unknown_never_zero(tmp_path: Path) -> None:
    # A command child whose CLI reports no usage ran (a call) and counted nothing.
    cli = {"route": "cli", "model": "reviewer", "cost_usd": None, "status": ChildStatus.COMPLETED}
    with Store(tmp_path / "t.db") as store:
        # Both routes priced: what the cli route's cache reads saved is unknown only because
        # its tokens are.
        priced = settings_json(settings(sim_route(), sim_route("cli")))
        store.create_batch(make_batch("b1", settings_json=priced))
        store.add_children(
            "b1",
            [
                make_child(0, activity=Activity(api_calls=1), **cli),
                make_child(1, status=ChildStatus.COMPLETED, usage=Usage(100, 50, 1000, 0)),
            ],
        )
    with StoreReader(tmp_path / "t.db") as r:
        report = build_report(r)
    uncounted, counted = report["children"]
    assert [uncounted[k] for k in ("tokens_in", "tokens_out", "cache_read_tokens")] == [None] * 3
    assert (counted["tokens_in"], counted["tokens_out"]) == (100, 50)
    routes = {r["route"]: r for r in report["routes"]}
    assert (routes["cli"]["tokens_unknown_children"], routes["cli"]["cache_saved_usd"]) == (1, None)
    assert routes["sim"]["tokens_unknown_children"] == 0 and routes["sim"]["cache_saved_usd"]
    totals = report["totals"]
    assert (totals["tokens_in"], totals["tokens_unknown_children"]) == (100, 1)
    assert totals["cache_saved_usd"] is None  # one route's saving is unknown: so is the sum
    # ...and the part known is the priced route's, as the summary and the meter add it up.
    assert totals["cache_saved_known_usd"] == routes["sim"]["cache_saved_usd"] > 0
    assert routes["cli"]["cache_saved_known_usd"] == 0
    md = render_markdown(report)
    assert "| input tokens | 100+? |" in md
    known = Decimal(str(routes["sim"]["cache_saved_usd"]))
    assert f"| cache saved | ${known} + unknown |" in md  # the known part, not left out
    assert "| c0 | completed | cli | reviewer | 1 | 0 | 0 | ? | ? | ? | ? | unknown |" in md


def test_an_attempt_whose_tokens_nobody_counted_has_unknown_tokens_not_zero() -> None:
    # A CLI that reports no usage, retried: each attempt's tokens were given as 0.
    from flightdeck.engine.control.attempts import retry_json
    from flightdeck.engine.records.attempts import attempt_records, markdown_lines

    cli = {"route": "cli", "cost_usd": None, "activity": Activity(api_calls=1)}
    first = make_child(0, status=ChildStatus.FAILED, **cli)
    now = make_child(0, status=ChildStatus.COMPLETED, attempt=2, **cli)
    counted = make_child(1, status=ChildStatus.FAILED, usage=Usage(100, 50))
    counted_now = make_child(1, status=ChildStatus.COMPLETED, attempt=2, usage=Usage(300, 90))
    assert first.tokens_unknown and now.tokens_unknown and not counted.tokens_unknown
    events = [
        (1.0, "c0", "retry", retry_json(first, 2, "fresh")),
        (2.0, "c1", "retry", retry_json(counted, 2, "fresh")),
    ]
    attempts = attempt_records(events, [now, counted_now])
    assert [(a["child_id"], a["tokens"]) for a in attempts] == [
        ("c0", None),
        ("c0", None),
        ("c1", 150),
        ("c1", 240),
    ]
    table = markdown_lines({"attempts": attempts}, str)
    assert "| c0 | 1 | first | failed | ? | unknown |  |" in table
    assert "| c1 | 2 | fresh | completed | 240 | $0.00 |  |" in table  # as every other $0


def test_an_attempt_s_cost_reads_as_every_other_cost_in_the_report() -> None:
    # The Attempts table wrote `$…:.4f`: a dollar or more as `$2.5000` (the Children table:
    # `$2.50`), and a spend under $0.0001 as `$0.0000`, a spend shown as nothing.
    from flightdeck.engine.control.attempts import retry_json
    from flightdeck.engine.records.attempts import attempt_records, markdown_lines

    big = make_child(0, status=ChildStatus.FAILED, cost_usd=Decimal("2.5"))
    big_now = make_child(0, status=ChildStatus.COMPLETED, attempt=2, cost_usd=Decimal("3.75"))
    tiny = make_child(1, status=ChildStatus.FAILED, cost_usd=Decimal("0.00004"))
    tiny_now = make_child(1, status=ChildStatus.FAILED, attempt=2, cost_usd=Decimal("0.00009"))
    events = [
        (1.0, "c0", "retry", retry_json(big, 2, "fresh")),
        (2.0, "c1", "retry", retry_json(tiny, 2, "fresh")),
    ]
    table = markdown_lines({"attempts": attempt_records(events, [big_now, tiny_now])}, str)
    costs = [line.split(" | ")[5] for line in table if line.startswith(("| c0 ", "| c1 "))]
    assert costs == ["$2.50", "$1.25", "<$0.0001", "<$0.0001"], table


def test_a_batch_whose_every_price_is_unknown_costs_unknown_not_zero(tmp_path: Path) -> None:
    unpriced = {"route": "gpt", "model": "no-such-model-zz", "cost_usd": None}
    with Store(tmp_path / "u.db") as store:
        store.create_batch(make_batch("b1", max_cost_usd=None))
        store.add_children("b1", [make_child(i, **unpriced) for i in range(2)])
    with StoreReader(tmp_path / "u.db") as r:
        report = build_report(r)
    totals = report["totals"]
    assert (totals["cost_usd"], totals["cost_known_usd"], totals["cost_unknown_children"]) == (
        None,
        0.0,
        2,
    )
    md = render_markdown(report)
    assert "| cost | unknown |" in md
    assert "$0" not in md


def test_render_markdown_routes_table(tmp_path: Path) -> None:
    with _two_routes(tmp_path) as r:
        md = render_markdown(build_report(r))
    lines = md.splitlines()
    start = lines.index("## Routes")
    assert lines.index("## Totals") < start < lines.index("## Children")
    table = lines[start + 2 : lines.index("## Children") - 1]
    assert table == [
        "| route | model | children | completed | failed | stopped | tokens in | tokens out "
        "| cache read | cache write | cost |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        "| a\\|b | m&lt;1> | 1 | 0 | 0 | 0 | 0 | 0 | 0 | 0 | $0.25 |",
        "| gpt | no-such-model-zz | 2 | 1 | 1 | 0 | 11 | 22 | 33 | 44 | unknown |",
        "| sim | sim-1 | 2 | 2 | 0 | 0 | 0 | 0 | 0 | 0 | $0.30 |",
    ]
    assert {len(_cells(row)) for row in table} == {11}
    assert "| cost | $0.55 + unknown for 2 children |" in md


def test_the_report_carries_the_operators_steers_and_stops(tmp_path: Path) -> None:
    db = tmp_path / "flightdeck.db"
    S = SteerState
    delivered = SteerReceipt(1, "c0", "focus | on [tests](x)", False, S.DELIVERED, CREATED + 5,
                             CREATED + 7)  # fmt: skip
    missed = SteerReceipt(2, "c1", "wrap up", True, S.MISSED, CREATED + 20, CREATED + 20)
    with Store(db) as store:
        store.create_batch(make_batch("b1", created_ts=CREATED))
        store.add_children("b1", [make_child(0), make_child(1)])
        store.record_control("b1", delivered)
        store.record_event("b1", "c0", CREATED + 5, "steer", delivered.message)
        store.record_event("b1", "c1", CREATED + 10, "stop", "stopped by operator")
        store.record_control("b1", missed)
    with StoreReader(db) as r:
        report = build_report(r)
    assert report["steers"] == [
        {"id": 1, "child_id": "c0", "message": "focus | on [tests](x)", "mode": "next_turn",
         "receipt": "delivered", "sent": "2024-05-01T12:00:05+00:00",
         "settled": "2024-05-01T12:00:07+00:00"},
        {"id": 2, "child_id": "c1", "message": "wrap up", "mode": "now", "receipt": "missed",
         "sent": "2024-05-01T12:00:20+00:00", "settled": "2024-05-01T12:00:20+00:00"},
    ]  # fmt: skip
    assert report["stops"] == [
        {
            "child_id": "c1",
            "requested": "2024-05-01T12:00:10+00:00",
            "reason": "stopped by operator",
        }
    ]
    lines = render_markdown(report).splitlines()
    table = lines[lines.index("## Operator") + 4 :]
    assert [_cells(row)[2] for row in table] == [
        " steer (at next turn) ",
        " stop ",
        " steer (interrupt now) ",
    ]  # in the order they happened
    assert "focus \\| on \\[tests\\](x)" in table[0]  # untrusted text cannot break the table
    assert table[0].endswith("| delivered 2024-05-01T12:00:07+00:00 |")
    assert table[1].startswith("| 2024-05-01T12:00:10+00:00 | c1 | stop | stopped by operator |")


def test_a_report_without_operator_actions_says_so(reader: StoreReader) -> None:
    report = build_report(reader)
    assert report["steers"] == [] and report["stops"] == []
    assert render_markdown(report).endswith("## Operator\n\nNo steers or stops.\n")


def test_the_report_reads_no_answer_so_its_memory_does_not_grow_with_them(
    tmp_path: Path,
) -> None:
    # Rows as an older flightdeck stored them: whole 4 MB answers, 20 MB in all.
    answers = [
        make_child(n, status=ChildStatus.COMPLETED, result="a" * 4_000_000) for n in range(5)
    ]
    with Store(tmp_path / "big.db") as store:
        store.create_batch(make_batch("b1", created_ts=CREATED))
        store.add_children("b1", answers)
    tracemalloc.start()
    try:
        with StoreReader(tmp_path / "big.db") as r:
            out = render_json(build_report(r)) + render_markdown(build_report(r))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(out) < 20_000
    assert peak < 2_000_000, f"peak {peak:,} bytes"
    with StoreReader(tmp_path / "big.db") as r:  # the answers are still there to read
        assert [len(c.result or "") for c in r.children("b1")] == [4_000_000] * 5
        assert {c.result for c in r.children("b1", results=False)} == {None}


def test_the_report_forecasts_the_cost_at_completion_and_shows_lost_attempts_apart(
    tmp_path: Path,
) -> None:
    db = tmp_path / "flightdeck.db"
    costs = ("0.10", "0.20", "0.30", "0.40")
    with Store(db) as store:
        store.create_batch(make_batch("b1", created_ts=CREATED))
        store.add_children(
            "b1",
            [
                *(
                    make_child(
                        i,
                        status=ChildStatus.COMPLETED,
                        cost_usd=Decimal(c),
                        started_ts=CREATED,
                        finished_ts=CREATED + 60,
                    )
                    for i, c in enumerate(costs)
                ),
                make_child(
                    4, status=ChildStatus.RUNNING, cost_usd=Decimal("0.12"), started_ts=CREATED
                ),
                make_child(5),
            ],
        )
        detail = json.dumps({"cost_usd": "0.07", "rerun": True})
        store.record_event("b1", "c4", CREATED + 5, "resumed", "{}")
        store.record_event("b1", "c4", CREATED + 5, "lost_attempt", detail)
    with StoreReader(db) as reader:
        report = build_report(reader, "b1", now=CREATED + 120)
    # spent $1.12; two not finished at the average $0.25 (the quartiles $0.175 and $0.325)
    assert report["forecast"] == {
        "finished": 4,
        "remaining": 2,
        "unpriced_children": 0,
        "projected_usd": 1.62,
        "low_usd": 1.47,
        "high_usd": 1.77,
        "lost_cost_usd": 0.07,
        "lost_cost_unknown": 0,
    }
    md = render_markdown(report)
    forecast = md.split("## Forecast\n\n")[1].split("\n\n")[0].splitlines()
    assert forecast == [
        "- projected cost at completion: $1.62 (range $1.47 to $1.77: the finished "
        "costs' 25th to 75th percentile)",
        "- children not finished: 2 of 6",
        "- lost attempts (re-runs after a lost owner or worker): $0.07, in the spend",
    ]
    assert "- resumed after a lost owner: once\n" in md  # not "1 time(s)"


def test_a_forecast_with_an_unknown_price_says_so_and_a_finished_batch_has_none(
    reader: StoreReader,
) -> None:
    report = build_report(reader, "b1")  # child 1 has no price; three have not finished
    assert report["forecast"]["projected_usd"] is None
    assert report["forecast"]["unpriced_children"] == 1
    assert "- projected cost at completion: unknown (1 without a price)" in (
        render_markdown(report)
    )
    old = build_report(reader, "old")  # nothing in it: no forecast section
    assert old["forecast"]["remaining"] == 0 and "## Forecast" not in render_markdown(old)


def test_paused_children_are_counted_so_the_totals_add_up(tmp_path: Path) -> None:
    # Found by an audit: the Markdown totals and the routes left paused children out, so
    # children 8 read as 1 completed + 2 running + 2 queued.
    statuses = [ChildStatus.COMPLETED, ChildStatus.PAUSED, ChildStatus.PAUSED, ChildStatus.QUEUED]
    with Store(tmp_path / "p.db") as store:
        store.create_batch(make_batch("b1"))
        store.add_children("b1", [make_child(i, status=s) for i, s in enumerate(statuses)])
    with StoreReader(tmp_path / "p.db") as r:
        report = build_report(r)
    [route] = report["routes"]
    assert (report["totals"]["paused"], route["paused"]) == (2, 2)
    md = render_markdown(report)
    assert "| paused | 2 |" in md
    counts = ("completed", "failed", "stopped", "paused", "running", "queued")
    shown = [int(re.search(rf"\| {c} \| (\d+) \|", md).group(1)) for c in counts]  # type: ignore[union-attr]
    assert sum(shown) == 4


def test_the_json_report_is_valid_unicode_with_a_lone_surrogate_in_a_question(
    tmp_path: Path,
) -> None:
    # Found by an audit: a model's question holding a JSON escape "\ud800" was kept in its
    # event's JSON detail and written back out as `\ud800`, which jq refuses to parse.
    from flightdeck.engine.api import Engine
    from flightdeck.engine.triage.needs import needs

    from helpers import batch, run_to_end, until
    from loopback import KEY_ENV, Loopback, Reply, ToolUse, route_for

    question = {"question": "ship \ud800 now?"}
    with Loopback(lambda _: Reply(tools=(ToolUse("a1", "ask_operator", question),))) as server:
        route = dataclasses.replace(route_for(server, "openai"), ask_operator=True)
        engine = Engine(batch(1), settings(route), state_dir=tmp_path, env={KEY_ENV: "sk-x"})
        engine.start()
        try:
            until(lambda: needs(engine.snapshot()), what="the question asked")
            engine.stop_all()
            run_to_end(engine)
        finally:
            engine.close()
    with StoreReader(tmp_path / "flightdeck.db") as r:
        text = render_json(build_report(r))
    assert "ship" in text and "\\ud800" not in text.lower()
    json.dumps(json.loads(text), ensure_ascii=False).encode("utf-8")  # no lone surrogate left


def test_render_markdown_spells_out_character_references(tmp_path: Path) -> None:
    """A goal, an error or a name is plain text, and `&#x202e;` in it is those 8 characters:
    a Markdown renderer (a browser's, Rich's in a terminal) decodes a character reference, so
    the report must not hand it one. A real batch on the sim, its report as `flightdeck report`
    prints it, rendered as HTML and in a terminal: no bidi override, no escape (it was both)."""
    from flightdeck.engine.api import Engine
    from flightdeck.engine.inputs.tasks import Batch, Task
    from markdown_it import MarkdownIt
    from rich.console import Console
    from rich.markdown import Markdown

    from helpers import flightdeck, run_to_end

    spoof = "&#x202e;gpj.exe &#8238;x &#X2067;y &#27;[31mred &amp; AT&T"
    batch = Batch(name=f"night {spoof}", tasks=(Task(id="t1", goal=f"review {spoof}", seq=0),))
    engine = Engine(batch, settings(sim_route()), state_dir=tmp_path / "state")
    engine.start()
    assert [r.status for r in run_to_end(engine).children] == [ChildStatus.COMPLETED]
    report = flightdeck("report", "--state-dir", str(tmp_path / "state"), cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    html = MarkdownIt("commonmark").enable("table").render(report.stdout)
    out = Console(file=io.StringIO(), force_terminal=True, width=400)
    out.print(Markdown(report.stdout))
    shown = out.file.getvalue()  # type: ignore[attr-defined]
    for rendered in (html, shown):
        assert not re.search("[\u202a-\u202e\u2066-\u2069\ufffd]", rendered), rendered
        assert "gpj.exe" in rendered and "AT&" in rendered
    # Read raw, it says what was written: one `&amp;` stands for each `&` of a reference.
    spelled = "review &amp;#x202e;gpj.exe &amp;#8238;x &amp;#X2067;y &amp;#27;\\[31mred"
    assert spelled in report.stdout, report.stdout
    assert "&amp;amp; AT&T" in report.stdout  # a lone `&` is left as it is
