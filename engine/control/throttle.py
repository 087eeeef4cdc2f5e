"""A route's throttle: its rpm/tpm token buckets and the pause a 429 puts on every child of it.

The buckets (ratelimit.py) come from the route's `rpm`/`tpm`, or are learned from the limits the
server states in its rate-limit headers (a configured limit stays an upper bound). A learned
bucket holds a minute's worth, as the server's does, and never claims more than the server says
remains. With no limit known at all, 429s adapt how many calls the route has in flight (AIMD,
adaptive.py).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import deque
from collections.abc import Callable

from flightdeck.engine.child.policy import StopRequested
from flightdeck.engine.control.adaptive import AdaptiveConcurrency
from flightdeck.engine.control.ratelimit import (
    Bucket,
    Cancelled,
    Clock,
    Lease,
    OnWait,
    RateLimiter,
)
from flightdeck.engine.inputs.settings import Route
from flightdeck.engine.interrupt import Interruptible
from flightdeck.engine.model import RouteLimit
from flightdeck.engine.providers.base import HeadroomEvent

log = logging.getLogger(__name__)

# The buckets and the adaptive cap are the throttle's parts; imported from here as before.
__all__ = [
    "AdaptiveConcurrency",
    "Bucket",
    "Cancelled",
    "Lease",
    "OnWait",
    "RateLimiter",
    "RecentCount",
    "RouteThrottle",
]

RECENT_WINDOW_S = 60.0  # a route's 429s are counted over the last minute


class RecentCount:
    """How many events happened in the last `window_s` seconds (a sliding window of their
    times); not thread-safe: its owner holds a lock."""

    def __init__(self, window_s: float = RECENT_WINDOW_S) -> None:
        self.window_s = window_s
        self._times: deque[float] = deque()

    def add(self, now: float) -> None:
        """One event at `now`."""
        self._times.append(now)
        self._expire(now)

    def count(self, now: float) -> int:
        """Events within the window ending at `now`."""
        self._expire(now)
        return len(self._times)

    def _expire(self, now: float) -> None:
        times = self._times
        while times and times[0] <= now - self.window_s:
            times.popleft()


class RouteThrottle:
    """Route-wide limits: a 429 with Retry-After holds every child of the route, not just one;
    its rpm/tpm buckets (built from the route on first use if not given, and from the limits
    the server states) pace every call; and with no limit known its concurrency adapts."""

    def __init__(
        self,
        clock: Clock = time.monotonic,
        limiter: RateLimiter | None = None,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._paused_until = 0.0
        self._pause_s = 0.0
        self.limiter = limiter
        self.concurrency: AdaptiveConcurrency | None = None
        self._rng = rng or random.Random()
        self._warned = False
        self._recent_429s = RecentCount()

    def now(self) -> float:
        """The throttle's clock."""
        return self._clock()

    def _limiter(self, route: Route) -> RateLimiter:
        limiter = self.limiter
        if limiter is not None and self.concurrency is not None:
            return limiter  # built once, then only read: no lock (twice a call)
        with self._lock:
            if self.limiter is None:
                self.limiter = RateLimiter(route.rpm, route.tpm, jitter=0.25, clock=self._clock)
            if self.concurrency is None:
                self.concurrency = AdaptiveConcurrency(route.max_concurrent, self._clock)
            return self.limiter

    def limited(self, route: Route) -> tuple[bool, bool]:
        """Whether calls on the route are paced by a request bucket, and by a token bucket."""
        limiter = self._limiter(route)
        return limiter.requests is not None, limiter.tokens is not None

    def admit(
        self,
        route: Route,
        tokens: int,
        interrupt: Interruptible,
        on_wait: OnWait | None = None,
    ) -> Lease:
        """Reserve one request and `tokens` from the buckets; `on_wait` hears how long a wait
        will be, and which limit holds it. Raises StopRequested if `interrupt` is set while it
        waits."""
        limiter = self._limiter(route)
        try:
            return limiter.acquire(tokens, interrupt, on_wait, spare=route.max_tokens)
        except Cancelled:
            raise StopRequested from None

    def retune(self, route: Route) -> None:
        """The operator changed the route's rpm, tpm or max_concurrent: pace to them from now
        (limits learned from the server stay an upper bound: see `RateLimiter.configure`)."""
        limiter = self._limiter(route)
        limiter.configure("requests", route.rpm)
        limiter.configure("tokens", route.tpm)
        if self.concurrency is not None:
            self.concurrency.set_ceiling(route.max_concurrent)

    def learn(self, route: Route, event: HeadroomEvent) -> None:
        """A response stated the route's limits: pace to them (see `RateLimiter.learn`). Headers
        that could not be read are ignored, with one warning per route."""
        limiter = self._limiter(route)
        if event.malformed:
            with self._lock:
                warn, self._warned = not self._warned, True
            if warn:
                names = ", ".join(sorted(set(event.malformed)))
                log.warning(
                    "route %s: ignoring unreadable rate-limit headers: %s", route.name, names
                )
        limiter.learn("requests", event.limit_requests, event.remaining_requests)
        limiter.learn("tokens", event.limit_tokens, event.remaining_tokens)

    def slot(self, route: Route, interrupt: Interruptible, on_wait: OnWait | None = None) -> float:
        """Take one of the route's adaptive concurrency slots (free while no rate limit is
        known: the buckets pace the route then); the seconds waited. Raises StopRequested."""
        self._limiter(route)
        assert self.concurrency is not None
        try:
            return self.concurrency.acquire(interrupt, on_wait)
        except Cancelled:
            raise StopRequested from None

    def release(self, *, ok: bool) -> None:
        """Give back a slot taken with `slot`."""
        if self.concurrency is not None:
            self.concurrency.release(ok=ok)

    def rate_limited(
        self, route: Route, started: float, retry_after: float | None, *, overloaded: bool = False
    ) -> None:
        """A call begun at `started` drew a 429: the server's buckets are empty, so pace from
        empty; with no rate known, cut the concurrency; hold the route for `retry_after`.
        `overloaded`: it was a 529, handled alike but not counted among the route's 429s."""
        limiter = self._limiter(route)
        if not overloaded:
            with self._lock:
                self._recent_429s.add(self._clock())
        limiter.exhausted()
        # The sim draws its 429s at random, whatever the load: fewer calls in flight would not
        # make them rarer, only slow the batch (the demo crawled at one child at a time).
        if limiter.unlimited and self.concurrency is not None and route.provider != "sim":
            self.concurrency.rate_limited(started)
        if retry_after:
            self.pause(retry_after)

    def pause(self, seconds: float) -> None:
        """Hold the whole route for `seconds` (a longer pause already set is kept)."""
        with self._lock:
            until = self._clock() + seconds
            if until > self._paused_until:
                self._paused_until, self._pause_s = until, seconds

    def wait_out_pause(
        self, interrupt: Interruptible, on_wait: Callable[[float], None] | None = None
    ) -> float:
        """Block while the route is paused (again if the pause is extended meanwhile); the
        seconds waited. Waiters leave spread out: a slot of the paced rate apart when one is
        known (the bucket then keeps them in order), else over a tenth of the pause."""
        waited = 0.0
        while (wait := self.remaining()) > 0:
            if on_wait is not None:
                on_wait(wait)
            wait += self._spread()
            if interrupt.wait(wait):
                raise StopRequested
            waited += wait
        return waited

    def release_in(self) -> float:
        """Seconds until a child waiting out the route's pause leaves it (spread out from the
        others, as in `wait_out_pause`); 0 when the route is not paused."""
        wait = self.remaining()
        return wait + self._spread() if wait > 0 else 0.0

    def _spread(self) -> float:
        """A random share of a slot of the paced rate, or of a tenth of the pause without one."""
        limiter = self.limiter
        slot = limiter.slot_s() if limiter is not None else 0.0
        with self._lock:
            return self._rng.uniform(0.0, slot if slot else self._pause_s / 10.0)

    def remaining(self) -> float:
        """Seconds left of the route's pause; 0 when it is not paused."""
        # One float read, atomic: no lock (every call asks, before it is made).
        return max(0.0, self._paused_until - self._clock())

    @property
    def paused_until(self) -> float | None:
        """When the route's pause ends, on the throttle's clock; None when it is not paused."""
        with self._lock:
            return self._paused_until if self._paused_until > self._clock() else None

    def banked(self, route: Route) -> tuple[float | None, float | None]:
        """What the route's request and token buckets hold now (see `RateLimiter.levels`)."""
        return self._limiter(route).levels()

    def rate_limited_recently(self) -> int:
        """How many 429s the route's calls drew in the last minute."""
        with self._lock:
            return self._recent_429s.count(self._clock())

    def limits(self, route: Route) -> tuple[RouteLimit | None, RouteLimit | None, int | None]:
        """(rpm, tpm, adaptive concurrency) the route is held to now; None where none is."""
        limiter = self._limiter(route)
        concurrency = self.concurrency
        cap = concurrency.limit if concurrency is not None and limiter.unlimited else None
        return limiter.limit("requests"), limiter.limit("tokens"), cap
