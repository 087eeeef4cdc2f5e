"""Retry policy (tenacity) and per-route throttling shared by all of a route's children."""

from __future__ import annotations

import gc
import math
import random
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from flightdeck.engine.control.flag import Waitable
from flightdeck.engine.control.ratelimit import Cancelled, Lease, RateLimiter
from flightdeck.engine.inputs.settings import RetrySettings, Route
from flightdeck.engine.providers.base import FatalError, ProviderError, RateLimited
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

T = TypeVar("T")


class StopRequested(Exception):
    """The child was interrupted while waiting (backoff, route pause)."""


def classify(exc: BaseException) -> bool:
    """The one place that decides: retry this error or give up."""
    return isinstance(exc, ProviderError) and exc.retryable and not isinstance(exc, FatalError)


class RouteThrottle:
    """Route-wide pause: a 429 with Retry-After holds every thread of the route, not just one.
    Also holds the route's rpm/tpm buckets (built from the route on first use if not given)."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, limiter: RateLimiter | None = None
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._paused_until = 0.0
        self.limiter = limiter

    def admit(
        self,
        route: Route,
        tokens: int,
        interrupt: Waitable,
        on_wait: Callable[[float], None] | None = None,
    ) -> Lease:
        """Reserve one request and `tokens` from the buckets (a route pause is waited out by
        RetryPolicy before every attempt); `on_wait` hears how long a wait will be."""
        limiter = self.limiter  # set once: every call after the first reads it without the lock
        if limiter is None:
            with self._lock:
                if self.limiter is None:
                    self.limiter = RateLimiter(route.rpm, route.tpm, clock=self._clock)
                limiter = self.limiter
        try:
            return limiter.acquire(tokens, interrupt, on_wait)
        except Cancelled:
            raise StopRequested from None

    def pause(self, seconds: float) -> None:
        with self._lock:
            self._paused_until = max(self._paused_until, self._clock() + seconds)

    def wait_out_pause(
        self, interrupt: Waitable, on_wait: Callable[[float], None] | None = None
    ) -> None:
        """Block while the route is paused (again if the pause is extended meanwhile)."""
        # The pause read without remaining()'s call and max(): every attempt of every child
        # passes here, nearly always with no pause.
        while (wait := self._paused_until - self._clock()) > 0:
            if on_wait is not None:
                on_wait(wait)
            if interrupt.wait(wait):
                raise StopRequested

    def remaining(self) -> float:
        # Every attempt of every child asks: read without the lock (a float read is atomic
        # under the GIL); only pause() needs it, to keep the later of two deadlines.
        return max(0.0, self._paused_until - self._clock())

    @property
    def paused_until(self) -> float | None:
        with self._lock:
            return self._paused_until if self._paused_until > self._clock() else None


@dataclass(frozen=True, slots=True)
class RetryNotice:
    """What a child shows while it waits: "429, retry 2/6 in 3.1s"."""

    attempt: int  # the retry about to happen (1 = first retry)
    attempts: int  # total retries allowed
    delay_s: float
    reason: str

    @property
    def text(self) -> str:
        return f"{self.reason}, retry {self.attempt}/{self.attempts} in {self.delay_s:.1f}s"


def reason_of(exc: BaseException | None) -> str:
    """A short reason: "429", "529", "503 service unavailable", "read timeout"."""
    if exc is None:
        return "error"
    text = str(exc)
    head = text.split(": ", 1)[0]  # provider messages read "<short reason>: <detail>"
    if isinstance(exc, RateLimited):
        return head[:3] if head[:3].isdigit() else "429"
    if len(text) <= 40:
        return text
    return head if len(head) <= 40 else text[:39] + "…"


class _WaitWithRetryAfter:
    """Full-jitter exponential backoff, never shorter than the server's Retry-After."""

    def __init__(self, settings: RetrySettings, scale: float, rng: random.Random) -> None:
        # tenacity computes the exponential ceiling; the jitter draws from our own generator
        # (wait_random_exponential uses the global one) so tests can seed it.
        self._ceiling = wait_exponential(
            multiplier=settings.base_s * scale, max=settings.max_s * scale
        )
        self._rng = rng

    def __call__(self, state: RetryCallState) -> float:
        ours = self._rng.uniform(0.0, float(self._ceiling(state)))
        exc = state.outcome.exception() if state.outcome is not None else None
        server = getattr(exc, "retry_after", None)
        return max(ours, float(server)) if server is not None else ours


