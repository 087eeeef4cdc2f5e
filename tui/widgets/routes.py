"""The route gauges: per route, children in flight against its cap, a route-wide pause with its
countdown, 429s in the last minute, the cache hit ratio, and rpm/tpm headroom (the limit
flightdeck paces to, and what the server's headers said remains)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from flightdeck.engine.model import ChildRow, ChildStatus, RouteHeadroom, RouteLimit, Snapshot
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.fmt import fmt_span, fmt_tokens
from rich.text import Text
from textual.widgets import Static

TITLE = (
    "  in flight/cap · paused · 429s in the last minute · cache hit ratio · "
    "rpm/tpm paced to · our buckets · server headroom (r hides)"
)
NOT_STORED = (
    "rpm/tpm headroom, pauses and 429s need the owner's process (not stored): "
    "in flight and cache ratio are counted from the rows"
)


class RoutePanel(Static):
    """Hidden until its key is pressed; fed a snapshot on every poll while shown."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, markup=False)
        self._shown: Text | None = None

    def show(self, snap: Snapshot) -> None:
        """Render the gauges for `snap` (one pass over its children); a no-op when unchanged."""
        text = routes_text(snap)
        if text != self._shown:
            self._shown = text
            self.update(text)


@dataclass(slots=True)
class RouteRows:
    """What a route's rows tell: its model, children running, and the prompt tokens billed."""

    model: str
    running: int = 0
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @property
    def cache_ratio(self) -> float | None:
        """Cache reads over everything read (fresh input, cache reads and writes); None before
        anything was read."""
        read = self.input_tokens + self.cache_read_tokens + self.cache_write_tokens
        return self.cache_read_tokens / read if read else None


def route_rows(rows: Iterable[ChildRow]) -> dict[str, RouteRows]:
    """Per route, one pass over the rows. Not `records.meter.route_totals`: that sums costs and
    every status too, four times the work, on every poll of up to 5,000 rows.

    A parent waiting on its delegates is running but holds no slot: it is not in flight."""
    out: dict[str, RouteRows] = {}
    running = ChildStatus.RUNNING
    for row in rows:
        acc = out.get(row.route)
        if acc is None:
            acc = out[row.route] = RouteRows(row.model)
        usage = row.usage
        acc.input_tokens += usage.input_tokens
        acc.cache_read_tokens += usage.cache_read_tokens
        acc.cache_write_tokens += usage.cache_write_tokens
        if row.status is running and not row.waits_on_delegates:
            acc.running += 1
    return out


def _in_flight(text: Text, alive: int, hr: RouteHeadroom | None, cap: int | None = None) -> None:
    """`cap`: the route's max_concurrent from the live limits, for a view with no gauges (an
    attached one: the owner records its limits, not its gauges)."""
    caps: list[tuple[int, str]] = []
    if hr is not None and hr.max_concurrent is not None:
        caps.append((hr.max_concurrent, "max_concurrent"))
    elif hr is None and cap is not None:
        caps.append((cap, "max_concurrent"))
    if hr is not None and hr.adaptive_concurrency is not None:
        caps.append((hr.adaptive_concurrency, "adapting to 429s"))
    text.append("  in flight ", style="dim")
    if not caps:
        text.append(str(alive))
        if hr is not None:
            text.append(" (no cap)", style="dim")
        return
    cap, why = min(caps)
    text.append(f"{alive}/{cap}", style="bold yellow" if alive >= cap else "")
    text.append(f" {why}", style="dim")


def _limit(
    text: Text,
    kind: str,
    limit: RouteLimit | None,
    banked: float | None,
    remaining: int | None,
    reset_s: float | None,
    *,
    since: float,
) -> None:
    """`kind` ("rpm"/"tpm"): the limit paced to, what our bucket holds, and what the server
    last said remains."""
    if limit is None and remaining is None:
        return
    text.append(f"  {kind} ", style="dim")
    text.append(limit.label if limit is not None else "no limit")
    if banked is not None:
        text.append(" · ours ", style="dim")
        if banked < 0:  # calls wait their turn: the pacing holds them
            text.append(f"{fmt_tokens(round(-banked))} owed", style="bold yellow")
        else:
            text.append(f"{fmt_tokens(int(banked))} banked")
    if remaining is not None:
        low = limit is not None and remaining < limit.per_minute * 0.1
        text.append(" · server ", style="dim")
        text.append(f"{fmt_tokens(remaining)} left", style="bold yellow" if low else "")
        if reset_s is not None:
            text.append(f" (resets in {fmt_span(max(0.0, reset_s - since))})", style="dim")


def _route_line(
    name: str, rows: RouteRows | None, hr: RouteHeadroom | None, now: float, cap: int | None
) -> Text:
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(one_line(name), style="bold")
    if rows is not None:
        text.append(f" {one_line(rows.model)}", style="dim")
    alive = hr.alive if hr is not None else rows.running if rows is not None else 0
    _in_flight(text, alive, hr, cap)
    if hr is not None:
        if hr.paused_until is not None and hr.paused_until > now:
            text.append("  paused ", style="bold yellow")
            text.append(f"{hr.paused_until - now:.1f}s", style="bold yellow")
        text.append("  429s/min ", style="dim")
        text.append(str(hr.rate_limited_1m), style="bold red" if hr.rate_limited_1m else "")
    ratio = rows.cache_ratio if rows is not None else None
    text.append("  cache ", style="dim")
    text.append("—" if ratio is None else f"{ratio:.0%}")
    if hr is not None:
        since = now - hr.observed_ts if hr.observed_ts is not None else 0.0
        _limit(
            text,
            "rpm",
            hr.rpm,
            hr.banked_requests,
            hr.remaining_requests,
            hr.reset_requests_s,
            since=since,
        )
        _limit(
            text,
            "tpm",
            hr.tpm,
            hr.banked_tokens,
            hr.remaining_tokens,
            hr.reset_tokens_s,
            since=since,
        )
    return text


def routes_text(snap: Snapshot) -> Text:
    """A title line, then one line per route (every route with a child or a gauge)."""
    by_route = route_rows(snap.children)
    headroom = {hr.route: hr for hr in snap.routes}
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append("routes", style="bold underline")
    text.append(TITLE, style="dim")
    limits = snap.limits
    for name in sorted(by_route.keys() | headroom.keys()):
        caps = limits.route(name) if limits is not None else None
        cap = caps.max_concurrent if caps is not None else None
        text.append("\n")
        text.append_text(_route_line(name, by_route.get(name), headroom.get(name), snap.now, cap))
    if not snap.routes:
        text.append("\n")
        text.append(NOT_STORED, style="dim")
    return text
