"""Pure helpers for the children table: cell text, sort orders, groupings and the filter
language."""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from enum import StrEnum
from functools import lru_cache

# The filter language is shared with `--where` on the command line.
from flightdeck.engine.apilight import STATUS_ALIASES as STATUS_ALIASES
from flightdeck.engine.apilight import Kind, Membership, error_signature
from flightdeck.engine.apilight import QueryError as QueryError
from flightdeck.engine.apilight import RowFilter as RowFilter
from flightdeck.engine.apilight import is_retrying as is_retrying
from flightdeck.engine.apilight import parse_filter as parse_filter
from flightdeck.engine.model import (
    CONTINUED_WAITING,
    PAUSED_SHOWS,
    BatchStatus,
    ChildRow,
    ChildStatus,
    Snapshot,
    SteerState,
)
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.fmt import (
    GLYPHS,
    Cell,
    fmt_age,
    fmt_row_cost,
    fmt_span,
    fmt_spent_compact,
    fmt_tokens,
)
from flightdeck.tui.widgets.columns import DOING_CHARS, TREE_MARK

GOAL_CHARS = 200  # the column truncates further; this only bounds memory per row

RETRYING_GLYPH: Cell = ("↻", "bold yellow")
LOOPING_GLYPH: Cell = ("∞", "bold yellow")  # a running child flagged as looping
OUTLIER_MARK = "▲"  # before the tokens: tokens or run time over 3x the batch's median
LAST_TURN = "last turn · "  # before "doing" while the child is on its last allowed turn
LOOPING = "looping · "  # before "doing" while it is flagged (the evidence: the detail pane)
TAG_MARK = "◆"

ATTENTION = frozenset({ChildStatus.FAILED, ChildStatus.STALLED, ChildStatus.TIMED_OUT})
_WAITING = frozenset({ChildStatus.QUEUED, ChildStatus.GATED})

STEER_MARKS: dict[SteerState, Cell] = {
    SteerState.QUEUED: ("… queued", "yellow"),
    SteerState.DELIVERED: ("✓ delivered", "green"),
    SteerState.MISSED: ("✗ missed", "red"),
}


def needs_attention(row: ChildRow) -> bool:
    return row.status in ATTENTION or is_retrying(row) or is_looping(row)


def is_looping(row: ChildRow) -> bool:
    """A running child flagged as looping (a finished one keeps its evidence, not the mark)."""
    return row.loop is not None and row.status is ChildStatus.RUNNING


# --- cells ------------------------------------------------------------------------------------


# What each column header means, for the help screen (the mark column has no header).
COLUMN_HELP: dict[str, str] = {
    "id": "the child's id (a delegate's is its parent's, then .1, .2, ...; indented under its "
    "parent in the tree order)",
    "goal": "its task, cut to the column's width",
    "route": "the route it calls, as route/model when the model has another name",
    "calls": "model requests sent so far",
    "doing": "its running tool and for how long, what it streams, or how it ended; "
    "'last turn' when max_turns allows no more (a steer sent then is missed)",
    "last": "how long ago it last did something, or ended",
    "tokens": "input tokens (cache reads and writes apart, as in the report) / output tokens; "
    f"{OUTLIER_MARK} before them: an outlier, its tokens (among children that used any) or its "
    "run time (among children that started) over 3 times the batch's median",
    "cost": "dollars spent; $? when the model has no price; +? while its CLI's turn has not "
    "reported its usage yet, or after the part known when the rest is unknown; in the tree "
    "order, Σ is a parent's cost with all its delegates'",
    "retries": "retries after a 429, a timeout or a server error",
    "steer": "the latest steer's receipt (queued, delivered or missed) and how many were sent",
}


