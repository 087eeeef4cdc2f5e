"""Final rows: each handed to the store at once, counted done (and announced, with its
completion unit) once committed; and the batch's status once all are.

So a finish that a UI shows (a headless line, say) is already on disk: a process killed right
after loses none of them, and the batch ends only when all are written. A unit is announced the
same way, once its "unit" event is committed: a resumed batch announces the units its carried
rows end that have none, and no other. Coordinator thread only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Mapping

from flightdeck.engine.child.state import Child
from flightdeck.engine.control.inbox import Message, Recorded, UnitRecorded, Unrecorded
from flightdeck.engine.control.units import Units
from flightdeck.engine.model import (
    BatchStatus,
    ChildFinished,
    ChildRow,
    ChildStatus,
    EngineEvent,
    GroupFinished,
)


class Finals:
    """How many final rows were handed to the store, committed, or given up on."""

    def __init__(
        self,
        children: list[Child],  # the coordinator's own list: it grows with delegates and waves
        *,
        carried: Callable[[], Collection[ChildRow]],
        own: Collection[str],  # the batch's own tasks: the carried rows that are members
        record_final: Callable[[ChildRow, Callable[[bool], None], GroupFinished | None], None],
        record_unit: Callable[[GroupFinished, Callable[[bool], None] | None], None],
        report: Callable[[Message], None],
        publish: Callable[[EngineEvent], None],
        told: Mapping[str, int] | None = None,  # the units earlier owners announced
    ) -> None:
        self._children = children
        # A resumed batch: the final rows of children an earlier owner finished (they count
        # in the batch's status and its progress; they run again only if retried).
        self._carried = carried
        self._record_final = record_final
        self._record_unit = record_unit
        self._told = told or {}
        self._report = report
        self._publish = publish
        kept = list(carried())  # a resumed batch's units count its earlier owners' rows
        # The members: the batch's own tasks, whoever ran them (not a wave, nor a delegate).
        tasks = [(r.seq, r.id, r.group) for r in kept if r.id in own]
        tasks += [(c.task.seq, c.task.id, c.task.group) for c in children if c.task.id in own]
        self._units = Units((i, group) for _, i, group in sorted(tasks))
        for row in sorted(kept, key=lambda r: r.seq):  # a delegate after its parent
            self._units.carry(row)
        self._joined = 0  # children of the list above that the units have seen
        self.done = 0
        self._committed: set[str] = set()  # children whose final row is in the store
        self._handed = 0  # final rows handed to the store (committed or not yet)
        # Final rows the store gave up on: those children ended, but were never announced.
        self.unrecorded = 0
        self.unrecorded_unstarted = 0  # of those, children that ended without starting
        self._ending: dict[str, GroupFinished] = {}  # units announced with these final rows
        self.units_held = 0  # carried units whose event is not committed yet: not announced

    def hand(self, row: ChildRow) -> None:
        """A final row to the store; the coordinator hears back whether it was committed. If it
        ends its unit, the unit's event is committed with it (one transaction)."""
        self._handed += 1
        self._join_delegates()
        # The rows handed before it are committed before it (one writer, in order).
        unit = self._units.ended(row)
        if unit is not None:
            self._ending[row.id] = unit
        self._record_final(
            row,
            lambda committed: self._report(Recorded(row) if committed else Unrecorded(row)),
            unit,
        )

    def recorded(self, row: ChildRow) -> None:
        """Committed: the child counts as done, announced, and its unit if it ended it."""
        self.done += 1
        self._committed.add(row.id)
        carried = len(self._carried())  # so a resumed batch counts from where it was
        self._publish(ChildFinished(row, carried + self.done, carried + len(self._children)))
        unit = self._ending.pop(row.id, None)
        if unit is not None:
            self._publish(unit)

    def carried_units(self) -> None:
        """A resumed batch, as it starts: the units its carried rows end that no earlier owner
        announced (a child the dead owner ran was left `unknown`: Units.carried_ends),
        announced once their events are committed."""
        for unit in self._units.carried_ends(self._told):
            self.units_held += 1
            self._record_unit(unit, functools.partial(self._unit_told, unit))

    def _unit_told(self, unit: GroupFinished, committed: bool) -> None:
        self._report(UnitRecorded(unit, committed))  # on the store's writer thread

    def unit_recorded(self, unit: GroupFinished, committed: bool) -> None:
        """A carried unit's event committed: announced; given up on: not (as a final row)."""
        self.units_held -= 1
        if committed:
            self._publish(unit)

    def _join_delegates(self) -> None:
        """The delegates made since the last look join their parent's unit (the list only
        grows, so each child is looked at once)."""
        for child in self._children[self._joined :]:
            task = child.task
            if task.parent is not None and task.group is not None:
                self._units.joined(task.id, task.parent, task.group)
        self._joined = len(self._children)

    def lost(self, row: ChildRow) -> None:
        """Given up on: ended, and never announced (nor the unit it ended); the batch fails,
        counting it."""
        self._ending.pop(row.id, None)
        self.done += 1
        self.unrecorded += 1
        self.unrecorded_unstarted += row.started_ts is None

    @property
    def waiting(self) -> int:
        """Final rows handed to the store and not yet heard back from (committed or given up)."""
        return self._handed - self.done

    def committed(self, child_id: str) -> bool:
        """Whether the child's final row is in the store."""
        return child_id in self._committed

    def reopen(self, child_id: str) -> None:
        """A child that ended runs again (a retry): not done any more, nor is its unit."""
        self._units.reopen(child_id)
        if child_id in self._committed:
            self._committed.discard(child_id)
            self.done -= 1
            self._handed -= 1

    @property
    def held(self) -> int:
        """Final rows handed to the store and not yet committed (nor given up on)."""
        return self._handed - self.done

    def status(self, stopped_by_stop_all: int) -> BatchStatus:
        """Stopped by the operator (all at once or one by one) or a budget, unless a child
        failed, timed out or stalled first: a stop is nobody's failure. The delegates of an
        earlier attempt of their parent are history: its last attempt's decide."""
        if stopped_by_stop_all:
            return BatchStatus.STOPPED
        statuses = {c.status for c in self._children if not c.kept.superseded}
        statuses |= {r.status for r in self._carried() if not r.superseded}
        if statuses <= {ChildStatus.COMPLETED}:
            return BatchStatus.COMPLETED
        if statuses <= {ChildStatus.COMPLETED, ChildStatus.STOPPED}:
            return BatchStatus.STOPPED
        return BatchStatus.FAILED
