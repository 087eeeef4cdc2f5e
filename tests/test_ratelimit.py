"""Per-route token buckets: exact rates on a virtual clock, reconciliation, stop, and the real
providers held to 600 requests/min against an unlimited loopback server on a scaled clock."""

from __future__ import annotations

import dataclasses
import itertools
import logging
import threading
import time
from pathlib import Path
from types import MappingProxyType, SimpleNamespace
from typing import Any

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.child.policy import RetryNotice, StopRequested
from flightdeck.engine.control.pool import auto_pool_size
from flightdeck.engine.control.retry import RetryPolicy
from flightdeck.engine.control.throttle import (
    AdaptiveConcurrency,
    Cancelled,
    Lease,
    RateLimiter,
    RouteThrottle,
)
from flightdeck.engine.errors import RateLimited
from flightdeck.engine.inputs.settings import RetrySettings, Route
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.model import ChildStatus, RouteLimit
from flightdeck.engine.providers import make_provider
from flightdeck.engine.providers.base import HeadroomEvent, Message, ToolSpec, TurnRequest
from flightdeck.engine.providers.headers import anthropic_headroom, openai_headroom
from flightdeck.engine.providers.tokens import estimate_tokens, prompt_tokens_estimate

from helpers import batch, run_to_end, settings, sim_route, start, tasks_batch
from loopback import KEY_ENV, BucketLimit, Loopback, Reply, route_for


