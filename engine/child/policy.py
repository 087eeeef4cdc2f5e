"""What a child needs of the retry policy and the route's limits, which control/ provides."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from flightdeck.engine.inputs.settings import Route
from flightdeck.engine.interrupt import Interruptible
from flightdeck.engine.providers.base import HeadroomEvent

T = TypeVar("T")


class StopRequested(Exception):
    """The child was interrupted while waiting (backoff, route pause, rate limit)."""


@dataclass(frozen=True, slots=True)
class RetryNotice:
    """What a child shows while it waits: "503, retry 2/6 in 3.1s", or for a rate limit (which
    uses no attempt) "429, retry in 1.0s (throttled 12s of 600s)"."""

    attempt: int  # the retry about to happen (1 = first retry)
    attempts: int  # total retries allowed (for errors; rate limits are bounded by time)
    delay_s: float
    reason: str
    waited_s: float | None = None  # rate limits: seconds throttled so far, of `max_wait_s`
    max_wait_s: float | None = None

    @property
    def text(self) -> str:
        """The notice as one line of activity text."""
        if self.max_wait_s is not None:
            waited = self.waited_s or 0.0
            return (
                f"{self.reason}, retry in {self.delay_s:.1f}s "
                f"(throttled {waited:.0f}s of {self.max_wait_s:.0f}s)"
            )
        return f"{self.reason}, retry {self.attempt}/{self.attempts} in {self.delay_s:.1f}s"


class Reservation(Protocol):
    """A call's share of the route's rate limits, settled with the tokens it used."""

    def settle(self, actual_tokens: int) -> None: ...


class CallPolicy(Protocol):
    """Runs a child's calls: retries with backoff, and the route's rate limits (configured or
    learned from the headers the child reports with `saw_headroom`)."""

    def call(
        self,
        fn: Callable[..., T],
        *args: object,
        interrupt: Interruptible,
        on_retry: Callable[[RetryNotice], None] | None = None,
        on_pause: Callable[[float], None] | None = None,
        on_wait: Callable[[float, str], None] | None = None,
    ) -> T: ...

    def admit(
        self,
        route: Route,
        tokens: int,
        interrupt: Interruptible,
        on_wait: Callable[[float, str], None] | None = None,
    ) -> Reservation: ...

    def limited(self, route: Route) -> tuple[bool, bool]: ...

    def saw_headroom(self, route: Route, event: HeadroomEvent) -> None: ...
