"""Completion units: the tasks that share a `group` are reported together once the last ends.

A member's delegates (and theirs) belong to its group: the unit waits for them too, and counts
their spend, though only the members decide its status. Each child is still recorded (and
announced) the moment it finishes; the unit's result comes on top, from the coordinator thread,
right after its last child's row is committed (its "unit" event with it), or, for a resumed
batch, as it starts if the rows it carried end a unit no owner announced.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from flightdeck.engine.model import ChildRow, ChildStatus, GroupFinished
from flightdeck.engine.model.units import Membership, attempts


class Units:
    """Which groups are still open, and the rows of their children that have ended."""

    def __init__(self, members: Iterable[tuple[str, str | None]]) -> None:
        """`members`: (child id, group) for every task, in batch order (a resumed batch's
        carried ones included: `carry` gives their rows)."""
        self._order: dict[str, list[str]] = {}
        for child_id, group in members:
            if group is not None:
                self._order.setdefault(group, []).append(child_id)
        # Who is in which unit: the rule the report and an attached view apply too. The members
        # are placed now, so that a delegate made while its parent runs finds its unit.
        self._placed = Membership({i for ids in self._order.values() for i in ids})
        for group, ids in self._order.items():
            for child_id in ids:
                self._placed.place(child_id, None, group)
        self._ended: dict[str, dict[str, ChildRow]] = {g: {} for g in self._order}
        # Each group's delegates, in the order they were made: their final row, None until then.
        self._delegates: dict[str, dict[str, ChildRow | None]] = {g: {} for g in self._order}
        self._running: dict[str, int] = dict.fromkeys(self._order, 0)  # its delegates not ended
        self._reported: set[str] = set()

    def joined(self, child_id: str, parent: str, group: str) -> None:
        """A delegate of one of the group's children: the unit ends once it has too."""
        unit = self._placed.place(child_id, parent, group)
        if unit is not None and child_id not in self._delegates[unit]:
            self._delegates[unit][child_id] = None
            self._running[unit] += 1

    def carry(self, row: ChildRow) -> None:
        """A row an earlier owner of a resumed batch ended: its unit counts it, ended."""
        self._note(row)

    def ended(self, row: ChildRow) -> GroupFinished | None:
        """Note a final row (handed to the store after every row noted before it); the unit's
        result if it was its group's last child."""
        group = self._note(row)
        if group is None or group in self._reported:
            return None
        unit = self._result(group)
        if unit is not None:
            self._reported.add(group)  # once, however many rows come back later
        return unit

    def carried_ends(self, told: Mapping[str, int]) -> list[GroupFinished]:
        """The units the carried rows end that no earlier owner announced (`told`: each group
        announced, with its members' attempts then; model/units.py), to announce once now.

        Only a unit with a child a lost owner left `unknown` (a resume's --no-rerun, a delegate
        never run again) can be one: every other unit ended with its last row handed to the
        store by an owner, whose "unit" event went first; an owner from before those events
        were kept recorded none, and had announced each unit as its last row was committed."""
        out = []
        for group in self._order:
            unit = self._result(group)
            if unit is None or group in self._reported:
                continue
            self._reported.add(group)
            lost = any(r.status is ChildStatus.UNKNOWN for r in (*unit.members, *unit.delegates))
            if lost and told.get(group) != attempts(unit.members):
                out.append(unit)
        return out

    def _result(self, group: str) -> GroupFinished | None:
        """The unit's result if every child of it has ended, else None."""
        ended = self._ended[group]
        if len(ended) < len(self._order[group]) or self._running[group]:
            return None  # a member, or a delegate (its parent stopped first), has not ended
        made = [d for d in self._delegates[group].values() if d is not None]
        return GroupFinished.of(group, [ended[i] for i in self._order[group]] + made)

    def _note(self, row: ChildRow) -> str | None:
        """Keep an ended row in its unit; the unit's group, None if it is in none (a wave that
        shares a group, or its delegate)."""
        group = self._placed.place(row.id, row.parent, row.group)
        if group is None:
            return None
        if row.parent is None:
            self._ended[group][row.id] = row
        else:
            delegates = self._delegates[group]
            if row.id in delegates and delegates[row.id] is None:
                self._running[group] -= 1
            delegates[row.id] = row
        return group

    def reopen(self, child_id: str) -> None:
        """A member runs again (a retry): its group is open until it ends again, and is then
        reported again, with its new row (and the delegates of every attempt: all were paid)."""
        group = self._placed.unit_of(child_id)
        if group is not None and self._ended[group].pop(child_id, None) is not None:
            self._reported.discard(group)  # a member that had ended (a delegate is not one)