class VirtualClock:
    """Time that only moves when someone waits: a single thread's schedule, exactly."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def wait(self, cancel: threading.Event | None, seconds: float) -> bool:
        self.now += seconds
        return False


def per_window(times: list[float], start: float, window: float, count: int) -> list[int]:
    return [
        sum(1 for t in times if start + i * window <= t < start + (i + 1) * window)
        for i in range(count)
    ]


def test_600_rpm_holds_within_5_percent_every_minute_on_a_virtual_clock() -> None:
    clock = VirtualClock()
    limiter = RateLimiter(rpm=600, clock=clock, wait=clock.wait)  # paced 2% under: 588/min
    start = clock.now
    times = []
    while clock.now < start + 10 * 60:
        limiter.acquire(0)
        times.append(clock.now)
    minutes = per_window(times, start, 60.0, 10)
    assert all(570 <= n <= 630 for n in minutes), minutes
    assert 592 <= minutes[0] <= 599  # one second of burst, then 9.8 a second
    assert all(587 <= n <= 589 for n in minutes[1:]), minutes


def test_request_spacing_is_even_after_the_burst() -> None:
    clock = VirtualClock()
    limiter = RateLimiter(rpm=120, clock=clock, wait=clock.wait, margin=0)  # 2/s, burst of 2
    times = []
    for _ in range(8):
        limiter.acquire(0)
        times.append(clock.now - 1000.0)
    assert times == pytest.approx([0, 0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0])


def test_tokens_per_minute_reserve_the_estimate_and_reconcile_with_usage() -> None:
    clock = VirtualClock()
    limiter = RateLimiter(tpm=60_000, clock=clock, wait=clock.wait, margin=0)  # 1,000 a second
    start = clock.now
    calls = 0
    while clock.now < start + 60:
        lease = limiter.acquire(5_000)  # the estimate: prompt + max_tokens
        lease.settle(1_000)  # what the server said the call used
        calls += 1
    # Reconciled: about 60 calls of 1,000 tokens fit in the minute, not 12 of 5,000.
    assert 55 <= calls <= 66
    lease = limiter.acquire(100)
    lease.settle(100)
    lease.settle(0)  # settling twice must not refund twice
    assert limiter.tokens is not None and limiter.tokens.level <= limiter.tokens.capacity


def test_usage_above_the_estimate_is_charged_after_the_fact() -> None:
    clock = VirtualClock()
    limiter = RateLimiter(tpm=6_000, clock=clock, wait=clock.wait, margin=0)  # 100/s, burst 100
    limiter.acquire(100).settle(700)  # used 600 more than reserved: 6 s of debt
    t0 = clock.now
    limiter.acquire(100)
    assert clock.now - t0 == pytest.approx(7.0)


def test_a_request_bigger_than_the_burst_still_goes_through() -> None:
    clock = VirtualClock()
    limiter = RateLimiter(tpm=600, clock=clock, wait=clock.wait, margin=0)  # 10/s, burst 10
    limiter.acquire(50)
    assert clock.now - 1000.0 == pytest.approx(4.0)  # 40 tokens of debt at 10/s


def test_unlimited_never_waits() -> None:
    def wait(cancel: threading.Event | None, seconds: float) -> bool:
        raise AssertionError("waited")

    limiter = RateLimiter(wait=wait)
    assert limiter.unlimited
    for _ in range(1000):
        limiter.acquire(10_000).settle(1)


def test_a_wait_wakes_on_stop_and_gives_its_reservation_back() -> None:
    # The limiter's clock stands still: the slot is 10 s away however long the machine takes,
    # so the wait ends only because the stop woke it.
    limiter = RateLimiter(rpm=6, margin=0, clock=lambda: 1000.0)  # one, then one every 10 s
    limiter.acquire(0)
    cancel = threading.Event()
    threading.Timer(0.05, cancel.set).start()
    with pytest.raises(Cancelled):
        limiter.acquire(0, cancel)
    assert limiter.delay() == pytest.approx(10.0)  # not 20: the slot was given back


def test_route_throttle_turns_a_cancelled_wait_into_stop_requested() -> None:
    route = Route(name="r", provider="sim", model="m", rpm=6)
    throttle = RouteThrottle()
    stop = threading.Event()
    throttle.admit(route, 0, stop)
    threading.Timer(0.05, stop.set).start()
    with pytest.raises(StopRequested):
        throttle.admit(route, 0, stop)


def test_route_throttle_builds_its_buckets_from_the_route_once() -> None:
    route = Route(name="r", provider="sim", model="m", rpm=600, tpm=100_000)
    throttle = RouteThrottle()
    throttle.admit(route, 10, threading.Event())
    limiter = throttle.limiter
    assert limiter is not None and limiter.requests is not None and limiter.tokens is not None
    assert limiter.requests.rate == pytest.approx(9.8)  # 600/min, paced 2% under
    throttle.admit(route, 10, threading.Event())
    assert throttle.limiter is limiter


def test_retry_policy_without_a_throttle_admits_freely() -> None:
    lease = RetryPolicy(RetrySettings()).admit(Route("r", "sim", "m", rpm=1), 5, threading.Event())
    assert lease.limiter is None


def test_estimates_count_the_prompt_and_reserve_max_tokens() -> None:
    tool = ToolSpec("read_file", "Read a file", {"type": "object"})
    request = TurnRequest("s" * 400, (Message("user", "u" * 392),), (tool,), max_tokens=500)
    prompt = prompt_tokens_estimate(request)
    assert 200 <= prompt <= 215
    assert estimate_tokens(request) == prompt + 500


def test_a_tools_schema_is_sized_once_not_every_turn(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every turn of every child offers the same tools: their JSON is dumped once per spec."""
    from flightdeck.engine.providers import tokens

    tool = ToolSpec("read_file", "Read a file", {"type": "object", "required": ["path"]})
    request = TurnRequest("s", (Message("user", "u"),), (tool,), max_tokens=1)
    first = prompt_tokens_estimate(request)
    dumped: list[object] = []
    real = tokens.json.dumps
    counting = SimpleNamespace(dumps=lambda value: dumped.append(value) or real(value))
    monkeypatch.setattr(tokens, "json", counting)  # this module's json only
    assert prompt_tokens_estimate(request) == first
    assert dumped == []
    other = ToolSpec("read_file", "Read a file", {"type": "object", "required": ["path", "x"]})
    assert prompt_tokens_estimate(dataclasses.replace(request, tools=(other,))) > first
    assert dumped == [dict(other.parameters)]  # a spec not seen before is sized, once


