"""The detail line under the table: the selected child's whole "doing", error and goal.

Columns cut these to their width (and a narrow screen drops some columns); this says them in
full, as far as the screen's width allows.
"""

from __future__ import annotations

from flightdeck.engine.apilight import burn_rate
from flightdeck.engine.model import BatchStatus, ChildRow, ChildStatus, LoopEvidence, Snapshot
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.fmt import GLYPHS, LEFT_RUNNING, LEFT_RUNNING_TEXT, fmt_cost
from flightdeck.tui.widgets.children import ChildrenTable
from flightdeck.tui.widgets.rows import (
    GOAL_CHARS,
    LOOPING_GLYPH,
    OUTLIER_MARK,
    STEER_MARKS,
    changed,
    counted_to,
    doing,
    is_retrying,
)
from rich.text import Text
from textual.widgets import Static

_FULL = 400  # characters of "doing" and the error kept; the line cuts to the width anyway
LOOP_CALLS_SHOWN = 6  # of a loop's evidence, the latest calls shown one under another
SHRINK_AFTER_S = 2.0  # the pane keeps its height this long after it has less to show


def detail_text(
    row: ChildRow | None, now: float, outlier: str | None = None, left: bool = False
) -> Text:
    """Two lines: id, status, what it does (or how it ended), burn rate, retries, steer and
    (`outlier`: "tokens 4.2× the batch median") why it is an outlier; then its goal. `left`:
    the batch is abandoned, so a running child is left running, nobody watching it."""
    text = Text(no_wrap=True, overflow="ellipsis")
    if row is None:
        text.append("no child selected", style="dim")
        return text
    left = left and row.status is ChildStatus.RUNNING
    glyph, glyph_style = LEFT_RUNNING if left else GLYPHS[row.status]
    text.append(f"{glyph} ", style=glyph_style)
    text.append(one_line(row.id), style="bold")
    status = "retrying" if is_retrying(row) else row.status.value
    status = f"{LEFT_RUNNING_TEXT}: its owner died" if left else status
    # doing() starts with the status (and says the error) for a child that has ended; a running
    # child's error (its last retry's reason) is said apart.
    what, style = doing(row, now, _FULL)
    if not what.startswith(row.status.value):
        text.append(f"  {status}", style=glyph_style)
    text.append("  ")
    text.append(what, style=style)
    if row.node is not None:  # its work ran on a cluster: where
        text.append("  node ", style="dim")
        text.append(one_line(row.node, 40))
    if row.error and row.status.live:
        text.append("  error: ", style="dim")
        text.append(one_line(row.error, _FULL), style="red")
    if row.status.live and row.started_ts is not None and not left:  # a minute's spend
        text.append("  burn ", style="dim")
        text.append(f"{fmt_cost(burn_rate(row, now))}/min")
    if row.attempt > 1:
        text.append(f"  attempt {row.attempt}", style="cyan")
    if row.activity.retries:  # the rt column is the first a narrow screen leaves out
        text.append(f"  retries {row.activity.retries}", style="yellow")
    if row.steers:
        last = max(row.steers, key=lambda r: r.id)
        mark, mark_style = STEER_MARKS[last.state]
        text.append("  loop policy's steer " if last.by == "policy" else "  steer ", style="dim")
        text.append(mark, style=mark_style)
    if outlier is not None:
        text.append(f"  {OUTLIER_MARK} outlier: ", style="bold yellow")
        text.append(outlier, style="yellow")
    text.append("\n")
    text.append("goal ", style="dim")
    text.append(one_line(row.goal[: GOAL_CHARS * 4], GOAL_CHARS * 2))
    if row.changes is not None:
        _changes_line(text, row)
    if row.loop is not None:
        _loop_lines(text, row.loop)
    return text


FILES_SHOWN = 8  # of a child's changed files, named in the detail pane


def _changes_line(text: Text, row: ChildRow) -> None:
    """The files a child changed, each with its lines; D shows the diff, M merges it."""
    changes = row.changes
    assert changes is not None
    text.append("\n")
    text.append("changes ", style="dim")
    text.append(changed(row), style="green" if changes.pending else "dim")
    keys = "  D diff, M merge, del discard" if changes.pending else ""
    if changes.state == "accepted":
        keys = f"  on {one_line(changes.branch or '', 80)} into {one_line(changes.into or '', 40)}"
    text.append(keys + "  ", style="dim")
    for f in changes.files[:FILES_SHOWN]:
        counts = "" if f.added is None else f" +{f.added} −{f.removed}"
        kind = "" if f.kind == "modified" else f" ({f.kind})"
        text.append(one_line(f.path, 80))
        text.append(f"{counts}{kind}  ", style="dim")
    if len(changes.files) > FILES_SHOWN:
        text.append(f"and {len(changes.files) - FILES_SHOWN} more", style="dim")


