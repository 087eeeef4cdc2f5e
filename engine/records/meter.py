"""Usage and cost: exact Decimal sums, prices from genai-prices or the route config; the live
thread-safe meter, and totals per batch and per route from child rows."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache

from flightdeck.engine.inputs.settings import Price, Route
from flightdeck.engine.model import ChildRow, ChildStatus, RouteTotals, Totals, Usage
from flightdeck.engine.money import ZERO_USD

_MILLION = Decimal(1_000_000)


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


# An agent CLI's usage is its model API's: priced as that API prices the model it runs.
_PRICED_AS = {"claude-stream-json": "anthropic", "codex-json": "openai"}


def _priced_as(route: Route) -> str | None:
    """The model API under which genai-prices may know the route's model: a model API's own, or
    the API of an agent CLI that reports its usage (Claude Code's, Codex's). A sim's and another
    command's never (its `model` is its program's name or a label), so neither pays for
    loading the tables: about half a second of CPU at a batch's start."""
    if route.command is not None:
        return _PRICED_AS.get(route.command.format)
    return route.provider if route.provider in ("openai", "anthropic") else None


def price_known(route: Route) -> bool:
    """Whether the route's calls can be priced (its own price, or genai-prices knows it)."""
    if route.price is not None:
        return True
    provider = _priced_as(route)
    return provider is not None and _known_model(provider, route.model)


def spend_known(route: Route) -> bool:
    """Whether what the route's children spend is known: priced calls, or a command whose CLI
    reports its cost (Claude Code; Codex's tokens need the route's price or a model that
    genai-prices knows, another command's the route's price). A cost cap over a route that
    is not is never reached: it cannot be enforced."""
    reports_cost = route.command is not None and route.command.format == "claude-stream-json"
    return reports_cost or price_known(route)


def pricing_wanted(route: Route) -> str:
    """What a route whose spend is unknown needs for it to be known, said to its user."""
    wanted = f"give [routes.{route.name}] a price"
    if route.command is not None and _priced_as(route) is not None:  # Codex: its tokens only
        return f"{wanted}, or set its model to the one its CLI runs (one genai-prices knows)"
    return wanted


def starts_known(route: Route) -> bool:
    """Whether a child of the route costs a known $0 until it is billed: a model child does
    (a call refused with a 429, a 401, or stopped before it is billed costs nothing, whatever
    the price; the first call billed at an unknown price makes it unknown), as does a command
    whose spend is known. A command whose CLI may report no usage does not."""
    return route.command is None or spend_known(route)


def route_cost(usage: Usage, route: Route, model: str | None = None) -> Decimal | None:
    """Cost for a route: its configured price first, then genai-prices for `model` (an agent
    CLI's reported one) or the route's, else unknown."""
    if route.price is not None:
        return cost_of(usage, route.price)
    provider = _priced_as(route)
    if provider is None:
        return None
    return genai_cost(usage, provider, model or route.model)


def cache_saving(usage: Usage, route: Route, paid: Decimal | None = None) -> Decimal | None:
    """What reading `usage`'s cache tokens saved against paying them as input (None: the price
    is unknown); `paid`: `route_cost(usage, route)`, when the caller has it already."""
    if not usage.cache_read_tokens:
        return ZERO_USD
    uncached = Usage(
        usage.input_tokens + usage.cache_read_tokens,
        usage.output_tokens,
        0,
        usage.cache_write_tokens,
    )
    full = route_cost(uncached, route)
    if paid is None:
        paid = route_cost(usage, route)
    return None if full is None or paid is None else full - paid


@dataclass(frozen=True, slots=True)
class MeterTotals:
    """A batch's usage and cost so far."""

    usage: Usage
    cost_usd: Decimal  # sum of known costs
    unknown_cost_usage: Usage  # usage whose price is unknown: shown, never priced