def test_auto_pool_size_considers_rpm() -> None:
    slow = Route(name="slow", provider="openai", model="m", rpm=30)
    assert auto_pool_size([slow], cpu_count=16) == 5  # 30 rpm x 10 s / 60
    capped = Route(name="capped", provider="openai", model="m", max_concurrent=3, rpm=6000)
    assert auto_pool_size([capped, slow], cpu_count=16) == 8


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_real_providers_hold_600_rpm_against_an_unlimited_server(provider: str) -> None:
    """Eight threads as fast as they can, through the SDK to the loopback server; the clock
    runs SCALE times faster than real time so a simulated minute takes 60/SCALE seconds."""
    scale = 4.0
    # Per thread: the clock's last reading (once `admit` returns, the limiter's own, when it let
    # the call go), and when the last wait was meant to end (that reading plus the seconds
    # asked: the limiter reads the clock, then waits what it found).
    mine = threading.local()

    def clock() -> float:
        mine.now = time.monotonic() * scale
        return mine.now

    def wait(cancel: threading.Event | None, seconds: float) -> bool:
        mine.due = mine.now + seconds
        return (cancel or threading.Event()).wait(seconds / scale)

    request = TurnRequest("system", (Message("user", "hi"),), (), max_tokens=16)
    with Loopback() as server:
        server.default = Reply(text="ok", output_tokens=1)
        url = server.openai_url if provider == "openai" else server.anthropic_url
        options = MappingProxyType({"base_url": url})
        route = Route(name="r", provider=provider, model="m", options=options)  # type: ignore[arg-type]
        client = make_provider(route, {})
        list(client.open(request))  # warm up: the first call pays for imports and the pool
        limiter = RateLimiter(rpm=600, clock=clock, wait=wait)
        throttle = RouteThrottle(clock=clock, limiter=limiter)
        stop = threading.Event()
        deadline = time.monotonic() + 2.5  # 10 simulated seconds

        # (how long it waited, when it was admitted, when the limiter meant to admit it),
        # simulated s: the limiter's readings, not the thread's after it (which a loaded
        # machine may deschedule in between)
        grants: list[tuple[float, float, float]] = []

        def work() -> None:
            while time.monotonic() < deadline:
                waited = throttle.admit(route, 0, stop).waited_s
                grants.append((waited, mine.now, mine.due if waited > 0 else mine.now))
                list(client.open(request))

        threads = [threading.Thread(target=work) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        client.close()
        received = len(server.times()) - 1  # the warm-up call aside
    # Every request the server saw was admitted once: the SDK sent none past the limiter (a
    # retry of its own would be one more here).
    assert received == len(grants)
    # The rate is judged on the admissions, on the limiter's clock: when each request reached
    # the server adds only the machine's delays (on a loaded machine, a first request read
    # 0.15 s late makes a 2.5 s run look 6% too fast).
    times = sorted(at for _, at, _ in grants)
    # Never above the limit plus the one-second burst (plus a little)...
    assert len(times) <= 10 * (times[-1] - times[0]) + 10 + 3
    # ...and, past the burst (~10 at once), at the limit: 10 a second (600 a minute) within 5%.
    rate = (len(times) - 10) / (times[-1] - times[0])
    assert rate <= 10.5, rate
    # Nor slower than the limit while a thread waited on it. Only then: the rest of the time
    # the client set the pace (on a loaded machine, much of the run). So the floor is judged
    # over the spans in which some thread was waiting: the admissions in them, per second.
    # On the limiter's schedule, not the machine's: a wait ends, and its admission counts, when
    # the limiter meant it to (its last wait's end), not when the thread woke. A loaded machine
    # woke threads up to 1.9 simulated seconds late (load 8): the last waiter of a 10 s span
    # woken 0.5 s late makes its 98 admissions read 9.3 a second. Judged so, the limiter at
    # its rate read 9.82 or more (31 runs at loads 8-13); at 540 rpm it reads 8.9 and fails.
    spans: list[list[float]] = []
    for began, end in sorted((due - waited, due) for waited, _, due in grants if waited > 0):
        if spans and began <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], end)
        else:
            spans.append([began, end])
    waited_s = sum(end - began for began, end in spans)
    if waited_s < 2.0:  # of the ten simulated seconds
        pytest.skip(f"the client, not the limit, set the pace here ({rate:.2f}/s)")
    dues = [due for _, _, due in grants]
    held = sum(1 for due in dues if any(began <= due <= end for began, end in spans))
    assert held / waited_s >= 9.5, (held, waited_s)