def static_cells(row: ChildRow, tagged: bool) -> tuple[Cell, ...]:
    """Every cell that depends only on the row (and its tag), in COLUMNS order but time cells."""
    if is_looping(row):
        glyph = LOOPING_GLYPH
    else:
        glyph = RETRYING_GLYPH if is_retrying(row) else GLYPHS[row.status]
    if row.superseded and row.status.terminal:  # history: nothing to act on
        glyph = (glyph[0], "dim")
    mark = (TAG_MARK if tagged else " ") + glyph[0]
    route = row.route if row.model in ("", row.route) else f"{row.route}/{row.model}"
    usage = row.live_usage  # the call in progress counts as it streams
    steer: Cell = ("", "")
    if row.steers:
        last = max(row.steers, key=lambda r: r.id)
        text, style = STEER_MARKS[last.state]
        steer = (text if len(row.steers) == 1 else f"{text} ({len(row.steers)})", style)
    status_style = "bold red" if row.status in ATTENTION else ""
    tokens: Cell = (
        ("?/?", "dim")  # nobody counted them: unknown, never 0
        if row.tokens_unknown
        else (f"{fmt_tokens(usage.input_tokens)}/{fmt_tokens(usage.output_tokens)}", "")
    )
    return (
        (mark, ("bold magenta" if tagged else glyph[1])),
        (one_line(row.id), "bold" if tagged else ""),
        (one_line(row.goal[: GOAL_CHARS * 2], GOAL_CHARS), ""),
        (one_line(route), "dim"),
        (str(row.activity.api_calls), ""),
        ("", status_style),  # placeholder: the "doing" cell is time-dependent
        ("", "dim"),  # placeholder: "last"
        tokens,
        (fmt_row_cost(row), ""),
        (str(row.activity.retries) if row.activity.retries else "", "yellow"),
        steer,
    )


def doing(row: ChildRow, now: float, limit: int = DOING_CHARS) -> Cell:
    """What the child is doing: its tool and for how long, its activity, or how it ended."""
    a = row.activity
    if row.pausing:  # the operator's pause, pending until its turn's end or its delegates
        return (one_line(a.text, limit), "cyan")
    if row.status is ChildStatus.RUNNING:
        # First, where the column cuts least: a steer sent now would be missed.
        last_turn = (LOOPING if is_looping(row) else "") + (LAST_TURN if a.last_turn else "")
        if a.current_tool is not None:
            since = fmt_span(now - a.tool_started_ts) if a.tool_started_ts is not None else ""
            style = "bold yellow" if is_looping(row) else "cyan"
            return (one_line(f"{last_turn}tool: {a.current_tool} {since}", limit), style)
        style = "bold yellow" if is_looping(row) else "yellow" if is_retrying(row) else ""
        return (one_line(last_turn + a.text, limit), style)
    if row.status in _WAITING:
        return (row.status.value, "dim")
    if row.status is ChildStatus.PAUSED:  # continued, it may wait for a slot: said so
        return (a.text if a.text == CONTINUED_WAITING else PAUSED_SHOWS, "cyan")
    text = row.status.value + (f" ({changed(row)})" if row.changes is not None else "")
    if row.superseded:  # its parent ran again since: history, nothing to act on
        return (
            one_line(f"{text} (superseded)" + (f": {row.error}" if row.error else ""), limit),
            "dim",
        )
    text += f": {row.error}" if row.error else ""
    return (one_line(text, limit), "bold red" if row.status in ATTENTION else "dim")


def changed(row: ChildRow) -> str:
    """What an ended child changed in its own workspace, and what became of it: "+12 −3 in 4
    files", "… merged", "… discarded"; attempts after the first said too."""
    out = f"#{row.attempt} " if row.attempt > 1 else ""
    if row.changes is None:
        return out.strip()
    decided = {"accepted": " merged", "discarded": " discarded"}.get(row.changes.state, "")
    return out + row.changes.summary + decided


def last(row: ChildRow, now: float) -> Cell:
    """How long ago the child last did something (or finished)."""
    if row.status in _WAITING:
        return ("—", "dim")
    ts = row.finished_ts if row.status.terminal else row.activity.last_activity_ts
    if ts is None:
        return ("—", "dim")
    idle = now - ts
    style = "dim" if row.status.terminal else ("yellow" if idle >= 30 else "")
    return (fmt_age(idle), style)


