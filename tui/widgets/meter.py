"""The cost meter: batch progress, tokens, dollars, burn rate, budget, elapsed time, and the
limit each route is paced to (configured or learned)."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from decimal import Decimal

from flightdeck.engine.apilight import Forecast, forecast
from flightdeck.engine.model import BatchStatus, ChildRow, Snapshot
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.fmt import (
    fmt_clock,
    fmt_cost,
    fmt_counted,
    fmt_spent,
    fmt_spent_compact,
    forecast_label,
)
from rich.cells import cell_len
from rich.text import Text
from textual.widgets import Static

BAR_WIDTH = 24
COMPACT_BAR = 8
BURN_WINDOW_S = 60.0  # the burn rate is measured over the last minute


def bar(fraction: float, width: int = BAR_WIDTH) -> str:
    """A text progress bar, full at 1.0."""
    filled = round(max(0.0, min(1.0, fraction)) * width)
    return "█" * filled + "░" * (width - filled)


class CostMeter(Static):
    """Batch progress and money at a glance; fed a snapshot on every poll."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, markup=False)
        self._samples: deque[tuple[float, Decimal]] = deque()
        self._shown: Text | None = None
        self._last: tuple[Snapshot, float, Decimal | None] | None = None
        self._ahead: tuple[Sequence[ChildRow], Forecast] | None = None  # of these rows

    def burn_per_min(self, snap: Snapshot, now: float) -> Decimal | None:
        """Dollars per minute over the last minute (the batch's first, while it is younger);
        None once the batch has ended, or nobody runs it: nothing burns then."""
        cost = snap.totals.live_cost_usd
        if _burns_nothing(snap):
            return None
        samples = self._samples
        samples.append((now, cost))
        while now - samples[0][0] > BURN_WINDOW_S:
            samples.popleft()
        t0, c0 = samples[0]
        since = max(snap.started_ts, now - BURN_WINDOW_S)
        if now <= since:
            return None
        spent = cost - c0
        if t0 > since:
            # Part of the minute came before the first poll (a view attached to a running
            # batch): the batch's average up to then stands for it. Measured from the attach
            # alone, it read $0.00/min while every call was still out.
            spent += c0 * Decimal(t0 - since) / Decimal(t0 - snap.started_ts)
        # The live cost falls when a child's first call, its prompt priced as fresh input, is
        # billed for less (a prefix read from the cache): an estimate corrected, not money back.
        return max(Decimal(0), spent * 60 / Decimal(now - since))

    def show(self, snap: Snapshot, now: float) -> None:
        """Render the meter for `snap`; a no-op when nothing visible changed."""
        if snap.finished_ts is not None:  # the batch is over: its clock stops with it
            now = snap.finished_ts
        burn = self.burn_per_min(snap, now)
        self._last = (snap, now, burn)
        text = self._fitted(snap, now, burn)
        if text != self._shown:
            self._shown = text
            self.update(text, layout=False)  # fixed height: no layout pass per poll

    def on_resize(self) -> None:
        if self._last is not None:  # which form fits depends on the width
            self._shown = self._fitted(*self._last)
            self.update(self._shown, layout=False)

    def _fitted(self, snap: Snapshot, now: float, burn: Decimal | None) -> Text:
        """The full form when it fits the meter's width, else the full form without its
        extras, else the compact one. A budget, a forecast and lost attempts can take the full
        form past 160 columns, and a figure past the edge is lost (the elapsed time first)."""
        ahead = self._forecast(snap.children)
        width = self.content_region.width
        if width <= 0:  # not laid out yet
            return meter_text(snap, now, burn, ahead, compact=False)
        for lean in (False, True):
            text = meter_text(snap, now, burn, ahead, compact=False, lean=lean, width=width)
            if _fits(text, width):
                return text
        text = meter_text(snap, now, burn, ahead, compact=True, width=width)
        if _fits(text, width):
            return text
        # Big token counts at 80 columns, or a narrower screen: tighter still, rather than the
        # elapsed time cut at the edge.
        return meter_text(snap, now, burn, ahead, compact=True, tight=True, width=width)

    def _forecast(self, children: Sequence[ChildRow]) -> Forecast:
        """The forecast of these rows, worked out again only for other rows: it reads every
        row, and a poll with no store read since hands the meter the same tuple (whose rows
        never change)."""
        if self._ahead is None or self._ahead[0] is not children:
            self._ahead = (children, forecast(children))
        return self._ahead[1]


def _burns_nothing(snap: Snapshot) -> bool:
    """An ended batch spends no more; an abandoned one runs nothing of its own (and an average
    over its clock, stopped at the last heartbeat, read $22/min)."""
    return snap.finished_ts is not None or snap.status is BatchStatus.ABANDONED


def _fits(text: Text, width: int) -> bool:
    return max(cell_len(line) for line in text.plain.split("\n")) <= width


