"""A route with no known rate limit: how many calls it may have in flight, adapted to 429s."""

from __future__ import annotations

import math
import threading
import time

from flightdeck.engine.control.ratelimit import Cancelled, Clock, OnWait
from flightdeck.engine.interrupt import Interruptible


class AdaptiveConcurrency:
    """How many calls a route with no known rate limit may have in flight: no cap until a 429,
    then additive increase (one more per cap's worth of successes), multiplicative decrease
    (halved on a 429 of a call that began after the last cut, so one burst cuts once), never
    above `ceiling`."""

    POLL_S = 0.05  # how often a waiter looks at its stop event

    def __init__(self, ceiling: int | None, clock: Clock = time.monotonic) -> None:
        self.ceiling = ceiling
        self._clock = clock
        # Taken as the plain lock (`with self._lock`): Condition's own `with` is Python code,
        # run twice a call. Waiters wait on the condition built on it.
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self.in_flight = 0
        self.cap: float | None = None  # None: not cut yet
        self._cut_at = -math.inf

    def acquire(self, cancel: Interruptible, on_wait: OnWait | None = None) -> float:
        """Take a slot, waiting while the route is at its cap; the seconds waited. Raises
        Cancelled."""
        with self._lock:
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
        with self._lock:
            self.in_flight -= 1
            if self.cap is None:
                return  # uncapped: nobody waits for a slot
            if ok:
                self.cap += 1.0 / self.cap
                if self.ceiling is not None:
                    self.cap = min(self.cap, float(self.ceiling))
            self._cond.notify()

    def set_ceiling(self, ceiling: int | None) -> None:
        """A new upper bound on the cap (the route's max_concurrent changed)."""
        with self._lock:
            self.ceiling = ceiling
            if ceiling is not None and self.cap is not None:
                self.cap = min(self.cap, float(ceiling))
            self._cond.notify_all()

    def rate_limited(self, started: float) -> None:
        """A call that began at `started` drew a 429: halve the cap, once per burst."""
        with self._lock:
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
        with self._lock:
            return None if self.cap is None else int(self.cap)