def counted_to(snap: Snapshot, now: float) -> float:
    """The time rows' idle and tool times count to: an abandoned batch's end (its owner last
    heard of), as its meter's elapsed does; what its children did after that, nobody recorded."""
    if snap.status is BatchStatus.ABANDONED and snap.finished_ts is not None:
        return min(now, snap.finished_ts)
    return now


def row_cells(
    row: ChildRow, tagged: bool, now: float, outlier: Kind | None = None
) -> tuple[Cell, ...]:
    """All cells of one row, in COLUMNS order; an outlier's tokens marked."""
    cells = list(static_cells(row, tagged))
    cells[5] = doing(row, now)
    cells[6] = last(row, now)
    if outlier is not None:
        cells[7] = (OUTLIER_MARK + cells[7][0], "bold yellow")
    return tuple(cells)


# --- sort orders ------------------------------------------------------------------------------


class SortOrder(StrEnum):
    """Row orders that `o` cycles through."""

    ATTENTION = "attention"
    RECENT = "recent"
    COST = "cost"
    TOKENS = "tokens"
    ID = "id"
    BATCH = "batch"
    TREE = "tree"  # each parent, then its delegates indented under it (ChildrenTable keys it)

    def next(self) -> SortOrder:
        members = list(SortOrder)
        return members[(members.index(self) + 1) % len(members)]


_INF = float("inf")


def sort_key(order: SortOrder, row: ChildRow) -> tuple[object, ...]:
    """Ascending key for `order`; ties fall back to batch order so rows never jitter."""
    if order is SortOrder.ATTENTION:
        return (*_attention_key(row), row.seq)
    if order is SortOrder.RECENT:
        ts = row.finished_ts if row.status.terminal else row.activity.last_activity_ts
        return (-(ts if ts is not None else -_INF), row.seq)
    if order is SortOrder.COST:  # a cost partly unknown by its known part, none known last
        known = row.live_known_usd
        return (-float(known) if known is not None else _INF, row.seq)
    if order is SortOrder.TOKENS:
        return (-row.live_usage.total, row.seq)
    if order is SortOrder.ID:
        return (row.id, row.seq)
    return (row.seq,)


def tree_key(row: ChildRow, rows: Mapping[str, ChildRow]) -> tuple[int, ...]:
    """The seqs from the root down to `row`: a parent sorts before its delegates (made after
    it, so with later seqs), and each delegate's own delegates right after it."""
    seqs = [row.seq]
    parent = row.parent
    while parent is not None and len(seqs) < 64:
        up = rows.get(parent)
        if up is None:
            break
        seqs.append(up.seq)
        parent = up.parent
    return tuple(reversed(seqs))


# A sum of costs: what is known, whether some price is unknown, whether more is to come (a
# turn that has reported nothing yet); `fmt_spent_compact(*spent)` reads it as the rows do.
Spent = tuple[Decimal, bool, bool]


def spent_of(row: ChildRow) -> Spent:
    """A row's live cost, as its cost column reads, to sum: `$0.42+?` is (0.42, True, False),
    a part unknown, or (0.42, False, True), a turn under way that has reported nothing yet."""
    live = row.live_cost_usd
    return (row.cost_floor_usd, True, False) if live is None else (live, False, row.cost_pending)


def add_spent(a: Spent, b: Spent) -> Spent:
    return (a[0] + b[0], a[1] or b[1], a[2] or b[2])


def subtree_costs(rows: Mapping[str, ChildRow]) -> dict[str, Spent]:
    """Each parent's cost with every delegate below it (live, as the cost column). Only children
    that delegated are in it."""
    totals: dict[str, Spent] = {}
    for row in rows.values():
        if row.parent is None:
            continue
        cost = spent_of(row)
        parent: str | None = row.parent
        for _ in range(64):
            if parent is None or parent not in rows:
                break
            total = totals[parent] if parent in totals else spent_of(rows[parent])
            totals[parent] = add_spent(total, cost)
            parent = rows[parent].parent
    return totals