def test_children_reserve_their_estimate_only_against_a_tokens_bucket(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reserved: dict[str, list[int]] = {"limited": [], "requests": [], "free": []}
    real = RouteThrottle.admit

    def spy(
        self: RouteThrottle,
        route: Route,
        tokens: int,
        interrupt: threading.Event,
        on_wait: Any = None,
    ) -> Lease:
        reserved[route.name].append(tokens)
        return real(self, route, tokens, interrupt, on_wait)

    monkeypatch.setattr(RouteThrottle, "admit", spy)
    limited = dataclasses.replace(sim_route("limited", tool_turns=0), tpm=10_000_000)
    requests = dataclasses.replace(sim_route("requests", tool_turns=0), rpm=10_000_000)
    routes = settings(limited, requests, sim_route("free", tool_turns=0))
    tasks = [Task(id=f"{r}{i}", goal="g", seq=i, route=r) for i in range(2) for r in reserved]
    run_to_end(start(tasks_batch(tasks), routes, tmp_path))
    assert reserved["requests"] == [0, 0]  # nothing reads an estimate without a tokens bucket
    assert reserved["free"] == []  # no limit at all: nothing to reserve
    assert len(reserved["limited"]) == 2
    assert all(t > limited.max_tokens for t in reserved["limited"])  # the prompt plus max_tokens


# --- limits nobody wrote down: learned from the headers, adapted without them -----------------


def test_openai_headers_state_the_limits_and_what_remains() -> None:
    headers = {
        "x-ratelimit-limit-requests": "240",
        "x-ratelimit-remaining-requests": "199",
        "x-ratelimit-reset-requests": "10.25s",
        "x-ratelimit-limit-tokens": "40000",
        "x-ratelimit-remaining-tokens": "39000.0",
        "x-ratelimit-reset-tokens": "1m30s",
    }
    assert openai_headroom(headers) == HeadroomEvent(
        remaining_requests=199,
        remaining_tokens=39000,
        reset_requests_s=10.25,
        reset_tokens_s=90.0,
        limit_requests=240,
        limit_tokens=40000,
    )
    assert openai_headroom({"x-ratelimit-limit-requests": "60"}) == HeadroomEvent(limit_requests=60)
    assert openai_headroom({"content-type": "text/event-stream"}) is None


def test_anthropic_headers_state_the_limits_the_tightest_token_limit_wins() -> None:
    now = 1893456000.0  # 2030-01-01T00:00:00Z
    headers = {
        "anthropic-ratelimit-requests-limit": "50",
        "anthropic-ratelimit-requests-remaining": "49",
        "anthropic-ratelimit-requests-reset": "2030-01-01T00:00:01Z",
        "anthropic-ratelimit-input-tokens-limit": "30000",
        "anthropic-ratelimit-input-tokens-remaining": "29000",
        "anthropic-ratelimit-output-tokens-limit": "8000",
        "anthropic-ratelimit-output-tokens-remaining": "7990",
        "anthropic-ratelimit-output-tokens-reset": "2030-01-01T00:00:02Z",
    }
    assert anthropic_headroom(headers, lambda: now) == HeadroomEvent(
        remaining_requests=49,
        remaining_tokens=7990,
        reset_requests_s=1.0,
        reset_tokens_s=2.0,
        limit_requests=50,
        limit_tokens=8000,
    )
    assert anthropic_headroom({"x-ratelimit-limit-requests": "60"}, lambda: now) is None


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("x-ratelimit-limit-requests", "lots"),
        ("x-ratelimit-limit-requests", "-5"),
        ("x-ratelimit-limit-requests", "nan"),
        ("x-ratelimit-remaining-requests", "inf"),
        ("x-ratelimit-remaining-tokens", "1e400"),
        ("x-ratelimit-reset-requests", "soon"),
        ("x-ratelimit-reset-tokens", ""),
        ("anthropic-ratelimit-requests-limit", "1,000"),
        ("anthropic-ratelimit-tokens-remaining", "12abc"),
        ("anthropic-ratelimit-requests-reset", "tomorrow"),
        ("anthropic-ratelimit-output-tokens-reset", "0001-01-01T00:00:00"),
    ],
)
def test_a_malformed_header_is_left_out_and_named(name: str, value: str) -> None:
    good = {"x-ratelimit-limit-tokens": "1000", "anthropic-ratelimit-requests-remaining": "3"}
    parse = openai_headroom if name.startswith("x-") else anthropic_headroom
    event = parse({**good, name: value})
    assert event is not None
    if value:  # an empty reset reads as no reset at all
        assert event.malformed == (name,)
    assert event == dataclasses.replace(parse(good), malformed=event.malformed)  # type: ignore[arg-type]


