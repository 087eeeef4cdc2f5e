"""Live limits on a running batch (pool size, a route's max_concurrent and rpm/tpm) and the
soft budget: applied by the coordinator at once, recorded as the operator's, kept on resume."""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.control import softbudget
from flightdeck.engine.control.throttle import RateLimiter
from flightdeck.engine.inputs.settings import Budget, Route
from flightdeck.engine.model import BatchStatus, ChildStatus
from flightdeck.engine.model.livelimits import LimitError, parse_money
from flightdeck.engine.money import fmt_usd
from flightdeck.engine.records.forecast import forecast
from flightdeck.engine.records.reader import StoreReader

from helpers import (
    Hold,
    announced,
    batch,
    run_to_end,
    settings,
    sim_route,
    start,
    stepped,
    stops_asked,
    until,
)


def held(hold: Hold, **options: object) -> Route:
    """A sim route whose children stream until the test stops them (held mid-answer)."""
    return sim_route(tool_turns=0, **hold.options(), **options)  # type: ignore[arg-type]


def _overlaps(rows: list, at: float) -> int:
    """How many of `rows` were running at the instant `at`."""
    return sum(
        1
        for r in rows
        if r.started_ts is not None and r.started_ts < at and (r.finished_ts or 1e18) > at
    )


def test_lowering_the_pool_interrupts_nothing_and_admits_only_once_under(
    tmp_path: Path, hold: Hold
) -> None:
    engine = start(batch(8), settings(held(hold), pool=4), tmp_path)
    ended = announced(engine)
    try:
        until(lambda: engine.snapshot().totals.running == 4)
        engine.set_limits({"pool_size": 1})
        until(lambda: engine.snapshot().pool_size == 1)
        stepped(engine)  # the coordinator has acted on it: nothing stops, nothing starts
        snap = engine.snapshot()
        assert (snap.totals.running, snap.totals.queued, snap.totals.stopped) == (4, 4, 0)
        assert not stops_asked(engine)
        engine.stop(["t0000", "t0001", "t0002"])  # 1 left: not under the pool of 1 yet
        until(lambda: ended >= {"t0000", "t0001", "t0002"}, what="the three stops heard")
        stepped(engine)  # admission has looked at the three slots freed
        assert engine.snapshot().totals.running == 1
        assert engine.snapshot().totals.queued == 4
        engine.stop(["t0003"])  # now under: one more, and only one, starts
        until(lambda: "t0003" in ended, what="t0003's stop heard")
        stepped(engine)
        assert engine.snapshot().child("t0004").status is ChildStatus.RUNNING  # type: ignore[union-attr]
        assert engine.snapshot().totals.running == 1
    finally:
        engine.close()


def test_raising_the_pool_starts_more_at_once_beyond_the_threads_it_began_with(
    tmp_path: Path, hold: Hold
) -> None:
    engine = start(batch(20), settings(held(hold), pool=2), tmp_path)
    try:
        until(lambda: engine.snapshot().totals.running == 2)
        threads = engine._pool.pool.threads  # type: ignore[union-attr]
        engine.set_limits({"pool_size": 12})
        until(lambda: engine.snapshot().totals.running == 12)
        assert engine._pool.pool.threads >= 12 > 2 + 4  # type: ignore[union-attr]
        assert threads <= 2 + 4
        assert engine.snapshot().pool_size == 12
    finally:
        engine.close()
    with StoreReader(engine.state_dir / "flightdeck.db") as reader:
        info = reader.batch(engine.batch_id)
        events = [(k, d) for _, c, k, d in reader.events(engine.batch_id) if k == "limits"]
    assert info is not None and info.pool_size == 12
    assert info.limits_json is not None and json.loads(info.limits_json)["pool_size"] == 12
    assert [json.loads(d) for _, d in events] == [{"change": {"pool_size": 12}, "by": "operator"}]


def test_a_routes_max_concurrent_changes_live_both_ways(tmp_path: Path, hold: Hold) -> None:
    route = held(hold, max_concurrent=2)
    engine = start(batch(10), settings(route, pool=8), tmp_path)
    try:
        until(lambda: engine.snapshot().totals.running == 2)
        engine.set_limits({"routes": {"sim": {"max_concurrent": 5}}})
        until(lambda: engine.snapshot().totals.running == 5)
        assert engine.snapshot().routes[0].max_concurrent == 5  # the route gauges' cap
        engine.set_limits({"routes": {"sim": {"max_concurrent": 1}}})
        until(lambda: engine.snapshot().routes[0].max_concurrent == 1)
        stepped(engine)
        assert engine.snapshot().totals.running == 5  # lowered: none interrupted
        assert not stops_asked(engine)
        engine.set_limits({"routes": {"sim": {"max_concurrent": None}}})  # off: the pool caps
        until(lambda: engine.snapshot().totals.running == 8)
    finally:
        engine.close()