class Meter:
    """Sums a batch's usage and cost as it is billed; safe to call from any number of threads.

    Per-route and per-child figures come from the child rows (`route_totals`), the same source
    a report reads, so the live view and the report cannot disagree.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._usage = Usage()
        self._cost = ZERO_USD
        self._unknown = Usage()

    def add_priced(self, usage: Usage, cost: Decimal | None) -> None:
        """Record `usage` at its `cost` (None: unknown, shown and never priced)."""
        if cost is None:
            self.add_unpriced(usage)
        else:
            self.add_cost(usage, cost)

    def add_unpriced(self, usage: Usage) -> None:
        """Record `usage` whose price is unknown: shown, never priced."""
        with self._lock:
            self._usage += usage
            self._unknown += usage

    def add_cost(self, usage: Usage, cost: Decimal) -> None:
        """Record `usage` at the `cost` its agent CLI reported for it."""
        with self._lock:
            self._usage += usage
            self._cost += cost

    def add_spent(
        self, usage: Usage, cost: Decimal | None, known: Decimal, route: Route | None = None
    ) -> None:
        """What a child spent before this owner (a row carried in, a process adopted): its cost
        as recorded (an agent CLI's is its own report, which its route's price may not know);
        where that is unknown, the part `known` (what a stop left known of it), or its usage
        priced on `route` if that can be and comes to more: never less than is known spent
        (priced, its usage may come to less: a CLI's own report is not the route's price)."""
        if cost is not None:
            self.add_cost(usage, cost)
            return
        priced = route_cost(usage, route) if route is not None else None
        with self._lock:
            self._usage += usage
            self._unknown += usage
            self._cost += known if priced is None else max(known, priced)

    def totals(self) -> MeterTotals:
        """The sums so far."""
        with self._lock:
            return MeterTotals(self._usage, self._cost, self._unknown)


class RowTally:
    """Running totals of child rows: counts, usage and the exact sum of the known costs. A row
    added can be removed again (its newer version added instead): integers and decimals sum
    exactly, so the totals stay those of the rows in it."""

    __slots__ = (
        "cost",
        "counts",
        "flight",
        "flight_cost",
        "pausing",
        "pending",
        "saved",
        "saved_unknown",
        "superseded",
        "tokens_unknown",
        "unknown",
        "usage",
    )

    def __init__(self) -> None:
        self.counts = dict.fromkeys(ChildStatus, 0)
        self.usage = Usage()
        self.cost = ZERO_USD
        self.unknown = 0
        self.flight = Usage()
        self.flight_cost = ZERO_USD
        self.saved = ZERO_USD
        self.saved_unknown = 0
        self.tokens_unknown = 0
        self.pending = 0
        self.pausing = 0
        self.superseded = 0  # ended rows of earlier attempts' delegates: in no status count

    def add(self, row: ChildRow) -> None:
        if row.superseded and row.status.terminal:
            self.superseded += 1
        else:
            self.counts[row.status] += 1
        if row.pausing:
            self.pausing += 1
        self.usage += row.usage
        if row.cost_usd is None or row.in_flight_cost_usd is None:
            self.unknown += 1
        self.cost += row.cost_known_usd  # all of it, or the part known: spent is spent
        if row.cache_saved_usd:
            self.saved += row.cache_saved_usd
        if row.cache_saved_usd is None or row.tokens_unknown:
            self.saved_unknown += 1
        if row.tokens_unknown:
            self.tokens_unknown += 1
        if row.cost_pending:
            self.pending += 1
        if row.in_flight.total:
            self.flight += row.in_flight
            if row.in_flight_cost_usd is not None:
                self.flight_cost += row.in_flight_cost_usd

    def remove(self, row: ChildRow) -> None:
        """Take out a row added before (as `add` put it in)."""
        if row.superseded and row.status.terminal:
            self.superseded -= 1
        else:
            self.counts[row.status] -= 1
        if row.pausing:
            self.pausing -= 1
        self.usage -= row.usage
        if row.cost_usd is None or row.in_flight_cost_usd is None:
            self.unknown -= 1
        self.cost -= row.cost_known_usd
        if row.cache_saved_usd:
            self.saved -= row.cache_saved_usd
        if row.cache_saved_usd is None or row.tokens_unknown:
            self.saved_unknown -= 1
        if row.tokens_unknown:
            self.tokens_unknown -= 1
        if row.cost_pending:
            self.pending -= 1
        if row.in_flight.total:
            self.flight -= row.in_flight
            if row.in_flight_cost_usd is not None:
                self.flight_cost -= row.in_flight_cost_usd

    def totals(self) -> Totals:
        counts = self.counts
        n = sum(counts.values()) + self.superseded
        # Gated children wait for the prompt-cache gate and hold no slot: they are queued.
        queued = counts[ChildStatus.QUEUED] + counts[ChildStatus.GATED]
        running = counts[ChildStatus.RUNNING]
        completed = counts[ChildStatus.COMPLETED]
        stopped = counts[ChildStatus.STOPPED]
        paused = counts[ChildStatus.PAUSED]
        return Totals(
            children=n,
            queued=queued,
            running=running,
            completed=completed,
            failed=n - queued - running - completed - stopped - paused - self.superseded,
            stopped=stopped,
            superseded=self.superseded,
            paused=paused,
            pausing=self.pausing,
            usage=self.usage,
            cost_usd=self.cost,
            cost_unknown=self.unknown,
            in_flight=self.flight,
            in_flight_cost_usd=self.flight_cost,
            cache_saved_usd=self.saved,
            saved_unknown=self.saved_unknown,
            tokens_unknown=self.tokens_unknown,
            pending=self.pending,
        )


def totals_of(rows: Iterable[ChildRow]) -> Totals:
    """Batch totals from child rows (one pass)."""
    tally = RowTally()
    for row in rows:
        tally.add(row)
    return tally.totals()


def route_totals(rows: Iterable[ChildRow]) -> tuple[RouteTotals, ...]:
    """Totals per route from child rows (one pass), sorted by route name."""
    tallies: dict[str, tuple[str, RowTally]] = {}
    for row in rows:
        entry = tallies.get(row.route)
        if entry is None:  # a route has one model: its first row names it
            entry = tallies[row.route] = (row.model, RowTally())
        entry[1].add(row)
    return tuple(
        RouteTotals(route, model, tally.totals())
        for route, (model, tally) in sorted(tallies.items())
    )
