"""Our retries around the SDK providers, checked on the loopback server's receive times:
full-jitter spacing, Retry-After honoured route-wide, no retry on auth or quota errors, waits
that wake on stop, the activity text, and a canary key that reaches no file on disk."""

from __future__ import annotations

import logging
import random
import re
import secrets
import threading
from collections.abc import Callable
from itertools import pairwise
from pathlib import Path

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.child.policy import RetryNotice, StopRequested
from flightdeck.engine.control.retry import RetryPolicy, classify, reason_of
from flightdeck.engine.control.throttle import RouteThrottle
from flightdeck.engine.errors import FatalError, RateLimited, TransientError
from flightdeck.engine.inputs.settings import RetrySettings
from flightdeck.engine.model import ChildStatus
from flightdeck.engine.providers.base import Message, Provider, StreamEvent, TurnRequest
from flightdeck.engine.providers.headers import duration_s, retry_after

from helpers import HANG_S, batch, run_to_end, settings, until
from loopback import KEY_ENV, Loopback, Received, Reply, ToolUse, provider_for, route_for

KEY = "sk-retry-0123456789abcdef"
REQUEST = TurnRequest("system", (Message("user", "hello"),), (), 64)
PROVIDERS = ["openai", "anthropic"]


def client(server: Loopback, provider: str, **kw: float) -> Provider:
    return provider_for(server, provider, KEY, **kw)


def call(p: Provider) -> Callable[[], list[StreamEvent]]:
    return lambda: list(p.open(REQUEST))


