"""What an agent CLI's child has spent: live as each API call streams, exact at each turn's end.

Claude Code's `assistant` events carry each call's usage as it streams; those tokens are billed
at once (the budget acts on them while the child runs), at the route's price or, without one,
at the price of the model the CLI reported. At the end of each turn the CLI reports the turn's
tokens and its own cost for them: what was billed live is trued up to that, so the totals are
the CLI's. Codex reports nothing before its turn's end: until a turn reports some usage, it
is `pending`. A run that ends without its report leaves the live estimate billed (an estimate,
as a model's call cut short); the child's cost is unknown when nothing could price it, or
nothing of that turn was ever reported: what is known of it (`known`, the turns reported before)
stays spent.
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

from flightdeck.engine.agents.formats import Live, Report
from flightdeck.engine.model import Usage
from flightdeck.engine.records.meter import Meter

Price = Callable[[Usage], Decimal | None]  # a cost estimate; None: no price is known


class CliTally:
    """One child's spend: what earlier attempts carried in, the turns reported, and the calls
    of the turn under way."""

    def __init__(
        self, meter: Meter, price: Price, usage: Usage, cost: Decimal | None, known: Decimal
    ) -> None:
        self._meter = meter
        self._price = price
        self.usage = usage  # everything billed: carried, reported, live
        self._known = known  # what is known of the cost (all of it, unless `_unknown`)
        self._unknown = cost is None  # something billed has no price: the cost is unknown
        self._live: dict[str, Usage] = {}  # the turn's calls, by key: their usage so far
        self._live_usage = Usage()
        self._live_cost = Decimal(0)
        self._live_unpriced = False
        self.calls_reported = 0  # the API calls of the turns reported
        self.reports = 0
        self.pending = False  # a turn is under way and has reported no usage yet

    @property
    def cost(self) -> Decimal | None:
        """The child's cost so far; None when part of it has no price."""
        return None if self._unknown or self._live_unpriced else self._known + self._live_cost

    @property
    def known(self) -> Decimal:
        """What is known of the child's cost: all of it, or, once part is unknown, the rest
        (the turns reported, and what the turn under way has been priced so far)."""
        return self._known + self._live_cost

    @property
    def calls(self) -> int:
        """API calls: those the CLI reported, and the calls of the turn under way."""
        return self.calls_reported + len(self._live)

    def begin(self) -> None:
        """A run starts (or is adopted): its turn has reported nothing yet."""
        self.pending = True

    def live(self, event: Live) -> bool:
        """A call's usage so far (a later figure for the same call replaces the earlier);
        True when it changed what is billed or the calls counted."""
        was_pending, self.pending = self.pending, False
        before = self._live.get(event.key)
        if before is not None and before == event.usage:
            return was_pending  # Claude Code repeats a message's usage on each of its blocks
        before = before or Usage()
        now = self._live[event.key] = _max(before, event.usage)
        added = now - before  # never below zero: `now` is the larger of the two, field by field
        if not added.total:
            return True
        cost = self._price(added)
        if cost is None:
            self._meter.add_unpriced(added)
            self._live_unpriced = True
        else:
            self._meter.add_cost(added, cost)
            self._live_cost += cost
        self._live_usage += added
        self.usage += added
        return True

    def report(self, event: Report) -> None:
        """A turn's end: its tokens and cost, as the CLI counts them, replace the live ones."""
        cost = event.cost_usd if event.cost_usd is not None else self._price(event.usage)
        # Exact: the turn's figures replace the live ones (a field may go down).
        extra = event.usage - self._live_usage
        if cost is None:
            self._meter.add_unpriced(extra)
            self._unknown = True
        else:
            # Trued up: the live estimate (if it was priced) is replaced by the CLI's cost.
            billed = Decimal(0) if self._live_unpriced else self._live_cost
            self._meter.add_cost(extra, cost - billed)
            self._known += cost
        self.usage += extra
        self.calls_reported += event.calls if event.calls is not None else max(1, len(self._live))
        self.reports += 1
        self.pending = False
        self._live.clear()
        self._live_usage, self._live_cost, self._live_unpriced = Usage(), Decimal(0), False

    def cut_short(self) -> Usage | None:
        """A run ended without reporting its last turn: what streamed stays billed, at the
        estimate, as spent (a stop never takes back what was shown); returned. None: the cost
        is unknown from now on, as nothing of the turn was reported or could be priced."""
        estimate = self._live_usage
        self._known += self._live_cost
        if not self._live or self._live_unpriced:
            self._unknown = True
        self.calls_reported += len(self._live)
        self.pending = False
        self._live.clear()
        self._live_usage, self._live_cost, self._live_unpriced = Usage(), Decimal(0), False
        return None if self._unknown else estimate


def _max(a: Usage, b: Usage) -> Usage:
    return Usage(
        max(a.input_tokens, b.input_tokens),
        max(a.output_tokens, b.output_tokens),
        max(a.cache_read_tokens, b.cache_read_tokens),
        max(a.cache_write_tokens, b.cache_write_tokens),
    )
