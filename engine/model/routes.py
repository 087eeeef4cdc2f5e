"""A route's gauges (the limits it is paced to, the headroom last seen) and the live limits."""

from __future__ import annotations

from decimal import Decimal
from typing import Literal

from flightdeck.engine.model.record import record


@record
class RouteLimit:
    """A per-minute limit a route is paced to, and where it came from: the route's settings
    ("configured") or the server's rate-limit headers ("learned", lower than any configured)."""

    per_minute: int
    source: Literal["configured", "learned"]

    @property
    def label(self) -> str:
        """E.g. "240 learned"."""
        return f"{self.per_minute} {self.source}"


@record
class RouteHeadroom:
    """Provider rate-limit headroom last seen on a route (from response headers), and the
    limits the route is paced to."""

    route: str
    remaining_requests: int | None = None
    remaining_tokens: int | None = None
    reset_requests_s: float | None = None
    reset_tokens_s: float | None = None
    paused_until: float | None = None  # a 429 with Retry-After paused the whole route
    observed_ts: float | None = None
    rpm: RouteLimit | None = None
    tpm: RouteLimit | None = None
    # With no limit known, 429s adapt how many calls the route has in flight (None: no cap yet).
    adaptive_concurrency: int | None = None
    rate_limited_1m: int = 0  # 429s the route's calls drew in the last minute
    alive: int = 0  # children started and not ended (counted against `max_concurrent`)
    max_concurrent: int | None = None  # the route's configured cap (None: none)
    # What flightdeck's own request and token buckets hold (negative: owed by calls waiting for
    # their turn); None without such a bucket.
    banked_requests: float | None = None
    banked_tokens: float | None = None


ROUTE_FIELDS = ("max_concurrent", "rpm", "tpm")  # a route's limits the operator may change


@record
class RouteCaps:
    """A route's limits as they stand now: configured, or changed live by the operator (rpm and
    tpm learned from the server's headers stay an upper bound over these: see RouteHeadroom)."""

    route: str
    max_concurrent: int | None = None
    rpm: int | None = None
    tpm: int | None = None
    # A command route: its CLI makes its own API calls, which nothing here paces (no rpm, tpm).
    command: bool = False

    @property
    def fields(self) -> tuple[str, ...]:
        """The limits that apply to the route (ROUTE_FIELDS, or a command's one)."""
        return ("max_concurrent",) if self.command else ROUTE_FIELDS


@record
class Limits:
    """A batch's live limits: the pool size, each route's caps, and the soft budget (None:
    none), with the hard budget they are checked against and the soft budget's hold, if on."""

    pool_size: int
    routes: tuple[RouteCaps, ...] = ()
    soft_cost_usd: Decimal | None = None
    max_cost_usd: Decimal | None = None  # the hard budget: never changed live
    soft_held: str | None = None  # why the soft budget holds admission; None: it does not
    # A route whose spend is not known (no price): no soft budget can be set live on it.
    unpriced_route: str | None = None

    def route(self, name: str) -> RouteCaps | None:
        """The caps of route `name`; None if the batch has no such route."""
        return next((r for r in self.routes if r.route == name), None)