def test_an_rpm_change_reaches_the_routes_bucket(tmp_path: Path) -> None:
    # rpm 1: one request a minute, so the last of the three waiting would start three minutes
    # after the first, far past run_to_end's HANG_S. Raised to 6000, they go at once: the
    # waits already begun look at the bucket again (every 0.1 s) and find their debt repaid.
    route = dataclasses.replace(sim_route(tool_turns=0, latency_ms=0), rpm=1)
    engine = start(batch(4), settings(route, pool=4), tmp_path)
    try:
        until(lambda: engine.snapshot().totals.completed >= 1)
        waiting = "rpm 1 configured"
        until(lambda: any(waiting in r.activity.text for r in engine.snapshot().children))
        engine.set_limits({"routes": {"sim": {"rpm": 6000}}})
        rpm = lambda: engine.snapshot().routes[0].rpm  # noqa: E731
        until(lambda: (limit := rpm()) is not None and limit.label == "6000 configured")
        snap = run_to_end(engine)
    finally:
        engine.close()
    assert snap.totals.completed == 4


def test_configured_and_learned_limits_combine_as_the_lower() -> None:
    now = [0.0]
    limiter = RateLimiter(rpm=60, clock=lambda: now[0])
    limiter.learn("requests", 30, None)  # the server says 30: lower, so it holds
    limiter.configure("requests", 600)  # the operator raises the configured one: 30 still
    limit = limiter.limit("requests")
    assert limit is not None and (limit.per_minute, limit.source) == (30, "learned")
    limiter.configure("requests", 20)  # below what the server allows: the operator's holds
    limit = limiter.limit("requests")
    assert limit is not None and (limit.per_minute, limit.source) == (20, "configured")
    assert limiter.slot_s() == pytest.approx(60 / (20 * 0.98))
    limiter.configure("tokens", 1000)  # a tpm where there was none: a bucket from now
    assert limiter.tokens is not None
    limiter.configure("tokens", None)
    assert limiter.tokens is None


def test_a_bad_change_says_which_field_and_changes_nothing(tmp_path: Path, hold: Hold) -> None:
    s = dataclasses.replace(settings(held(hold), pool=2), budget=Budget(Decimal("5")))
    engine = start(batch(2), s, tmp_path)
    try:
        for change, field in (
            ({"pool_size": 0}, "pool_size"),
            ({"routes": {"nope": {"rpm": 5}}}, "route"),
            ({"routes": {"sim": {"rpm": -1}}}, "rpm"),
            ({"soft_cost_usd": "9"}, "soft_cost_usd"),  # above the hard budget
            ({"soft_cost_usd": "-1"}, "soft_cost_usd"),
            ({}, "limits"),
        ):
            with pytest.raises(LimitError) as err:
                engine.set_limits(change)
            assert err.value.field == field
        assert engine.limits().pool_size == 2
    finally:
        engine.close()


# --- the soft budget --------------------------------------------------------------------------


@pytest.fixture
def every_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """The soft budget looked at on every coordinator step, not once a second: the hold then
    begins at a known point, right after the first child finishes."""
    monkeypatch.setattr(softbudget, "SOFT_BUDGET_EVERY_S", 0.0)


def _soft(soft: str, pool: int = 1) -> object:
    route = sim_route(tool_turns=0)
    return dataclasses.replace(
        settings(route, pool=pool), budget=Budget(soft_cost_usd=Decimal(soft))
    )


@pytest.mark.usefixtures("every_step")
@pytest.mark.parametrize("text", ["inf", "Infinity", "-inf", "nan", "sNaN", "ten"])
def test_a_soft_budget_that_is_no_amount_is_said_so(text: str) -> None:
    # `--soft-cost inf` said "must be 0 or more, got inf", of a number above any bound.
    with pytest.raises(LimitError) as caught:
        parse_money("soft_cost_usd", text)
    assert caught.value.message == f"expected dollars (such as 10 or 12.50) or off, got {text!r}"


