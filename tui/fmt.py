"""Short human formats shared by the TUI and the headless CLI (no Textual import here)."""

from __future__ import annotations

import math
from decimal import Decimal
from typing import TYPE_CHECKING

from flightdeck.engine.model import ChildRow, ChildStatus
from flightdeck.engine.money import fmt_usd

if TYPE_CHECKING:
    from flightdeck.engine.apilight import Forecast

__all__ = [
    "GLYPHS",
    "LEFT_RUNNING",
    "LEFT_RUNNING_TEXT",
    "Cell",
    "fmt_age",
    "fmt_clock",
    "fmt_cost",
    "fmt_row_cost",
    "fmt_span",
    "fmt_spent",
    "fmt_tokens",
    "limits_ended",
]

# A cell is its plain text and a Rich style name; comparing these tuples is how the table
# finds the cells that changed without building any renderable.
Cell = tuple[str, str]

# One glyph per status, the same in the TUI and in headless output.
GLYPHS: dict[ChildStatus, Cell] = {
    ChildStatus.QUEUED: ("○", "dim"),
    ChildStatus.GATED: ("◌", "dim"),
    ChildStatus.RUNNING: ("●", "green"),
    ChildStatus.PAUSED: ("‖", "bold cyan"),
    ChildStatus.COMPLETED: ("✓", "green"),
    ChildStatus.FAILED: ("✗", "bold red"),
    ChildStatus.STOPPED: ("■", "yellow"),
    ChildStatus.TIMED_OUT: ("◷", "bold red"),
    ChildStatus.STALLED: ("⊗", "bold red"),
    ChildStatus.UNKNOWN: ("?", "bold magenta"),
}
# A running child of an abandoned batch: its owner died, so nobody watches it until a resume.
# Yellow, and said in words, as the meter's `● N left running`.
LEFT_RUNNING: Cell = ("●", "yellow")
LEFT_RUNNING_TEXT = "left running"


def fmt_tokens(n: int) -> str:
    if n < 1000:
        return str(n)
    if round(n / 1000, 1) < 1000:  # 999,950 would read "1000.0k"
        return f"{n / 1000:.1f}k"
    return f"{n / 1_000_000:.2f}M"


def fmt_counted(n: int, unknown: int) -> str:
    """Tokens counted, `?` when none was and some went uncounted (`unknown` children), `1.2k+?`
    when some were: a command whose CLI reports no usage is never shown as 0."""
    if not unknown:
        return fmt_tokens(n)
    return f"{fmt_tokens(n)}+?" if n else "?"


def fmt_cost(cost: Decimal | None) -> str:
    if cost is None:
        return "$?"  # price unknown: never guessed
    return fmt_usd(cost)


def fmt_spent(
    known: Decimal, unknown: int, noun: str = "unknown", pending: int = 0
) -> tuple[str, str]:
    """A total of which `unknown` children have no price, as (amount, note).

    ("$0.25", " (+2 unknown)"), or ("$?", " (2 unknown)") when only those children spent
    anything: a known $0 beside them is no total. `pending` children have more to report (an
    agent CLI's turn under way): ("$0.25", " (+3 pending)"), their known part counted.
    """
    if not unknown and not pending:
        return fmt_cost(known), ""
    amount = fmt_cost(None if unknown and not known else known)
    said = ", ".join(f"{n} {word}" for n, word in ((unknown, noun), (pending, "pending")) if n)
    return amount, f" ({'' if amount == fmt_cost(None) else '+'}{said})"


def fmt_row_cost(row: ChildRow) -> str:
    """A row's live cost; `$0.42+?`, what is known and more, while its agent CLI's turn has
    reported no usage yet, or when the rest is unknown (a turn a stop cut short)."""
    cost = row.live_cost_usd
    if cost is None:
        return fmt_spent_compact(row.cost_floor_usd, 1)
    return fmt_spent_compact(cost, 0, row.cost_pending)


def fmt_spent_compact(known: Decimal, unknown: int, pending: bool = False) -> str:
    """`fmt_spent` in one cell of a table: "$0.25+?" when some prices are unknown or more is
    to come (`pending`: an agent CLI's turn has reported nothing yet, `$0.00+?` as the meter's
    `$0.00 (+1 pending)`), "$?" when only children of unknown price spent anything."""
    amount = fmt_spent(known, unknown)[0]
    more = (unknown or pending) and amount != fmt_cost(None)
    return amount + ("+?" if more else "")


def fmt_span(seconds: float) -> str:
    """A short duration: 4s, 2m05s, 1h12m."""
    s = max(0, math.floor(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def fmt_age(seconds: float) -> str:
    """How long ago, coarse enough that it changes rarely: 4s, 2m, 1h."""
    s = max(0, math.floor(seconds))
    if s < 60:
        return f"{s}s ago"
    if s < 3600:
        return f"{s // 60}m ago"
    return f"{s // 3600}h ago"


def fmt_clock(seconds: float) -> str:
    """Elapsed time as h:mm:ss or m:ss."""
    s = max(0, math.floor(seconds))
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


def forecast_label(ahead: Forecast, *, compact: bool) -> str:
    """The projected cost at completion: "$2.67 ($2.22–$3.12)", compact without the range;
    "—" until a child has finished, "$?" when a price is unknown."""
    if ahead.unpriced:
        return fmt_cost(None)
    if ahead.projected_usd is None or ahead.low_usd is None or ahead.high_usd is None:
        return "—"
    shown = fmt_cost(ahead.projected_usd)
    if compact or ahead.low_usd == ahead.high_usd:
        return shown
    return f"{shown} ({fmt_cost(ahead.low_usd)}–{fmt_cost(ahead.high_usd)})"


def limits_ended(batch_id: str, status: str) -> str:
    """Why a batch's limits cannot change: it has ended (`flightdeck limits` and the TUI's `L`)."""
    return f"batch {batch_id} has ended ({status}): its limits can no longer change"