class Slept(threading.Event):
    """An interrupt that is never set, keeping what each of the policy's sleeps asked for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        if timeout is not None:
            self.asked.append(timeout)
        return super().wait(timeout)


def retry_notices(
    policy: RetryPolicy, server: Loopback, provider: str, interrupt: threading.Event | None = None
) -> list[RetryNotice]:
    """One call through `policy` to a fresh client; the notices of its retries."""
    notices: list[RetryNotice] = []
    p = client(server, provider)
    try:
        interrupt = threading.Event() if interrupt is None else interrupt
        policy.call(call(p), interrupt=interrupt, on_retry=notices.append)
    finally:
        p.close()
    return notices


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in pairwise(times)]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_retry_spacing_is_full_jitter_backoff_as_configured(
    server: Loopback, provider: str
) -> None:
    server.script(Reply(status=500), Reply(status=503), Reply(status=529), Reply(text="ok"))
    settings_ = RetrySettings(attempts=4, base_s=0.08, max_s=0.2)
    policy = RetryPolicy(settings_, rng=random.Random(7))
    slept = Slept()
    notices = retry_notices(policy, server, provider, slept)
    # The delays are uniform in [0, min(max_s, base_s * 2**n)]: replay the seeded draws.
    rng = random.Random(7)
    expected = [rng.uniform(0, min(0.2, 0.08 * 2**n)) for n in range(3)]
    assert [n.delay_s for n in notices] == pytest.approx(expected)
    assert [(n.attempt, n.attempts) for n in notices] == [(1, 3), (2, 3), (3, 3)]
    # It slept the announced delays, once each (not how long the sleeps took: a loaded machine
    # adds to those), and the server saw no retry before its delay.
    assert slept.asked == pytest.approx(expected)
    for delay, gap in zip(expected, gaps(server.times()), strict=True):
        assert gap >= delay - 0.005


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    "header", [{"retry_after_ms": "350"}, {"retry_after": "0.35"}], ids=["ms", "s"]
)
def test_retry_after_is_honoured_when_longer_than_our_backoff(
    server: Loopback, provider: str, header: dict[str, str]
) -> None:
    server.script(Reply(status=429, **header), Reply(text="ok"))
    policy = RetryPolicy(RetrySettings(attempts=3, base_s=0.01, max_s=0.02))
    slept = Slept()
    notices = retry_notices(policy, server, provider, slept)
    (gap,) = gaps(server.times())
    assert notices[0].delay_s == pytest.approx(0.35)
    # A rate limit uses no attempt: the notice counts the time throttled instead.
    assert notices[0].text in (
        "429, retry in 0.3s (throttled 0s of 600s)",
        "429, retry in 0.4s (throttled 0s of 600s)",
    )
    assert slept.asked == pytest.approx([0.35]) and gap >= 0.345  # slept once, what it said


def test_our_backoff_wins_when_it_is_longer_than_retry_after() -> None:
    class High(random.Random):
        def uniform(self, a: float, b: float) -> float:
            return b

    policy = RetryPolicy(RetrySettings(attempts=2, base_s=0.2, max_s=1.0), rng=High())
    outcomes = iter([RateLimited("429 rate limited: slow down", retry_after=0.05)])
    notices: list[RetryNotice] = []

    def fn() -> str:
        error = next(outcomes, None)
        if error is not None:
            raise error
        return "ok"

    assert policy.call(fn, interrupt=threading.Event(), on_retry=notices.append) == "ok"
    assert notices[0].delay_s == pytest.approx(0.2)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    "reply",
    [Reply(status=401), Reply(status=403), Reply(status=429, error_type="insufficient_quota")],
    ids=["401", "403", "quota"],
)
def test_auth_and_quota_errors_are_never_retried(
    server: Loopback, provider: str, reply: Reply
) -> None:
    server.script(reply, Reply(text="would succeed"))
    policy = RetryPolicy(RetrySettings(attempts=6, base_s=0.01, max_s=0.01))
    p = client(server, provider)
    try:
        with pytest.raises(FatalError):
            policy.call(call(p), interrupt=threading.Event())
    finally:
        p.close()
    assert len(server.received) == 1


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize(
    "fault",
    [
        Reply(status=408),
        Reply(status=409),
        Reply(status=429),
        Reply(status=500),
        Reply(status=503),
        Reply(status=529),
        Reply(disconnect_after_chunks=2),
        Reply(malformed_after_chunks=1),
        Reply(stall_after_chunks=1),
    ],
    ids=["408", "409", "429", "500", "503", "529", "disconnect", "malformed", "stall"],
)
def test_transient_faults_are_retried_until_success(
    server: Loopback, provider: str, fault: Reply
) -> None:
    server.script(fault, Reply(text="recovered"))
    policy = RetryPolicy(RetrySettings(attempts=3, base_s=0.01, max_s=0.02))
    # The stall's timeout; long enough that the reply after it, on a busy machine, is not one
    # (0.2 s was not, at load 10: a third request).
    p = client(server, provider, read_timeout_s=1.0)
    try:
        events = policy.call(call(p), interrupt=threading.Event())
    finally:
        p.close()
    assert len(server.received) == 2
    assert "recovered" in "".join(getattr(e, "text", "") for e in events)


def test_classification_is_one_place() -> None:
    assert classify(RateLimited("429"))
    assert classify(TransientError("503"))
    assert not classify(FatalError("401"))
    assert not classify(ValueError("bug"))
    assert reason_of(RateLimited("529 overloaded: busy")) == "529"
    assert reason_of(RateLimited("sim: 429 rate limited")) == "429"
    long = TransientError("503 server error: " + "upstream connect error " * 5)
    assert reason_of(long) == "503 server error"


def test_retry_after_headers_parse() -> None:
    assert retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert retry_after({"retry-after": "7"}) == 7.0
    now = 1_700_000_000.0
    date = "Tue, 14 Nov 2023 22:13:30 GMT"  # now + 10 s
    assert retry_after({"retry-after": date}, lambda: now) == pytest.approx(10.0)
    assert retry_after({"retry-after": "soon"}) is None
    assert retry_after({}) is None
    assert duration_s("6m0s") == 360.0
    assert duration_s("20ms") == pytest.approx(0.02)
    assert duration_s("1h2m3.5s") == pytest.approx(3723.5)
    assert duration_s("0.5") == 0.5
    assert duration_s("5x") is None


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_429_with_retry_after_pauses_every_thread_of_the_route(
    server: Loopback, provider: str
) -> None:
    server.script(Reply(status=429, retry_after_ms="400"))
    server.default = Reply(text="ok")
    throttle = RouteThrottle()  # one per route, shared by its children
    fast = RetrySettings(attempts=3, base_s=0.01, max_s=0.01)
    first, second = RetryPolicy(fast, throttle=throttle), RetryPolicy(fast, throttle=throttle)
    p = client(server, provider)
    try:
        a = threading.Thread(
            target=first.call, args=(call(p),), kwargs={"interrupt": threading.Event()}
        )
        a.start()
        until(lambda: throttle.paused_until is not None)
        # Another child of the same route starts now: it must wait out the pause too.
        second.call(call(p), interrupt=threading.Event())
        a.join(HANG_S)
    finally:
        p.close()
    times = server.times()
    assert len(times) == 3
    assert all(t - times[0] >= 0.39 for t in times[1:]), gaps(times)


class Sleeping(threading.Event):
    """An interrupt that says when the policy begins a sleep on it, and how each sleep ended
    (True: woken by `set`; False: it ran its time out)."""

    def __init__(self) -> None:
        super().__init__()
        self.began = threading.Event()
        self.woken: list[bool] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.began.set()
        woken = super().wait(timeout)
        self.woken.append(woken)
        return woken


def test_a_backoff_sleep_wakes_at_once_on_stop(server: Loopback) -> None:
    server.default = Reply(status=429, retry_after="30")
    policy = RetryPolicy(RetrySettings(attempts=5, base_s=0.01, max_s=0.01))
    stop = Sleeping()

    def stop_in_the_backoff() -> None:
        # Once the 30 s backoff has begun: a stop set by a timer could come before the first
        # request had even been answered (a cold client on a loaded machine) and test nothing.
        if stop.began.wait(HANG_S):
            stop.set()

    p = client(server, "openai")
    try:
        threading.Thread(target=stop_in_the_backoff, daemon=True).start()
        with pytest.raises(StopRequested):
            policy.call(call(p), interrupt=stop)
        # The stop ended the backoff, not its 30 s; how fast is measured by the benchmarks (a
        # loaded machine can be slow to switch threads).
        assert stop.woken == [True]
    finally:
        p.close()
    assert len(server.received) == 1


def test_the_engine_shows_the_retry_and_fails_fatal_errors_with_a_reason(
    tmp_path: Path,
) -> None:
    def responder(received: Received) -> Reply:
        goal = received.body["messages"][-1]["content"]
        if "item 0" in goal:
            return Reply(status=401, message="invalid x-api-key")
        if "item 1" in goal and len([r for r in server.received if "item 1" in str(r.body)]) == 1:
            return Reply(status=429, retry_after_ms="600")
        return Reply(text="fine")

    with Loopback(responder) as server:
        route = route_for(server, "openai")
        engine = Engine(
            batch(2, route="openai"), settings(route), state_dir=tmp_path, env={KEY_ENV: KEY}
        )
        engine.start()
        try:
            until(lambda: engine.snapshot().children[1].activity.text.startswith("429, retry"))
            waiting = engine.snapshot().children[1].activity
            assert engine.wait(60)
            snap = engine.snapshot()
        finally:
            engine.close()
    # The route's pause (0.6 s), plus up to a tenth of it: its waiters leave spread out.
    assert re.fullmatch(r"429, retry in 0\.[5-7]s \(throttled [01]s of 600s\)", waiting.text)
    assert waiting.retries == 1
    failed, retried = snap.children
    assert failed.status is ChildStatus.FAILED
    assert failed.error is not None and "401 authentication failed" in failed.error
    assert retried.status is ChildStatus.COMPLETED and retried.activity.retries == 1
    assert sum(1 for r in server.received if "item 0" in str(r.body)) == 1  # never retried
    transcript = Path(retried.transcript).read_text(encoding="utf-8")
    assert "429, retry in" in transcript


def _canary_agent(key: str) -> Callable[[Received], Reply]:
    """Retries, a tool turn, an answer; and a child whose 401 echoes the key back."""
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def respond(received: Received) -> Reply:
        body = str(received.body)
        child = "item 0" if "item 0" in body else "item 1" if "item 1" in body else "other"
        with lock:
            n = seen[child] = seen.get(child, 0) + 1
        if child == "item 0":
            return Reply(status=401, message=f"Incorrect API key provided: {key}")
        if n == 1:
            return Reply(status=429, retry_after_ms="20", message=f"slow down {key[:4]}")
        if n == 2:
            return Reply(tools=(ToolUse("call_1", "list_dir", {"path": "."}),))
        return Reply(text="done")

    return respond


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_canary_key_reaches_no_file_under_the_state_dir(
    tmp_path: Path, provider: str, caplog: pytest.LogCaptureFixture
) -> None:
    canary = "canary-" + secrets.token_hex(16)
    caplog.set_level(logging.DEBUG)
    with Loopback(_canary_agent(canary)) as server:
        route = route_for(server, provider)
        state = tmp_path / "state"
        engine = Engine(
            batch(3, route=provider), settings(route), state_dir=state, env={KEY_ENV: canary}
        )
        engine.start()
        snap = run_to_end(engine)
    # The key did travel (so the test could fail), and the server echoed it back in an error.
    assert any(canary in str(r.headers) for r in server.received)
    assert [r.status for r in snap.children] == [
        ChildStatus.FAILED,
        ChildStatus.COMPLETED,
        ChildStatus.COMPLETED,
    ]
    files = [p for p in state.rglob("*") if p.is_file()]
    assert any(p.suffix == ".db" for p in files) and any(p.suffix == ".log" for p in files)
    for path in files:
        assert canary.encode() not in path.read_bytes(), path
    assert canary not in str(snap)
    assert not any(canary in record.getMessage() for record in caplog.records)


def test_first_attempt_outside_tenacity_is_replayed_as_attempt_one() -> None:
    calls: list[int] = []
    notices: list[RetryNotice] = []

    def flaky() -> str:
        calls.append(1)
        if len(calls) < 3:
            raise RateLimited("429", retry_after=0.01)
        return "ok"

    policy = RetryPolicy(RetrySettings(attempts=3, base_s=0.001, max_s=0.002))
    assert policy.call(flaky, interrupt=threading.Event(), on_retry=notices.append) == "ok"
    assert len(calls) == 3
    # 429s use no attempt: numbered, bounded by max_wait_s rather than attempts
    assert [(n.attempt, n.attempts, n.max_wait_s) for n in notices] == [(1, 0, 600), (2, 0, 600)]
    assert all(n.delay_s >= 0.01 for n in notices)  # Retry-After honoured from the first try

    calls.clear()
    one = RetrySettings(attempts=1, base_s=0.001, max_s=0.002)
    assert RetryPolicy(one).call(flaky, interrupt=threading.Event()) == "ok"
    assert len(calls) == 3  # a single attempt still rides out two rate limits

    def broken() -> str:
        calls.append(1)
        raise TransientError("503 server error: down")

    calls.clear()
    with pytest.raises(TransientError):
        RetryPolicy(one).call(broken, interrupt=threading.Event())
    assert len(calls) == 1  # ... but a server error uses it up


def test_steer_now_during_a_backoff_rides_the_next_attempt_without_a_wasted_request(
    tmp_path: Path,
) -> None:
    def responder(received: Received) -> Reply:
        if len(server.received) == 1:
            return Reply(status=429, retry_after_ms="500")
        return Reply(text="fine")

    with Loopback(responder) as server:
        route = route_for(server, "openai")
        engine = Engine(
            batch(1, route="openai"), settings(route), state_dir=tmp_path, env={KEY_ENV: KEY}
        )
        engine.start()
        try:
            until(lambda: engine.snapshot().children[0].activity.text.startswith("429, retry"))
            engine.steer(["t0000"], "change of plan", now=True)
            assert engine.wait(60)
            row = engine.snapshot().children[0]
        finally:
            engine.close()
    # the 429, then one request that carries the message: none opened only to be closed
    assert len(server.received) == 2
    assert "[operator] change of plan" in str(server.received[1].body["messages"][-1])
    assert row.status is ChildStatus.COMPLETED and row.activity.api_calls == 2
    assert [s.state.value for s in row.steers] == ["delivered"]