def test_learned_limits_pace_from_what_remains_at_the_stated_rate() -> None:
    clock = VirtualClock()
    limiter = RateLimiter(clock=clock, wait=clock.wait)
    assert limiter.unlimited and limiter.limit("requests") is None
    limiter.learn("requests", 240, 10)
    assert limiter.limit("requests") == RouteLimit(240, "learned")
    start, times = clock.now, []
    for _ in range(30):
        limiter.acquire(0)
        times.append(clock.now - start)
    assert times[:10] == [0.0] * 10  # what the server said remains, at once
    gaps = [b - a for a, b in itertools.pairwise(times[10:])]
    assert gaps == pytest.approx([60 / (240 * 0.98)] * len(gaps))  # then 2% under its rate
    limiter.learn("requests", 240, 0)  # never claim more than the server says is left
    limiter.exhausted()
    t0 = clock.now
    limiter.acquire(0)
    assert clock.now - t0 == pytest.approx(60 / (240 * 0.98))


def test_a_configured_limit_stays_an_upper_bound() -> None:
    clock = VirtualClock()
    lower = RateLimiter(rpm=100, clock=clock, wait=clock.wait)
    lower.learn("requests", 240, 200)
    assert lower.limit("requests") == RouteLimit(100, "configured")
    assert lower.requests is not None and lower.requests.rate == pytest.approx(100 * 0.98 / 60)
    higher = RateLimiter(rpm=600, tpm=100_000, clock=clock, wait=clock.wait)
    higher.learn("requests", 240, 200)
    higher.learn("tokens", 500_000, None)
    assert higher.limit("requests") == RouteLimit(240, "learned")
    assert higher.limit("tokens") == RouteLimit(100_000, "configured")
    assert higher.requests is not None and higher.requests.rate == pytest.approx(240 * 0.98 / 60)


def test_a_wait_says_which_limit_holds_it() -> None:
    clock = VirtualClock()
    route = Route(name="r", provider="openai", model="m")
    throttle = RouteThrottle(clock, RateLimiter(clock=clock, wait=clock.wait))
    assert throttle.limited(route) == (False, False)
    throttle.learn(route, HeadroomEvent(remaining_requests=0, limit_requests=240))
    assert throttle.limited(route) == (True, False)
    waits: list[tuple[float, str]] = []
    throttle.admit(route, 0, threading.Event(), lambda s, why: waits.append((s, why)))
    assert waits == [(pytest.approx(60 / (240 * 0.98)), "rpm 240 learned")]
    assert throttle.limits(route) == (RouteLimit(240, "learned"), None, None)


