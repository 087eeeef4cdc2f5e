"""The status bar: batch state, sort order, filter, tags, follow and freeze."""

from __future__ import annotations

from dataclasses import dataclass

from flightdeck.engine.model import BatchStatus
from flightdeck.engine.sanitize import one_line
from rich.text import Text
from textual.widgets import Static


@dataclass(frozen=True, slots=True)
class StatusLine:
    """Everything the status bar shows; equal values mean no redraw."""

    batch_id: str = ""
    batch_status: BatchStatus = BatchStatus.RUNNING
    order: str = "attention"
    query: str = ""
    shown: int = 0
    total: int = 0
    tagged: int = 0
    following: bool = False
    frozen: bool = False


class StatusBar(Static):
    """One line under the table."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, markup=False)
        self.line: StatusLine | None = None

    def show(self, line: StatusLine) -> None:
        if line == self.line:
            return
        self.line = line
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append(f"batch {one_line(line.batch_id)} ", style="bold")
        finished = line.batch_status is not BatchStatus.RUNNING
        text.append(
            line.batch_status.value,
            style=("bold green" if line.batch_status is BatchStatus.COMPLETED else "bold yellow")
            if finished
            else "green",
        )
        if finished:
            text.append(" (q to quit)", style="dim")
        text.append("  │  sort ", style="dim")
        text.append(line.order)
        text.append("  │  filter ", style="dim")
        text.append(one_line(line.query, 40) if line.query else "—")
        text.append(f"  │  {line.shown:,} of {line.total:,} shown", style="dim")
        if line.tagged:
            text.append(f"  │  {line.tagged} tagged", style="bold magenta")
        if line.following:
            text.append("  │  following", style="bold cyan")
        if line.frozen:
            text.append("  │  FROZEN", style="bold reverse yellow")
        self.update(text, layout=False)  # fixed height: no layout pass per poll
