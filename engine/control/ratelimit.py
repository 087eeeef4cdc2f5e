"""Per-route token buckets: requests per minute and tokens per minute.

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

import json
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from flightdeck.engine.control.flag import Waitable
from flightdeck.engine.providers.base import ToolSpec, TurnRequest

Clock = Callable[[], float]
# wait(cancel, seconds) -> True if `cancel` was set before the time was up
Wait = Callable[[Waitable | None, float], bool]

CHARS_PER_TOKEN = 4  # about right for English and code on current tokenizers


def _wait(cancel: Waitable | None, seconds: float) -> bool:
    if cancel is None:
        time.sleep(seconds)
        return False
    return cancel.wait(seconds)


class Cancelled(Exception):
    """The wait for a reservation was cancelled (the child is stopping)."""


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
        if self.settled:
            return
        self.settled = True
        if self.limiter is not None:
            self.limiter._reconcile(self.tokens, actual_tokens)


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
        return self.requests is None and self.tokens is None

    def acquire(
        self,
        tokens: int,
        cancel: Waitable | None = None,
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

    def _reconcile(self, estimated: int, actual: int) -> None:
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


def prompt_tokens_estimate(request: TurnRequest) -> int:
    """Rough prompt size from its characters: system, messages, tool calls and tool schemas."""
    chars = len(request.system)
    for message in request.messages:
        chars += len(message.content) + 8
        for call in message.tool_calls:
            chars += len(call.name) + len(json.dumps(dict(call.arguments)))
    chars += _tools_chars(request.tools)
    return math.ceil(chars / CHARS_PER_TOKEN)


_TOOLS_CHARS: dict[int, tuple[tuple[ToolSpec, ...], int]] = {}


def _tools_chars(tools: tuple[ToolSpec, ...]) -> int:
    """Size of the tool schemas; a route's children share one tuple, so it is measured once."""
    cached = _TOOLS_CHARS.get(id(tools))
    if cached is not None and cached[0] is tools:
        return cached[1]
    size = sum(
        len(t.name) + len(t.description) + len(json.dumps(dict(t.parameters))) for t in tools
    )
    if len(_TOOLS_CHARS) > 64:
        _TOOLS_CHARS.clear()
    _TOOLS_CHARS[id(tools)] = (tools, size)  # keeps the tuple alive, so its id stays unique
    return size


def estimate_tokens(request: TurnRequest) -> int:
    """What a call may use against a tokens-per-minute limit: the prompt plus `max_tokens`
    (the most it can write; OpenAI reserves the same way), reconciled after the call."""
    return prompt_tokens_estimate(request) + request.max_tokens
