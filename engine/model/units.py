"""Who belongs to which completion unit: the one rule the engine's live units, the report and an
attached view all apply, so that a unit's members, delegates, status and spend agree everywhere.

A unit's members are the batch's own tasks that have its group; a member's delegates (and
theirs) join it. A schedule's wave that shares the group is in no unit, nor is what it delegates:
a scheduled batch never ends by itself, and its unit would never be complete. Within a unit, the
members are the rows with no parent, the rest its delegates (`GroupFinished.of`).

A unit announced is recorded as a "unit" event naming its group and its members' attempts then,
so that an owner that resumes the batch announces only the units no owner announced before.
"""

from __future__ import annotations

import json
from collections.abc import Container, Iterable, Sequence

from flightdeck.engine.model import ChildRow, GroupFinished

UNIT_EVENT = "unit"  # the events table's kind for a unit announced


def is_wave(row: ChildRow, own: Container[str] | None) -> bool:
    """A schedule's wave: neither a delegate nor one of the batch's own tasks (`own`; None: not
    known, so no child is taken for a wave). A retry leaves it out: it is no task to run again."""
    return row.parent is None and own is not None and row.id not in own


class Membership:
    """The unit of each child placed so far (parents before their delegates)."""

    def __init__(self, own: Container[str] | None) -> None:
        # The batch's own tasks' ids; None: not known (a snapshot made by hand), so every task
        # (a child with no parent) is taken for one: no wave is known.
        self._own = own
        self._unit: dict[str, str] = {}

    def place(self, child_id: str, parent: str | None, group: str | None) -> str | None:
        """The unit (its group) `child_id` is in, None if none: one of the batch's own tasks
        is a member of its group's; a delegate is in its parent's (placed before it)."""
        unit = self._unit.get(child_id)
        if unit is None:
            if parent is None:
                own = self._own is None or child_id in self._own
                unit = group if own else None
            else:
                unit = self._unit.get(parent)
            if unit is not None:
                self._unit[child_id] = unit
        return unit

    def unit_of(self, child_id: str) -> str | None:
        """The unit a child placed before is in (None: none, or not placed yet)."""
        return self._unit.get(child_id)


def unit_rows(rows: Iterable[ChildRow], own: Container[str]) -> dict[str, list[ChildRow]]:
    """Each unit's rows in batch order (its members, and the delegates among them: see
    GroupFinished.of), the units in the order of their first member."""
    placed = Membership(own)
    units: dict[str, list[ChildRow]] = {}
    for row in sorted(rows, key=lambda r: r.seq):  # a delegate comes after its parent
        unit = placed.place(row.id, row.parent, row.group)
        if unit is not None:
            units.setdefault(unit, []).append(row)
    return units


def attempts(members: Iterable[ChildRow]) -> int:
    """Which ending of a unit this is: its members' attempts (a retried member's unit ends
    again, and is announced again)."""
    return sum(r.attempt for r in members if r.parent is None)


def told_json(unit: GroupFinished) -> str:
    """The detail of a unit's "unit" event."""
    return json.dumps(
        {"group": unit.group, "status": unit.status.value, "attempts": attempts(unit.members)}
    )


def units_told(events: Sequence[tuple[float, str | None, str, str]]) -> dict[str, int]:
    """Each group announced so far, with its members' attempts when it was last announced
    (`events`: the batch's (ts, child, kind, detail), in order)."""
    told: dict[str, int] = {}
    for _ts, _child, kind, detail in events:
        if kind == UNIT_EVENT:
            found = json.loads(detail)
            told[str(found["group"])] = int(found["attempts"])
    return told
