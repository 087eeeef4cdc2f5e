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
        for child_id, group in members:
            if group is not None:
                self._order.setdefault(group, []).append(child_id)
        self._ended: dict[str, dict[str, ChildRow]] = {g: {} for g in self._order}

    def ended(self, row: ChildRow) -> GroupFinished | None:
        """Note a committed final row; the unit's result if it was its group's last member."""
        if row.group is None or row.group not in self._ended:
            return None
        ended = self._ended[row.group]
        ended[row.id] = row
        order = self._order[row.group]
        if len(ended) < len(order):
            return None
        del self._ended[row.group]  # reported once, however many rows come back later
        return GroupFinished.of(row.group, [ended[i] for i in order])
