"""A group's header in the children table: its members counted by status, their cost, how many
are tagged (plain text: the name is sanitized)."""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass, field

from flightdeck.engine.model import ChildRow, ChildStatus
from flightdeck.engine.money import ZERO_USD
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.fmt import GLYPHS, Cell, fmt_spent_compact
from flightdeck.tui.widgets.rows import TAG_MARK, Spent, add_spent, spent_of

GROUP_CHARS = 60  # of a group's name in its header
FOLDED, UNFOLDED = "▸", "▾"
# Statuses in the order a header counts them: what is done first, then what still runs.
_COUNT_ORDER = (
    ChildStatus.COMPLETED,
    ChildStatus.FAILED,
    ChildStatus.TIMED_OUT,
    ChildStatus.STALLED,
    ChildStatus.STOPPED,
    ChildStatus.UNKNOWN,
    ChildStatus.RUNNING,
    ChildStatus.PAUSED,
    ChildStatus.GATED,
    ChildStatus.QUEUED,
)


@dataclass(slots=True)
class GroupSummary:
    """What a group's header says: its members by status, their live cost, how many tagged;
    a completion unit's delegates apart from its members, as the report counts them."""

    members: int = 0
    by_status: dict[ChildStatus, int] = field(default_factory=dict)
    cost: Spent = (ZERO_USD, False, False)  # what is known, some unknown, more to come
    tagged: int = 0
    delegates: int = 0  # a unit's: its members' delegates (their cost is in `cost`)
    # Delegates of their parents' earlier attempts: history, apart, as the meter and the report
    # count them (`■` beside the meter's `■ 0 stopped` read as stopped children).
    superseded: int = 0

    def add(self, row: ChildRow, tagged: bool, *, delegate: bool = False) -> None:
        if delegate:
            self.delegates += 1
        elif row.superseded and row.status.terminal:
            self.members += 1
            self.superseded += 1
        else:
            self.members += 1
            self.by_status[row.status] = self.by_status.get(row.status, 0) + 1
        self.cost = add_spent(self.cost, spent_of(row))
        self.tagged += tagged


def group_summary(
    members: Iterable[ChildRow], tagged: Container[str], *, unit: bool = False
) -> GroupSummary:
    """One group's summary from its members' rows; a completion unit's (`unit`) counts the rows
    with a parent as its delegates, as `GroupFinished.of` splits them."""
    summary = GroupSummary()
    for row in members:
        summary.add(row, row.id in tagged, delegate=unit and row.parent is not None)
    return summary


def group_header(name: str, summary: GroupSummary, folded: bool) -> Cell:
    """`▾ security  3 children: 2 ✓ 1 ●, 4 delegates  $0.0123`: plain text (the name is
    sanitized)."""
    counts = summary.by_status
    by_status = " ".join(f"{counts[s]} {GLYPHS[s][0]}" for s in _COUNT_ORDER if counts.get(s))
    if made := summary.delegates:
        by_status += f", {made} delegate{'' if made == 1 else 's'}"
    if summary.superseded:
        by_status += f"{', ' if by_status else ''}{summary.superseded} superseded"
    noun = "child" if summary.members == 1 else "children"
    text = (
        f"{FOLDED if folded else UNFOLDED} {one_line(name, GROUP_CHARS)}  "
        f"{summary.members} {noun}: {by_status}  {fmt_spent_compact(*summary.cost)}"
    )
    if summary.tagged:
        text += f"  {TAG_MARK} {summary.tagged} tagged"
    return (text, "bold magenta" if summary.tagged else "bold")