def _loop_lines(text: Text, loop: LoopEvidence) -> None:
    """The evidence of a loop: what was found, then the calls (or turns) one under another,
    so the repeats line up; `n` sends the canned steer. Untrusted text, as plain Text."""
    text.append("\n")
    text.append(f"{LOOPING_GLYPH[0]} looping ", style=LOOPING_GLYPH[1])
    text.append(f"({loop.kind}) ", style="dim")
    text.append(one_line(loop.summary, _FULL), style="yellow")
    text.append("  n: send the canned steer", style="dim")
    calls = loop.calls[-LOOP_CALLS_SHOWN:]
    skipped = len(loop.calls) - len(calls)
    for n, call in enumerate(calls, start=skipped + 1):
        text.append("\n")
        text.append(f"{n:>3} ", style="dim")
        text.append(one_line(call, _FULL))


def detail_height(text: Text) -> int:
    """Lines the detail pane needs for `text`: two, and changed files and a loop's evidence
    under them."""
    return text.plain.count("\n") + 1


def group_detail_text(header: str, live: int, by: str = "group") -> Text:
    """Over a group's header: what it is grouped by, its summary (as the header says it), then
    what the keys do."""
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(f"{by} ", style="dim")
    text.append(header, style="bold")  # plain text, its name already sanitized
    text.append("\n")
    if live:
        noun = "member" if live == 1 else "members"
        text.append(f"s steers, x stops its {live} live {noun}; ", style="dim")
    else:
        text.append("every member has ended; ", style="dim")
    text.append("enter folds or unfolds it; space tags them all", style="dim")
    return text


class ChildDetail(Static):
    """Fed the selected row on every poll and every cursor move; redraws only on change.

    The pane grows at once to show what the selected child has under its two lines (changed
    files, a loop's evidence), and shrinks back only once SHRINK_AFTER_S have passed with less
    to show: each change of its height lays the whole screen out (30-70 ms with thousands of
    rows), and a cursor moved over children with and without evidence would pay it every key."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, markup=False)
        self._shown: Text | None = None
        self._height = 2  # as main.tcss sets it
        self._less_since: float | None = None  # since when the text shown needs fewer lines

    def show(
        self,
        row: ChildRow | None,
        now: float,
        outlier: str | None = None,
        at: float | None = None,
        left: bool = False,
    ) -> None:
        """`at`: the time the row's figures count to, if not `now` (an abandoned batch's end);
        `left`: the batch is abandoned."""
        self.show_text(detail_text(row, now if at is None else at, outlier, left), now)

    def show_text(self, text: Text, now: float) -> None:
        needed = detail_height(text)
        if needed >= self._height:
            self._less_since = None
        elif self._less_since is None:
            self._less_since = now
        shrink = self._less_since is not None and now - self._less_since >= SHRINK_AFTER_S
        height = needed if needed > self._height or shrink else self._height
        if text == self._shown and height == self._height:
            return
        self._shown = text
        resized = height != self._height
        if resized:
            self._height = height
            self._less_since = None
            self.styles.height = height
        self.update(text, layout=resized)  # else a fixed height: no layout pass

    def show_selected(self, table: ChildrenTable, now: float, snap: Snapshot | None = None) -> None:
        """What the table's cursor is on: a group's summary (never a member's detail), or the
        child's, with why it is an outlier (its times counted as the table counts them)."""
        rows = table.rows_by_id
        header = table.selected_header
        if header is not None:
            live = sum(1 for i in table.group_members(header) if rows[i].status.live)
            text = group_detail_text(table.header_text(header), live, header.by.value)
            self.show_text(text, now)
            return
        selected = table.selected_id
        row = rows.get(selected) if selected is not None else None
        outlier = None
        kind = table.model.medians.outlier(row) if row is not None else None
        if row is not None and kind is not None:
            outlier = f"{kind} {table.model.medians.ratio(row, kind):.1f}× the batch median"
        at = None if snap is None else counted_to(snap, now)
        left = snap is not None and snap.status is BatchStatus.ABANDONED
        self.show(row, now, outlier, at, left)
