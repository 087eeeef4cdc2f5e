"""The soft budget (`[budget] soft_cost_usd`, live): admission is held once the spend or the
projected cost at completion crosses it, until the operator raises it, drops it or stops the
batch. Coordinator-thread state, no locks; the coordinator asks for its hold with the others.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Sequence
from decimal import Decimal

from flightdeck.engine.model import ChildRow
from flightdeck.engine.money import fmt_usd
from flightdeck.engine.records.forecast import forecast
from flightdeck.engine.records.meter import Meter

log = logging.getLogger(__name__)

# How its hold starts, among the holds a batch records (Snapshot.held): a resume finds it there.
SOFT_HOLD = "soft budget "
# How often the soft budget is checked against the projection (~2 ms at 5,000 children).
SOFT_BUDGET_EVERY_S = 1.0


class SoftBudget:
    """The live soft budget and why it holds admission, if it does."""

    def __init__(
        self,
        cost: Decimal | None,
        *,
        clock: Callable[[], float],
        meter: Meter,
        rows: Callable[[], Sequence[ChildRow]],
        record_event: Callable[[str | None, str, str], None],
        announce: Callable[[], None],  # the hold began: the live limits and holds, told again
    ) -> None:
        self.cost = cost  # None: none, or dropped
        self.held: str | None = None  # why it holds admission
        self._last = -SOFT_BUDGET_EVERY_S
        self._clock = clock
        self._meter = meter
        self._rows = rows
        self._record_event = record_event
        self._announce = announce

    def set(self, cost: Decimal | None) -> None:
        """The operator raised it, lowered it or dropped it: looked at again at once."""
        self.cost = cost
        self.held = None
        self._last = -SOFT_BUDGET_EVERY_S

    def watch(self) -> None:
        """Hold admission once the spend crosses it (looked at before every admission: no child
        starts past it), or the projection does (a pass over every row: once a second); the
        hold lasts until `set` or the batch's end."""
        soft = self.cost
        if soft is None or self.held is not None:
            return
        spent = self._meter.totals().cost_usd
        now = self._clock()
        if spent < soft and now - self._last < SOFT_BUDGET_EVERY_S:
            return
        self._last = now
        projected = forecast(self._rows()).projected_usd
        if projected is not None and projected > soft:  # the projection counts the spend
            why = f"{SOFT_HOLD}{_usd(soft)} reached: projected {_usd(projected)}"
        elif spent >= soft:
            why = f"{SOFT_HOLD}{_usd(soft)} reached: spent {_usd(spent)}"
        else:
            return
        self.held = why
        detail = {
            "soft_cost_usd": str(soft),
            "spent_usd": str(spent),
            "projected_usd": None if projected is None else str(projected),
            "reason": why,
        }
        self._record_event(None, "soft_budget_hold", json.dumps(detail))
        log.info("flightdeck engine: %s; no new child starts", why)  # the UIs ask the operator
        self._announce()

    def end(self) -> bool:
        """An ended batch holds nothing back; True if this held it."""
        held, self.held = self.held, None
        return held is not None

    def holds(self) -> list[str]:
        """Its hold on admission, as `Snapshot.held` says it."""
        return [self.held] if self.held else []


def _usd(amount: Decimal) -> str:
    return fmt_usd(amount)
