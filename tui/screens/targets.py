"""Which children the main screen's keys act on (s, x, p, n), and tagging them (space, t, g).

Functions of the children table: the tagged children if any; on a group's header, its group;
with a filter on, every child it keeps; else the one under the cursor. `aim` reads them off the
table as one value (`Aim`) for the orders to decide on (`act_on` also keeps the cursor's row).
"""

from __future__ import annotations

from collections.abc import Container, Mapping
from dataclasses import dataclass

from flightdeck.engine.model import ChildRow, ChildStatus
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.widgets import ChildrenTable
from flightdeck.tui.widgets.lines import GroupHeader
from flightdeck.tui.widgets.rows import GroupBy

# How a finished child ended, after its id; other statuses read "has <status>".
_ENDED = {ChildStatus.STOPPED: "was stopped", ChildStatus.UNKNOWN: "ended (status unknown)"}


def matching_query(table: ChildrenTable) -> str | None:
    """The filter's query when s and x act on every child it keeps: a filter is on, nothing
    is tagged and the cursor is not on a group's header. None otherwise."""
    if table.tagged or table.selected_header is not None or not table.row_filter.active:
        return None
    return table.row_filter.query


def targets(table: ChildrenTable) -> list[str]:
    """Tagged children if any; on a header, its group; with a filter on, every child it
    keeps; else the one under the cursor."""
    if table.tagged:
        rows = table.rows_by_id
        return sorted((i for i in table.tagged if i in rows), key=lambda i: rows[i].seq)
    header = table.selected_header
    if header is not None:
        return table.group_members(header)
    if matching_query(table) is not None:
        return table.model.matching
    selected = table.selected_id
    return [selected] if selected is not None else []


@dataclass(frozen=True, slots=True)
class Aim:
    """Whom a key on the children acts on, read off the table as the key is pressed: the value
    the orders (actions.py) decide on."""

    ids: tuple[str, ...]  # targets(table)
    rows: Mapping[str, ChildRow]  # every child's row as the table shows it
    query: str | None  # matching_query(table)
    header: GroupHeader | None  # the group under the cursor, when nothing is tagged
    tagged: bool
    own: Container[str] | None = None  # the batch's own tasks: not a schedule's waves

    @property
    def live(self) -> tuple[str, ...]:
        rows = self.rows
        return tuple(i for i in self.ids if rows[i].status.live)

    @property
    def ended(self) -> tuple[str, ...]:
        rows = self.rows
        return tuple(i for i in self.ids if not rows[i].status.live)

    @property
    def looping(self) -> tuple[str, ...]:
        rows = self.rows
        return tuple(i for i in self.live if rows[i].loop is not None)

    @property
    def group(self) -> str | None:
        """The header's group in words (`group security`), when the key acts on one."""
        return None if self.header is None else self.header.described

    @property
    def ended_of(self) -> str:
        """Whose ended children a dialog counts: the tagged ones, the header's group's, or the
        filter's."""
        if self.tagged:
            return "tagged"
        if self.header is not None:
            return "in the group"
        return "matching" if self.query is not None else "tagged"

    def kept_none(self, verb: str) -> str | None:
        """The filter keeps no child: why the key does nothing (`nothing_to`), else None."""
        return self.nothing_to(verb) if self.query is not None and not self.ids else None

    def nothing_to(self, verb: str) -> str:
        """Every target has ended, or the filter keeps none: why the key does nothing, said
        rather than silent."""
        ended = self.ended
        if not self.ids and self.query is not None:
            why = _no_match(self.query)
        elif self.header is not None:
            why = f"every child under {one_line(self.header.described, 60)} has ended"
        elif self.query is not None:
            why = f"every child matching `{one_line(self.query, 60)}` has ended"
        elif len(ended) == 1:
            row = self.rows[ended[0]]
            how = _ENDED.get(row.status, "has " + row.status.value.replace("_", " "))
            why = f"{one_line(row.id)} {how}"
        else:
            why = f"all {len(ended)} tagged children have ended"
        return f"{why}: nothing to {verb}"


def _no_match(query: str) -> str:
    return f"no child matches `{one_line(query, 60)}`"


def kept_none(table: ChildrenTable, verb: str) -> str | None:
    """A filter is on and keeps no child: why a key on the rows shown does nothing, else None."""
    if not table.row_filter.active or table.model.matching:
        return None
    return f"{_no_match(table.row_filter.query)}: nothing to {verb}"


def aim(table: ChildrenTable) -> Aim:
    """What a key pressed now acts on."""
    tagged = bool(table.tagged)
    header = None if tagged else table.selected_header
    query = matching_query(table)
    return Aim(tuple(targets(table)), table.rows_by_id, query, header, tagged, table.model.own)


def act_on(table: ChildrenTable) -> Aim:
    """`aim`, for a key that acts now: the cursor keeps to its row from here. Pinned to the
    top, it went to whichever child took the top once the action moved its own down."""
    table.pinned_top = False  # the cursor stays with its child as rows move, as after j/k
    return aim(table)


# --- tagging: each returns whether it changed the tags ----------------------------------------


def tag(table: ChildrenTable) -> bool:
    """Tag (or untag) the child under the cursor and move on; a header, its whole group."""
    header = table.selected_header
    selected = table.selected_id
    if header is not None:  # a header tags (or untags) its whole group
        members = table.group_members(header)
        table.set_tagged(members, not all(i in table.tagged for i in members))
    elif selected is not None:
        table.set_tagged([selected], selected not in table.tagged)
    else:
        return False
    if table.row_filter.tagged_only:
        table.rebuild()
    else:
        table.action_cursor_down()
    return True


def tag_visible(table: ChildrenTable) -> None:
    """Tag every shown child, or untag them when all are tagged already."""
    shown = list(table.shown)
    every = all(i in table.tagged for i in shown)
    table.set_tagged(shown, not every)
    if table.row_filter.tagged_only:
        table.rebuild()


def tag_group(table: ChildrenTable) -> str | bool:
    """Tag the selected child's whole group (a completion unit): s and x then act on it.
    Whether the tags changed, or why not when the child is in no group."""
    header = table.selected_header
    selected = table.selected_id
    row = table.rows_by_id.get(selected) if selected is not None else None
    if header is None and row is not None:
        unit = table.model.unit_of(row.id)  # as the engine counts it: never a wave's group
        if unit is None:
            if row.group is None:
                return f"{one_line(row.id)} is in no group"
            return (
                f"{one_line(row.id)} is in no completion unit: a schedule's wave and its delegates"
                f" are in none, not {one_line(row.group)}'s"
            )
        header = GroupHeader(GroupBy.GROUP, unit)
    if header is None:
        return False
    members = table.group_members(header)
    every = all(i in table.tagged for i in members)
    table.set_tagged(members, not every)
    if table.row_filter.tagged_only:
        table.rebuild()
    return True
