"""The children table: a Line API widget that draws only the lines on screen, from a
`ChildLines` (lines.py: the rows, their sort keys, the filter and the groups). Each line is
built from its cells (plain text and a style name) and cached by what it shows, so an unchanged
line costs a lookup. The widget keeps the cursor, and holds the order still while it moves.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Container, Iterable, Sequence
from typing import ClassVar

from flightdeck.engine.model import ChildRow, ChildStatus
from flightdeck.tui.fmt import Cell
from flightdeck.tui.widgets.columns import (
    TABLE_CSS,
    fit_columns,
    group_strip,
    header_strip,
    line_strip,
)
from flightdeck.tui.widgets.lines import ChildLines, Entry, GroupHeader
from flightdeck.tui.widgets.rows import GroupBy, RowFilter, SortOrder
from textual import events
from textual.binding import Binding, BindingType
from textual.cache import LRUCache
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.timer import Timer

HOLD_S = 3.0  # after a key press, rows keep their places this long
_STRIPS = 256  # rendered lines kept: a few screenfuls (each Strip is ~20 objects the GC walks)

# (cells, widths, look) -> the rendered line; `look` is cursor, focus and theme.
_LineKey = tuple[tuple[Cell, ...], tuple[int, ...], tuple[object, ...]]


class ChildrenTable(ScrollView, can_focus=True):
    """Children as rows, the header on top; `apply` updates by difference from a snapshot."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "cursor_up", "Up", show=False),
        Binding("down", "cursor_down", "Down", show=False),
        Binding("pageup", "page_up", "Page up", show=False),
        Binding("pagedown", "page_down", "Page down", show=False),
        Binding("home", "first_row", "First row", show=False),
        Binding("end", "last_row", "Last row", show=False),
    ]

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "children-table--header",
        "children-table--cursor",
        "children-table--cursor-blurred",
    }

    DEFAULT_CSS = TABLE_CSS

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
        self.model = ChildLines()
        self.cursor_row = 0
        self._highlighted: Entry | None = None
        # Until the operator picks a row, the cursor stays on the top one (the most urgent).
        self.pinned_top = True
        self.hold_s = hold_s
        self.clock: Callable[[], float] = time.monotonic
        self._held_until = 0.0
        self._hold_timer: Timer | None = None
        self.resort_pending = False
        self.columns = fit_columns(120)
        self._widths = tuple(width for _, _, width in self.columns)
        # What each line (by its index under the header) last drew: its entry and cells.
        self._on_screen: dict[int, tuple[Entry, tuple[Cell, ...]]] = {}
        self._strips: LRUCache[_LineKey, Strip] = LRUCache(_STRIPS)

    # --- reading (the model's, as the screens and tests read them) ----------------------------

    @property
    def rows_by_id(self) -> dict[str, ChildRow]:
        return self.model.rows_by_id

    @property
    def tagged(self) -> set[str]:
        return self.model.tagged

    @property
    def row_filter(self) -> RowFilter:
        return self.model.row_filter

    @row_filter.setter
    def row_filter(self, row_filter: RowFilter) -> None:
        self.model.row_filter = row_filter  # shown once rebuild() is called

    @property
    def shown(self) -> Sequence[str]:
        """Child ids on lines (no header, no folded group's member), in display order."""
        return self.model.shown

    @property
    def lines(self) -> Sequence[Entry]:
        """What each line under the column header shows, top to bottom."""
        return self.model.lines

    def group_members(self, header: GroupHeader) -> list[str]:
        """Every child under `header` (the filter and folds aside), in batch order."""
        return self.model.group_members(header)

    def header_text(self, header: GroupHeader) -> str:
        return self.model.header_text(header)

    def displayed(self, child_id: str, column: str) -> str:
        """The plain text a cell shows, before the column's width cuts it."""
        return self.model.displayed(child_id, column)

    @property
    def selected_entry(self) -> Entry | None:
        lines = self.model.lines
        return lines[self.cursor_row] if 0 <= self.cursor_row < len(lines) else None

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

    def group_under_cursor(self) -> GroupHeader | None:
        """Grouped: the header under the cursor, or the selected child's."""
        entry = self.selected_entry
        if isinstance(entry, GroupHeader):
            return entry
        return self.model.header_of(entry) if entry is not None else None

    # --- updating ---------------------------------------------------------------------------

    def apply(
        self, rows: Iterable[ChildRow], now: float, own: Container[str] | None, left: bool = False
    ) -> None:
        """Bring the table in line with `rows` (the whole batch; `own`: its own tasks; `left`:
        the batch is abandoned, its running children left running)."""
        selected = self.selected_entry
        taken = self.model.take(rows, now, own, left)
        if taken.wider:  # a new id, indented as the tree order shows it
            self._fit()
        if taken.refiltered:
            if not self._reorder(selected, force=False):
                self._relayout()
                self._place_cursor(selected)
        elif taken.moved:
            reordered = self._reorder(selected, force=False)
            if not reordered and taken.regrouped and not self.holding:
                # A child changed groups without changing places (at a group's edge).
                self._relayout()
                self._place_cursor(selected)
                self.refresh()
        self._repaint_changed()

    def rebuild(self) -> None:
        """Show the rows the filter keeps in order (after a filter or tag change)."""
        selected = self.selected_entry
        self.model.refilter()
        self.resort_pending = False
        self._relayout()
        self._place_cursor(selected)
        self.refresh()

    def set_order(self, order: SortOrder) -> None:
        """Sort by `order` now (the operator asked for it: no hold)."""
        selected = self.selected_entry
        self.model.set_order(order)
        if not self._reorder(selected, force=True):
            self._relayout()  # the same order may still gain or lose group headers
            self._place_cursor(selected)
        self.refresh()

    def set_grouping(self, by: GroupBy | None) -> None:
        """Group the rows by `by` (None: not at all), now (the operator asked: no hold)."""
        if by is self.model.grouping:
            return
        selected = self.selected_entry
        if isinstance(selected, GroupHeader):
            selected = None  # that header is gone: the cursor goes to the top row
            self.pinned_top = True
        self.model.set_grouping(by)
        if not self._reorder(selected, force=True):
            self._relayout()  # the same order still gains or loses the headers
            self._place_cursor(selected)
        self.refresh()

    def toggle_fold(self, header: GroupHeader) -> None:
        """Fold `header`'s group to its header, or unfold it."""
        folded = self.model.folded
        folding = header not in folded
        if folding:
            folded.add(header)
        else:
            folded.discard(header)
        if header.by is not self.model.grouping:
            return
        self.pinned_top = False  # the operator acted on this row: the cursor stays with it
        selected = self.selected_entry
        if folding and isinstance(selected, str) and self.model.header_of(selected) == header:
            selected = header  # its row is going: the cursor goes to the header
        self._relayout()
        self._place_cursor(selected)
        self.refresh()

    def set_tagged(self, child_ids: Iterable[str], tagged: bool) -> None:
        """Tag or untag children and redraw their mark."""
        self.model.set_tagged(child_ids, tagged)
        self._repaint_changed()

    def select(self, entry: Entry | None) -> bool:
        """Put the cursor on `entry` if it is shown, and keep it there as rows move (no longer
        pinned to the top row: whoever picked it meant that child, not the most urgent one)."""
        index = self.model.position(entry) if entry is not None else None
        if index is None:
            return False
        self.pinned_top = False
        self._move_to(index)
        return True

    def follow(self, *, start: bool = False) -> None:
        """The cursor to the most recently active running child. A poll's follow (not `start`)
        leaves it while the operator's keys hold the rows: the screen may not yet know of them."""
        if start:
            self._held_until = 0.0  # following anew: the rows move with it again
        rows = self.model.rows_by_id
        running = [rows[i] for i in self.shown if rows[i].status is ChildStatus.RUNNING]
        if running and (start or not self.holding):
            newest = max(running, key=lambda r: r.activity.last_activity_ts or 0.0)
            self.select(newest.id)

    def _reorder(self, selected: Entry | None, *, force: bool) -> bool:
        """Sort the rows (unless the operator holds them); True when the lines were redone."""
        wanted = self.model.sorted_ids()
        if wanted is None:
            self.resort_pending = False
            return False
        if not force and self.holding:
            # The operator is reading these rows: they move once the keys have rested.
            self.resort_pending = True
            return False
        self.resort_pending = False
        self._relayout(wanted)
        self._place_cursor(selected)
        self.refresh()
        return True

    def _relayout(self, shown: list[str] | None = None) -> None:
        """The lines from the kept rows (`shown`: them in a new order), and the size they take."""
        self.model.relayout(shown)
        self._sized()

    def _place_cursor(self, selected: Entry | None) -> None:
        """After rows moved: keep the cursor's child (htop does the same), or the top row."""
        target = 0 if self.pinned_top or selected is None else self.model.position(selected)
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
        return max(0, len(self.model.lines) - 1)

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
        if index < len(self.model.lines):
            self.navigated()
            self._move_to(index)

    # --- layout -----------------------------------------------------------------------------

    def on_mount(self) -> None:
        self._fit()

    # A resize; and rows that come to scroll, whose scrollbar takes a cell without a resize.
    on_resize = watch_show_vertical_scrollbar = on_mount

    def _fit(self) -> None:
        """Columns by priority for the width there is (see rows.fit_columns)."""
        self.columns = fit_columns(self.scrollable_content_region.width, self.model.id_need)
        self._widths = tuple(width for _, _, width in self.columns)
        self._sized()
        self._scroll_to_cursor()
        self.refresh()

    def _sized(self) -> None:
        width = sum(self._widths) + len(self._widths) - 1
        self.virtual_size = Size(width, len(self.model.lines) + 1)

    # --- rendering --------------------------------------------------------------------------

    def _repaint_changed(self) -> None:
        """Refresh only the lines on screen that would draw something else than they did: a
        child's cells changed, or another child (or none) came to the line, as when a child
        leaves the filter and the rows below it move up."""
        top = round(self.scroll_y)
        lines, cells, drawn = self.model.lines, self.model.entry_cells, self._on_screen
        for index in range(top, top + self.size.height):
            shows = (lines[index], cells(lines[index])) if index < len(lines) else None
            if drawn.get(index) != shows:
                self.refresh_line(index + 1)

    def render_line(self, y: int) -> Strip:
        width = self.scrollable_content_region.width
        strips = self._strips
        if y == 0:
            style = self.get_component_rich_style("children-table--header")
            key: _LineKey = ((), self._widths, ("header", style, width))
            if (strip := strips.get(key)) is None:
                strip = strips[key] = header_strip(self.columns, style, width)
            return strip
        index = round(self.scroll_y) + y - 1
        lines = self.model.lines
        if index >= len(lines):
            self._on_screen.pop(index, None)
            return Strip.blank(width, self.rich_style)
        entry = lines[index]
        cells = self.model.entry_cells(entry)
        self._on_screen[index] = (entry, cells)
        if index == self.cursor_row:
            name = "children-table--cursor" if self.has_focus else "children-table--cursor-blurred"
            base = self.get_component_rich_style(name)
        else:
            base = self.rich_style
        key = (cells, self._widths, (base, width))
        if (strip := strips.get(key)) is None:
            if isinstance(entry, str):
                strip = line_strip(self.columns, cells, base, width)
            else:
                strip = group_strip(cells, base, width)
            strips[key] = strip
        return strip

    def on_focus(self) -> None:
        self.refresh_line(self.cursor_row + 1)

    def on_blur(self) -> None:
        self.refresh_line(self.cursor_row + 1)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._strips.clear()
