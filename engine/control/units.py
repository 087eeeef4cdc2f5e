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
        """`members`: (child id, group) for every task, in batch order (a resumed batch's
        carried ones included: `carry` gives their rows)."""
        self._order: dict[str, list[str]] = {}
        self._group_of: dict[str, str] = {}
        for child_id, group in members:
            if group is not None:
                self._order.setdefault(group, []).append(child_id)
                self._group_of[child_id] = group
        self._ended: dict[str, dict[str, ChildRow]] = {g: {} for g in self._order}
        # Each group's delegates, in the order they were made: their final row, None until then.
        self._delegates: dict[str, dict[str, ChildRow | None]] = {g: {} for g in self._order}
        self._running: dict[str, int] = dict.fromkeys(self._order, 0)  # its delegates not ended
        self._reported: set[str] = set()

    def joined(self, child_id: str, parent: str, group: str) -> None:
        """A delegate of one of the group's children: the unit ends once it has too."""
        delegates = self._delegates.get(group)
        if delegates is not None and child_id not in delegates and self._in(parent, group):
            delegates[child_id] = None
            self._running[group] += 1

    def _in(self, parent: str, group: str) -> bool:
        """Whether `parent` is one of the unit's children: a member, or a delegate of one (a
        wave sharing the group is neither, nor are its delegates)."""
        return self._group_of.get(parent) == group or parent in self._delegates[group]

    def carry(self, row: ChildRow) -> None:
        """A row an earlier owner of a resumed batch ended: its unit counts it, ended."""
        self._note(row)

    def ended(self, row: ChildRow) -> GroupFinished | None:
        """Note a committed final row; the unit's result if it was its group's last child."""
        group = self._note(row)
        if group is None or group in self._reported:
            return None
        ended = self._ended[group]
        if len(ended) < len(self._order[group]) or self._running[group]:
            return None  # a member, or a delegate (its parent stopped first), has not ended
        self._reported.add(group)  # once, however many rows come back later
        made = [d for d in self._delegates[group].values() if d is not None]
        return GroupFinished.of(group, [ended[i] for i in self._order[group]] + made)

    def _note(self, row: ChildRow) -> str | None:
        """Keep an ended row in its unit; the unit's group, None if it is in none."""
        group = row.group
        if group is None or group not in self._ended:
            return None
        if row.id in self._group_of:
            self._ended[group][row.id] = row
        elif row.parent is not None and self._in(row.parent, group):
            delegates = self._delegates[group]
            if row.id in delegates and delegates[row.id] is None:
                self._running[group] -= 1
            delegates[row.id] = row
        else:  # a task added later that shares the group (a wave), or its delegate: not the unit's
            return None
        return group

    def reopen(self, child_id: str) -> None:
        """A member runs again (a retry): its group is open until it ends again, and is then
        reported again, with its new row (and the delegates of every attempt: all were paid)."""
        group = self._group_of.get(child_id)
        if group is not None:
            self._ended[group].pop(child_id, None)
            self._reported.discard(group)
