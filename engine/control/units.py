"""Completion units: the tasks that share a `group` are reported together once the last ends.

Each member is still recorded (and announced) the moment it finishes; the unit's result comes
on top, from the coordinator thread, right after its last member's row is committed.
"""

from __future__ import annotations

from collections.abc import Iterable

from flightdeck.engine.model import ChildRow, GroupFinished


class Units:
    """Which groups are still open, and the rows of their members that have ended."""

    def __init__(self, members: Iterable[tuple[str, str | None]]) -> None:
        """`members`: (child id, group) for every task, in batch order."""
        self._order: dict[str, list[str]] = {}
        self._group_of: dict[str, str] = {}
        for child_id, group in members:
            if group is not None:
                self._order.setdefault(group, []).append(child_id)
                self._group_of[child_id] = group
        self._ended: dict[str, dict[str, ChildRow]] = {g: {} for g in self._order}
        self._reported: set[str] = set()

    def ended(self, row: ChildRow) -> GroupFinished | None:
        """Note a committed final row; the unit's result if it was its group's last member."""
        if row.group is None or row.group not in self._ended:
            return None
        ended = self._ended[row.group]
        ended[row.id] = row
        order = self._order[row.group]
        if len(ended) < len(order) or row.group in self._reported:
            return None
        self._reported.add(row.group)  # once, however many rows come back later
        return GroupFinished.of(row.group, [ended[i] for i in order])

    def reopen(self, child_id: str) -> None:
        """A member runs again (a retry): its group is open until it ends again, and is then
        reported again, with its new row."""
        group = self._group_of.get(child_id)
        if group is not None:
            self._ended[group].pop(child_id, None)
            self._reported.discard(group)
