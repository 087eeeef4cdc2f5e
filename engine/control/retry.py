"""Our retries, with tenacity: full-jitter exponential backoff, never shorter than the server's
Retry-After, no retry on quota or auth errors, and backoff sleeps that wake at once on stop.

Being throttled is not failing: a 429 is no attempt. Errors (5xx, broken streams) count against
`attempts`; rate limits against `max_wait_s`, the total time one call may spend throttled (its
route's pause, its rate buckets and concurrency slot, its backoff after 429s).
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from flightdeck.engine.child.policy import RetryNotice, StopRequested
from flightdeck.engine.control.throttle import Lease, OnWait, RouteThrottle
from flightdeck.engine.errors import FatalError, ProviderError, RateLimited
from flightdeck.engine.inputs.settings import RetrySettings, Route
from flightdeck.engine.interrupt import Interruptible
from flightdeck.engine.providers.base import HeadroomEvent
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    wait_exponential,
)

__all__ = ["Retry", "RetryPolicy", "classify", "reason_of", "throttled"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Retry:
    """The verdict on a retryable error: try again, waiting at least `not_before_s`."""

    not_before_s: float = 0.0  # the server's Retry-After, 0 when it named none


def classify(exc: BaseException) -> Retry | None:
    """The one place that decides: retry this error (and how long at least to wait) or give up."""
    if not isinstance(exc, ProviderError) or isinstance(exc, FatalError) or not exc.retryable:
        return None
    return Retry(exc.retry_after or 0.0)


def _retryable(exc: BaseException) -> bool:
    return classify(exc) is not None


def throttled(exc: BaseException | None) -> bool:
    """A rate limit (429), which uses no attempt; a 529 (overloaded) is a server error."""
    return isinstance(exc, RateLimited) and reason_of(exc) != "529"


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


class _JitteredBackoff:
    """Full-jitter exponential backoff, never shorter than what `classify` says to wait."""

    __slots__ = ("_ceiling", "_rng")  # one per child that retried: no dict

    def __init__(
        self, settings: RetrySettings, scale: float, rng: random.Random | None, seed: str | None
    ) -> None:
        # tenacity computes the exponential ceiling; the jitter draws from our own generator
        # (wait_random_exponential uses the global one) so a run can be replayed.
        self._ceiling = wait_exponential(
            multiplier=settings.base_s * scale, max=settings.max_s * scale
        )
        self._rng = random.Random(seed) if rng is None else rng

    def __call__(self, state: RetryCallState, release: Callable[[], float] | None = None) -> float:
        """The backoff before the next attempt. A 429 with Retry-After paused the route: with
        `release` (the route's: when this waiter leaves the pause, spread out from the others)
        that is the backoff, rather than one growing with the attempts."""
        exc = state.outcome.exception() if state.outcome is not None else None
        if (
            release is not None
            and isinstance(exc, RateLimited)
            and throttled(exc)
            and exc.retry_after
        ):
            return release()
        ours = self._rng.uniform(0.0, float(self._ceiling(state)))
        verdict = classify(exc) if exc is not None else None
        return max(ours, verdict.not_before_s) if verdict is not None else ours


@dataclass(slots=True)
class _Throttled:
    """One call's account: errors that used an attempt, and seconds spent throttled."""

    errors: int = 0
    rate_limited: int = 0
    waited_s: float = 0.0

    def failed(self, exc: BaseException) -> None:
        if throttled(exc):
            self.rate_limited += 1
        else:
            self.errors += 1


class RetryPolicy:
    """Runs a call with bounded retries; sleeps wake at once when `interrupt` is set. With a
    throttle (and `route`), every attempt waits out the route's pause and takes a slot of its
    adaptive concurrency, and the route hears of each 429."""

    __slots__ = ("_account", "_backoff", "_rng", "_seed", "route", "scale", "settings", "throttle")

    def __init__(
        self,
        settings: RetrySettings,
        *,
        scale: float = 1.0,
        throttle: RouteThrottle | None = None,
        route: Route | None = None,
        rng: random.Random | None = None,
        seed: str | None = None,
    ) -> None:
        self.settings = settings
        self.scale = scale
        self.throttle = throttle
        self.route = route
        # The backoff's, made at the first retry: nearly every child has none.
        self._rng, self._seed = rng, seed
        self._backoff: _JitteredBackoff | None = None
        self._account = _Throttled()

    @property
    def max_wait_s(self) -> float:
        """How long one call may be throttled before it fails (scaled like the backoff)."""
        return self.settings.max_wait_s * self.scale

    def call(
        self,
        fn: Callable[..., T],
        *args: object,
        interrupt: Interruptible,
        on_retry: Callable[[RetryNotice], None] | None = None,
        on_pause: Callable[[float], None] | None = None,
        on_wait: OnWait | None = None,
    ) -> T:
        """Call `fn(*args)` until it succeeds, fails for good, runs out of attempts (or, for
        rate limits, of `max_wait_s`), or is stopped (StopRequested)."""
        account = self._account = _Throttled()
        # Nearly every call succeeds at once, and tenacity's bookkeeping is a large share of
        # an instant call's cost: tenacity takes over from the first retryable failure.
        try:
            return self._attempt(fn, args, interrupt, on_pause, on_wait)
        except Exception as exc:
            if classify(exc) is None:
                raise
            account.failed(exc)
            if self._stop(account, exc):
                if isinstance(exc, RateLimited) and throttled(exc):
                    raise self._gave_up(account, exc) from exc
                raise
            first_error = exc
        again = functools.partial(self._attempt, fn, args, interrupt, on_pause, on_wait)
        try:
            return self._retrying(interrupt, on_retry, account)(_replaying(first_error, again))
        except RateLimited as exc:
            raise self._gave_up(account, exc) from exc

    def _attempt(
        self,
        fn: Callable[..., T],
        args: tuple[object, ...],
        interrupt: Interruptible,
        on_pause: Callable[[float], None] | None,
        on_wait: OnWait | None,
    ) -> T:
        """One attempt: `fn(*args)` once the route's slot is taken and its pause is over,
        telling the throttle how it went (and giving back the slot)."""
        if interrupt.is_set():
            raise StopRequested
        throttle, route = self.throttle, self.route
        if throttle is None:
            return fn(*args)
        account = self._account
        if route is not None:
            account.waited_s += throttle.slot(route, interrupt, on_wait)
        ok = False
        try:
            # Another child of this route was told to back off: wait with it. After taking
            # the slot: a child that waited for a slot while a 429 paused the route waits on.
            account.waited_s += throttle.wait_out_pause(interrupt, on_pause)
            started = throttle.now()
            result = fn(*args)
            ok = True
            return result
        except RateLimited as exc:
            if route is not None:
                throttle.rate_limited(
                    route, started, exc.retry_after, overloaded=not throttled(exc)
                )
            elif exc.retry_after:
                throttle.pause(exc.retry_after)
            raise
        finally:
            if route is not None:
                throttle.release(ok=ok)

    def _stop(self, account: _Throttled, exc: BaseException | None) -> bool:
        if throttled(exc):
            return account.waited_s >= self.max_wait_s
        return account.errors >= self.settings.attempts

    def _gave_up(self, account: _Throttled, exc: RateLimited) -> RateLimited:
        """The error a call that ran out of `max_wait_s` fails with (else `exc` itself)."""
        if not throttled(exc) or account.waited_s < self.max_wait_s:
            return exc
        reason = reason_of(exc)
        return RateLimited(
            f"{reason}: still rate limited after {account.waited_s:.0f}s throttled "
            f"(max_wait_s {self.max_wait_s:g}s): {exc}"
        )

    def _retrying(
        self,
        interrupt: Interruptible,
        on_retry: Callable[[RetryNotice], None] | None,
        account: _Throttled,
    ) -> Retrying:
        """tenacity, composed: our stop, backoff, classification, and a sleep that wakes on stop."""
        release = self.throttle.release_in if self.throttle is not None else None

        def sleep(seconds: float) -> None:
            if interrupt.wait(seconds):
                raise StopRequested

        def stop(state: RetryCallState) -> bool:
            exc = state.outcome.exception() if state.outcome is not None else None
            if state.attempt_number > 1 and exc is not None:
                account.failed(exc)  # the first was counted before tenacity took over
            return self._stop(account, exc)

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome is not None else None
            asked = exc.retry_after if isinstance(exc, RateLimited) and throttled(exc) else None
            if asked and asked > self.max_wait_s - account.waited_s:
                # The server asks for more than max_wait_s leaves (an hour's Retry-After): fail
                # now rather than wait it out; the route's pause would hold the next try anyway.
                raise RateLimited(
                    f"{reason_of(exc)}: still rate limited after {account.waited_s:.0f}s "
                    f"throttled (max_wait_s {self.max_wait_s:g}s), the server asking for "
                    f"{asked:.0f}s more: {exc}"
                ) from exc
            if self._backoff is None:
                self._backoff = _JitteredBackoff(self.settings, self.scale, self._rng, self._seed)
            return self._backoff(state, release)

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            delay = state.upcoming_sleep
            if throttled(exc):
                account.waited_s += delay
            if on_retry is None:
                return
            if throttled(exc):
                notice = RetryNotice(
                    account.rate_limited,
                    0,
                    delay,
                    reason_of(exc),
                    waited_s=account.waited_s,
                    max_wait_s=self.max_wait_s,
                )
            else:
                attempts = self.settings.attempts - 1
                notice = RetryNotice(account.errors, attempts, delay, reason_of(exc))
            on_retry(notice)

        return Retrying(
            stop=stop,
            wait=wait,
            retry=retry_if_exception(_retryable),
            sleep=sleep,
            before_sleep=before_sleep,
            reraise=True,
        )

    def admit(
        self,
        route: Route,
        tokens: int,
        interrupt: Interruptible,
        on_wait: OnWait | None = None,
    ) -> Lease:
        """Take this call's share of the route's rate limits (no limit without a throttle);
        the time it waits counts as throttled."""
        if self.throttle is None:
            return Lease(None, tokens)
        lease = self.throttle.admit(route, tokens, interrupt, on_wait)
        self._account.waited_s += lease.waited_s
        return lease

    def limited(self, route: Route) -> tuple[bool, bool]:
        """Whether the route paces calls by requests, and by tokens (configured or learned)."""
        if self.throttle is None:
            return route.rpm is not None, route.tpm is not None
        return self.throttle.limited(route)

    def saw_headroom(self, route: Route, event: HeadroomEvent) -> None:
        """A response stated the route's rate limits: the throttle paces to them."""
        if self.throttle is not None:
            self.throttle.learn(route, event)


def _replaying(error: Exception, attempt: Callable[[], T]) -> Callable[[], T]:
    """`attempt`, but its first call raises `error`: a failure made before tenacity took over
    is its attempt 1, so backoff, notices and attempt counts are as if tenacity had made it."""
    pending = [error]

    def replayed() -> T:
        if pending:
            raise pending.pop()
        return attempt()

    return replayed
