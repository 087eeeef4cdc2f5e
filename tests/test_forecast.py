"""The money forecast against a batch whose costs are known exactly."""

from __future__ import annotations

import json
from decimal import Decimal

from flightdeck.engine.model import ChildRow, ChildStatus, Usage
from flightdeck.engine.records.forecast import (
    Forecast,
    burn_rate,
    forecast,
    lost_attempts,
    lost_cost,
)

from test_store import make_child  # the store tests' row builder

S = ChildStatus
D = Decimal


def _batch() -> list[ChildRow]:
    """Four finished ($0.10, $0.20, $0.30, $0.40), two running, four queued."""
    done = [
        make_child(i, status=s, cost_usd=D(c), started_ts=1000.0, finished_ts=1060.0 * (i + 1))
        for i, (s, c) in enumerate(
            [(S.COMPLETED, "0.10"), (S.FAILED, "0.20"), (S.STOPPED, "0.30"), (S.COMPLETED, "0.40")]
        )
    ]
    running = [
        make_child(4, status=S.RUNNING, cost_usd=D("0.05"), started_ts=1000.0),
        # a call in progress counts as it streams
        make_child(5, status=S.RUNNING, cost_usd=D("0.10"), in_flight_cost_usd=D("0.02"),
                   started_ts=1000.0),
    ]  # fmt: skip
    queued = [make_child(6 + i) for i in range(4)]
    return done + running + queued


def test_the_projection_is_the_spend_plus_the_average_for_each_child_not_finished() -> None:
    got = forecast(_batch())
    spent = D("1.00") + D("0.05") + D("0.12")  # finished, then running (billed and in flight)
    # six not finished; average $0.25, quartiles (inclusive) $0.175 and $0.325
    assert got == Forecast(
        finished=4,
        remaining=6,
        unpriced=0,
        projected_usd=spent + 6 * D("0.25"),
        low_usd=spent + 6 * D("0.175"),
        high_usd=spent + 6 * D("0.325"),
    )
    assert got.projected_usd == D("2.67") and got.low_usd == D("2.22") and got.high_usd == D("3.12")


def test_superseded_delegates_and_earlier_attempts_count_as_spent_never_as_samples() -> None:
    # Found by an audit: two superseded $0 delegates were the only finished children, and the
    # projection read $0 for every child still running; a re-run child queued again left
    # its lost attempt's spend out of what was spent.
    batch = _batch()
    cut = [
        make_child(10 + i, status=S.STOPPED, cost_usd=D("0.01"), superseded=True,
                   started_ts=1000.0, finished_ts=1001.0)
        for i in range(2)
    ]  # fmt: skip
    again = make_child(12, cost_usd=D("0.07"))  # queued again, its lost attempt's spend kept
    got = forecast(batch + cut + [again])
    spent = D("1.00") + D("0.05") + D("0.12") + D("0.02") + D("0.07")
    assert (got.finished, got.remaining) == (6, 7)
    assert got.projected_usd == spent + 7 * D("0.25")  # the four real finishes' average


def test_the_projection_lies_within_its_range_when_one_child_costs_far_more() -> None:
    # Four finished at $0.01 and one at $0.20: the average ($0.048) is above the 75th
    # percentile ($0.01). The range was $0.01 each, the projection outside it.
    costs = ["0.01", "0.01", "0.01", "0.01", "0.20"]
    done = [
        make_child(i, status=S.COMPLETED, cost_usd=D(c), started_ts=1.0, finished_ts=2.0)
        for i, c in enumerate(costs)
    ]
    got = forecast(done + [make_child(5 + i) for i in range(10)])
    assert got.low_usd is not None and got.projected_usd is not None and got.high_usd is not None
    assert got.low_usd <= got.projected_usd <= got.high_usd
    assert got.projected_usd == D("0.24") + D("0.048") * 10
    assert (got.low_usd, got.high_usd) == (D("0.24") + D("0.01") * 10, got.projected_usd)


def test_once_all_have_finished_the_projection_is_what_was_spent() -> None:
    done = [r for r in _batch() if r.status.terminal]
    got = forecast(done)
    assert got.remaining == 0
    assert got.projected_usd == got.low_usd == got.high_usd == D("1.00")


def test_no_projection_before_anything_finishes_and_one_finished_gives_no_spread() -> None:
    batch = _batch()
    assert forecast(batch[4:]).projected_usd is None  # running and queued only
    assert not forecast(batch[4:]).known
    one = forecast([batch[0], *batch[6:]])
    assert one.projected_usd == one.low_usd == one.high_usd == D("0.10") * 5