def tree_cells(
    cells: tuple[Cell, ...], row: ChildRow, subtree_cost: Spent | None
) -> tuple[Cell, ...]:
    """A row's cells in the tree order: its id indented by depth, and for a parent the cost of
    its whole subtree (`Σ$…`, `Σ$…+?`). `subtree_cost` None: it delegated nothing."""
    out = list(cells)
    if row.depth:
        text, style = out[1]
        out[1] = ("  " * (row.depth - 1) + TREE_MARK + text, style)
    if subtree_cost is not None:
        out[8] = ("Σ" + fmt_spent_compact(*subtree_cost), "bold")
    return tuple(out)


def _attention_key(row: ChildRow) -> tuple[int, float]:
    # failed/stalled/timed out (latest first), retrying, running (oldest first), waiting,
    # then finished (latest first), a superseded delegate (history) among them however it ended
    if row.superseded and row.status.terminal:
        return (4, -(row.finished_ts or 0.0))
    if row.status in ATTENTION or row.status is ChildStatus.UNKNOWN:
        return (0, -(row.finished_ts or 0.0))
    if row.status is ChildStatus.RUNNING:
        return (1 if is_retrying(row) or is_looping(row) else 2, row.started_ts or 0.0)
    if row.status in _WAITING or row.status is ChildStatus.PAUSED:
        return (3, 0.0)
    return (4, -(row.finished_ts or 0.0))


# --- groupings (G) ----------------------------------------------------------------------------


class GroupBy(StrEnum):
    """What `G` groups the table by, under foldable headers; the sort order applies within."""

    GROUP = "group"  # the task's group (its completion unit)
    STATUS = "status"
    ROUTE = "route"
    TOOL = "tool"  # the tool running now
    ERROR = "error"  # the error's signature, or a retrying child's last failure's


GROUPINGS: tuple[GroupBy | None, ...] = (None, *GroupBy)  # what G cycles through; None: off


def next_grouping(by: GroupBy | None) -> GroupBy | None:
    return GROUPINGS[(GROUPINGS.index(by) + 1) % len(GROUPINGS)]


# Statuses grouped in the attention order: what needs a look first, what is done last.
_STATUS_GROUPS = (
    "failed",
    "timed_out",
    "stalled",
    "unknown",
    "retrying",
    "running",
    "pausing",
    "paused",
    "gated",
    "queued",
    "completed",
    "stopped",
    "superseded",  # delegates of their parents' earlier attempts: history, last
)
_STATUS_RANK = {name: i for i, name in enumerate(_STATUS_GROUPS)}


@lru_cache(maxsize=4096)
def _signature(text: str) -> str | None:
    # Children failing the same way share a message: each distinct one is normalized once.
    return error_signature(text)


def group_value(by: GroupBy, row: ChildRow, units: Membership) -> str | None:
    """The row's value in grouping `by`; None: it has none (no group, no tool, no error). By
    group, its completion unit as the engine and the report count it (`units`, the rows placed):
    a member's delegates are in its group, a schedule's wave sharing the group is in none."""
    if by is GroupBy.GROUP:
        return units.unit_of(row.id)
    if by is GroupBy.STATUS:
        if row.superseded and row.status.terminal:  # as the meter counts them: apart
            return "superseded"
        return "retrying" if is_retrying(row) else "pausing" if row.pausing else row.status.value
    if by is GroupBy.ROUTE:
        return row.route
    if by is GroupBy.TOOL:
        return row.activity.current_tool
    if row.error:
        return _signature(row.error)
    # A child retrying has not failed yet, but it is failing: its retry notice names how.
    reason = row.activity.retry_reason
    return _signature(reason) if reason is not None and row.status.live else None


Rank = tuple[bool, int, str | None]  # a group's place; see group_rank


def group_rank(by: GroupBy, value: str | None) -> Rank:
    """Where a group goes: statuses in the attention order, others by name; no value last.
    The value is the last item (never compared with a str when None: the first item differs)."""
    if by is GroupBy.STATUS and value is not None:
        return (False, _STATUS_RANK.get(value, len(_STATUS_RANK)), value)
    return (value is None, 0, value)


def no_value_label(by: GroupBy) -> str:
    """The header of the children with no value: `no error`, `no tool`, `no group`."""
    return f"no {by.value}"
