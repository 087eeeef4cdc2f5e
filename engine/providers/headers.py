"""Rate-limit response headers: how long the server asked us to wait, and the route's headroom."""

from __future__ import annotations

import contextlib
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
            return max(0.0, float(ms) / 1000.0)
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
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
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(0.0, when.timestamp() - now())


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(float(text))
    except ValueError:
        return None


def openai_headroom(headers: Mapping[str, str]) -> HeadroomEvent | None:
    """`x-ratelimit-remaining-requests` and friends (OpenAI and many compatible servers)."""
    event = HeadroomEvent(
        remaining_requests=_int(headers.get("x-ratelimit-remaining-requests")),
        remaining_tokens=_int(headers.get("x-ratelimit-remaining-tokens")),
        reset_requests_s=duration_s(headers.get("x-ratelimit-reset-requests")),
        reset_tokens_s=duration_s(headers.get("x-ratelimit-reset-tokens")),
    )
    return event if event != HeadroomEvent() else None


def anthropic_headroom(
    headers: Mapping[str, str], now: Callable[[], float] = time.time
) -> HeadroomEvent | None:
    """`anthropic-ratelimit-requests-remaining` and friends; token figures from the tightest
    of the combined, input and output token limits."""
    tokens: list[tuple[int, float | None]] = []
    for kind in ("tokens", "input-tokens", "output-tokens"):
        left = _int(headers.get(f"anthropic-ratelimit-{kind}-remaining"))
        if left is not None:
            reset = seconds_until(headers.get(f"anthropic-ratelimit-{kind}-reset"), now)
            tokens.append((left, reset))
    tightest = min(tokens, key=lambda t: t[0]) if tokens else (None, None)
    event = HeadroomEvent(
        remaining_requests=_int(headers.get("anthropic-ratelimit-requests-remaining")),
        remaining_tokens=tightest[0],
        reset_requests_s=seconds_until(headers.get("anthropic-ratelimit-requests-reset"), now),
        reset_tokens_s=tightest[1],
    )
    return event if event != HeadroomEvent() else None
