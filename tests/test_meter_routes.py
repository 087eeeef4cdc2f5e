"""Per-route totals from child rows, and costs nobody can price shown as unknown, never as $0."""

from __future__ import annotations

import dataclasses
from decimal import Decimal

import pytest
from flightdeck.engine.model import (
    BatchStatus,
    ChildRow,
    ChildStatus,
    RouteTotals,
    Snapshot,
    Totals,
    Usage,
)
from flightdeck.engine.records.forecast import forecast
from flightdeck.engine.records.meter import RowTally, route_totals, totals_of
from flightdeck.tui.fmt import fmt_spent
from flightdeck.tui.widgets import meter
from flightdeck.tui.widgets.meter import CostMeter
from textual.app import App, ComposeResult

from test_store import make_child  # the store tests' row builder

S = ChildStatus


def _rows() -> list[ChildRow]:
    unpriced = {"route": "gpt", "model": "no-such-model-zz", "cost_usd": None}
    return [
        make_child(0, status=S.COMPLETED, usage=Usage(1, 2, 3, 4), cost_usd=Decimal("0.1")),
        make_child(1, status=S.RUNNING, usage=Usage(10, 20, 30, 40), **unpriced),
        make_child(2, status=S.STOPPED, usage=Usage(5, 0, 0, 0), cost_usd=Decimal("0.2")),
        make_child(3, status=S.QUEUED, route="gpt", model="no-such-model-zz"),  # unbilled: $0
        make_child(4, status=S.GATED, route="alpha", model="a-1", cost_usd=Decimal("1e-7")),
        make_child(5, status=S.COMPLETED, started_ts=1.0, **unpriced),  # it ran
    ]


def test_route_totals_group_the_rows_by_route_exactly() -> None:
    assert route_totals(_rows()) == (
        # a gated child holds no slot: it is queued, not running
        RouteTotals("alpha", "a-1", Totals(children=1, queued=1, cost_usd=Decimal("0.0000001"))),
        RouteTotals(
            "gpt",
            "no-such-model-zz",
            Totals(
                children=3,
                queued=1,
                running=1,
                completed=1,
                usage=Usage(10, 20, 30, 40),
                cost_usd=Decimal(0),
                cost_unknown=2,
            ),
        ),
        RouteTotals(
            "sim",
            "sim-1",
            Totals(
                children=2,
                completed=1,
                stopped=1,  # stopped is not failed
                usage=Usage(6, 2, 3, 4),
                cost_usd=Decimal("0.3"),  # exact: no float ever held it
            ),
        ),
    )


def test_route_totals_add_up_to_the_batch_totals() -> None:
    rows = _rows()
    parts = [r.totals for r in route_totals(rows)]
    batch = totals_of(rows)
    assert batch.cost_usd == sum((t.cost_usd for t in parts), Decimal(0)) == Decimal("0.3000001")
    assert batch.usage == sum((t.usage for t in parts), Usage())
    for name in ("children", "queued", "running", "completed", "failed", "stopped", "cost_unknown"):
        assert getattr(batch, name) == sum(getattr(t, name) for t in parts), name
    assert route_totals([]) == ()


def _ended_rows() -> tuple[ChildRow, ...]:
    ended = (S.COMPLETED, S.FAILED, S.TIMED_OUT, S.STALLED, S.UNKNOWN, S.STOPPED, S.STOPPED)
    return tuple(make_child(i, status=status) for i, status in enumerate(ended))


def test_stopped_children_are_counted_apart_from_failed() -> None:
    totals = totals_of(_ended_rows())
    assert (totals.completed, totals.failed, totals.stopped) == (1, 4, 2)
    assert totals.done == totals.children == 7


@pytest.mark.parametrize(
    ("known", "unknown", "shown"),
    [
        (Decimal(0), 0, ("$0.00", "")),  # nothing unknown: a real $0
        (Decimal("0.25"), 0, ("$0.25", "")),
        (Decimal("0.25"), 2, ("$0.25", " (+2 unknown)")),
        (Decimal(0), 2, ("$?", " (2 unknown)")),  # only unknown prices spent: no total to show
    ],
)
def test_fmt_spent(known: Decimal, unknown: int, shown: tuple[str, str]) -> None:
    assert fmt_spent(known, unknown) == shown


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Textual runs on asyncio


class _MeterApp(App[None]):
    def compose(self) -> ComposeResult:
        yield CostMeter(id="meter")