class RetryPolicy:
    """Runs a call with bounded retries; sleeps wake at once when `interrupt` is set."""

    def __init__(
        self,
        settings: RetrySettings,
        *,
        scale: float = 1.0,
        throttle: RouteThrottle | None = None,
        rng: random.Random | None = None,
        seed: str | None = None,
    ) -> None:
        self.settings = settings
        self.scale = scale
        self.throttle = throttle
        # Seeding from a string hashes it (sha512): built on the first retry, not per child,
        # since nearly every call succeeds at once.
        self._rng = rng
        self._seed = seed

    def _jitter_rng(self) -> random.Random:
        if self._rng is None:
            self._rng = random.Random(self._seed)
        return self._rng

    def call(
        self,
        fn: Callable[..., T],
        *args: object,
        interrupt: Waitable,
        on_retry: Callable[[RetryNotice], None] | None = None,
        on_pause: Callable[[float], None] | None = None,
    ) -> T:
        """Call `fn(*args)` until it succeeds, fails fatally, runs out of attempts, or is
        stopped."""
        # Nearly every call succeeds at once: the first attempt is made here, without the
        # retry machinery and its closures (a dozen objects built and freed per call); on a
        # retryable failure it is replayed into tenacity as its first attempt, so backoff,
        # notices and attempt counts are exactly as if tenacity had made it.
        try:
            return self._attempt(fn, args, interrupt, on_pause)
        except Exception as exc:
            if not classify(exc) or self.settings.attempts <= 1:
                raise
            first_error = exc
        return self._retry(fn, args, first_error, interrupt, on_retry, on_pause)

    def _attempt(
        self,
        fn: Callable[..., T],
        args: tuple[object, ...],
        interrupt: Waitable,
        on_pause: Callable[[float], None] | None,
    ) -> T:
        if interrupt.is_set():
            raise StopRequested
        if self.throttle is not None:
            # Another thread of this route was told to back off: wait with it.
            self.throttle.wait_out_pause(interrupt, on_pause)
        return fn(*args)

    def _retry(
        self,
        fn: Callable[..., T],
        args: tuple[object, ...],
        first_error: Exception,
        interrupt: Waitable,
        on_retry: Callable[[RetryNotice], None] | None,
        on_pause: Callable[[float], None] | None,
    ) -> T:
        """The attempts after a retryable first failure, under tenacity."""

        def sleep(seconds: float) -> None:
            if interrupt.wait(seconds):
                raise StopRequested

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            delay = state.upcoming_sleep
            if isinstance(exc, RateLimited) and exc.retry_after and self.throttle is not None:
                self.throttle.pause(exc.retry_after)
            if on_retry is not None:
                notice = RetryNotice(
                    state.attempt_number, self.settings.attempts - 1, delay, reason_of(exc)
                )
                on_retry(notice)

        replayed = False

        def replay_then_attempt() -> T:
            nonlocal replayed
            if not replayed:
                replayed = True
                raise first_error
            return self._attempt(fn, args, interrupt, on_pause)

        retrying = Retrying(
            stop=stop_after_attempt(self.settings.attempts),
            wait=_WaitWithRetryAfter(self.settings, self.scale, self._jitter_rng()),
            retry=retry_if_exception(classify),
            sleep=sleep,
            before_sleep=before_sleep,
            reraise=True,
        )
        return retrying(replay_then_attempt)

    def admit(
        self,
        route: Route,
        tokens: int,
        interrupt: Waitable,
        on_wait: Callable[[float], None] | None = None,
    ) -> Lease:
        """Take this call's share of the route's rate limits (no limit without a throttle)."""
        if self.throttle is None:
            return Lease(None, tokens)
        return self.throttle.admit(route, tokens, interrupt, on_wait)


TYPICAL_CALL_S = 10.0  # a streamed turn of a few hundred tokens; converts rpm into concurrency


def route_concurrency(route: Route) -> int | None:
    """How many calls a route can usefully have in flight, or None when unbounded."""
    if route.max_concurrent is not None:
        return route.max_concurrent
    if route.rpm is not None:
        return max(1, math.ceil(route.rpm * TYPICAL_CALL_S / 60))
    return None


def auto_pool_size(routes: Iterable[Route], cpu_count: int | None) -> int:
    """`auto` pool size: min(64, 8 × CPUs), bounded by what the routes can use at once.

    Workers only wait on I/O, so several per core are cheap (CPython's own ThreadPoolExecutor
    default is cpu + 4); past 64 the GIL and the SQLite writer dominate. A route contributes its
    max_concurrent, else rpm × 10 s / 60; an unbounded route leaves the CPU bound in charge.
    """
    size = min(64, 8 * max(1, cpu_count or 1))
    limits = [route_concurrency(r) for r in routes]
    if limits and all(limit is not None for limit in limits):
        size = min(size, sum(limit for limit in limits if limit is not None))
    return max(1, size)


# CPython's default is 5 ms. Every thread waiting for the GIL wakes once per interval to ask
# for it, so 64 runnable workers cost thousands of futile wake-ups a second: on the engine
# benchmark (2,000 instant sim children, 64 slots) 20 ms cut context switches 4-5x and raised
# throughput by 25-75% on a fast disk (10 ms and 50 ms did less), while the TUI's key-to-frame
# latency with 200 live children stayed the same (tests/bench). The price: a thread back from
# a syscall may wait longer for the GIL, so when file creation is slow and the transcript sink
# is the bottleneck the same benchmark ran 5-25% slower. Children that wait seconds on the
# network see neither effect.
GIL_SWITCH_INTERVAL_S = 0.02

# CPython collects the youngest generation every 700 net allocations of container objects, and
# an engine allocates many (rows, messages, events) while it holds thousands of long-lived ones
# (children, their state), which every older-generation pass walks again. In a new process
# running a 2,000-child engine benchmark batch, the default thresholds ran 54-57 collections
# (26-46 ms); these ran none. Garbage is still freed at once by reference counting; only
# reference cycles wait longer (at most 50,000 young container objects, a few MB, and one pass
# over them takes about 40 ms).
GC_THRESHOLDS = (50_000, 20, 100)


def tune_interpreter() -> None:
    """Process-wide settings for running the engine; the `flightdeck` command calls this.

    A library embedding `Engine` decides for its own process, so `Engine` never calls it.
    """
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    gc.set_threshold(*GC_THRESHOLDS)