def test_an_unknown_price_leaves_the_projection_unknown_never_zero() -> None:
    batch = _batch()
    batch[4] = make_child(4, status=S.RUNNING, cost_usd=None, started_ts=1000.0)
    got = forecast(batch)
    assert got.unpriced == 1
    assert got.projected_usd is None and got.low_usd is None and got.high_usd is None
    batch[4] = make_child(4, status=S.RUNNING, cost_usd=D("0"), in_flight_cost_usd=None)
    assert forecast(batch).projected_usd is None  # the call in progress has no price either


def test_a_child_queued_again_after_spend_of_unknown_cost_leaves_the_projection_unknown() -> None:
    # Found by a review: a retried agent CLI child whose stop made its cost unknown (the part
    # known kept, `cost_floor_usd`) was counted as $0 spent, and the projection (and the soft
    # budget's hold on it) read a number, short of what was spent.
    batch = _batch()
    again = make_child(12, cost_usd=None, cost_floor_usd=D("0.07"), usage=Usage(1000, 100))
    got = forecast([*batch, again])
    assert got.unpriced == 1 and got.projected_usd is None
    # Its earlier attempt counted no token and nothing of its cost is known: only the events
    # tell it from a fresh child (`carried_unknown`); it read as one, and the projection as a
    # number while spent read `$X+?`.
    carried = forecast([*batch, make_child(12, cost_usd=None, carried_unknown=True)])
    assert carried.unpriced == 1 and carried.projected_usd is None
    # Queued, never run, on a route whose spend is unknown until billed: nothing spent yet.
    fresh = forecast([*batch, make_child(12, cost_usd=None)])
    assert fresh.unpriced == 0
    assert fresh.projected_usd == forecast([*batch, make_child(12)]).projected_usd is not None


def test_burn_rate_is_the_live_cost_over_the_running_time() -> None:
    running = make_child(5, status=S.RUNNING, cost_usd=D("0.10"), in_flight_cost_usd=D("0.02"),
                         started_ts=1000.0)  # fmt: skip
    assert burn_rate(running, now=1030.0) == D("0.24")  # $0.12 in half a minute
    ended = make_child(0, status=S.COMPLETED, cost_usd=D("0.30"), started_ts=1000.0,
                       finished_ts=1090.0)  # fmt: skip
    assert burn_rate(ended, now=5000.0) == D("0.2")  # its own running time, not the clock's
    assert burn_rate(make_child(1), now=1030.0) is None  # not started
    assert burn_rate(running, now=1000.0) is None  # no time has passed
    unpriced = make_child(2, status=S.RUNNING, cost_usd=None, started_ts=1000.0)
    assert burn_rate(unpriced, now=1030.0) is None


def test_lost_attempts_are_summed_from_the_events_and_one_unpriced_makes_them_unknown() -> None:
    def lost(cost: str | None, child: str = "c1") -> tuple[float, str | None, str, str]:
        return (1.0, child, "lost_attempt", json.dumps({"cost_usd": cost, "rerun": True}))

    def retry(cost: str | None) -> tuple[float, str | None, str, str]:
        return (1.0, "c1", "retry", json.dumps({"attempt": 2, "before": {"cost_usd": cost}}))

    resumed = (0.5, None, "resumed", json.dumps({"lost_cost_usd": "9"}))  # not summed twice
    assert lost_cost([resumed, lost("0.01"), lost("0.003", "c2")]) == D("0.013")
    assert lost_cost([resumed]) == 0
    assert lost_cost([lost("0.01"), lost(None)]) is None
    # A lost attempt's row holds what earlier attempts carried into it: each counts its own.
    # Found by a review: two crashes of one child's runs counted the first attempt twice, and
    # an attempt the operator had stopped (then retried) counted as lost.
    assert lost_cost([lost("0.01"), lost("0.025")]) == D("0.025")
    assert lost_cost([retry("0.004"), lost("0.006")]) == D("0.002")
    assert lost_attempts([retry(None), lost("0.006")]).unknown == 1


def test_a_child_billed_nothing_is_no_sample_of_what_a_child_costs() -> None:
    # A model child whose calls were refused (a 401, a stop in a 429's backoff) costs a known
    # $0 even on a route with no price: as a sample, the batch's other children, to be billed
    # at a price nobody knows, were forecast at $0.00.
    refused = make_child(0, status=S.FAILED, cost_usd=D(0), started_ts=1.0, finished_ts=2.0)
    waiting = make_child(1, status=S.RUNNING, cost_usd=D(0), started_ts=1.0)  # in a backoff
    got = forecast([refused, waiting, make_child(2)])
    assert (got.finished, got.remaining, got.unpriced) == (1, 2, 0)
    assert got.projected_usd is None and not got.known
    # A child of a free model (a price of 0) did its work: a sample of $0 all the same.
    free = make_child(3, status=S.COMPLETED, cost_usd=D(0), usage=Usage(120, 30, 0, 0),
                      started_ts=1.0, finished_ts=2.0)  # fmt: skip
    assert forecast([refused, free, make_child(2)]).projected_usd == D(0)
