"""A route's rpm/tpm token buckets: each call reserves one request and its estimated tokens.

Each call reserves before it starts and waits for its turn; when the call ends the estimate is
reconciled with the usage the server reported. A bucket may go into debt: a reservation is taken
at once and the caller sleeps until the debt is repaid, so callers are served in arrival order
with no thundering herd, and the long-run rate is exact. The burst a bucket allows is `burst_s`
seconds of its rate (providers enforce per-minute limits over shorter windows too, so a full
minute of burst would draw 429s). The rate itself is `margin` below the configured limit: paced
exactly at the limit, every request lands on the edge of the server's window (it counts from
receive times, we from send times), and jitter tips some over.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from flightdeck.engine.interrupt import Interruptible
from flightdeck.engine.model import RouteLimit

Clock = Callable[[], float]
# wait(cancel, seconds) -> True if `cancel` was set before the time was up
Wait = Callable[[Interruptible | None, float], bool]
Kind = Literal["requests", "tokens"]
# on_wait(seconds, why): why is the limit that holds the call, e.g. "rpm 240 learned"
OnWait = Callable[[float, str], None]
REFUND_POLL_S = 0.1  # how often a wait on a token bucket looks whether refunds repaid it
USED_EMA = 0.2  # weight of the latest call in the share of its estimate calls use
USED_MARGIN = 1.5  # reserve this many times that share of a call's estimate


class Cancelled(Exception):
    """The wait for a reservation was cancelled (the child is stopping)."""


def _wait(cancel: Interruptible | None, seconds: float) -> bool:
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
        cancel: Interruptible | None = None,
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
