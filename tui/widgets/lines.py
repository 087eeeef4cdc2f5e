"""What the children table shows, apart from drawing it: the rows, their sort keys, the filter,
the groups and their headers, as lines top to bottom (`ChildLines`). No Textual here: the
widget (children.py) holds one, keeps the cursor and the hold, and draws the lines on screen.

Grouped (by the task's group, status, route, tool or error signature), the lines are the rows
with a header before each group's members, in the sort order within the group, and a folded
group shows only its header. Ungrouped, the lines are the rows themselves (the same list: no
extra work on the common path). Outliers (tokens or run time over 3x the batch's median) are
marked; the medians are taken once per snapshot, not per row.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from dataclasses import dataclass
from typing import cast

from flightdeck.engine.apilight import MedianRows, Medians, Membership
from flightdeck.engine.model import ChildRow, ChildStatus
from flightdeck.tui.fmt import LEFT_RUNNING, LEFT_RUNNING_TEXT, Cell
from flightdeck.tui.widgets.columns import COLUMN_KEYS, ID_MIN, id_width
from flightdeck.tui.widgets.headers import GroupSummary, group_header, group_summary
from flightdeck.tui.widgets.rows import (
    GroupBy,
    Rank,
    RowFilter,
    SortOrder,
    Spent,
    group_rank,
    group_value,
    no_value_label,
    row_cells,
    sort_key,
    subtree_costs,
    tree_cells,
    tree_key,
)


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


@dataclass(frozen=True, slots=True)
class Taken:
    """What a snapshot changed in the lines (`ChildLines.take`)."""

    refiltered: bool  # a child came into the filter's keep or left it
    moved: bool  # some child's sort key changed
    regrouped: bool  # some child changed groups
    wider: bool  # a new id needs a wider id column


_MARK, _DOING = COLUMN_KEYS.index("mark"), COLUMN_KEYS.index("doing")


def left_running(cells: tuple[Cell, ...], tagged: bool) -> tuple[Cell, ...]:
    """A running row of an abandoned batch: its mark and "doing" say nobody watches it now."""
    new = list(cells)
    mark, doing = new[_MARK], new[_DOING]
    new[_MARK] = (mark[0][:-1] + LEFT_RUNNING[0], mark[1] if tagged else LEFT_RUNNING[1])
    new[_DOING] = (f"{LEFT_RUNNING_TEXT} · {doing[0]}", LEFT_RUNNING[1])
    return tuple(new)


class ChildLines:
    """The children as sorted, filtered and grouped lines; updated by difference (`take`)."""

    def __init__(self) -> None:
        self.rows_by_id: dict[str, ChildRow] = {}
        self.tagged: set[str] = set()
        self.order = SortOrder.ATTENTION
        self.grouping: GroupBy | None = None  # what G groups the rows by (None: not grouped)
        # Who is in which completion unit (the group grouping's headers), as the engine says:
        # made again with the batch's own tasks at the first snapshot.
        self._units = Membership(None)
        self.own: Container[str] | None = None  # the batch's own tasks (not waves, delegates)
        self.medians = Medians()  # the batch's, this snapshot's: which rows are outliers
        self._median_rows = MedianRows()
        self.row_filter = RowFilter()
        self.folded: set[GroupHeader] = set()  # groups shown as their header only
        self.now = 0.0  # the last snapshot's time: what idle and run times are counted to
        self.left = False  # the batch is abandoned: its running children are left running
        self.id_need = ID_MIN  # the longest id's cells (with the tree's indent)
        self._delegated = False  # some child delegated: the tree order has a tree to show
        self._subtree: dict[str, Spent] = {}  # in the tree order: each parent's total
        self._keys: dict[str, tuple[object, ...]] = {}  # sort key of every row
        self._shown: list[str] = []  # ids the filter keeps, in display order
        self._index: dict[str, int] | None = None  # id -> position in _shown, built on demand
        # The lines: _shown itself, or grouped with headers and folds applied.
        self._lines: Sequence[Entry] = self._shown
        self._line_index: dict[Entry, int] | None = None  # grouped: entry -> line
        self._children: list[str] | None = None  # grouped: the child ids on lines
        self._summaries: dict[GroupHeader, GroupSummary] = {}  # drawn since rows last changed
        # One grouping's value -> ids, until a row is added (or, but by task group, changes).
        self._members: tuple[GroupBy, dict[str | None, list[str]]] | None = None

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

    def header_of(self, child_id: str) -> GroupHeader | None:
        """The header `child_id` is under in the current grouping (None: not grouped)."""
        if self.grouping is None:
            return None
        return GroupHeader(self.grouping, self._value(self.grouping, self.rows_by_id[child_id]))

    def unit_of(self, child_id: str) -> str | None:
        """The completion unit (its group) `child_id` is in; None: none (a schedule's wave, say)."""
        return self._units.unit_of(child_id)

    def _value(self, by: GroupBy, row: ChildRow) -> str | None:
        return group_value(by, row, self._units)

    def group_members(self, header: GroupHeader) -> list[str]:
        """Every child under `header` (the filter and folds aside), in batch order."""
        if self._members is None or self._members[0] is not header.by:
            by = header.by
            members: dict[str | None, list[str]] = {}
            for child_id, row in self.rows_by_id.items():
                members.setdefault(self._value(by, row), []).append(child_id)
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
            unit = header.by is GroupBy.GROUP and header.name is not None
            summary = self._summaries[header] = group_summary(members, self.tagged, unit=unit)
        return summary

    def header_cells(self, header: GroupHeader) -> tuple[Cell, ...]:
        return (group_header(header.label, self.summary(header), header in self.folded),)

    def header_text(self, header: GroupHeader) -> str:
        return self.header_cells(header)[0][0]

    def cells(self, child_id: str) -> tuple[Cell, ...]:
        row = self.rows_by_id[child_id]
        cells = row_cells(row, child_id in self.tagged, self.now, self.medians.outlier(row))
        if self.left and row.status is ChildStatus.RUNNING:
            cells = left_running(cells, child_id in self.tagged)
        if self.order is SortOrder.TREE and self._delegated:
            cells = tree_cells(cells, row, self._subtree.get(child_id))
        return cells

    def entry_cells(self, entry: Entry) -> tuple[Cell, ...]:
        """A line's cells: a child's, or a group header's."""
        return self.cells(entry) if isinstance(entry, str) else self.header_cells(entry)

    def displayed(self, child_id: str, column: str) -> str:
        """The plain text a cell shows, before the column's width cuts it."""
        return self.cells(child_id)[COLUMN_KEYS.index(column)][0]

    def position(self, entry: Entry) -> int | None:
        """The line `entry` (a child id or a group's header) is on, if it is on one."""
        if self._lines is self._shown:
            return self._kept().get(entry) if isinstance(entry, str) else None
        if self._line_index is None:
            self._line_index = {e: i for i, e in enumerate(self._lines)}
        return self._line_index.get(entry)

    def _kept(self) -> dict[str, int]:
        if self._index is None:
            self._index = {child_id: i for i, child_id in enumerate(self._shown)}
        return self._index

    def _key(self, row: ChildRow) -> tuple[object, ...]:
        key: tuple[object, ...]
        if self.order is SortOrder.TREE:
            key = tree_key(row, self.rows_by_id)
        else:
            key = sort_key(self.order, row)
        if self.grouping is None:
            return key
        # Grouped: by the group first, so a group's members are together in the sort order.
        return (group_rank(self.grouping, self._value(self.grouping, row)), key)

    def _keeps(self, row: ChildRow, now: float) -> bool:
        return self.row_filter.matches(row, row.id in self.tagged, now, self.medians)

    # --- updating ---------------------------------------------------------------------------

    def take(
        self,
        rows: Iterable[ChildRow],
        now: float,
        own: Container[str] | None = None,
        left: bool = False,
    ) -> Taken:
        """The rows of a snapshot (the whole batch) taken in by difference; the children the
        filter keeps follow, in their old places (new ones last) until `sorted_ids` is shown.
        `own`: the batch's own tasks (`Snapshot.own`, the same every snapshot); `left`: the
        batch is abandoned, its running children left running by an owner that died."""
        self.now, self.left, self.own = now, left, own
        batch: Sequence[ChildRow] = rows if isinstance(rows, Sequence) else tuple(rows)
        by_id, keys, order = self.rows_by_id, self._keys, self.order
        if len(batch) > len(by_id):  # new children: each placed in its unit, parents first
            if not by_id:
                self._units = Membership(own)
            fresh = sorted((r for r in batch if r.id not in by_id), key=lambda r: r.seq)
            for row in fresh:
                self._units.place(row.id, row.parent, row.group)
        # Once per snapshot, before the filter asks it (is:outlier) for every row.
        median_rows = self._median_rows
        for row in batch:
            if by_id.get(row.id) is not row:
                median_rows.update(row)
        self.medians = median_rows.medians(now)
        keep, kept = self._keeps, self._kept()
        added: list[str] = []
        removed: set[str] = set()
        moved = regrouped = wider = relinked = False
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
                if (need := id_width(row)) > self.id_need:
                    self.id_need = need
                    wider = True
            else:
                relinked = relinked or old.parent != row.parent  # its parent known only now
                if grouping is not None and grouping is not GroupBy.GROUP:
                    # Its status, tool or error may have changed: so may the members of groups.
                    self._members = None
                    regrouped = regrouped or self._value(grouping, old) != self._value(
                        grouping, row
                    )
            by_id[row.id] = row
            if row.parent is not None:
                self._delegated = True
            key = self._key(row)
            moved = moved or keys.get(row.id) != key
            keys[row.id] = key
            recheck(row)
        if relinked and (placed := self._place_unplaced(batch)):
            self._members = None
            regrouped = regrouped or grouping is GroupBy.GROUP
            for child_id in placed:
                key = self._key(by_id[child_id])
                moved = moved or keys.get(child_id) != key
                keys[child_id] = key
        if self._delegated and order is SortOrder.TREE:
            self._subtree = subtree_costs(by_id)
        if self._summaries:
            self._summaries = {}
        if removed:
            self._shown = [i for i in self._shown if i not in removed]
        self._shown.extend(added)
        return Taken(bool(removed or added), moved, regrouped, wider)

    def _place_unplaced(self, batch: Sequence[ChildRow]) -> list[str]:
        """The delegates in no unit yet, placed again now that a parent is known: attached, a
        delegate's row and its "delegate" event (its parent) are two writes, and a read between
        them has the row with no parent (reading.py relinks it at the next). The ones that
        found a unit (its own delegates too)."""
        units = self._units
        loose = [r for r in batch if r.parent is not None and units.unit_of(r.id) is None]
        loose.sort(key=lambda r: r.seq)  # parents first
        return [r.id for r in loose if units.place(r.id, r.parent, r.group) is not None]

    def sorted_ids(self) -> list[str] | None:
        """The kept children in sort order, when that is not the order they are shown in."""
        wanted = sorted(self._shown, key=self._keys.__getitem__)
        return None if wanted == self._shown else wanted

    def refilter(self) -> None:
        """The children the filter keeps, in sort order (after a filter or tag change)."""
        keep, now = self._keeps, self.now
        shown = [i for i, row in self.rows_by_id.items() if keep(row, now)]
        shown.sort(key=self._keys.__getitem__)
        self._shown = shown

    def relayout(self, shown: list[str] | None = None) -> None:
        """The lines from the kept children (`shown`: them in a new order), after they changed,
        or the order, or a fold."""
        if shown is not None:
            self._shown = shown
        self._index = None
        self._line_index = None
        self._children = None
        self._lines = self._shown if self.grouping is None else self._grouped(self.grouping)

    def set_order(self, order: SortOrder) -> None:
        """Sort keys by `order` (shown once the widget relays the lines out)."""
        self.order = order
        self._keys = {i: self._key(row) for i, row in self.rows_by_id.items()}
        if order is SortOrder.TREE and self._delegated:
            self._subtree = subtree_costs(self.rows_by_id)

    def set_grouping(self, by: GroupBy | None) -> None:
        """Sort keys grouped by `by` (None: not at all)."""
        self.grouping = by
        self._members = None
        self._summaries = {}
        self._keys = {i: self._key(row) for i, row in self.rows_by_id.items()}

    def set_tagged(self, child_ids: Iterable[str], tagged: bool) -> None:
        """Tag or untag children."""
        self._summaries = {}  # headers count their tagged members
        for child_id in child_ids:
            if tagged:
                self.tagged.add(child_id)
            else:
                self.tagged.discard(child_id)

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
