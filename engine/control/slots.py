"""The batch's children and the slots they hold: the state the coordinator and its parts share.

Read and changed on the coordinator thread only. The parts (admission, arrivals, pauses,
controls) are handed this state and the narrow `Ends` below, never the coordinator itself, so
none imports it back. The count of busy slots is the children actually alive, less those alive
without one (parents waiting on delegates, paused processes), not a second bookkeeping list.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from flightdeck.engine.child.state import Child
from flightdeck.engine.control.queues import RouteQueues
from flightdeck.engine.executors.base import Executor
from flightdeck.engine.inputs.settings import Route
from flightdeck.engine.model import ChildRow, ChildStatus
from flightdeck.engine.records.attempts import delegates_of, earlier_delegates


@dataclass(frozen=True, slots=True)
class Carried:
    """What an earlier owner left a resumed batch (nothing, for a new one)."""

    rows: tuple[ChildRow, ...] = ()  # its final rows
    first_receipt_id: int = 1
    admission_paused: bool = False  # the operator's pause, kept across a resume
    soft_held: str | None = None  # the soft budget's hold, kept too: the operator was asked
    adopted: frozenset[str] = frozenset()  # children whose process the dead owner started
    runs: int = 0  # the runs its owners made: each attempt of each child (max_runs counts them)
    # The batch's own tasks (its spec): of the rows above, only theirs are members of units (a
    # schedule's waves, as the owner that ran them counted them, are not).
    tasks: frozenset[str] = frozenset()
    # Each unit an earlier owner announced, with its members' attempts then (model/units.py).
    units_told: Mapping[str, int] = field(default_factory=dict)


class Slots:
    """Every child by id, the alive ones, the routes' queues, the pool they run on, and the
    final rows a resumed batch carried."""

    def __init__(
        self,
        children: list[Child],
        routes: Mapping[str, Route],
        *,
        pool: Executor,
        pool_size: int,
        clock: Callable[[], float],
        carried: tuple[ChildRow, ...] = (),
    ) -> None:
        self.children = children
        self.by_id = {c.task.id: c for c in children}
        # Final rows an earlier owner left (a resumed batch), until a retry runs one again:
        # replaced whole, never changed in place (a sender reads it from its own thread).
        self.carried = {r.id: r for r in carried}
        # Each parent's delegates, carried or made here: history once it runs again.
        self.kids = delegates_of((r.id, r.parent) for r in carried)
        self.queues = RouteQueues(routes, children)  # the routes' queues and children alive
        self.alive: dict[str, Child] = {}  # started and not ended (a suspended process too)
        # Alive children without a slot: parents waiting on delegates, paused processes.
        self.waiting: dict[str, Child] = {}
        self.pool = pool  # where children run (threads here, or a cluster)
        self.pool_size = pool_size
        self.stop_requested: dict[str, float] = {}  # child id -> when its stop was asked
        self._clock = clock

    def busy(self) -> int:
        """Slots in use: alive children, less the parents waiting on their delegates."""
        return len(self.alive) - len(self.waiting)

    def full(self) -> bool:
        """Every slot is in use: nothing more starts now."""
        return self.busy() >= self.pool_size

    def free_slot(self, child: Child) -> None:
        """An alive child gives up its slot, as a parent waiting on delegates does."""
        self.waiting[child.task.id] = child
        self.queues.ended(child)

    def take_slot(self, child: Child) -> None:
        """A child that gave up its slot has it again (its route's was taken by the caller)."""
        del self.waiting[child.task.id]

    def slot_again(self, child: Child) -> bool:
        """A child waiting without a slot takes one again, if one is free (on its route too);
        True if it has one now (or never gave it up)."""
        if child.task.id in self.waiting:
            if self.full() or not self.queues.take(child):
                return False
            self.take_slot(child)
        return True

    def add(self, made: list[Child]) -> list[Child]:
        """Children made as the batch runs (delegates, waves) join it."""
        self.children.extend(made)
        self.by_id.update((c.task.id, c) for c in made)
        for child in made:
            if child.task.parent is not None:
                self.kids.setdefault(child.task.parent, []).append(child.task.id)
        return made

    def interrupt(self, child: Child, status: ChildStatus, reason: str) -> None:
        """Ask a running child to end with `status` (the watchdog times how long it takes)."""
        self.stop_requested.setdefault(child.task.id, self._clock())
        child.request_stop(status, reason)

    def supersede(self, child_id: str) -> list[str]:
        """`child_id` runs again (a new attempt): mark the delegates its earlier attempts made,
        and theirs, as history; returns the ids marked now (each is marked once)."""
        out, rows = [], {}
        for kid in earlier_delegates(child_id, self.kids):
            child, row = self.by_id.get(kid), self.carried.get(kid)
            if child is not None and not child.kept.superseded:
                child.kept.supersede()
                out.append(kid)
            elif child is None and row is not None and not row.superseded:
                rows[kid] = dataclasses.replace(row, superseded=True)
                out.append(kid)
        if rows:  # replaced whole: a sender reads it from its own thread
            self.carried = {**self.carried, **rows}
        return out

    def rows(self) -> list[ChildRow]:
        """Every child's row as it is now."""
        return [c.row() for c in self.children]

    def all_rows(self) -> dict[str, ChildRow]:
        """The batch's rows by id, a resumed batch's carried ones too (any thread: each value
        is replaced whole, never changed in place)."""
        return {**self.carried, **{c.task.id: c.row() for c in list(self.children)}}


class Ends(Protocol):
    """What the coordinator does when a child gives back its slot or ends: its parts ask for it
    through this, knowing nothing else of the coordinator."""

    def release(self, child: Child) -> None:
        """Free the child's slot (in the pool and on its route); a gate it led opens."""

    def finish(self, child: Child) -> None:
        """Record a final child; it counts as done once committed."""
