"""Our retries, with tenacity: full-jitter exponential backoff, never shorter than the server's
Retry-After, no retry on quota or auth errors, and backoff sleeps that wake at once on stop."""

from __future__ import annotations

import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from flightdeck.engine.child.policy import RetryNotice, StopRequested
from flightdeck.engine.control.throttle import Lease, RouteThrottle
from flightdeck.engine.errors import FatalError, ProviderError, RateLimited
from flightdeck.engine.inputs.settings import RetrySettings, Route
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

__all__ = ["Retry", "RetryPolicy", "classify", "reason_of"]

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

    def __init__(
        self, settings: RetrySettings, scale: float, rng: random.Random | None, seed: str | None
    ) -> None:
        # tenacity computes the exponential ceiling; the jitter draws from our own generator
        # (wait_random_exponential uses the global one) so a run can be replayed.
        self._ceiling = wait_exponential(
            multiplier=settings.base_s * scale, max=settings.max_s * scale
        )
        self._rng = rng
        self._seed = seed

    def __call__(self, state: RetryCallState) -> float:
        if self._rng is None:  # seeded on first use: nearly every call succeeds at once
            self._rng = random.Random(self._seed)
        ours = self._rng.uniform(0.0, float(self._ceiling(state)))
        exc = state.outcome.exception() if state.outcome is not None else None
        verdict = classify(exc) if exc is not None else None
        return max(ours, verdict.not_before_s) if verdict is not None else ours


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
        self._backoff = _JitteredBackoff(settings, scale, rng, seed)

    def call(
        self,
        fn: Callable[..., T],
        *args: object,
        interrupt: threading.Event,
        on_retry: Callable[[RetryNotice], None] | None = None,
        on_pause: Callable[[float], None] | None = None,
    ) -> T:
        """Call `fn(*args)` until it succeeds, fails for good, runs out of attempts, or is
        stopped (StopRequested)."""

        def attempt() -> T:
            if interrupt.is_set():
                raise StopRequested
            if self.throttle is not None:
                # Another child of this route was told to back off: wait with it.
                self.throttle.wait_out_pause(interrupt, on_pause)
            return fn(*args)

        # Nearly every call succeeds at once, and tenacity's bookkeeping is a large share of
        # an instant call's cost: tenacity takes over from the first retryable failure.
        try:
            return attempt()
        except Exception as exc:
            if classify(exc) is None or self.settings.attempts <= 1:
                raise
            first_error = exc
        return self._retrying(interrupt, on_retry)(_replaying(first_error, attempt))

    def _retrying(
        self, interrupt: threading.Event, on_retry: Callable[[RetryNotice], None] | None
    ) -> Retrying:
        """tenacity, composed: our stop, backoff, classification, and a sleep that wakes on stop."""

        def sleep(seconds: float) -> None:
            if interrupt.wait(seconds):
                raise StopRequested

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome is not None else None
            if isinstance(exc, RateLimited) and exc.retry_after and self.throttle is not None:
                self.throttle.pause(exc.retry_after)
            if on_retry is not None:
                attempts = self.settings.attempts - 1
                delay = state.upcoming_sleep
                on_retry(RetryNotice(state.attempt_number, attempts, delay, reason_of(exc)))

        return Retrying(
            stop=stop_after_attempt(self.settings.attempts),
            wait=self._backoff,
            retry=retry_if_exception(_retryable),
            sleep=sleep,
            before_sleep=before_sleep,
            reraise=True,
        )

    def admit(
        self,
        route: Route,
        tokens: int,
        interrupt: threading.Event,
        on_wait: Callable[[float], None] | None = None,
    ) -> Lease:
        """Take this call's share of the route's rate limits (no limit without a throttle)."""
        if self.throttle is None:
            return Lease(None, tokens)
        return self.throttle.admit(route, tokens, interrupt, on_wait)


def _replaying(error: Exception, attempt: Callable[[], T]) -> Callable[[], T]:
    """`attempt`, but its first call raises `error`: a failure made before tenacity took over
    is its attempt 1, so backoff, notices and attempt counts are as if tenacity had made it."""
    pending = [error]

    def replayed() -> T:
        if pending:
            raise pending.pop()
        return attempt()

    return replayed
