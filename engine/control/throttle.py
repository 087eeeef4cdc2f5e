"""A route's throttle: its rpm/tpm token buckets and the pause a 429 puts on every child of it.

The buckets come from the route's `rpm`/`tpm`, or are learned from the limits the server states
in its rate-limit headers (a configured limit stays an upper bound). A learned bucket holds a
minute's worth, as the server's does, and never claims more than the server says remains. With
no limit known at all, 429s adapt how many calls the route has in flight (AIMD).

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

import logging
import math
import random
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from flightdeck.engine.child.policy import StopRequested
from flightdeck.engine.inputs.settings import Route
from flightdeck.engine.model import RouteLimit
from flightdeck.engine.providers.base import HeadroomEvent

log = logging.getLogger(__name__)

Clock = Callable[[], float]
# wait(cancel, seconds) -> True if `cancel` was set before the time was up
Wait = Callable[[threading.Event | None, float], bool]

__all__ = [
    "AdaptiveConcurrency",
    "Bucket",
    "Cancelled",
    "Lease",
    "RateLimiter",
    "RecentCount",
    "RouteThrottle",
]

Kind = Literal["requests", "tokens"]
# on_wait(seconds, why): why is the limit that holds the call, e.g. "rpm 240 learned"
OnWait = Callable[[float, str], None]
REFUND_POLL_S = 0.1  # how often a wait on a token bucket looks whether refunds repaid it
USED_EMA = 0.2  # weight of the latest call in the share of its estimate calls use
USED_MARGIN = 1.5  # reserve this many times that share of a call's estimate
RECENT_WINDOW_S = 60.0  # a route's 429s are counted over the last minute


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
    far less than they reserve would run far below the limit. `inflow` counts every unit that
    came in (refill, refunds) so a reservation in debt is covered once the inflow since it was
    taken repays its share, refunds included, not only at the refill's pace.
    """

    def __init__(self, per_minute: float, burst_s: float, now: float) -> None:
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate * burst_s)
        self.level = self.capacity
        self.inflow = 0.0
        self._stamp = now
        self._max_capacity = max(self.capacity, float(per_minute))

    def _set(self, level: float) -> None:
        self.inflow += level - self.level
        self.level = level

    def _refill(self, now: float) -> None:
        if now > self._stamp:
            self._set(min(self.capacity, self.level + (now - self._stamp) * self.rate))
            self._stamp = now

    def take(self, amount: float, now: float) -> float:
        """Reserve `amount`; return the seconds until the reservation is covered at the refill's
        pace (`covered_in(target)` is sooner if refunds come)."""
        self._refill(now)
        self.capacity = max(self.capacity, min(float(amount), self._max_capacity))
        self.level -= amount
        return 0.0 if self.level >= 0 else -self.level / self.rate

    def target(self) -> float:
        """Right after `take`: the inflow at which that reservation is covered."""
        return self.inflow + max(0.0, -self.level)

    def covered_in(self, target: float, now: float) -> float:
        """Seconds until the inflow reaches `target` at the refill's pace; 0 once it has."""
        self._refill(now)
        return max(0.0, target - self.inflow) / self.rate

    def give(self, amount: float, now: float) -> None:
        """Return `amount` (negative: charge more after the fact)."""
        self._refill(now)
        self._set(min(self.capacity, self.level + amount))

    def delay(self, now: float) -> float:
        """Seconds a one-unit reservation made now would wait."""
        self._refill(now)
        return max(0.0, (1.0 - self.level) / self.rate)

    def retune(self, per_minute: float, capacity: float, now: float) -> None:
        """A new rate (and capacity), from now on; the level is kept (within the capacity)."""
        self._refill(now)
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, capacity)
        self._max_capacity = max(self.capacity, float(per_minute))
        self._set(min(self.level, self.capacity))

    def level_at(self, now: float) -> float:
        """What is banked at `now` (negative: owed by reservations still waiting)."""
        self._refill(now)
        return self.level

    def at_most(self, level: float, now: float) -> None:
        """The server says no more than `level` remains: never claim more than that."""
        self._refill(now)
        self._set(min(self.level, level))


