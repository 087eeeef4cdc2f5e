"""The money forecast: each child's burn rate, and what the batch will have cost at completion.

The projection is what has been spent (finished and running children alike), plus the finished
children's average cost for each child not yet finished (queued or running). A running child
thus counts its spend so far and one more average: a deliberate lean to the high side, since
a forecast that runs short is the one that surprises. The range takes the 25th and 75th
percentiles of the finished children's costs in place of the average, widened to the average
where the costs are skewed (one expensive child lifts the average above the 75th percentile),
so the projection always lies within its range. Children that a child delegates later are not
known yet and are not counted. What a superseded delegate (its parent's earlier attempt's) or a
child queued again (a lost attempt, a retry) spent counts as spent, never as a sample; nor is
a child billed nothing (its calls refused) a sample.

Unknown prices stay unknown: one child with no price makes the projection None, never a guess.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal

from flightdeck.engine.model import ChildRow, ChildStatus


@dataclass(frozen=True, slots=True)
class Forecast:
    """A batch's projected cost at completion, with a low and a high estimate."""

    finished: int  # children that have ended, however
    remaining: int  # children not yet finished: queued and running
    # started children (a child queued again among them) whose cost is unknown: any makes the
    # projection None
    unpriced: int
    projected_usd: Decimal | None  # None: no child has finished yet, or a price is unknown
    low_usd: Decimal | None  # the 25th percentile of finished costs in place of the average
    high_usd: Decimal | None  # the 75th (each widened to the average: see the module docstring)

    @property
    def known(self) -> bool:
        """A projection exists: something has finished and every price is known."""
        return self.projected_usd is not None


def burn_rate(row: ChildRow, now: float) -> Decimal | None:
    """A child's dollars per minute over its running time (to `now` while it runs); None if
    it has not started, no time has passed, or its price is unknown."""
    cost = row.live_cost_usd
    if cost is None or row.started_ts is None:
        return None
    end = row.finished_ts if row.finished_ts is not None else now
    seconds = end - row.started_ts
    if seconds <= 0:
        return None
    rate: Decimal = cost * 60 / Decimal(seconds)
    return rate


def forecast(children: Sequence[ChildRow]) -> Forecast:
    """The projected cost of `children` once all have finished (see the module docstring)."""
    finished_costs: list[Decimal] = []
    spent = Decimal(0)
    remaining = unpriced = 0
    for row in children:
        ended = row.status.terminal
        if not ended:
            remaining += 1
        if row.status is ChildStatus.QUEUED:  # queued again: its earlier attempts' spend
            if row.cost_usd is None and (
                row.usage.total or row.cost_floor_usd or row.carried_unknown
            ):
                unpriced += 1  # what they spent is unknown, in part at least
            spent += row.cost_known_usd
            continue
        cost = row.cost_usd if ended else row.live_cost_usd
        if cost is None:
            unpriced += 1
            continue
        spent += cost
        # A superseded delegate was cut short with its parent's earlier attempt, and a child
        # billed nothing (its calls refused: a known $0 even at an unknown price) did no work:
        # neither is a sample of what a child costs.
        if ended and not row.superseded and (cost or row.usage.total):
            finished_costs.append(cost)
    finished = len(children) - remaining
    if unpriced or not finished_costs:
        return Forecast(finished, remaining, unpriced, None, None, None)
    mean = sum(finished_costs, Decimal(0)) / len(finished_costs)
    low = high = mean
    if len(finished_costs) > 1:
        q1, _, q3 = statistics.quantiles(finished_costs, n=4, method="inclusive")
        low, high = min(Decimal(q1), mean), max(Decimal(q3), mean)
    return Forecast(
        finished,
        remaining,
        0,
        spent + mean * remaining,
        spent + low * remaining,
        spent + high * remaining,
    )


def lost_attempt_json(row: ChildRow, rerun: bool, why: str | None = None) -> str:
    """A `lost_attempt` event's detail: what the attempt a dead owner (or worker) lost was
    billed, whether the child runs again, and why it was lost when that is not the owner."""
    detail: dict[str, object] = {
        "usage": dataclasses.asdict(row.usage),
        "cost_usd": None if row.cost_usd is None else str(row.cost_usd),
        "rerun": rerun,
    }
    if why is not None:
        detail["why"] = why
    return json.dumps(detail)


@dataclass(slots=True)
class LostAttempts:
    """What the attempts lost with an owner (or a worker) cost, each its own spend."""

    cost_usd: Decimal = Decimal(0)  # the lost attempts with a price
    unknown: int = 0  # lost attempts with no price
    # Each child's spend as its current attempt began: what a retry or a lost attempt carried
    # into it (None: unknown). A lost attempt's row holds that too: its own cost is the rest.
    carried: dict[str, Decimal | None] = dataclasses.field(default_factory=dict)

    def add(self, child_id: str, cost: Decimal | None) -> None:
        """A lost attempt whose row was billed `cost` in all; the next attempt carries it."""
        before = self.carried.get(child_id, Decimal(0))
        if cost is None or before is None:
            self.unknown += 1
        else:
            self.cost_usd += cost - before
        self.carried[child_id] = cost


def lost_attempts(events: Iterable[tuple[float, str | None, str, str]]) -> LostAttempts:
    """The lost attempts of a batch's events (as the reader gives them, in order): its
    `lost_attempt` events, less what each child's `retry` or earlier lost attempt carried."""
    out = LostAttempts()
    for _ts, child, kind, detail in events:
        if child is None or kind not in ("lost_attempt", "retry"):
            continue
        found = json.loads(detail)
        cost = (found["before"] if kind == "retry" else found).get("cost_usd")
        cost = None if cost is None else Decimal(cost)
        if kind == "retry":  # the attempt it ended, earlier ones included, is carried on
            out.carried[child] = cost
        else:
            out.add(child, cost)
    return out


def lost_cost(events: Iterable[tuple[float, str | None, str, str]]) -> Decimal | None:
    """What the attempts lost with an owner cost (`lost_attempts`); None if one had no price."""
    lost = lost_attempts(events)
    return None if lost.unknown else lost.cost_usd
