"""What a child needs of the retry policy and the route's limits, which control/ provides."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from flightdeck.engine.inputs.settings import Route

T = TypeVar("T")


class StopRequested(Exception):
    """The child was interrupted while waiting (backoff, route pause, rate limit)."""


@dataclass(frozen=True, slots=True)
class RetryNotice:
    """What a child shows while it waits: "429, retry 2/6 in 3.1s"."""

    attempt: int  # the retry about to happen (1 = first retry)
    attempts: int  # total retries allowed
    delay_s: float
    reason: str

    @property
    def text(self) -> str:
        """The notice as one line of activity text."""
        return f"{self.reason}, retry {self.attempt}/{self.attempts} in {self.delay_s:.1f}s"


class Reservation(Protocol):
    """A call's share of the route's rate limits, settled with the tokens it used."""

    def settle(self, actual_tokens: int) -> None: ...


class CallPolicy(Protocol):
    """Runs a child's calls: retries with backoff, and the route's rate limits."""

    def call(
        self,
        fn: Callable[..., T],
        *args: object,
        interrupt: threading.Event,
        on_retry: Callable[[RetryNotice], None] | None = None,
        on_pause: Callable[[float], None] | None = None,
    ) -> T: ...

    def admit(
        self,
        route: Route,
        tokens: int,
        interrupt: threading.Event,
        on_wait: Callable[[float], None] | None = None,
    ) -> Reservation: ...
