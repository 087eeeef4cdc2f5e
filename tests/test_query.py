"""The query language (engine/triage/query.py): every term, and every error naming its term."""

from __future__ import annotations

import dataclasses
import re
from decimal import Decimal

import pytest
from flightdeck.engine.model import Activity, ChildRow, ChildStatus, LoopEvidence, Usage
from flightdeck.engine.triage.outliers import Medians, batch_medians
from flightdeck.engine.triage.query import QueryError, parse_filter, split_terms

NOW = 10_000.0


def row(
    child_id: str,
    status: ChildStatus = ChildStatus.RUNNING,
    *,
    route: str = "sim",
    group: str | None = None,
    tool: str | None = None,
    cost: str | None = "0",
    tokens: int = 0,
    last: float | None = NOW,
    error: str | None = None,
    depth: int = 0,
    goal: str = "review the code",
) -> ChildRow:
    return ChildRow(
        id=child_id,
        seq=int(child_id.rsplit("-", 1)[-1]) if child_id[-1].isdigit() else 0,
        goal=goal,
        group=group,
        route=route,
        model=route,
        status=status,
        activity=Activity(current_tool=tool, last_activity_ts=last),
        usage=Usage(input_tokens=tokens),
        cost_usd=None if cost is None else Decimal(cost),
        queued_ts=0.0,
        started_ts=None if status in (ChildStatus.QUEUED, ChildStatus.GATED) else 1.0,
        finished_ts=last if status.terminal else None,
        error=error,
        result=None,
        transcript="",
        depth=depth,
    )


ROWS = [
    row("c-1", route="claude", group="security", tool="read_file", cost="0.75", tokens=25_000),
    row("c-2", cost="0.25", tokens=19_999, last=NOW - 301, depth=1),
    row("c-3", ChildStatus.FAILED, error="Rate limit exceeded (429)", last=NOW - 7200),
    row("c-4", ChildStatus.QUEUED, last=None, cost=None),
    row("c-5", route="Claude", group="Security", goal="fix the rate limit docs", tokens=2_000_000),
]


def ids(query: str, tagged: frozenset[str] = frozenset()) -> list[str]:
    f = parse_filter(query)
    return [r.id for r in ROWS if f.matches(r, r.id in tagged, NOW)]


def test_fields() -> None:
    assert ids("status:running") == ["c-1", "c-2", "c-5"]
    assert ids("s:queued,failed") == ["c-3", "c-4"]
    assert ids("status:live status:done") == ids("")  # one field given twice: either value
    assert ids("route:claude") == ["c-1", "c-5"]  # case-insensitive
    assert ids("route:CLAUDE,sim") == [r.id for r in ROWS]
    assert ids("group:security") == ["c-1", "c-5"]
    assert ids("tool:read_file") == ["c-1"]
    assert ids('error:"rate limit"') == ["c-3"]  # a substring of the error only
    assert ids("error:429 error:exceeded") == ["c-3"]
    assert ids("is:tagged", frozenset({"c-2"})) == ["c-2"]


def test_comparisons_and_units() -> None:
    assert ids("cost>0.50") == ["c-1"]
    assert ids("cost>$0.50") == ["c-1"]
    assert ids("cost<=0.25") == ["c-2", "c-3", "c-5"]  # an unknown price matches no comparison
    assert ids("tokens>20k") == ["c-1", "c-5"]
    assert ids("tokens>=1.5M") == ["c-5"]
    assert ids("tokens<20000") == ["c-2", "c-3", "c-4"]
    assert ids("idle>5m") == ["c-2", "c-3"]  # a queued child is not idle: it waits
    assert ids("idle>300") == ids("idle>300s") == ["c-2", "c-3"]
    assert ids("idle>=2h") == ["c-3"]
    assert ids("idle<1m") == ["c-1", "c-5"]
    assert ids("depth>0") == ["c-2"]
    assert ids("depth<1") == ["c-1", "c-3", "c-4", "c-5"]


def test_terms_are_anded_with_free_text() -> None:
    assert ids(
        "status:running route:claude tool:read_file group:security cost>0.50 idle<5m "
        "tokens>20k depth<1"
    ) == ["c-1"]
    assert ids('"rate limit"') == ["c-3", "c-5"]  # a quoted phrase, in the error or the goal
    assert ids("rate limit docs") == ["c-5"]
    assert ids('"status:running"') == []  # a quoted term is text, never a field
    assert ids("") == [r.id for r in ROWS]
    assert not parse_filter("  ").active
    assert parse_filter("idle>1m").timed and not parse_filter("cost>1").timed