@dataclass
class Lease:
    """One call's reservation; `settle` with the tokens actually used (once)."""

    limiter: RateLimiter | None
    tokens: int  # reserved
    waited_s: float = 0.0
    settled: bool = False
    estimate: int | None = None  # the caller's estimate, when the reservation is not it
    held: int = 0  # of the reservation, what settling is expected to refund

    def settle(self, actual_tokens: int) -> None:
        """Reconcile the reservation with the tokens the call used; later calls do nothing."""
        if self.settled:
            return
        self.settled = True
        if self.limiter is not None:
            self.limiter.reconcile(self.tokens, actual_tokens, self.estimate, self.held)


class RateLimiter:
    """A route's request and token buckets; thread-safe; `clock` and `wait` are injectable."""

    def __init__(
        self,
        rpm: float | None = None,
        tpm: float | None = None,
        *,
        burst_s: float = 1.0,
        margin: float = 0.02,
        jitter: float = 0.0,
        clock: Clock = time.monotonic,
        wait: Wait = _wait,
    ) -> None:
        self._clock = clock
        self._wait = wait
        self._lock = threading.Lock()
        now = clock()
        self._pace = pace = 1.0 - margin
        self._burst_s = burst_s
        self.requests = Bucket(rpm * pace, burst_s, now) if rpm else None
        self.tokens = Bucket(tpm * pace, burst_s, now) if tpm else None
        self._configured: dict[Kind, float | None] = {"requests": rpm, "tokens": tpm}
        self._learned: dict[Kind, int | None] = {"requests": None, "tokens": None}
        self._jitter = jitter  # of a slot, added at random to each wait
        self._used_ratio: float | None = None  # of their token estimates settled calls used
        self._outstanding = 0  # tokens calls not settled yet are expected to be refunded
        self._rng: random.Random | None = None

    def limit(self, kind: Kind) -> RouteLimit | None:
        """The limit `kind` is paced to, and whether it is configured or learned."""
        with self._lock:
            return self._limit(kind)

    def _limit(self, kind: Kind) -> RouteLimit | None:
        configured, learned = self._configured[kind], self._learned[kind]
        if learned is not None and (configured is None or learned < configured):
            return RouteLimit(learned, "learned")
        return RouteLimit(round(configured), "configured") if configured is not None else None

    def learn(self, kind: Kind, limit: int | None, remaining: int | None) -> None:
        """The server stated `limit` per minute for `kind` and that `remaining` is left: pace
        to it when nothing lower is configured, and never claim more than remains."""
        with self._lock:
            now = self._clock()
            bucket = self.requests if kind == "requests" else self.tokens
            if limit is not None and limit > 0 and limit != self._learned[kind]:
                self._learned[kind] = limit
                configured = self._configured[kind]
                if configured is None or limit < configured:
                    # The server's bucket holds a minute's worth; so does ours (it refills a
                    # little slower), kept honest by the `remaining` the server reports.
                    start = float(limit if remaining is None else remaining)
                    if bucket is None:
                        bucket = Bucket(limit * self._pace, 60.0, now)
                        bucket.retune(limit * self._pace, float(limit), now)
                        bucket.level = min(bucket.capacity, start)
                    else:
                        bucket.retune(limit * self._pace, float(limit), now)
                    if kind == "requests":
                        self.requests = bucket
                    else:
                        self.tokens = bucket
                elif bucket is not None:
                    # The server's limit is back at or above the configured one: pace to that
                    # again, not to the lower one learned before.
                    rate = configured * self._pace
                    bucket.retune(rate, rate / 60.0 * self._burst_s, now)
            if bucket is not None and remaining is not None:
                # Calls not settled yet will be refunded in part, and the server has likely
                # counted them already at what they use: what remains for new calls is at most
                # `remaining` less those refunds (requests are never refunded).
                held = self._outstanding if kind == "tokens" else 0
                bucket.at_most(float(remaining - held), now)

    def configure(self, kind: Kind, per_minute: int | None) -> None:
        """The operator changed the route's configured `kind` limit (None: removed). The
        limit in force is the lower of it and the one the server stated, as in `learn`; the
        bucket keeps its level (within the new capacity), so nothing banked is lost or made."""
        with self._lock:
            now = self._clock()
            self._configured[kind] = per_minute
            learned = self._learned[kind]
            bucket = self.requests if kind == "requests" else self.tokens
            if learned is not None and (per_minute is None or learned < per_minute):
                rate, capacity = learned * self._pace, float(learned)  # a minute's worth
            elif per_minute is not None:
                rate = per_minute * self._pace
                capacity = rate / 60.0 * self._burst_s
            else:  # no limit known any more: calls already waiting finish their wait
                bucket = None
                rate = capacity = 0.0
            if bucket is None and rate:
                bucket = Bucket(rate, self._burst_s, now)
            if bucket is not None:
                bucket.retune(rate, capacity, now)
            if kind == "requests":
                self.requests = bucket
            else:
                self.tokens = bucket

    def exhausted(self) -> None:
        """The server answered 429: its buckets are empty now, so ours are (paced from here)."""
        with self._lock:
            now = self._clock()
            for bucket in (self.requests, self.tokens):
                if bucket is not None:
                    bucket.at_most(0.0, now)

    def levels(self) -> tuple[float | None, float | None]:
        """What the request and token buckets hold now (None: no such bucket)."""
        with self._lock:
            now = self._clock()
            requests, tokens = self.requests, self.tokens
            return (
                requests.level_at(now) if requests is not None else None,
                tokens.level_at(now) if tokens is not None else None,
            )

    def slot_s(self) -> float:
        """Seconds between two requests at the paced rate (0 with no request bucket)."""
        with self._lock:
            return 1.0 / self.requests.rate if self.requests is not None else 0.0

    def _why(self, kind: Kind) -> str:
        limit = self._limit(kind)
        name = "rpm" if kind == "requests" else "tpm"
        return f"{name} {limit.label}" if limit is not None else name

    @property
    def unlimited(self) -> bool:
        """True when the route has neither an rpm nor a tpm limit."""
        return self.requests is None and self.tokens is None

    def acquire(
        self,
        tokens: int,
        cancel: threading.Event | None = None,
        on_wait: OnWait | None = None,
        *,
        spare: int | None = None,
    ) -> Lease:
        """Reserve one request and `tokens` (of which the call may not use `spare`: its
        max_tokens); sleep until both are covered (told to `on_wait` first, with the seconds
        and the limit that holds it). Raises Cancelled."""
        if self.unlimited:
            return Lease(None, tokens)
        with self._lock:
            now = self._clock()
            delay, why = 0.0, ""
            targets: list[tuple[Bucket, float]] = []
            if self.requests is not None:
                delay, why = self.requests.take(1, now), self._why("requests")
                targets.append((self.requests, self.requests.target()))
            reserved = self._reservation(tokens) if self.tokens is not None else tokens
            if self.tokens is not None:
                token_delay = self.tokens.take(reserved, now)
                targets.append((self.tokens, self.tokens.target()))
                if token_delay > delay:
                    delay, why = token_delay, self._why("tokens")
            if delay > 0 and self._jitter and self.requests is not None:
                # Those who wait are served in order, a slot apart; a little jitter keeps
                # two of them from landing on the server at the same instant.
                if self._rng is None:
                    self._rng = random.Random(id(self))
                bucket, target = targets[0]
                targets[0] = (bucket, target + self._rng.uniform(0.0, self._jitter))
                delay = max(delay, bucket.covered_in(targets[0][1], now))
        if delay > 0 and on_wait is not None:
            on_wait(delay, why)
        waited = 0.0
        while delay > 0:
            # Refunds of over-estimated tokens repay a debt sooner than the refill, and the
            # operator may change the rate meanwhile (`configure`): look again.
            step = min(delay, REFUND_POLL_S)
            if self._wait(cancel, step):
                with self._lock:
                    now = self._clock()
                    if self.requests is not None:
                        self.requests.give(1, now)
                    if self.tokens is not None:
                        self.tokens.give(reserved, now)
                raise Cancelled
            waited += step
            with self._lock:
                now = self._clock()
                delay = max(b.covered_in(t, now) for b, t in targets)
                if delay < 1e-9:
                    delay = 0.0
        held = 0
        if self.tokens is not None:
            with self._lock:
                # The refund to expect: what the reservation holds beyond the share of its
                # estimate calls use; before any call has been settled, up to its `spare`.
                ratio = self._used_ratio
                if ratio is not None:
                    held = max(0, reserved - math.floor(tokens * ratio))
                else:
                    held = reserved if spare is None else min(reserved, spare)
                self._outstanding += held
        estimate = tokens if reserved != tokens else None
        return Lease(self, reserved, waited, estimate=estimate, held=held)

    def reconcile(
        self, estimated: int, actual: int, estimate: int | None = None, held: int = 0
    ) -> None:
        """Give back (or charge) the difference between a reservation and what was used;
        `estimate` (else the reservation) is what the caller estimated the call would use,
        `held` the refund expected when it was reserved."""
        if self.tokens is None:
            return
        with self._lock:
            self._outstanding = max(0, self._outstanding - held)
            base = estimate if estimate is not None else estimated
            if base > 0 and actual > 0:
                ratio = actual / base
                old = self._used_ratio
                self._used_ratio = ratio if old is None else old + USED_EMA * (ratio - old)
            if estimated != actual:
                self.tokens.give(estimated - actual, self._clock())

    def _reservation(self, estimate: int) -> int:
        """What to reserve for a call estimated at `estimate` tokens: the estimate counts all
        of max_tokens, which calls seldom use, and a reservation held for the length of a call
        throttles the route far below its limit; so, once calls have been settled, reserve
        `USED_MARGIN` times the share of their estimates they used (settling charges the rest)."""
        ratio = self._used_ratio
        if ratio is None or estimate <= 0:
            return estimate
        return max(1, min(estimate, math.ceil(estimate * ratio * USED_MARGIN)))

    def delay(self) -> float:
        """How long a new call would wait right now (for display)."""
        with self._lock:
            now = self._clock()
            waits = [b.delay(now) for b in (self.requests, self.tokens) if b is not None]
        return max(waits, default=0.0)


