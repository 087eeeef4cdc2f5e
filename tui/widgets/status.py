"""The status bar: batch state, sort order, filter, tags, follow and freeze."""

from __future__ import annotations

from dataclasses import dataclass

from flightdeck.engine.model import BatchStatus, Snapshot
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.widgets.children import ChildrenTable
from rich.text import Text
from textual.widgets import Static


@dataclass(frozen=True, slots=True)
class StatusLine:
    """Everything the status bar shows; equal values mean no redraw."""

    batch_id: str = ""
    batch_status: BatchStatus = BatchStatus.RUNNING
    order: str = "attention"
    grouping: str | None = None  # what G groups by
    query: str = ""
    shown: int = 0
    total: int = 0
    tagged: int = 0
    following: bool = False
    frozen: bool = False
    resort_pending: bool = False
    paused: int = 0  # children the operator paused
    pausing: int = 0  # ... still running, their pause pending
    held: str | None = None  # why admission is held (`Snapshot.held`)
    needs: int = 0  # entries of the "needs you" queue (engine/triage/needs.py)


def status_line(
    snap: Snapshot | None,
    table: ChildrenTable,
    *,
    following: bool,
    frozen: bool,
    needs: int = 0,
) -> StatusLine:
    """The status bar's line for the batch as `snap` has it and the table as it shows it
    (`needs`: the length of the "needs you" queue)."""
    return StatusLine(
        batch_id=snap.batch_id if snap else "",
        batch_status=snap.status if snap else BatchStatus.RUNNING,
        order=table.model.order.value,
        grouping=table.model.grouping.value if table.model.grouping else None,
        query=table.row_filter.query,
        shown=len(table.shown),
        total=len(table.rows_by_id),
        tagged=len(table.tagged),
        following=following,
        frozen=frozen,
        resort_pending=table.resort_pending,
        paused=snap.totals.paused if snap else 0,
        pausing=snap.totals.pausing if snap else 0,
        held=snap.held if snap else None,
        needs=needs,
    )


Part = tuple[int, list[tuple[str, str]]]  # (priority: lower stays longer, [(text, style)])


def status_parts(line: StatusLine) -> list[Part]:
    """What the bar says, in display order, each part with its priority."""
    finished = line.batch_status is not BatchStatus.RUNNING
    state_style = (
        ("bold green" if line.batch_status is BatchStatus.COMPLETED else "bold yellow")
        if finished
        else "green"
    )
    parts: list[Part] = [
        (
            0,
            [
                (f"batch {one_line(line.batch_id, 24)} ", "bold"),
                (line.batch_status.value, state_style),
            ],
        ),
    ]
    if line.batch_status is BatchStatus.ABANDONED:  # nothing finished: its owner died
        parts.append((0, [(": its owner died, `flightdeck resume` runs it on", "bold red")]))
    if finished:
        parts.append((1, [(" (q to quit)", "dim")]))
    if line.frozen:
        parts.append((0, [("  │  ", "dim"), ("FROZEN", "bold reverse yellow")]))
    if line.needs:
        parts.append((0, [("  │  ", "dim"), (f"{line.needs:,} need you (!)", "bold reverse red")]))
    if line.held and not finished:
        held = "admission held: " + one_line(line.held, 80)
        parts.append((0, [("  │  ", "dim"), (held, "bold reverse cyan")]))
    if line.paused or line.pausing:
        text = f"  │  {line.paused:,} paused"
        if line.pausing:
            text += f" · {line.pausing:,} pausing"
        parts.append((1, [(text, "bold cyan")]))
    if line.resort_pending:
        parts.append((1, [("  │  ", "dim"), ("re-sort pending", "bold yellow")]))
    parts.append((2, [("  │  sort ", "dim"), (line.order, "")]))
    if line.grouping is not None:
        parts.append((2, [("  │  grouped by ", "dim"), (line.grouping, "bold")]))
    if line.tagged:
        parts.append((1, [(f"  │  {line.tagged} tagged", "bold magenta")]))
    parts.append((2, [(f"  │  {line.shown:,} of {line.total:,} shown", "dim")]))
    if line.following:
        parts.append((2, [("  │  following", "bold cyan")]))
    query = one_line(line.query, 40) if line.query else "—"
    # A filter in force outranks the sort: s and x act on every child it keeps.
    parts.append((1 if line.query else 3, [("  │  filter ", "dim"), (query, "")]))
    return parts


def fit_parts(parts: list[Part], width: int) -> Text:
    """The parts that fit in `width`, most important first, kept in display order.

    A part that does not fit is left out whole rather than cut mid-word; only the first part
    (the batch) is ever cut, with an ellipsis, on a screen too narrow for it.
    """

    def size(part: Part) -> int:
        return sum(len(t) for t, _ in part[1])

    keep: set[int] = set()
    used = 0
    for index in sorted(range(len(parts)), key=lambda i: (parts[i][0], i)):
        need = size(parts[index])
        if index == 0 or used + need <= width:
            keep.add(index)
            used += need
    text = Text(no_wrap=True, overflow="ellipsis")
    for index, (_, pieces) in enumerate(parts):
        if index in keep:
            for piece, style in pieces:
                text.append(piece, style=style)
    return text


class StatusBar(Static):
    """One line under the table; what does not fit is dropped by priority."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, markup=False)
        self.line: StatusLine | None = None
        self._width = 0

    def show(self, line: StatusLine) -> None:
        width = self.content_region.width or 160
        if line == self.line and width == self._width:
            return
        self.line, self._width = line, width
        self.update(fit_parts(status_parts(line), width), layout=False)  # fixed height

    def on_resize(self) -> None:
        if self.line is not None:
            line, self.line = self.line, None
            self.show(line)