def test_unreadable_headers_warn_once_per_route(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    routes = [Route(name=n, provider="openai", model="m") for n in ("a", "b")]
    bad = HeadroomEvent(limit_requests=240, malformed=("x-ratelimit-remaining-requests",))
    throttles = {r.name: RouteThrottle() for r in routes}
    for _ in range(3):
        for r in routes:
            throttles[r.name].learn(r, bad)
    warnings = [rec.getMessage() for rec in caplog.records if rec.levelno == logging.WARNING]
    assert warnings == [
        "route a: ignoring unreadable rate-limit headers: x-ratelimit-remaining-requests",
        "route b: ignoring unreadable rate-limit headers: x-ratelimit-remaining-requests",
    ]
    assert throttles["a"].limits(routes[0])[0] == RouteLimit(240, "learned")  # the rest is used


def test_without_headers_429s_cut_concurrency_and_successes_raise_it_slowly() -> None:
    clock = VirtualClock()
    gate = AdaptiveConcurrency(ceiling=10, clock=clock)
    stop = threading.Event()
    for _ in range(8):
        assert gate.acquire(stop) == 0.0  # no cap before the first 429
    started = clock.now
    clock.now += 1
    gate.rate_limited(started)
    assert gate.limit == 4  # halved from the 8 in flight
    gate.rate_limited(started)  # the same burst (sent before the cut): cut once
    assert gate.limit == 4
    for _ in range(8):
        gate.release(ok=True)
    assert gate.limit == 5  # + 1/cap a success: about one a cap's worth
    clock.now += 1
    gate.rate_limited(clock.now)
    assert gate.limit == 2
    for _ in range(200):
        assert gate.acquire(stop) == 0.0
        gate.release(ok=True)
    assert gate.limit == 10  # never above the route's max_concurrent


def test_a_slot_wait_of_the_adaptive_cap_wakes_on_stop() -> None:
    gate = AdaptiveConcurrency(ceiling=None)
    stop = threading.Event()
    gate.acquire(stop)
    gate.rate_limited(-1.0)  # cap 1, one in flight
    threading.Timer(0.05, stop.set).start()
    with pytest.raises(Cancelled):
        gate.acquire(stop)


def test_rate_limits_use_no_attempt_until_max_wait_s() -> None:
    calls: list[float] = []

    def limited() -> str:
        calls.append(time.monotonic())
        raise RateLimited("429 rate limited: slow down", retry_after=0.02)

    retry = RetrySettings(attempts=2, base_s=0.001, max_s=0.002, max_wait_s=0.2)
    notices: list[RetryNotice] = []
    policy = RetryPolicy(retry, throttle=RouteThrottle(), route=Route("r", "openai", "m"))
    with pytest.raises(RateLimited) as caught:
        policy.call(limited, interrupt=threading.Event(), on_retry=notices.append)
    assert len(calls) > 4  # far more tries than `attempts`: throttled is not failed
    assert calls[-1] - calls[0] >= 0.18
    assert "still rate limited after 0s throttled (max_wait_s 0.2s)" in str(caught.value)
    assert notices[0].text.startswith("429, retry in 0.0s (throttled 0s of 0s)")


def test_a_learned_limit_reaches_the_snapshot_and_a_bad_header_fails_no_child(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    bad = {"x-ratelimit-remaining-tokens": "plenty"}
    limit = BucketLimit(240, dialect="openai", reply=Reply(text="ok", headers=bad))
    with Loopback(limit) as server:
        learned = route_for(server, "openai", name="learned")
        configured = route_for(server, "openai", name="configured", rpm=100)
        tasks = [
            Task(id=f"{r}{i}", goal="g", seq=i, route=r)
            for i in range(3)
            for r in ("learned", "configured")
        ]
        engine = start(
            tasks_batch(tasks), settings(learned, configured), tmp_path, env={KEY_ENV: "k"}
        )
        snap = run_to_end(engine)
    assert all(c.status is ChildStatus.COMPLETED for c in snap.children)
    limits = {r.route: (r.rpm, r.tpm) for r in snap.routes}
    assert limits == {
        "learned": (RouteLimit(240, "learned"), None),
        "configured": (RouteLimit(100, "configured"), None),
    }
    warned = [r for r in caplog.records if "unreadable rate-limit headers" in r.getMessage()]
    assert len(warned) == 2  # one a route


@pytest.mark.slow
def test_an_unconfigured_route_is_paced_to_the_servers_bucket_and_no_child_fails(
    tmp_path: Path,
) -> None:
    """The issue's scenario, small: no rpm configured, a server whose bucket holds 20 requests
    and refills 20 a second (stating 1200/min), Retry-After on its 429s; 60 children on 16
    slots, with 4 attempts each. Throttled is not failed, and the route paces to the limit
    learned. How few 429s that pacing draws depends on the machine keeping time, so it is a
    figure of the rate-limit benchmark (bench_ratelimit.py: at most 5 %), not asserted here:
    on an idle machine 1 to 4 of 60, with both cores busy up to 9."""
    limit = BucketLimit(20, dialect="openai", scale=60)
    with Loopback(limit) as server:
        route = route_for(server, "openai")  # retry: 4 attempts, no rpm, no tpm
        engine = start(batch(60, route="openai"), settings(route, pool=16), tmp_path, env={})
        snap = run_to_end(engine)
    assert [c.status for c in snap.children] == [ChildStatus.COMPLETED] * 60
    # Most runs draw a few 429s (each retried, none failing a child); a machine too busy to
    # outrun the bucket draws none, so their number is not asserted either way.
    assert [r.rpm for r in snap.routes] == [RouteLimit(20 * 60, "learned")]


def test_reservations_shrink_to_what_settled_calls_used() -> None:
    # max_tokens counted in full, held for the length of every call, throttled a learned tpm
    # route to a third of its limit: once calls settle, a reservation is 1.5x their share.
    clock = VirtualClock()
    limiter = RateLimiter(tpm=60_000, clock=clock, wait=clock.wait, margin=0)
    first = limiter.acquire(5_000)
    assert first.tokens == 5_000  # nothing settled yet: the whole estimate
    first.settle(500)  # a tenth of it used
    second = limiter.acquire(5_000)
    assert second.tokens == 750
    second.settle(2_000)  # more than reserved: charged after the fact
    assert limiter.tokens is not None and limiter.tokens.level == pytest.approx(2_500)
    assert limiter.acquire(5_000).tokens == pytest.approx(1_200, abs=1)  # the share: 0.16


def test_the_sims_random_429s_do_not_cut_its_concurrency(tmp_path: Path) -> None:
    # Every first call draws a 429: a real server's would mean "too many at once", the sim's
    # mean nothing of the load, so all eight still run side by side.
    route = sim_route(error_rate=0.5, retry_after_s=0.01, tool_turns=0)
    engine = Engine(batch(8), settings(route, pool=8), state_dir=tmp_path / "s")
    engine.start()
    snap = run_to_end(engine)
    assert snap.totals.completed == 8
    assert all(r.adaptive_concurrency is None for r in snap.routes)


def test_a_learned_limit_below_the_configured_one_is_lifted_when_the_server_raises_it() -> None:
    clock = [0.0]
    limiter = RateLimiter(rpm=150, clock=lambda: clock[0])
    limiter.learn("requests", 100, None)
    assert limiter.limit("requests") == RouteLimit(100, "learned")
    assert limiter.requests is not None and limiter.requests.rate == pytest.approx(100 * 0.98 / 60)
    limiter.learn("requests", 200, None)  # the server's limit went up past ours
    assert limiter.limit("requests") == RouteLimit(150, "configured")
    assert limiter.requests.rate == pytest.approx(150 * 0.98 / 60)  # paced to it again