async def meter_text(snap: Snapshot) -> str:
    """What the cost meter shows of `snap`, at its `now` of 30 s."""
    app = _MeterApp()
    async with app.run_test(size=(160, 4)):
        meter = app.query_one(CostMeter)
        meter.show(snap, 30.0)
        return str(meter.render())


@pytest.mark.anyio
async def test_the_cost_meter_shows_no_zero_dollars_when_every_price_is_unknown() -> None:
    rows = tuple(
        dataclasses.replace(make_child(i, status=S.COMPLETED, cost_usd=None), route="gpt")
        for i in range(2)
    )
    snap = Snapshot("b1", BatchStatus.RUNNING, 0.0, 30.0, rows, totals_of(rows), pool_size=2)
    text = await meter_text(snap)
    assert "spent $? (2 unknown)" in text
    assert "burn $?/min" in text
    assert "$0" not in text


@pytest.mark.anyio
async def test_a_priced_cli_child_stopped_mid_turn_is_unknown_on_the_meter_not_unpriced() -> None:
    # Found by a walk-through: Claude Code stopped in its tool, on a route with a price, made
    # the meter read `spent $0.4765 (+1 unpriced)` (and the headless bar `running $0.4765 (+1
    # unpriced)`): its price was known, the calls its CLI never reported were not.
    from flightdeck.tui.output import progress_label

    done = make_child(0, status=S.COMPLETED, cost_usd=Decimal("0.4765"), route="claude-code")
    cut = make_child(1, status=S.STOPPED, usage=Usage(12894, 1, 0, 0), route="claude-code")
    rows = (done, dataclasses.replace(cut, cost_usd=None), make_child(2, status=S.RUNNING))
    snap = Snapshot("b1", BatchStatus.RUNNING, 0.0, 30.0, rows, totals_of(rows), pool_size=2)
    text = await meter_text(snap)
    assert "spent $0.4765 (+1 unknown)" in text, text
    assert "unpriced" not in text + progress_label(snap)
    assert progress_label(snap).startswith("running  $0.4765 (+1 unknown)")


@pytest.mark.anyio
async def test_the_cost_meter_shows_stopped_apart_from_failed() -> None:
    rows = _ended_rows()
    snap = Snapshot("b1", BatchStatus.STOPPED, 0.0, 30.0, rows, totals_of(rows), pool_size=2)
    text = await meter_text(snap)
    assert "7/7 done" in text
    assert "✗ 4 failed   ■ 2 stopped" in text


@pytest.mark.anyio
async def test_the_cost_meter_freezes_elapsed_and_shows_no_burn_once_the_batch_ends() -> None:
    rows = (make_child(0, status=S.COMPLETED, cost_usd=Decimal("1.5")),)
    snap = Snapshot(
        "b1", BatchStatus.COMPLETED, 0.0, 100.0, rows, totals_of(rows), 2, finished_ts=90.0
    )
    app = _MeterApp()
    async with app.run_test(size=(160, 4)):
        meter = app.query_one(CostMeter)
        shown = []
        for now in (90.0, 100.0, 400.0, 4000.0):  # polls go on after the end
            meter.show(dataclasses.replace(snap, now=now), now)
            shown.append(str(meter.render()))
    assert len(set(shown)) == 1, shown
    # Once it has ended nothing burns: it used to show the batch's average, `burn $1.00/min`.
    assert "elapsed 1:30" in shown[0] and "burn —" in shown[0]
    assert "/min" not in shown[0]


@pytest.mark.anyio
async def test_an_ended_batchs_unpriced_spend_burns_nothing_either() -> None:
    rows = (make_child(0, status=S.COMPLETED, cost_usd=None),)
    snap = Snapshot(
        "b1", BatchStatus.COMPLETED, 0.0, 30.0, rows, totals_of(rows), 2, finished_ts=20.0
    )
    text = await meter_text(snap)
    assert "burn —" in text and "/min" not in text, text


def test_an_abandoned_batch_burns_nothing_and_its_frozen_clock_makes_no_average() -> None:
    # Found by a walk-through: an owner that died (its disk full) two seconds in, its heartbeat
    # never stamped after the first: $0.0041 over 0.01 s read `burn $22.64/min`.
    row = make_child(0, status=S.RUNNING, started_ts=0.0, cost_usd=Decimal("0.0041"))
    snap = Snapshot(
        "b1", BatchStatus.ABANDONED, 0.0, 50.0, (row,), totals_of((row,)), 2, finished_ts=0.01
    )
    assert CostMeter().burn_per_min(snap, 50.0) is None  # the meter shows `burn —`


