"""Outliers: a child whose tokens or run time is over `FACTOR` times the batch's median.

The medians are taken once per snapshot, then asking whether a row is an outlier is two
comparisons: the table asks for every row on screen and a query with `is:outlier` for every
row, so neither may compute a median per row. `MedianRows` keeps what the medians need per
child, updated only for the rows that changed (the TUI's case: a poll changes the running ones).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from flightdeck.engine.model import ChildRow

FACTOR = 3.0
Kind = Literal["tokens", "time"]


def _tokens(row: ChildRow) -> int:
    # live_usage.total without building a Usage: this runs for every row of every snapshot
    return row.usage.total + row.in_flight.total


def run_s(row: ChildRow, now: float) -> float | None:
    """How long the child has run (to its end, or to `now`); None until it starts."""
    if row.started_ts is None:
        return None
    end = row.finished_ts if row.finished_ts is not None else now
    return max(0.0, end - row.started_ts)


@dataclass(frozen=True, slots=True)
class Medians:
    """The batch's median tokens (among children that used any) and run time (among children
    that started), at `now`."""

    tokens: float | None = None
    run_s: float | None = None
    now: float = 0.0

    def outlier(self, row: ChildRow) -> Kind | None:
        """Which of the row's measures is over FACTOR times its median, tokens first."""
        if self.tokens and _tokens(row) > FACTOR * self.tokens:
            return "tokens"
        if self.run_s:
            took = run_s(row, self.now)
            if took is not None and took > FACTOR * self.run_s:
                return "time"
        return None

    def ratio(self, row: ChildRow, kind: Kind) -> float:
        """How many times its median the row's `kind` is (for the detail line)."""
        if kind == "tokens":
            return _tokens(row) / self.tokens if self.tokens else 0.0
        took = run_s(row, self.now)
        return took / self.run_s if took is not None and self.run_s else 0.0


class MedianRows:
    """Each child's tokens (if it used any) and run span (if it started), by id."""

    def __init__(self) -> None:
        self._tokens: dict[str, int] = {}
        self._spans: dict[str, tuple[float, float | None]] = {}

    def update(self, row: ChildRow) -> None:
        """`row` is new or changed."""
        total = _tokens(row)
        if total:
            self._tokens[row.id] = total
        else:
            self._tokens.pop(row.id, None)
        if row.started_ts is not None:
            self._spans[row.id] = (row.started_ts, row.finished_ts)
        else:
            self._spans.pop(row.id, None)

    def medians(self, now: float) -> Medians:
        tokens = list(self._tokens.values())
        times = [
            max(0.0, (now if end is None else end) - start) for start, end in self._spans.values()
        ]
        return Medians(
            tokens=float(statistics.median(tokens)) if tokens else None,
            run_s=statistics.median(times) if times else None,
            now=now,
        )


def batch_medians(rows: Iterable[ChildRow], now: float) -> Medians:
    """The medians over `rows` (the whole batch, whatever a filter keeps)."""
    kept = MedianRows()
    for row in rows:
        kept.update(row)
    return kept.medians(now)