def meter_text(
    snap: Snapshot,
    now: float,
    burn: Decimal | None,
    ahead: Forecast,
    *,
    compact: bool,
    lean: bool = False,
    tight: bool = False,
    width: int | None = None,
) -> Text:
    """Two lines: children by state; then tokens, dollars, burn, budget, forecast (`ahead`),
    elapsed, and what fits of the pool and the routes' limits in `width` columns (None: all).

    `lean` leaves out the extras (the budget's bar, what the cache saved). Compact says the
    rest with a short bar and short labels, so the tokens and dollars fit on an 80-column
    screen; `tight` (compact too) leaves out the cached count and says the children's counts
    by their glyphs alone (`●3 ○2 ✓1 ✗0 ■0`), for big counts at 80 columns or a narrower one.
    """
    t = snap.totals
    total = max(1, t.children)
    text = Text(no_wrap=True, overflow="ellipsis")
    gap = "  " if compact else "   "
    text.append(bar(t.done / total, COMPACT_BAR if compact else BAR_WIDTH), style="green")
    text.append(f" {t.done}/{t.children} done{gap}", style="bold")
    # An abandoned batch runs nothing of its own: its children were running when its owner died.
    left = snap.status is BatchStatus.ABANDONED
    running_style = "yellow" if left else "green"
    if compact:
        run, queued, ok, failed, stopped = (
            ("", "", "", "", "") if tight else (" run", " queued", " ok", " failed", " stopped")
        )
        run = " left" if left and not tight else run
        text.append(f"●{t.running}{run} ", style=running_style)
        text.append(f"○{t.queued}{queued} ", style="dim")
        text.append(f"✓{t.completed}{ok} ", style="green")
        text.append(f"✗{t.failed}{failed} ", style="bold red" if t.failed else "dim")
        text.append(f"■{t.stopped}{stopped}", style="yellow" if t.stopped else "dim")
    else:
        running = "left running" if left else "running"
        text.append(f"● {t.running} {running}{gap}", style=running_style)
        text.append(f"○ {t.queued} queued{gap}", style="dim")
        text.append(f"✓ {t.completed} completed{gap}", style="green")
        text.append(f"✗ {t.failed} failed{gap}", style="bold red" if t.failed else "dim")
        text.append(f"■ {t.stopped} stopped", style="yellow" if t.stopped else "dim")
    text.append("\n")
    usage = t.live_usage  # calls in progress count as they stream, until they are billed
    # "in" is fresh input alone, as in the report; cache reads and writes are shown apart.
    cached = usage.cache_read_tokens + usage.cache_write_tokens
    if not compact:
        text.append("tokens ", style="dim")
    dot = " " if compact else " · "
    unknown = t.tokens_unknown  # children whose CLI reports no usage: `?`, never 0
    text.append(
        f"{fmt_counted(usage.input_tokens, unknown)} in{dot}"
        f"{fmt_counted(usage.output_tokens, unknown)} out"
    )
    if (cached or unknown or not compact) and not tight:
        text.append(f"{dot}{fmt_counted(cached, unknown)} cached")
    if t.cache_saved_usd and not (compact or lean):  # what the cache saved, at the full price
        saved = fmt_spent_compact(t.cache_saved_usd, t.saved_unknown)  # "+?": some unknown
        text.append(f" (saved {saved})", style="green")
    text.append(f"{gap}spent " if not compact else gap, style="dim")
    spent, note = fmt_spent(t.live_cost_usd, t.cost_unknown, pending=t.pending)
    text.append(spent, style="bold")
    text.append(note, style="yellow")
    text.append(f"{gap}burn " if not compact else " ", style="dim")
    if t.cost_unknown and not t.live_cost_usd and not _burns_nothing(snap):
        # only unpriced spend: its rate is unknown too
        text.append(f"{fmt_cost(None)}/min")
    else:
        text.append("—" if burn is None else f"{fmt_cost(burn)}/min")
    if snap.max_cost_usd:
        used = float(t.live_cost_usd / snap.max_cost_usd)
        style = "bold red" if used >= 0.9 else "yellow" if used >= 0.6 else "green"
        text.append(f"{gap}budget ", style="dim")
        if compact:
            text.append(f"{used:.0%}", style=style)
        else:
            if not lean:
                text.append(bar(used, 12) + " ", style=style)
            text.append(f"{used:.0%} of {fmt_cost(snap.max_cost_usd)}", style=style)
    if ahead.remaining:  # once all have finished, the projection is what was spent
        # compact: an arrow for "heading to", so the elapsed time still fits 80 columns
        text.append(f"{gap}{'→' if compact else 'forecast'} ", style="dim")
        text.append(forecast_label(ahead, compact=compact))
    lost = snap.lost_cost_usd  # what attempts lost with an owner (or a worker) cost
    if lost != 0 and not compact:
        text.append(f"{gap}lost attempts ", style="dim")
        text.append(fmt_cost(lost), style="yellow")
    text.append(f"{gap}elapsed " if not compact else gap, style="dim")
    text.append(fmt_clock(now - snap.started_ts))
    if lost != 0 and compact:  # last, and left out whole where it does not fit (`width`):
        part = f"{gap}lost {fmt_cost(lost)}"  # never "lost" cut from its figure
        line = text.plain.rsplit("\n", 1)[-1]
        if width is None or cell_len(line + part) <= width:
            text.append(f"{gap}lost ", style="dim")
            text.append(fmt_cost(lost), style="yellow")
    if compact:  # the least needed figures: compact leaves them out
        return text
    # ... and the full form shows each only while the line has room for all of it (`width`)
    room = math.inf if width is None else width - cell_len(text.plain.rsplit("\n", 1)[-1])
    for label, value in _least_needed(snap):
        room -= cell_len(gap + label + value)
        if room < 0:
            break
        text.append(f"{gap}{label}", style="dim")
        text.append(value)
    return text


def _least_needed(snap: Snapshot) -> list[tuple[str, str]]:
    """(label, value): the pool, and the limit each route is paced to (configured or learned)."""
    figures = [("pool ", str(snap.pool_size))]
    for route in snap.routes:
        label, limit = f"{one_line(route.route)} ", route.rpm or route.tpm
        if limit is not None:
            figures.append((label, f"{'rpm' if route.rpm else 'tpm'} {limit.label}"))
        elif route.adaptive_concurrency is not None:
            # The cap on its calls at once, not a count of them (the route gauges, `r`, count).
            figures.append((label, f"concurrency {route.adaptive_concurrency} adapted to 429s"))
    return figures
