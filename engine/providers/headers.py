"""Rate-limit response headers: how long the server asked us to wait, and the route's headroom."""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from email.utils import parsedate_to_datetime

from flightdeck.engine.providers.base import HeadroomEvent


def retry_after(headers: Mapping[str, str], now: Callable[[], float] = time.time) -> float | None:
    """Seconds the server asked us to wait: `retry-after-ms`, else `retry-after` (s or a date)."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        with contextlib.suppress(ValueError):
            if math.isfinite(wait := float(ms) / 1000.0):
                return max(0.0, wait)
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        wait = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, wait) if math.isfinite(wait) else None
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - now())


def duration_s(text: str | None) -> float | None:
    """OpenAI's reset durations: "1s", "6m0s", "20ms", "1h2m3.5s"."""
    if not text:
        return None
    total, number, i = 0.0, "", 0
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    while i < len(text):
        ch = text[i]
        if ch.isdigit() or ch == ".":
            number += ch
            i += 1
            continue
        unit = "ms" if text.startswith("ms", i) else ch
        if unit not in units or not number:
            return None
        try:
            total += float(number) * units[unit]
        except ValueError:
            return None
        number, i = "", i + len(unit)
    if number:  # a bare number: seconds
        try:
            total += float(number)
        except ValueError:
            return None
    return total


def seconds_until(stamp: str | None, now: Callable[[], float] = time.time) -> float | None:
    """Anthropic's resets: an RFC 3339 time; seconds from now until then."""
    if not stamp:
        return None
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError, OSError):
        return None
    return max(0.0, when - now())


class _Reader:
    """Reads rate-limit headers, noting the ones that are present but unreadable."""

    def __init__(self, headers: Mapping[str, str], now: Callable[[], float]) -> None:
        self.headers = headers
        self.now = now
        self.malformed: list[str] = []

    def _bad(self, name: str) -> None:
        self.malformed.append(name)

    def count(self, name: str) -> int | None:
        """A non-negative whole number ("240", "240.0"); None if absent or unreadable."""
        text = self.headers.get(name)
        if text is None:
            return None
        try:
            value = float(text)
        except ValueError:
            value = -1.0
        if not 0 <= value < 1e15:  # also NaN and inf
            self._bad(name)
            return None
        return int(value)

    def duration(self, name: str) -> float | None:
        """OpenAI's reset: a duration ("6m0s")."""
        text = self.headers.get(name)
        value = duration_s(text)
        if text is not None and (value is None or not 0 <= value < 1e9):
            self._bad(name)
            return None
        return value

    def stamp(self, name: str) -> float | None:
        """Anthropic's reset: an RFC 3339 time, as seconds from now."""
        text = self.headers.get(name)
        value = seconds_until(text, self.now)
        if text is not None and value is None:
            self._bad(name)
        return value


def openai_headroom(
    headers: Mapping[str, str], now: Callable[[], float] = time.time
) -> HeadroomEvent | None:
    """`x-ratelimit-limit-requests`, `-remaining-`, `-reset-` and the same for tokens (OpenAI and
    many compatible servers); an unreadable value is left out and named in `malformed`."""
    read = _Reader(headers, now)
    event = HeadroomEvent(
        remaining_requests=read.count("x-ratelimit-remaining-requests"),
        remaining_tokens=read.count("x-ratelimit-remaining-tokens"),
        reset_requests_s=read.duration("x-ratelimit-reset-requests"),
        reset_tokens_s=read.duration("x-ratelimit-reset-tokens"),
        limit_requests=read.count("x-ratelimit-limit-requests"),
        limit_tokens=read.count("x-ratelimit-limit-tokens"),
        malformed=tuple(read.malformed),
    )
    return event if event != HeadroomEvent() else None


def anthropic_headroom(
    headers: Mapping[str, str], now: Callable[[], float] = time.time
) -> HeadroomEvent | None:
    """`anthropic-ratelimit-requests-limit`, `-remaining`, `-reset` and friends; token figures
    from the tightest of the combined, input and output token limits (the one with the least
    remaining; its limit, else the smallest stated)."""
    read = _Reader(headers, now)
    tokens: list[tuple[int, float | None, int | None]] = []
    limits: list[int] = []
    for kind in ("tokens", "input-tokens", "output-tokens"):
        left = read.count(f"anthropic-ratelimit-{kind}-remaining")
        reset = read.stamp(f"anthropic-ratelimit-{kind}-reset")
        limit = read.count(f"anthropic-ratelimit-{kind}-limit")
        if limit is not None:
            limits.append(limit)
        if left is not None:
            tokens.append((left, reset, limit))
    left, reset, limit = min(tokens, key=lambda t: t[0]) if tokens else (None, None, None)
    event = HeadroomEvent(
        remaining_requests=read.count("anthropic-ratelimit-requests-remaining"),
        remaining_tokens=left,
        reset_requests_s=read.stamp("anthropic-ratelimit-requests-reset"),
        reset_tokens_s=reset,
        limit_requests=read.count("anthropic-ratelimit-requests-limit"),
        limit_tokens=limit if limit is not None else min(limits, default=None),
        malformed=tuple(read.malformed),
    )
    return event if event != HeadroomEvent() else None
