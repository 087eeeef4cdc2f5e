"""The children table: one row per child, updated by difference from engine snapshots."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from flightdeck.engine.model import ChildRow, ChildStatus
from flightdeck.tui.fmt import Cell
from flightdeck.tui.widgets.rows import (
    COLUMN_KEYS,
    COLUMNS,
    RowFilter,
    SortOrder,
    doing,
    last,
    row_cells,
    sort_key,
)
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.cache import LRUCache
from textual.message import Message
from textual.widgets import DataTable
from textual.widgets.data_table import ColumnKey, RowDoesNotExist, RowKey

_GOAL = COLUMN_KEYS.index("goal")
_DOING = COLUMN_KEYS.index("doing")
_LAST = COLUMN_KEYS.index("last")
_MIN_GOAL = 16
# Finished rows only show a coarse age; refreshing it every few polls is enough.
_SLOW_EVERY = 8
# Past this many removals in one update a rebuild is cheaper than DataTable.remove_row (O(n)).
_REBUILD_AFTER = 32
_CELL_CACHE = 8192  # rendered cells kept; a screenful is a few hundred
_COLUMN_KEYS = tuple(ColumnKey(key) for key in COLUMN_KEYS)


# A rendered cell: the value it showed, how it looked, its row index, its segments.
_Rendered = tuple[object, tuple[object, ...], int, list[list[Segment]]]


class _IdCell(Text):
    """The id cell keeps the raw child id, so sorting can map rows back to children."""

    def __init__(self, child_id: str, text: str, style: str) -> None:
        super().__init__(text, style=style, no_wrap=True, overflow="ellipsis")
        self.child_id = child_id


def _render(cell: Cell) -> Text:
    # Plain Text, never markup: goals, ids and errors are untrusted.
    return Text(cell[0], style=cell[1], no_wrap=True, overflow="ellipsis")


class ChildrenTable(DataTable[Text]):
    """Children as rows; `apply` updates only the cells that changed."""

    class Navigated(Message):
        """The operator moved the cursor (so follow mode should let go)."""

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="row", zebra_stripes=False)
        self.rows_by_id: dict[str, ChildRow] = {}
        self.tagged: set[str] = set()
        self.order = SortOrder.ATTENTION
        self.row_filter = RowFilter()
        self._cells: dict[str, tuple[Cell, ...]] = {}  # what each visible row shows now
        self._keys: dict[str, tuple[object, ...]] = {}  # sort key per visible row
        self._shown: list[str] = []  # visible ids in display order
        self._now = 0.0
        self._polls = 0
        # Until the operator picks a row, the cursor stays on the top one (the most urgent).
        self.pinned_top = True
        self._unflushed = False  # cells were written since the last refresh
        self._rendered: LRUCache[tuple[object, object], _Rendered] = LRUCache(_CELL_CACHE)

    def on_mount(self) -> None:
        for key, label, width in COLUMNS:
            self.add_column(label, width=width, key=key)
        self._fit_goal()

    # --- reading ----------------------------------------------------------------------------

    @property
    def shown(self) -> Sequence[str]:
        """Visible child ids, in display order."""
        return self._shown

    @property
    def selected_id(self) -> str | None:
        """The child under the cursor."""
        if not self._shown or not self.is_valid_row_index(self.cursor_row):
            return None
        return self.coordinate_to_cell_key(self.cursor_coordinate).row_key.value

    def displayed(self, child_id: str, column: str) -> str:
        """The plain text a cell shows (for tests and the screen)."""
        return self._cells[child_id][COLUMN_KEYS.index(column)][0]

    # --- updating ---------------------------------------------------------------------------

    def apply(self, rows: Iterable[ChildRow], now: float) -> None:
        """Bring the table in line with `rows`; call inside `App.batch_update()`."""
        self._now = now
        self._polls += 1
        slow = self._polls % _SLOW_EVERY == 0
        changed: list[ChildRow] = []
        by_id = self.rows_by_id
        for row in rows:
            # The engine hands out the same ChildRow object until the child changes.
            if by_id.get(row.id) is not row:
                by_id[row.id] = row
                changed.append(row)
        added: list[str] = []
        removed: list[str] = []
        for row in changed:
            visible = self.row_filter.matches(row, row.id in self.tagged)
            if row.id in self._cells:
                if visible:
                    self._keys[row.id] = sort_key(self.order, row)
                    self._update(row)
                else:
                    removed.append(row.id)
            elif visible:
                added.append(row.id)
        if len(removed) > _REBUILD_AFTER:
            self.rebuild()
            return
        for child_id in removed:
            self._drop(child_id)
        for child_id in added:
            self._add(by_id[child_id])
        self._tick_time(slow, skip={r.id for r in changed})
        self._flush()
        if changed or added or removed:
            self._reorder()

    def rebuild(self) -> None:
        """Re-create every row (after a filter or order change), keeping the cursor's child."""
        selected = self.selected_id
        self.clear()
        self._cells.clear()
        self._keys.clear()
        keep = self.row_filter.matches
        rows = [row for row in self.rows_by_id.values() if keep(row, row.id in self.tagged)]
        for row in rows:
            self._keys[row.id] = sort_key(self.order, row)
        rows.sort(key=lambda r: self._keys[r.id])
        self._shown = [row.id for row in rows]
        for row in rows:
            self._add_cells(row)
        top = self._shown[0] if self._shown else None
        self._keep_cursor(selected, top if self.pinned_top else selected)

    def set_order(self, order: SortOrder) -> None:
        self.order = order
        self._keys = {i: sort_key(order, self.rows_by_id[i]) for i in self._shown}
        self._reorder()

    def set_tagged(self, child_ids: Iterable[str], tagged: bool) -> None:
        """Tag or untag children and redraw their mark."""
        for child_id in child_ids:
            if tagged:
                self.tagged.add(child_id)
            else:
                self.tagged.discard(child_id)
            if child_id in self._cells:
                self._update(self.rows_by_id[child_id])
        self._flush()

    def select(self, child_id: str | None) -> bool:
        """Put the cursor on `child_id` if it is shown (and keep it there as rows move)."""
        if child_id is None or child_id not in self._cells:
            return False
        try:
            index = self.get_row_index(child_id)
        except RowDoesNotExist:
            return False
        if index != self.cursor_row:
            self.move_cursor(row=index, animate=False)
        return True

    def _add(self, row: ChildRow) -> None:
        self._keys[row.id] = sort_key(self.order, row)
        self._shown.append(row.id)
        self._add_cells(row)

    def _add_cells(self, row: ChildRow) -> None:
        cells = row_cells(row, row.id in self.tagged, self._now)
        self._cells[row.id] = cells
        self.add_row(*self._renderables(row.id, cells), key=row.id)

    def _drop(self, child_id: str) -> None:
        self._cells.pop(child_id, None)
        self._keys.pop(child_id, None)
        self._shown.remove(child_id)
        self.remove_row(child_id)

    def _renderables(self, child_id: str, cells: tuple[Cell, ...]) -> list[Text]:
        out = [_render(cell) for cell in cells]
        out[1] = _IdCell(child_id, *cells[1])
        return out

    def _update(self, row: ChildRow) -> None:
        new = row_cells(row, row.id in self.tagged, self._now)
        self._write(row.id, new)

    def _write(self, child_id: str, new: tuple[Cell, ...]) -> None:
        old = self._cells[child_id]
        if new == old:
            return
        self._cells[child_id] = new
        data = self._data[RowKey(child_id)]
        for index, (before, after) in enumerate(zip(old, new, strict=True)):
            if before != after:
                value = _IdCell(child_id, *after) if index == 1 else _render(after)
                # What update_cell does, minus its refresh() per cell: hundreds of cells
                # change per poll and one refresh at the end (_flush) is enough.
                data[_COLUMN_KEYS[index]] = value
                self._unflushed = True

    def _flush(self) -> None:
        if self._unflushed:
            self._unflushed = False
            self._update_count += 1
            self.refresh()

    def _tick_time(self, slow: bool, skip: set[str]) -> None:
        """Ages and tool durations move with the clock, even when the child does not."""
        now = self._now
        for child_id, cells in self._cells.items():
            if child_id in skip:
                continue
            row = self.rows_by_id[child_id]
            # Only running children tick every poll; finished ones show a coarse age.
            if row.status is not ChildStatus.RUNNING and not (slow and row.status.terminal):
                continue
            new_doing, new_last = doing(row, now), last(row, now)
            if new_doing != cells[_DOING] or new_last != cells[_LAST]:
                updated = list(cells)
                updated[_DOING], updated[_LAST] = new_doing, new_last
                self._write(child_id, tuple(updated))

    def _reorder(self) -> None:
        keys = self._keys
        wanted = sorted(self._shown, key=keys.__getitem__)
        if wanted == self._shown:
            return
        selected = self.selected_id
        self._shown = wanted
        rank = {child_id: i for i, child_id in enumerate(wanted)}
        self.sort("id", key=lambda cell: rank[cell.child_id])
        # DataTable.sort keeps the cursor's index; keep its child instead (htop does the same).
        self._keep_cursor(selected, wanted[0] if self.pinned_top else selected)

    def _keep_cursor(self, before: str | None, target: str | None) -> None:
        self.select(target)
        after = self.selected_id
        if after is not None and after != before:
            # A different child now sits under a cursor that did not move: say so, as a move would.
            key = self.coordinate_to_cell_key(self.cursor_coordinate).row_key
            self.post_message(self.RowHighlighted(self, self.cursor_row, key))

    # --- rendering --------------------------------------------------------------------------

    def _render_cell(
        self,
        row_index: int,
        column_index: int,
        base_style: Style,
        width: int,
        cursor: bool = False,
        hover: bool = False,
    ) -> list[list[Segment]]:
        """Render a cell only when it changed.

        DataTable keys its render caches on a table-wide update count, so one update_cell
        re-renders every visible cell, and with hundreds of running children that is every
        frame. Here a cell is rendered again only when its value object or its look changed;
        a row that merely moved gets its cached segments with the new row index patched in.
        """
        if row_index < 0 or column_index < 0:  # header and row labels: DataTable's own path
            return super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        row_key = self._row_locations.get_key(row_index)
        column_key = self._column_locations.get_key(column_index)
        assert row_key is not None and column_key is not None
        value = self._data[row_key].get(column_key)
        look = (base_style, width, cursor, hover, self._show_hover_cursor, self._pseudo_class_state)
        hit = self._rendered.get((row_key, column_key))
        if hit is not None and hit[0] is value and hit[1] == look:
            cached_index, lines = hit[2], hit[3]
            if cached_index == row_index:
                return lines
            # DataTable marks each cell's segments with its row index (for mouse clicks).
            meta = Style.from_meta({"row": row_index, "column": column_index})
            moved = [[Segment(t, s + meta if s else meta, c) for t, s, c in line] for line in lines]
            self._rendered[(row_key, column_key)] = (value, look, row_index, moved)
            return moved
        lines = super()._render_cell(row_index, column_index, base_style, width, cursor, hover)
        self._rendered[(row_key, column_key)] = (value, look, row_index, lines)
        return lines

    # --- layout -----------------------------------------------------------------------------

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        """The table's size, without measuring the cells of new rows.

        DataTable measures every cell of every new row (through Rich's console options) to size
        auto-width columns and auto-height rows. Here every column has a fixed width and every
        row is one line, so the measurements decide nothing, and a big batch appearing at once
        would freeze the UI while they run.
        """
        super()._update_dimensions(())

    def on_resize(self, event: events.Resize) -> None:
        self._fit_goal()

    def _fit_goal(self) -> None:
        """Give the goal column whatever width the other columns leave."""
        if not self.columns:
            return
        pad = 2 * self.cell_padding
        others = sum(width + pad for key, _, width in COLUMNS if key != "goal")
        available = self.scrollable_content_region.width - others - pad - 1
        goal = self.columns[ColumnKey("goal")]
        width = max(_MIN_GOAL, available)
        if goal.width != width:
            goal.width = width
            # Column widths feed DataTable's render caches, which key on the update count.
            self._update_count += 1
            self._require_update_dimensions = True
            self.refresh()

    # --- operator navigation ----------------------------------------------------------------

    def navigated(self) -> None:
        """The operator chose a row: stop pinning the cursor to the top, tell the screen."""
        self.pinned_top = False
        self.post_message(self.Navigated())

    def action_cursor_up(self) -> None:
        self.navigated()
        super().action_cursor_up()

    def action_cursor_down(self) -> None:
        self.navigated()
        super().action_cursor_down()

    def action_page_up(self) -> None:
        self.navigated()
        super().action_page_up()

    def action_page_down(self) -> None:
        self.navigated()
        super().action_page_down()

    def action_scroll_top(self) -> None:
        self.navigated()
        super().action_scroll_top()

    def action_scroll_bottom(self) -> None:
        self.navigated()
        super().action_scroll_bottom()

    async def _on_click(self, event: events.Click) -> None:
        self.navigated()
        await super()._on_click(event)
