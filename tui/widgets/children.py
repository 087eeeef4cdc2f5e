"""The children table: a Line API widget that renders only the rows on screen.

It keeps no renderable per child: the snapshot's rows, their sort keys and the visible order.
A frame asks `render_line` for the few dozen lines on screen; each is built from the row's cells
(plain text and a style name) and cached by what it shows, so an unchanged line costs a lookup.

Grouped (G: by the task's group, status, route, tool or error signature), the lines are the
rows with a header before each group's members (its counts and cost), in the sort order within
the group, and a folded group shows only its header. Ungrouped, the lines are the rows
themselves (the same list: no extra work on the common path).

Outliers (tokens or run time over 3x the batch's median) are marked; the medians are taken once
per snapshot, not per row.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import ClassVar, cast

from flightdeck.engine.api import MedianRows, Medians
from flightdeck.engine.model import ChildRow, ChildStatus
from flightdeck.tui.fmt import Cell
from flightdeck.tui.widgets.columns import (
    COLUMN_KEYS,
    ID_MIN,
    fit_columns,
    fit_name,
    fit_text,
    id_width,
)
from flightdeck.tui.widgets.rows import (
    GroupBy,
    GroupSummary,
    Rank,
    RowFilter,
    SortOrder,
    group_header,
    group_rank,
    group_summary,
    group_value,
    no_value_label,
    row_cells,
    sort_key,
    subtree_costs,
    tree_cells,
    tree_key,
)
from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.timer import Timer

HOLD_S = 3.0  # after a key press, rows keep their places this long
_STRIPS = 4096  # rendered lines kept; a screenful is a few dozen
_SEP = " "  # between columns

# (cells, widths, look) -> the rendered line; `look` is cursor, focus and theme.
_LineKey = tuple[tuple[Cell, ...], tuple[int, ...], tuple[object, ...]]


@dataclass(frozen=True, slots=True)
class GroupHeader:
    """A group's header line. Not a str, so never mistaken for a child id; its grouping is part
    of it, so a fold in one grouping is not one in another."""

    by: GroupBy
    name: str | None  # None: the children with no value in `by` (no tool, no error)

    @property
    def label(self) -> str:
        """What the header calls its group: the name, or `no error`."""
        return self.name if self.name is not None else no_value_label(self.by)

    @property
    def described(self) -> str:
        """The group in a sentence: `group security`, `error timeout after <n>s`, `no tool`."""
        return f"{self.by.value} {self.name}" if self.name is not None else self.label


Entry = str | GroupHeader  # what a line shows: a child (by id) or a group's header


class ChildrenTable(ScrollView, can_focus=True):
    """Children as rows, the header on top; `apply` updates by difference from a snapshot."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor_up", "Up", show=False),
        Binding("down", "cursor_down", "Down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "children-table--header",
        "children-table--cursor",
        "children-table--cursor-blurred",
    }

    DEFAULT_CSS = """
    ChildrenTable {
        background: $surface;
        color: $foreground;
        overflow-x: hidden;
        overflow-y: auto;
        scrollbar-size-vertical: 1;
    }
    ChildrenTable > .children-table--header {
        text-style: bold;
        background: $panel;
        color: $foreground;
    }
    ChildrenTable > .children-table--cursor {
        background: $block-cursor-background;
        color: $block-cursor-foreground;
        text-style: $block-cursor-text-style;
    }
    ChildrenTable > .children-table--cursor-blurred {
        background: $block-cursor-blurred-background;
        color: $block-cursor-blurred-foreground;
        text-style: $block-cursor-blurred-text-style;
    }
    """

    class Highlighted(Message):
        """A different child, or a group's header, is under the cursor (or nothing)."""

        def __init__(self, child_id: str | None, group: GroupHeader | None = None) -> None:
            super().__init__()
            self.child_id = child_id
            self.group = group  # the header's group, when the cursor is on one

    class Navigated(Message):
        """The operator moved the cursor (so follow mode should let go)."""

    class Resorted(Message):
        """A re-sort held back while the operator navigated has been applied."""

    def __init__(self, *, id: str | None = None, hold_s: float = HOLD_S) -> None:
        super().__init__(id=id)
        self.rows_by_id: dict[str, ChildRow] = {}
        self.tagged: set[str] = set()
        self.order = SortOrder.ATTENTION
        self.grouping: GroupBy | None = None  # what G groups the rows by (None: not grouped)
        self.medians = Medians()  # the batch's, this snapshot's: which rows are outliers
        self._median_rows = MedianRows()
        self.row_filter = RowFilter()
        self._delegated = False  # some child delegated: the tree order has a tree to show
        self._subtree: dict[str, Decimal | None] = {}  # in the tree order: each parent's total
        self._keys: dict[str, tuple[object, ...]] = {}  # sort key of every row
        self._shown: list[str] = []  # ids the filter keeps, in display order
        self._index: dict[str, int] | None = None  # id -> position in _shown, built on demand
        # The lines: _shown itself, or grouped with headers and folds applied.
        self._lines: Sequence[Entry] = self._shown
        self._line_index: dict[Entry, int] | None = None  # grouped: entry -> line
        self._children: list[str] | None = None  # grouped: the child ids on lines
        self.folded: set[GroupHeader] = set()  # groups shown as their header only
        self._summaries: dict[GroupHeader, GroupSummary] = {}  # drawn since rows last changed
        # One grouping's value -> ids, until a row is added (or, but by task group, changes).
        self._members: tuple[GroupBy, dict[str | None, list[str]]] | None = None
        self.cursor_row = 0
        self._highlighted: Entry | None = None
        self._now = 0.0
        # Until the operator picks a row, the cursor stays on the top one (the most urgent).
        self.pinned_top = True
        self.hold_s = hold_s
        self.clock: Callable[[], float] = time.monotonic
        self._held_until = 0.0
        self._hold_timer: Timer | None = None
        self.resort_pending = False
        self._id_need = ID_MIN  # the longest id's cells (with the tree's indent)
        self.columns = fit_columns(120)
        self._widths = tuple(width for _, _, width in self.columns)
        self._on_screen: dict[Entry, tuple[Cell, ...]] = {}  # cells each visible line last drew
        self._strips: LRUCache[_LineKey, Strip] = LRUCache(_STRIPS)

    # --- reading ----------------------------------------------------------------------------

    @property
    def shown(self) -> Sequence[str]:
        """Child ids on lines (no header, no folded group's member), in display order."""
        if self._lines is self._shown:
            return self._shown
        if self._children is None:
            self._children = [e for e in self._lines if isinstance(e, str)]
        return self._children

    @property
    def matching(self) -> list[str]:
        """Every child the filter keeps, folded groups' members too, in display order."""
        return list(self._shown)

    @property
    def lines(self) -> Sequence[Entry]:
        """What each line under the column header shows, top to bottom."""
        return self._lines

    @property
    def selected_entry(self) -> Entry | None:
        if 0 <= self.cursor_row < len(self._lines):
            return self._lines[self.cursor_row]
        return None

    @property
    def selected_id(self) -> str | None:
        """The child under the cursor (None on a group's header)."""
        entry = self.selected_entry
        return entry if isinstance(entry, str) else None

    @property
    def selected_header(self) -> GroupHeader | None:
        """The group header under the cursor."""
        entry = self.selected_entry
        return entry if isinstance(entry, GroupHeader) else None

    def header_of(self, child_id: str) -> GroupHeader | None:
        """The header `child_id` is under in the current grouping (None: not grouped)."""
        if self.grouping is None:
            return None
        return GroupHeader(self.grouping, group_value(self.grouping, self.rows_by_id[child_id]))

    def group_under_cursor(self) -> GroupHeader | None:
        """Grouped: the header under the cursor, or the selected child's."""
        entry = self.selected_entry
        if isinstance(entry, GroupHeader):
            return entry
        return self.header_of(entry) if entry is not None else None

    def group_members(self, header: GroupHeader) -> list[str]:
        """Every child under `header` (the filter and folds aside), in batch order."""
        if self._members is None or self._members[0] is not header.by:
            by = header.by
            members: dict[str | None, list[str]] = {}
            for child_id, row in self.rows_by_id.items():
                members.setdefault(group_value(by, row), []).append(child_id)
            rows = self.rows_by_id
            for ids in members.values():
                ids.sort(key=lambda i: rows[i].seq)
            self._members = (by, members)
        return list(self._members[1].get(header.name, ()))

    def summary(self, header: GroupHeader) -> GroupSummary:
        """What `header` counts (all its members, whatever the filter keeps). Only headers on
        screen are counted, once per snapshot: not the whole table each poll."""
        summary = self._summaries.get(header)
        if summary is None:
            rows = self.rows_by_id
            members = (rows[i] for i in self.group_members(header))
            summary = self._summaries[header] = group_summary(members, self.tagged)
        return summary

    def header_cells(self, header: GroupHeader) -> tuple[Cell, ...]:
        return (group_header(header.label, self.summary(header), header in self.folded),)

    def header_text(self, header: GroupHeader) -> str:
        return self.header_cells(header)[0][0]

    def cells(self, child_id: str) -> tuple[Cell, ...]:
        row = self.rows_by_id[child_id]
        cells = row_cells(row, child_id in self.tagged, self._now, self.medians.outlier(row))
        if self.order is SortOrder.TREE and self._delegated:
            cells = tree_cells(cells, row, self._subtree.get(child_id, False))
        return cells

    def _key(self, row: ChildRow) -> tuple[object, ...]:
        key: tuple[object, ...]
        if self.order is SortOrder.TREE:
            key = tree_key(row, self.rows_by_id)
        else:
            key = sort_key(self.order, row)
        if self.grouping is None:
            return key
        # Grouped: by the group first, so a group's members are together in the sort order.
        return (group_rank(self.grouping, group_value(self.grouping, row)), key)

    def _keeps(self, row: ChildRow, now: float) -> bool:
        return self.row_filter.matches(row, row.id in self.tagged, now, self.medians)

    def displayed(self, child_id: str, column: str) -> str:
        """The plain text a cell shows, before the column's width cuts it."""
        return self.cells(child_id)[COLUMN_KEYS.index(column)][0]

    def _kept(self) -> dict[str, int]:
        if self._index is None:
            self._index = {child_id: i for i, child_id in enumerate(self._shown)}
        return self._index

    def position(self, entry: Entry) -> int | None:
        """The line `entry` (a child id or a group's header) is on, if it is on one."""
        if self._lines is self._shown:
            return self._kept().get(entry) if isinstance(entry, str) else None
        if self._line_index is None:
            self._line_index = {e: i for i, e in enumerate(self._lines)}
        return self._line_index.get(entry)

    # --- updating ---------------------------------------------------------------------------

    def apply(self, rows: Iterable[ChildRow], now: float) -> None:
        """Bring the table in line with `rows` (the whole batch)."""
        self._now = now
        batch: Sequence[ChildRow] = rows if isinstance(rows, Sequence) else tuple(rows)
        by_id, keys, order = self.rows_by_id, self._keys, self.order
        # Once per snapshot, before the filter asks it (is:outlier) for every row.
        median_rows = self._median_rows
        for row in batch:
            if by_id.get(row.id) is not row:
                median_rows.update(row)
        self.medians = median_rows.medians(now)
        keep, kept = self._keeps, self._kept()
        added: list[str] = []
        removed: set[str] = set()
        moved = regrouped = False
        timed = self.row_filter.timed
        grouping = self.grouping

        def recheck(row: ChildRow) -> None:
            """Whether the filter keeps `row` now: shown or hidden if that changed."""
            was = row.id in kept
            now_visible = keep(row, now)
            if now_visible and not was:
                added.append(row.id)
            elif was and not now_visible:
                removed.add(row.id)

        for row in batch:
            # The engine hands out the same ChildRow object until the child changes.
            old = by_id.get(row.id)
            if old is row:
                if timed:  # idle>5m: an unchanged child can come to match (or stop) by itself
                    recheck(row)
                continue
            if old is None:
                self._members = None  # a new child: groups are listed again when asked
                # Its id, indented as the tree order shows it: the id column may widen.
                if (need := id_width(row)) > self._id_need:
                    self._id_need = need
                    self._fit()
            elif grouping is not None and grouping is not GroupBy.GROUP:
                # Its status, tool or error may have changed: so may the members of groups.
                self._members = None
                regrouped = regrouped or group_value(grouping, old) != group_value(grouping, row)
            by_id[row.id] = row
            if row.parent is not None:
                self._delegated = True
            key = self._key(row)
            moved = moved or keys.get(row.id) != key
            keys[row.id] = key
            recheck(row)
        if self._delegated and order is SortOrder.TREE:
            self._subtree = subtree_costs(by_id)
        if self._summaries:
            self._summaries = {}
        if removed or added:
            selected = self.selected_entry
            if removed:
                self._shown = [i for i in self._shown if i not in removed]
            self._shown.extend(added)
            if not self._reorder(selected, force=False):
                self._relayout()
                self._place_cursor(selected)
        elif moved:
            selected = self.selected_entry
            if not self._reorder(selected, force=False) and regrouped and not self.holding:
                # A child changed groups without changing places (at a group's edge).
                self._relayout()
                self._place_cursor(selected)
                self.refresh()
        self._repaint_changed()

    def rebuild(self) -> None:
        """Show the rows the filter keeps in order (after a filter or tag change)."""
        selected = self.selected_entry
        keep, now = self._keeps, self._now
        shown = [i for i, row in self.rows_by_id.items() if keep(row, now)]
        shown.sort(key=self._keys.__getitem__)
        self._shown = shown
        self.resort_pending = False
        self._relayout()
        self._place_cursor(selected)
        self.refresh()

    def set_order(self, order: SortOrder) -> None:
        """Sort by `order` now (the operator asked for it: no hold)."""
        selected = self.selected_entry
        self.order = order
        self._keys = {i: self._key(row) for i, row in self.rows_by_id.items()}
        if order is SortOrder.TREE and self._delegated:
            self._subtree = subtree_costs(self.rows_by_id)
        if not self._reorder(selected, force=True):
            self._relayout()  # the same order may still gain or lose group headers
            self._place_cursor(selected)
        self.refresh()

    def set_grouping(self, by: GroupBy | None) -> None:
        """Group the rows by `by` (None: not at all), now (the operator asked: no hold)."""
        if by is self.grouping:
            return
        selected = self.selected_entry
        if isinstance(selected, GroupHeader):
            selected = None  # that header is gone: the cursor goes to the top row
            self.pinned_top = True
        self.grouping = by
        self._members = None
        self._summaries = {}
        self._keys = {i: self._key(row) for i, row in self.rows_by_id.items()}
        if not self._reorder(selected, force=True):
            self._relayout()  # the same order still gains or loses the headers
            self._place_cursor(selected)
        self.refresh()

    def toggle_fold(self, header: GroupHeader) -> None:
        """Fold `header`'s group to its header, or unfold it."""
        folding = header not in self.folded
        if folding:
            self.folded.add(header)
        else:
            self.folded.discard(header)
        if header.by is not self.grouping:
            return
        self.pinned_top = False  # the operator acted on this row: the cursor stays with it
        selected = self.selected_entry
        if folding and isinstance(selected, str) and self.header_of(selected) == header:
            selected = header  # its row is going: the cursor goes to the header
        self._relayout()
        self._place_cursor(selected)
        self.refresh()

    def set_tagged(self, child_ids: Iterable[str], tagged: bool) -> None:
        """Tag or untag children and redraw their mark."""
        self._summaries = {}  # headers count their tagged members
        for child_id in child_ids:
            if tagged:
                self.tagged.add(child_id)
            else:
                self.tagged.discard(child_id)
        self._repaint_changed()

    def select(self, entry: Entry | None) -> bool:
        """Put the cursor on `entry` if it is shown, and keep it there as rows move (no longer
        pinned to the top row: whoever picked it meant that child, not the most urgent one)."""
        index = self.position(entry) if entry is not None else None
        if index is None:
            return False
        self.pinned_top = False
        self._move_to(index)
        return True

    def follow(self) -> None:
        """The cursor to the most recently active running child."""
        rows = self.rows_by_id
        running = [rows[i] for i in self.shown if rows[i].status is ChildStatus.RUNNING]
        if running:
            newest = max(running, key=lambda r: r.activity.last_activity_ts or 0.0)
            self.select(newest.id)

    def _reorder(self, selected: Entry | None, *, force: bool) -> bool:
        """Sort the rows (unless the operator holds them); True when the lines were redone."""
        keys = self._keys
        wanted = sorted(self._shown, key=keys.__getitem__)
        if wanted == self._shown:
            self.resort_pending = False
            return False
        if not force and self.holding:
            # The operator is reading these rows: they move once the keys have rested.
            self.resort_pending = True
            return False
        self.resort_pending = False
        self._shown = wanted
        self._relayout()
        self._place_cursor(selected)
        self.refresh()
        return True

    def _relayout(self) -> None:
        """The lines from the kept rows (after _shown changed, or the order, or a fold)."""
        self._index = None
        self._line_index = None
        self._children = None
        self._lines = self._shown if self.grouping is None else self._grouped(self.grouping)
        self._sized()

    def _grouped(self, by: GroupBy) -> list[Entry]:
        """Each group's header, then its members unless folded; the groups in their rank (the
        ones with no value last). Grouped by value, not by adjacency, so rows added or changed
        while the order is held stay under their own header."""
        # A row's key starts with its group's rank, which ends with the group's value: no need
        # to work the value out again for every row.
        keys = self._keys
        groups: dict[Rank, list[str]] = {}
        for child_id in self._shown:
            groups.setdefault(cast(Rank, keys[child_id][0]), []).append(child_id)
        lines: list[Entry] = []
        for rank in sorted(groups):
            header = GroupHeader(by, rank[2])
            lines.append(header)
            if header not in self.folded:
                lines.extend(groups[rank])
        return lines

    def _place_cursor(self, selected: Entry | None) -> None:
        """After rows moved: keep the cursor's child (htop does the same), or the top row."""
        target = 0 if self.pinned_top or selected is None else self.position(selected)
        self._move_to(target if target is not None else min(self.cursor_row, self._last_row))

    @property
    def holding(self) -> bool:
        return not self.pinned_top and self.clock() < self._held_until

    def _hold(self) -> None:
        self._held_until = self.clock() + self.hold_s
        if self._hold_timer is not None:
            self._hold_timer.stop()
        self._hold_timer = self.set_timer(self.hold_s, self._release)

    def _release(self) -> None:
        self._hold_timer = None
        if self.resort_pending:
            self._reorder(self.selected_entry, force=True)
            self.post_message(self.Resorted())

    # --- cursor -----------------------------------------------------------------------------

    @property
    def _last_row(self) -> int:
        return max(0, len(self._lines) - 1)

    def _move_to(self, index: int) -> None:
        index = max(0, min(index, self._last_row))
        if index != self.cursor_row:
            old = self.cursor_row
            self.cursor_row = index
            self.refresh_line(old + 1)
            self.refresh_line(index + 1)
            # Only when the cursor moved: a poll must not pull back a view scrolled by the wheel.
            self._scroll_to_cursor()
        entry = self.selected_entry
        if entry != self._highlighted:
            self._highlighted = entry
            if isinstance(entry, GroupHeader):
                self.post_message(self.Highlighted(None, group=entry))
            else:
                self.post_message(self.Highlighted(entry))

    def _scroll_to_cursor(self) -> None:
        rows = max(1, self.scrollable_content_region.height - 1)  # the header takes a line
        top = round(self.scroll_y)
        if self.cursor_row < top:
            self.scroll_to(y=self.cursor_row, animate=False, immediate=True)
        elif self.cursor_row >= top + rows:
            self.scroll_to(y=self.cursor_row - rows + 1, animate=False, immediate=True)

    @property
    def _page(self) -> int:
        return max(1, self.scrollable_content_region.height - 2)

    def navigated(self) -> None:
        """The operator chose a row: stop pinning the cursor to the top, hold the order."""
        self.pinned_top = False
        self._hold()
        self.post_message(self.Navigated())

    def action_cursor_up(self) -> None:
        self.navigated()
        self._move_to(self.cursor_row - 1)

    def action_cursor_down(self) -> None:
        self.navigated()
        self._move_to(self.cursor_row + 1)

    def action_page_up(self) -> None:
        self.navigated()
        self._move_to(self.cursor_row - self._page)

    def action_page_down(self) -> None:
        self.navigated()
        self._move_to(self.cursor_row + self._page)

    def action_first_row(self) -> None:
        self.navigated()
        self._move_to(0)

    def action_last_row(self) -> None:
        self.navigated()
        self._move_to(self._last_row)

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None or offset.y < 1:  # the header
            return
        index = round(self.scroll_y) + offset.y - 1
        if index < len(self._lines):
            self.navigated()
            self._move_to(index)

    # --- layout -----------------------------------------------------------------------------

    def on_resize(self, _: events.Resize) -> None:
        self._fit()

    def on_mount(self) -> None:
        self._fit()

    def _fit(self) -> None:
        """Columns by priority for the width there is (see rows.fit_columns)."""
        self.columns = fit_columns(self.scrollable_content_region.width, self._id_need)
        self._widths = tuple(width for _, _, width in self.columns)
        self._sized()
        self._scroll_to_cursor()
        self.refresh()

    def _sized(self) -> None:
        width = sum(self._widths) + len(self._widths) - 1
        self.virtual_size = Size(width, len(self._lines) + 1)

    # --- rendering --------------------------------------------------------------------------

    def _repaint_changed(self) -> None:
        """Refresh only the lines on screen whose cells changed since they were drawn."""
        top = round(self.scroll_y)
        lines = self._lines
        for index in range(top, min(len(lines), top + self.size.height)):
            entry = lines[index]
            cells = self.cells(entry) if isinstance(entry, str) else self.header_cells(entry)
            if self._on_screen.get(entry) != cells:
                self.refresh_line(index + 1)

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        if y == 0:
            return self._header(width)
        index = round(self.scroll_y) + y - 1
        if index >= len(self._lines):
            return Strip.blank(width, self.rich_style)
        entry = self._lines[index]
        child = isinstance(entry, str)
        cells = self.cells(entry) if isinstance(entry, str) else self.header_cells(entry)
        self._on_screen[entry] = cells
        if index == self.cursor_row:
            name = "children-table--cursor" if self.has_focus else "children-table--cursor-blurred"
            base = self.get_component_rich_style(name)
        else:
            base = self.rich_style
        key: _LineKey = (cells, self._widths, (base, width))
        strip = self._strips.get(key)
        if strip is None:
            strip = (
                self._line(cells, base, width) if child else self._group_line(cells, base, width)
            )
            self._strips[key] = strip
        return strip

    def _group_line(self, cells: tuple[Cell, ...], base: Style, width: int) -> Strip:
        """A group's header: one plain text across the columns (the name is sanitized)."""
        text, style = cells[0]
        segment = Segment(fit_text(text, width), base + Style.parse(style))
        return Strip([segment]).adjust_cell_length(width, base)

    def _line(self, cells: tuple[Cell, ...], base: Style, width: int) -> Strip:
        by_key = dict(zip(COLUMN_KEYS, cells, strict=True))
        sep = Segment(_SEP, base)
        segments: list[Segment] = []
        for key, _, col_width in self.columns:
            text, style = by_key[key]
            if segments:
                segments.append(sep)
            # Plain text, never markup: goals, ids and errors are untrusted.
            fit = fit_name if key == "id" else fit_text
            segments.append(Segment(fit(text, col_width), base + Style.parse(style)))
        return Strip(segments).adjust_cell_length(width, base)

    def _header(self, width: int) -> Strip:
        style = self.get_component_rich_style("children-table--header")
        key: _LineKey = ((), self._widths, ("header", style, width))
        strip = self._strips.get(key)
        if strip is None:
            text = _SEP.join(fit_text(label, w) for _, label, w in self.columns)
            strip = Strip([Segment(text, style)]).adjust_cell_length(width, style)
            self._strips[key] = strip
        return strip

    def on_focus(self) -> None:
        self.refresh_line(self.cursor_row + 1)

    def on_blur(self) -> None:
        self.refresh_line(self.cursor_row + 1)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()