class AdaptiveConcurrency:
    """How many calls a route with no known rate limit may have in flight: no cap until a 429,
    then additive increase (one more per cap's worth of successes), multiplicative decrease
    (halved on a 429 of a call that began after the last cut, so one burst cuts once), never
    above `ceiling`."""

    POLL_S = 0.05  # how often a waiter looks at its stop event

    def __init__(self, ceiling: int | None, clock: Clock = time.monotonic) -> None:
        self.ceiling = ceiling
        self._clock = clock
        self._cond = threading.Condition()
        self.in_flight = 0
        self.cap: float | None = None  # None: not cut yet
        self._cut_at = -math.inf

    def acquire(self, cancel: threading.Event, on_wait: OnWait | None = None) -> float:
        """Take a slot, waiting while the route is at its cap; the seconds waited. Raises
        Cancelled."""
        with self._cond:
            if self.cap is None or self.in_flight < int(self.cap):
                self.in_flight += 1
                return 0.0
            t0 = self._clock()
            if on_wait is not None:
                on_wait(0.0, f"concurrency {int(self.cap)} adapted to 429s")
            while self.cap is not None and self.in_flight >= int(self.cap):
                if cancel.is_set():
                    raise Cancelled
                self._cond.wait(self.POLL_S)
            self.in_flight += 1
            return max(0.0, self._clock() - t0)

    def release(self, *, ok: bool) -> None:
        """A call ended (`ok`: it succeeded, so the cap may grow)."""
        with self._cond:
            self.in_flight -= 1
            if ok and self.cap is not None:
                self.cap += 1.0 / self.cap
                if self.ceiling is not None:
                    self.cap = min(self.cap, float(self.ceiling))
            self._cond.notify()

    def set_ceiling(self, ceiling: int | None) -> None:
        """A new upper bound on the cap (the route's max_concurrent changed)."""
        with self._cond:
            self.ceiling = ceiling
            if ceiling is not None and self.cap is not None:
                self.cap = min(self.cap, float(ceiling))
            self._cond.notify_all()

    def rate_limited(self, started: float) -> None:
        """A call that began at `started` drew a 429: halve the cap, once per burst."""
        with self._cond:
            if started < self._cut_at:
                return  # sent before the last cut: the same burst
            self._cut_at = self._clock()
            current = self.cap if self.cap is not None else float(max(1, self.in_flight))
            self.cap = max(1.0, current / 2.0)
            if self.ceiling is not None:
                self.cap = min(self.cap, float(self.ceiling))

    @property
    def limit(self) -> int | None:
        """The cap in force; None before the first cut."""
        with self._cond:
            return None if self.cap is None else int(self.cap)


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
        interrupt: threading.Event,
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

    def slot(
        self, route: Route, interrupt: threading.Event, on_wait: OnWait | None = None
    ) -> float:
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
        self, interrupt: threading.Event, on_wait: Callable[[float], None] | None = None
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
        with self._lock:
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