def test_the_projection_crossing_the_soft_budget_holds_admission(tmp_path: Path) -> None:
    engine = start(batch(10), _soft("0.000001"), tmp_path)  # type: ignore[arg-type]
    try:
        until(lambda: engine.snapshot().held is not None)
        snap = engine.snapshot()
        stepped(engine)  # admission has looked since the hold began
        assert engine.snapshot().totals.queued == 9  # nothing more starts while it holds
        with StoreReader(engine.state_dir / "flightdeck.db") as reader:  # for attached views
            until(lambda: (i := reader.batch(engine.batch_id)) is not None and i.held == snap.held)
    finally:
        engine.close()
    first = snap.child("t0000")
    assert first is not None and first.cost_usd is not None
    projected = forecast(snap.children).projected_usd
    assert projected == first.cost_usd * 10  # one finished, nine to go at its cost
    assert snap.held == f"soft budget <$0.0001 reached: projected {fmt_usd(projected)}"
    assert projected < 1 and fmt_usd(projected) != "$0.01"  # four places, not rounded
    assert snap.limits is not None and snap.limits.soft_held == snap.held
    with StoreReader(engine.state_dir / "flightdeck.db") as reader:
        info = reader.batch(engine.batch_id)
        holds = [
            json.loads(d)
            for _, _, k, d in reader.events(engine.batch_id)
            if k == "soft_budget_hold"
        ]
    assert info is not None and info.held is None  # closed: nothing held any more
    assert [h["projected_usd"] for h in holds] == [str(projected)]


@pytest.mark.usefixtures("every_step")
def test_raising_or_dropping_the_soft_budget_releases_the_hold(tmp_path: Path) -> None:
    engine = start(batch(6), _soft("0.000001"), tmp_path)  # type: ignore[arg-type]
    try:
        until(lambda: engine.snapshot().held is not None)
        engine.set_limits({"soft_cost_usd": "0.0000015"})  # raised, still under: holds again
        until(lambda: engine.limits().soft_cost_usd == Decimal("0.0000015"))
        stepped(engine)  # the budget looked at again, and admission after it
        assert engine.snapshot().held is not None  # the projection is still over it
        totals = engine.snapshot().totals
        assert (totals.done, totals.queued) == (1, 5)  # nothing started meanwhile
        engine.set_limits({"soft_cost_usd": "1000"})  # raised well over: runs to the end
        snap = run_to_end(engine)
    finally:
        engine.close()
    assert snap.status is BatchStatus.COMPLETED and snap.held is None

    engine = start(batch(4), _soft("0.000001"), tmp_path / "b")  # type: ignore[arg-type]
    try:
        until(lambda: engine.snapshot().held is not None)
        engine.set_limits({"soft_cost_usd": None})  # continue: no soft budget for this batch
        snap = run_to_end(engine)
    finally:
        engine.close()
    assert snap.status is BatchStatus.COMPLETED and snap.limits.soft_cost_usd is None  # type: ignore[union-attr]


@pytest.mark.usefixtures("every_step")
def test_stop_all_while_the_soft_budget_holds_ends_the_batch(tmp_path: Path) -> None:
    engine = start(batch(5), _soft("0.000001"), tmp_path)  # type: ignore[arg-type]
    try:
        until(lambda: engine.snapshot().held is not None)
        engine.stop_all()
        snap = run_to_end(engine)
    finally:
        engine.close()
    assert snap.status is BatchStatus.STOPPED
    assert (snap.totals.completed, snap.totals.stopped) == (1, 4)
    assert snap.held is None  # an ended batch holds nothing back, in the store too
    with StoreReader(engine.state_dir / "flightdeck.db") as reader:
        info = reader.batch(engine.batch_id)
    assert info is not None and info.held is None


@pytest.mark.usefixtures("every_step")
def test_spend_crossing_the_soft_budget_holds_too(tmp_path: Path) -> None:
    engine = start(batch(3), _soft("0"), tmp_path)  # type: ignore[arg-type]
    try:
        until(lambda: engine.snapshot().held is not None)
        assert engine.snapshot().held == "soft budget $0.00 reached: spent $0.00"
        assert engine.snapshot().totals.queued == 3  # held before anything started
    finally:
        engine.close()


