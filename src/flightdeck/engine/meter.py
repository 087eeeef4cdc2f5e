"""Thread-safe usage and cost: exact Decimal sums, prices from genai-prices or the route config."""

from __future__ import annotations

import threading
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache

from .model import Usage
from .settings import Price, Route

_MILLION = Decimal(1_000_000)
_ZERO = Decimal(0)


def cost_of(usage: Usage, price: Price) -> Decimal:
    """Exact dollar cost of `usage` at `price` (per million tokens)."""
    cache_read = price.cache_read_per_mtok
    cache_write = price.cache_write_per_mtok
    total = (
        usage.input_tokens * price.input_per_mtok
        + usage.output_tokens * price.output_per_mtok
        + usage.cache_read_tokens * (price.input_per_mtok if cache_read is None else cache_read)
        + usage.cache_write_tokens * (price.input_per_mtok if cache_write is None else cache_write)
    )
    return total / _MILLION


@lru_cache(maxsize=256)
def _known_model(provider: str, model: str) -> bool:
    """Whether genai-prices has a price for this model (looked up once, offline data)."""
    try:
        from genai_prices import Usage as GPUsage
        from genai_prices import calc_price

        calc_price(GPUsage(input_tokens=1, output_tokens=1), model, provider_id=provider)
    except Exception:  # LookupError and friends: unknown model, unknown provider
        return False
    return True


def genai_cost(usage: Usage, provider: str, model: str) -> Decimal | None:
    """Cost from genai-prices, or None when the model is unknown (never guessed as zero)."""
    if not _known_model(provider, model):
        return None
    from genai_prices import Usage as GPUsage
    from genai_prices import calc_price

    # genai-prices counts cache tokens inside input_tokens; ours are separate.
    gp = GPUsage(
        input_tokens=usage.prompt_tokens,
        output_tokens=usage.output_tokens,
        cache_read_tokens=usage.cache_read_tokens,
        cache_write_tokens=usage.cache_write_tokens,
    )
    result = calc_price(gp, model, provider_id=provider)
    return Decimal(result.total_price)


def price_known(route: Route) -> bool:
    """Whether the route's calls can be priced (its own price, or genai-prices knows it)."""
    if route.price is not None:
        return True
    return route.provider != "sim" and _known_model(route.provider, route.model)


def route_cost(usage: Usage, route: Route) -> Decimal | None:
    """Cost for a route: its configured price first, then genai-prices, else unknown."""
    if route.price is not None:
        return cost_of(usage, route.price)
    if route.provider == "sim":
        return None
    return genai_cost(usage, route.provider, route.model)


@dataclass(frozen=True, slots=True)
class MeterTotals:
    usage: Usage
    cost_usd: Decimal  # sum of known costs
    unknown_cost_usage: Usage  # usage whose price is unknown: shown, never priced


class Meter:
    """Sums usage and cost per route; safe to call from any number of threads."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._usage: dict[str, Usage] = {}
        self._cost: dict[str, Decimal] = {}
        self._unknown: dict[str, Usage] = {}

    def add(self, route: Route, usage: Usage) -> Decimal | None:
        """Record `usage` on `route` and return its cost (None when the price is unknown)."""
        cost = route_cost(usage, route)
        name = route.name
        with self._lock:
            total = self._usage.get(name)
            self._usage[name] = usage if total is None else total + usage
            if cost is None:
                unknown = self._unknown.get(name)
                self._unknown[name] = usage if unknown is None else unknown + usage
            else:
                self._cost[name] = self._cost.get(name, _ZERO) + cost
        return cost

    def totals(self) -> MeterTotals:
        with self._lock:
            usage = sum(self._usage.values(), Usage())
            cost = sum(self._cost.values(), Decimal(0))
            unknown = sum(self._unknown.values(), Usage())
        return MeterTotals(usage, cost, unknown)

    def by_route(self) -> dict[str, tuple[Usage, Decimal | None]]:
        with self._lock:
            return {
                name: (usage, self._cost.get(name) if name not in self._unknown else None)
                for name, usage in self._usage.items()
            }
