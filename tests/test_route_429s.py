"""A route's gauges in the engine: its 429s in the last minute (the sliding window on an injected
clock, the count a snapshot carries after the sim's 429s) and what its own buckets bank."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from flightdeck.engine.api import Engine
from flightdeck.engine.control.throttle import RateLimiter, RecentCount, RouteThrottle
from flightdeck.engine.inputs.settings import Route

from helpers import batch, run_to_end, settings, sim_route


def test_the_window_counts_the_last_minute_only() -> None:
    recent = RecentCount(window_s=60.0)
    for t in (0.0, 10.0, 59.0):
        recent.add(t)
    assert recent.count(59.5) == 3
    assert recent.count(60.0) == 2  # the one at 0 is a minute old: out
    assert recent.count(69.9) == 2
    assert recent.count(70.0) == 1
    assert recent.count(200.0) == 0


def test_the_throttle_counts_429s_but_not_529s_on_its_clock() -> None:
    now = [100.0]
    throttle = RouteThrottle(clock=lambda: now[0])
    route = Route("r", "openai", "m")
    throttle.rate_limited(route, now[0], None)
    now[0] += 30
    throttle.rate_limited(route, now[0], None)
    throttle.rate_limited(route, now[0], None, overloaded=True)  # a 529: not a 429
    assert throttle.rate_limited_recently() == 2
    now[0] += 31
    assert throttle.rate_limited_recently() == 1
    now[0] += 30
    assert throttle.rate_limited_recently() == 0


def test_a_snapshot_carries_the_routes_429s_and_its_children_alive(tmp_path: Path) -> None:
    route = sim_route(error_rate=0.5, retry_after_s=0.01, tool_turns=0, max_concurrent=3)
    engine = Engine(batch(8), settings(route, pool=8), state_dir=tmp_path / "s")
    engine.start()
    snap = run_to_end(engine)
    assert snap.totals.completed == 8
    routes = {r.route: r for r in snap.routes}
    retries = sum(c.activity.retries for c in snap.children)  # every 429 here was retried
    assert retries > 0
    assert routes["sim"].rate_limited_1m == retries
    assert (routes["sim"].alive, routes["sim"].max_concurrent) == (0, 3)


def test_the_buckets_say_what_they_bank_and_what_waiting_calls_owe() -> None:
    now = [0.0]
    limiter = RateLimiter(rpm=60, clock=lambda: now[0], margin=0.0)  # one a second, one banked
    assert limiter.levels() == (1.0, None)  # no tpm: no token bucket
    for _ in range(3):
        limiter.requests.take(1, now[0])  # type: ignore[union-attr]
    assert limiter.levels() == (-2.0, None)  # two calls owed
    now[0] += 1.5
    assert limiter.levels() == (-0.5, None)  # repaid at one a second


def test_a_snapshot_carries_what_a_paced_route_banks(tmp_path: Path) -> None:
    route = dataclasses.replace(sim_route(tool_turns=0), rpm=6000, tpm=None)
    engine = Engine(batch(2), settings(route, pool=2), state_dir=tmp_path / "s")
    engine.start()
    snap = run_to_end(engine)
    (hr,) = snap.routes
    assert hr.banked_requests is not None and hr.banked_requests <= 100  # a second's burst
    assert hr.banked_tokens is None