def test_spend_crossing_the_soft_budget_holds_before_the_next_start(tmp_path: Path) -> None:
    # Found by an audit: the spend was looked at once a second with the projection, and three
    # children started past it. The spend is now looked at before every admission.
    engine = start(batch(3), _soft("0.0000001"), tmp_path)  # type: ignore[arg-type]
    try:
        until(lambda: engine.snapshot().held is not None)
        stepped(engine)  # admission has looked since the hold began: nothing more starts
        totals = engine.snapshot().totals
    finally:
        engine.close()
    assert (totals.done, totals.queued) == (1, 2)


def test_a_soft_budget_needs_every_route_priced(tmp_path: Path) -> None:
    from flightdeck.engine.api import Engine
    from flightdeck.engine.errors import ConfigError
    from flightdeck.engine.inputs.settings import Route, Settings

    route = Route(name="x", provider="openai", model="no-such-model-anywhere")
    s = Settings(routes={"x": route}, budget=Budget(soft_cost_usd=Decimal("1")))
    with pytest.raises(ConfigError) as err:
        Engine(batch(1, route="x"), s, state_dir=tmp_path)
    assert err.value.field == "budget.soft_cost_usd"


def test_a_soft_budget_set_live_needs_every_route_priced_too(tmp_path: Path, hold: Hold) -> None:
    # As in the config: spend at an unknown price is never counted, so it would never hold.
    route = dataclasses.replace(held(hold), price=None)
    engine = start(batch(2), settings(route, pool=1), tmp_path)
    try:
        assert engine.limits().unpriced_route == "sim"
        with pytest.raises(LimitError, match="no price is known for route 'sim'") as err:
            engine.set_limits({"soft_cost_usd": "0.01"})
        assert err.value.field == "soft_cost_usd"
        assert engine.limits().soft_cost_usd is None
        engine.set_limits({"soft_cost_usd": None})  # dropping one is always possible
    finally:
        engine.close()


def test_the_report_shows_the_changes_and_the_holds(tmp_path: Path, every_step: None) -> None:
    from flightdeck.engine.records.markdown import render_markdown
    from flightdeck.engine.records.report import build_report

    engine = start(batch(3), _soft("0.000001"), tmp_path)  # type: ignore[arg-type]
    try:
        until(lambda: engine.snapshot().held is not None)
        engine.set_limits({"pool_size": 3, "soft_cost_usd": None})
        run_to_end(engine)
    finally:
        engine.close()
    with StoreReader(engine.state_dir / "flightdeck.db") as reader:
        report = build_report(reader, engine.batch_id)
    actions = [(a["action"], a.get("change")) for a in report["limits"]]
    assert actions == [
        ("soft_budget_hold", None),
        ("limits", {"pool_size": 3, "soft_cost_usd": None}),
    ]
    md = render_markdown(report)
    assert "| — | limits | pool 3; soft budget off |" in md
    assert "| — | soft budget hold | soft budget &lt;$0.0001 reached: projected $" in md


def test_a_command_route_offers_only_max_concurrent(tmp_path: Path) -> None:
    # `flightdeck limits B --route cli --rpm 5` said "limits applied" and listed rpm 5 for a
    # route whose CLI makes its own API calls: nothing paced them (the config refuses rpm there).
    from flightdeck.engine.inputs.settings import load_settings
    from flightdeck.engine.model.livelimits import changed, limits_from_json, limits_json, limits_of

    path = tmp_path / "flightdeck.toml"
    path.write_text(
        '[routes.cli]\nprovider = "command"\nargv = ["true"]\nmax_concurrent = 2\n'
        '[routes.sim]\nprovider = "sim"\nrpm = 60\n'
    )
    loaded = load_settings(path)
    # As an attached client reads them: from the batch's row.
    limits = limits_from_json(limits_json(limits_of(loaded, loaded.routes, 4, lambda r: True)))
    caps = {c.route: c for c in limits.routes}
    assert caps["cli"].fields == ("max_concurrent",)
    assert caps["sim"].fields == ("max_concurrent", "rpm", "tpm")
    for field in ("rpm", "tpm"):
        with pytest.raises(LimitError) as refused:
            changed(limits, {"routes": {"cli": {field: 5}}})
        assert refused.value.field == field
        assert "runs a command" in str(refused.value)
    assert changed(limits, {"routes": {"cli": {"max_concurrent": 3}}}) is not None
    assert changed(limits, {"routes": {"sim": {"rpm": 5}}}) is not None
    # A row an older version wrote (no "command" key) reads as before.
    old = json.loads(limits_json(limits))
    del old["routes"]["cli"]["command"]
    assert not {c.route: c for c in limits_from_json(json.dumps(old)).routes}["cli"].command