def test_an_abandoned_batchs_running_children_are_said_left_running_not_running() -> None:
    # Found by walk-throughs: the meter of a batch whose owner died read "● 2 running", beside
    # the banner saying nothing runs it.
    rows = tuple(make_child(i, status=S.RUNNING, started_ts=0.0) for i in range(2))
    for status, full, compact in (
        (BatchStatus.ABANDONED, "● 2 left running", "●2 left "),
        (BatchStatus.RUNNING, "● 2 running", "●2 run "),
    ):
        snap = Snapshot("b1", status, 0.0, 50.0, rows, totals_of(rows), 2)
        for is_compact, said in ((False, full), (True, compact)):
            text = meter.meter_text(snap, 50.0, None, forecast(rows), compact=is_compact).plain
            assert said in text.splitlines()[0], text


def test_the_burn_rate_never_goes_below_zero_when_an_estimate_is_billed_for_less() -> None:
    # A call in flight is priced as fresh input; billed, its prompt read from the cache costs
    # less. The live cost falls, but nothing was refunded: burning, not -$0.18 a minute.
    estimated = make_child(
        0,
        status=S.RUNNING,
        started_ts=0.0,
        cost_usd=Decimal("0.10"),
        in_flight=Usage(input_tokens=20_000),
        in_flight_cost_usd=Decimal("0.05"),
    )
    billed = dataclasses.replace(
        estimated, cost_usd=Decimal("0.12"), in_flight=Usage(), in_flight_cost_usd=Decimal(0)
    )
    meter = CostMeter()
    for rows, now in (((estimated,), 1000.0), ((billed,), 1010.0)):
        snap = Snapshot("b1", BatchStatus.RUNNING, 0.0, now, rows, totals_of(rows), 2)
        burn = meter.burn_per_min(snap, now)
    assert snap.totals.live_cost_usd == Decimal("0.12")  # from 0.15 ten seconds before
    assert burn == Decimal(0)


def test_attached_to_a_running_batch_the_burn_rate_counts_the_minute_before_the_attach() -> None:
    # Attached ten minutes into a batch that spent $6.00 ($0.60 a minute) and whose calls are
    # all still out: measured from the attach alone, it read $0.00/min after five seconds.
    row = make_child(0, status=S.RUNNING, started_ts=0.0, cost_usd=Decimal("6.00"))
    meter = CostMeter()
    for now in (600.0, 610.0):
        snap = Snapshot("b1", BatchStatus.RUNNING, 0.0, now, (row,), totals_of((row,)), 2)
        burn = meter.burn_per_min(snap, now)
    # 50 s of the minute before the attach, at the batch's average, and nothing since.
    assert burn == Decimal("0.50")
    for now in (640.0, 670.0):  # a whole minute watched: what it saw, nothing
        snap = dataclasses.replace(snap, now=now)
        burn = meter.burn_per_min(snap, now)
    assert burn == Decimal(0)


@pytest.mark.anyio
async def test_the_cost_meter_says_a_cache_saving_is_partly_unknown() -> None:
    # A CLI child whose tokens nobody counted: what its cache saved is unknown, as the report
    # and the summary say; the priced child's $0.01 alone is not the whole.
    priced = make_child(0, status=S.COMPLETED, cost_usd=Decimal("0.1"))
    priced = dataclasses.replace(priced, cache_saved_usd=Decimal("0.01"))
    uncounted = make_child(1, status=S.COMPLETED, route="cli", cost_usd=None)
    uncounted = dataclasses.replace(
        uncounted, activity=dataclasses.replace(uncounted.activity, api_calls=1)
    )
    assert uncounted.tokens_unknown
    shown = []
    app = _MeterApp()
    async with app.run_test(size=(160, 4)):
        meter = app.query_one(CostMeter)
        for rows in ((priced,), (priced, uncounted)):
            snap = Snapshot("b1", BatchStatus.RUNNING, 0.0, 30.0, rows, totals_of(rows), 2)
            meter.show(snap, 30.0)
            shown.append(str(meter.render()))
    assert "(saved $0.01)" in shown[0]
    assert "(saved $0.01+?)" in shown[1]


def test_a_tally_takes_back_a_saving_it_counted_unknown() -> None:
    uncounted = make_child(0, status=S.RUNNING, route="cli", cost_usd=None)
    uncounted = dataclasses.replace(
        uncounted, activity=dataclasses.replace(uncounted.activity, api_calls=1)
    )
    tally = RowTally()
    tally.add(uncounted)
    assert tally.totals().saved_unknown == 1
    tally.remove(uncounted)
    assert tally.totals().saved_unknown == 0