def test_split_terms() -> None:
    assert split_terms('a error:"rate  limit" "b c" d') == [
        ("a", False),
        ("error:rate  limit", False),
        ("b c", True),
        ("d", False),
    ]
    assert split_terms("don't") == [("don't", False)]  # only double quotes quote


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("stauts:running", "'stauts:running': unknown field 'stauts'"),
        ("cpu>3", "'cpu>3': unknown field 'cpu'"),
        ("status:bogus", "'status:bogus': unknown status 'bogus'"),
        ("status:running,", "'status:running,': unknown status ''"),
        ("status:", "'status:': status needs a value"),
        ("route:", "'route:': route needs a value"),
        ("is:live", "'is:live': one of is:tagged, is:looping, is:outlier"),
        ("cost:0.5", "'cost:0.5': cost is compared, e.g. cost>0.50"),
        ("status>1", "'status>1': status is not compared"),
        ("cost>", "'cost>': cost needs a number"),
        ("cost>abc", "'cost>abc': cost needs a number"),  # it said: unknown unit 'c' for cost
        ("cost>$", "'cost>\\$': cost needs a number"),
        ("cost>nan", "'cost>nan': cost needs a number"),
        ("idle>soon", "'idle>soon': idle needs a number"),
        ("tokens>lots", "'tokens>lots': tokens needs a number"),
        ("tokens>20q", "'tokens>20q': unknown unit 'q' for tokens"),
        ("tokens>k", "'tokens>k': tokens needs a number"),
        ("idle>5d", "'idle>5d': unknown unit 'd' for idle"),
        ("idle>-5m", "'idle>-5m': idle needs a number"),
        ("depth>0.5", "'depth>0.5': depth is a whole number"),
        ("depth>1k", "'depth>1k': unknown unit 'k' for depth"),
        ("a>b", "'a>b': unknown field 'a'"),
        ('error:"rate limit', "unclosed quote"),
    ],
)
def test_every_error_names_the_term(query: str, message: str) -> None:
    with pytest.raises(QueryError, match=message):
        parse_filter(query)
    with pytest.raises(QueryError) as caught:
        parse_filter("status:running " + query)
    assert "\n" not in str(caught.value)


def test_is_tagged_refused_without_tags() -> None:
    with pytest.raises(QueryError, match="'is:tagged': nothing is tagged here"):
        parse_filter("is:tagged", tags=False)


def test_is_looping_picks_the_children_flagged_as_looping() -> None:
    looping = dataclasses.replace(
        row("c-8"), loop=LoopEvidence("repeat", "x called 5 times", ("x {}",) * 5, NOW)
    )
    rows = [*ROWS, looping]
    for f in (parse_filter("is:looping"), parse_filter("is:looping status:running", tags=False)):
        assert [r.id for r in rows if f.matches(r, now=NOW)] == ["c-8"]
    assert not parse_filter("is:looping status:failed").matches(looping, now=NOW)


def test_unchanged_rows_use_live_cost() -> None:
    # The cost compared is what the column shows: billed plus the call in flight.
    base = row("c-9", cost="0.40")
    streaming = dataclasses.replace(base, in_flight_cost_usd=Decimal("0.2"))
    f = parse_filter("cost>0.5")
    assert not f.matches(base, now=NOW) and f.matches(streaming, now=NOW)


def test_is_outlier_keeps_rows_over_three_times_a_median() -> None:
    def ran(child_id: str, tokens: int, started: float, finished: float | None) -> ChildRow:
        base = row(child_id, ChildStatus.COMPLETED if finished else ChildStatus.RUNNING)
        return dataclasses.replace(
            base, usage=Usage(input_tokens=tokens), started_ts=started, finished_ts=finished
        )

    rows = [
        ran("c-1", 1_000, NOW - 60, NOW - 30),  # 30 s
        ran("c-2", 1_200, NOW - 40, NOW - 10),  # 30 s
        ran("c-3", 900, NOW - 100, None),  # running 100 s: over 3x the 30 s median
        ran("c-4", 5_000, NOW - 50, NOW - 20),  # tokens over 3x the 1,100 median
        ran("c-5", 0, NOW - 40, NOW - 10),  # no tokens: not in the tokens' median
        row("c-6", ChildStatus.QUEUED, last=None),  # not started: in neither median
    ]
    medians = batch_medians(rows, NOW)
    assert medians.tokens == 1_100 and medians.run_s == 30
    assert [medians.outlier(r) for r in rows] == [None, None, "time", "tokens", None, None]
    assert round(medians.ratio(rows[3], "tokens"), 2) == 4.55
    f = parse_filter("is:outlier")
    assert f.timed  # the medians move with the batch: checked again every poll
    assert [r.id for r in rows if f.matches(r, now=NOW, medians=medians)] == ["c-3", "c-4"]
    assert not f.matches(rows[3], now=NOW)  # without the batch's medians nothing is kept
    assert parse_filter("is:outlier", tags=False).outliers_only  # --where too
    both = parse_filter("is:outlier tokens>2k")
    assert [r.id for r in rows if both.matches(r, now=NOW, medians=medians)] == ["c-4"]


def test_outliers_need_a_median_to_be_over() -> None:
    # One child, or none with tokens: no median to be 3x over, no outlier.
    alone = dataclasses.replace(row("c-1"), usage=Usage(input_tokens=10))
    assert batch_medians([alone], NOW).outlier(alone) is None
    assert batch_medians([], NOW) == Medians(now=NOW)


def test_the_help_screen_lists_every_field_and_is_value_of_the_language() -> None:
    from flightdeck.engine.triage.query import NUMERIC_FIELDS, TEXT_FIELDS
    from flightdeck.tui.screens.help import FILTER_HELP

    with pytest.raises(QueryError) as refused:
        parse_filter("is:bogus")
    values = re.findall(r"is:[\w-]+", str(refused.value).split(": ", 1)[1])
    assert values, refused.value
    shown = " ".join(term for term, _ in FILTER_HELP)
    named = set(re.findall(r"\b([a-z]+)[:<>]", shown)) | set(re.findall(r"is:[\w-]+", shown))
    assert {*TEXT_FIELDS, *NUMERIC_FIELDS, *values} - named == set()
