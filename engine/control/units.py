"""Completion units: the tasks that share a `group` are reported together once the last ends.

A member's delegates (and theirs) belong to its group: the unit waits for them too, and counts
their spend, though only the members decide its status. Each child is still recorded (and
announced) the moment it finishes; the unit's result comes on top, from the coordinator thread,
right after its last child's row is committed.
"""

from __future__ import annotations

from collections.abc import Iterable

from flightdeck.engine.model import ChildRow, GroupFinished


class Units:
    """Which groups are still open, and the rows of their children that have ended."""

    def __init__(self, members: Iterable[tuple[str, str | None]]) -> None:
        """`members`: (child id, group) for every task, in batch order."""
        self._order: dict[str, list[str]] = {}
        self._group_of: dict[str, str] = {}
        for child_id, group in members:
            if group is not None:
                self._order.setdefault(group, []).append(child_id)
                self._group_of[child_id] = group
        self._ended: dict[str, dict[str, ChildRow]] = {g: {} for g in self._order}
        # Each group's delegates, in the order they were made: their final row, None until then.
        self._delegates: dict[str, dict[str, ChildRow | None]] = {g: {} for g in self._order}
        self._reported: set[str] = set()

    def joined(self, child_id: str, group: str) -> None:
        """A delegate of one of the group's children: the unit ends once it has too."""
        if group in self._delegates:
            self._delegates[group].setdefault(child_id, None)

    def ended(self, row: ChildRow) -> GroupFinished | None:
        """Note a committed final row; the unit's result if it was its group's last child."""
        group = row.group
        if group is None or group not in self._ended:
            return None
        delegates = self._delegates[group]
        if row.id in delegates or (row.parent is not None and self._group_of.get(row.id) is None):
            delegates[row.id] = row
        else:
            self._ended[group][row.id] = row
        ended = self._ended[group]
        order = self._order[group]
        # Each member, not a count: a task added later (a wave, a resumed batch's retried
        # carried task) may share the group without being one of them.
        if group in self._reported or any(i not in ended for i in order):
            return None
        if any(d is None for d in delegates.values()):  # a delegate still running (a stop race)
            return None
        self._reported.add(group)  # once, however many rows come back later
        made = [d for d in delegates.values() if d is not None]
        return GroupFinished.of(group, [ended[i] for i in order] + made)

    def reopen(self, child_id: str) -> None:
        """A member runs again (a retry): its group is open until it ends again, and is then
        reported again, with its new row (and the delegates of every attempt: all were paid)."""
        group = self._group_of.get(child_id)
        if group is not None:
            self._ended[group].pop(child_id, None)
            self._reported.discard(group)
