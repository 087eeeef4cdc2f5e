"""A route's throttle: its rpm/tpm token buckets and the pause a 429 puts on every child of it.

Each call reserves one request and its estimated tokens before it starts and waits for its turn;
when the call ends the estimate is reconciled with the usage the server reported. A bucket may
go into debt: a reservation is taken at once and the caller sleeps until the debt is repaid, so
callers are served in arrival order with no thundering herd, and the long-run rate is exact.
The burst a bucket allows is `burst_s` seconds of its rate (providers enforce per-minute limits
over shorter windows too, so a full minute of burst would draw 429s). The rate itself is `margin`
below the configured limit: paced exactly at the limit, every request lands on the edge of the
server's window (it counts from receive times, we from send times), and jitter tips some over.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from flightdeck.engine.child.policy import StopRequested
from flightdeck.engine.inputs.settings import Route

Clock = Callable[[], float]
# wait(cancel, seconds) -> True if `cancel` was set before the time was up
Wait = Callable[[threading.Event | None, float], bool]

__all__ = [
    "Bucket",
    "Cancelled",
    "Lease",
    "RateLimiter",
    "RouteThrottle",
]


class Cancelled(Exception):
    """The wait for a reservation was cancelled (the child is stopping)."""


def _wait(cancel: threading.Event | None, seconds: float) -> bool:
    if cancel is None:
        time.sleep(seconds)
        return False
    return cancel.wait(seconds)


class Bucket:
    """`per_minute` units per minute, `burst_s` seconds' worth banked; may go into debt.

    The capacity grows to the largest single reservation (up to a minute's worth): otherwise
    the refund of an over-estimate would overflow the bucket and be lost, and calls that use
    far less than they reserve would run far below the limit.
    """

    def __init__(self, per_minute: float, burst_s: float, now: float) -> None:
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate * burst_s)
        self.level = self.capacity
        self._stamp = now
        self._max_capacity = max(self.capacity, float(per_minute))

    def _refill(self, now: float) -> None:
        if now > self._stamp:
            self.level = min(self.capacity, self.level + (now - self._stamp) * self.rate)
            self._stamp = now

    def take(self, amount: float, now: float) -> float:
        """Reserve `amount`; return the seconds until the reservation is covered."""
        self._refill(now)
        self.capacity = max(self.capacity, min(float(amount), self._max_capacity))
        self.level -= amount
        return 0.0 if self.level >= 0 else -self.level / self.rate

    def give(self, amount: float, now: float) -> None:
        """Return `amount` (negative: charge more after the fact)."""
        self._refill(now)
        self.level = min(self.capacity, self.level + amount)

    def delay(self, now: float) -> float:
        """Seconds a one-unit reservation made now would wait."""
        self._refill(now)
        return max(0.0, (1.0 - self.level) / self.rate)


@dataclass
class Lease:
    """One call's reservation; `settle` with the tokens actually used (once)."""

    limiter: RateLimiter | None
    tokens: int
    waited_s: float = 0.0
    settled: bool = False

    def settle(self, actual_tokens: int) -> None:
        """Reconcile the reservation with the tokens the call used; later calls do nothing."""
        if self.settled:
            return
        self.settled = True
        if self.limiter is not None:
            self.limiter.reconcile(self.tokens, actual_tokens)


class RateLimiter:
    """A route's request and token buckets; thread-safe; `clock` and `wait` are injectable."""

    def __init__(
        self,
        rpm: float | None = None,
        tpm: float | None = None,
        *,
        burst_s: float = 1.0,
        margin: float = 0.02,
        clock: Clock = time.monotonic,
        wait: Wait = _wait,
    ) -> None:
        self._clock = clock
        self._wait = wait
        self._lock = threading.Lock()
        now = clock()
        pace = 1.0 - margin
        self.requests = Bucket(rpm * pace, burst_s, now) if rpm else None
        self.tokens = Bucket(tpm * pace, burst_s, now) if tpm else None

    @property
    def unlimited(self) -> bool:
        """True when the route has neither an rpm nor a tpm limit."""
        return self.requests is None and self.tokens is None

    def acquire(
        self,
        tokens: int,
        cancel: threading.Event | None = None,
        on_wait: Callable[[float], None] | None = None,
    ) -> Lease:
        """Reserve one request and `tokens`; sleep until both are covered (told to `on_wait`
        first, with the seconds). Raises Cancelled."""
        if self.unlimited:
            return Lease(None, tokens)
        with self._lock:
            now = self._clock()
            delay = 0.0
            if self.requests is not None:
                delay = self.requests.take(1, now)
            if self.tokens is not None:
                delay = max(delay, self.tokens.take(tokens, now))
        if delay > 0 and on_wait is not None:
            on_wait(delay)
        if delay > 0 and self._wait(cancel, delay):
            with self._lock:
                now = self._clock()
                if self.requests is not None:
                    self.requests.give(1, now)
                if self.tokens is not None:
                    self.tokens.give(tokens, now)
            raise Cancelled
        return Lease(self, tokens, delay)

    def reconcile(self, estimated: int, actual: int) -> None:
        """Give back (or charge) the difference between a reservation and what was used."""
        if self.tokens is None or estimated == actual:
            return
        with self._lock:
            self.tokens.give(estimated - actual, self._clock())

    def delay(self) -> float:
        """How long a new call would wait right now (for display)."""
        with self._lock:
            now = self._clock()
            waits = [b.delay(now) for b in (self.requests, self.tokens) if b is not None]
        return max(waits, default=0.0)


class RouteThrottle:
    """Route-wide limits: a 429 with Retry-After holds every child of the route, not just one,
    and its rpm/tpm buckets (built from the route on first use if not given) pace every call."""

    def __init__(self, clock: Clock = time.monotonic, limiter: RateLimiter | None = None) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._paused_until = 0.0
        self.limiter = limiter

    def admit(
        self,
        route: Route,
        tokens: int,
        interrupt: threading.Event,
        on_wait: Callable[[float], None] | None = None,
    ) -> Lease:
        """Reserve one request and `tokens` from the buckets; `on_wait` hears how long a wait
        will be. Raises StopRequested if `interrupt` is set while it waits."""
        with self._lock:
            if self.limiter is None:
                self.limiter = RateLimiter(route.rpm, route.tpm, clock=self._clock)
            limiter = self.limiter
        try:
            return limiter.acquire(tokens, interrupt, on_wait)
        except Cancelled:
            raise StopRequested from None

    def pause(self, seconds: float) -> None:
        """Hold the whole route for `seconds` (a longer pause already set is kept)."""
        with self._lock:
            self._paused_until = max(self._paused_until, self._clock() + seconds)

    def wait_out_pause(
        self, interrupt: threading.Event, on_wait: Callable[[float], None] | None = None
    ) -> None:
        """Block while the route is paused (again if the pause is extended meanwhile)."""
        while (wait := self.remaining()) > 0:
            if on_wait is not None:
                on_wait(wait)
            if interrupt.wait(wait):
                raise StopRequested

    def remaining(self) -> float:
        """Seconds left of the route's pause; 0 when it is not paused."""
        with self._lock:
            return max(0.0, self._paused_until - self._clock())

    @property
    def paused_until(self) -> float | None:
        """When the route's pause ends, on the throttle's clock; None when it is not paused."""
        with self._lock:
            return self._paused_until if self._paused_until > self._clock() else None
