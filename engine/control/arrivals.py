"""Children that arrive while the batch runs: a parent's delegates, and its schedules' waves.

Run on the coordinator thread (as admission.py is), between two steps, so no delegate or wave
is ever seen half queued. A parent waiting on its delegates gives up its slot and takes one
again, ahead of new work, once they have all ended.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable

from flightdeck.engine.child.delegate import DelegateCall
from flightdeck.engine.child.state import Child
from flightdeck.engine.control.delegation import Delegations
from flightdeck.engine.control.schedules import ScheduleClock
from flightdeck.engine.control.slots import Slots
from flightdeck.engine.inputs.tasks import Schedule, Task
from flightdeck.engine.model import ChildRow
from flightdeck.engine.records.reader import SCHEDULES_END

log = logging.getLogger(__name__)


class Arrivals:
    """The delegate calls in flight, the schedule clock, and the seq the next child gets."""

    def __init__(
        self,
        slots: Slots,
        *,
        spawn: Callable[[Task], Child] | None,
        schedules: tuple[Schedule, ...],
        taken_ids: frozenset[str],  # children kept from before a resume
        clock: Callable[[], float],
        exhausted: Callable[[], str | None],  # why no more children may start (a budget)
        record_event: Callable[[str | None, str, str], None],
    ) -> None:
        self._slots = slots
        self._spawn = spawn
        self._taken = taken_ids
        self._clock = clock
        self._exhausted = exhausted
        self._record_event = record_event
        self._delegations = Delegations(self._id_taken)
        # The call each parent waits on now: an earlier one may still end (its attempt was
        # retried, or ran on a worker that was lost and runs again as the same child).
        self._waits: dict[str, DelegateCall] = {}
        # After every child's, the rows kept from before a resume included: one attempt's
        # delegates stay together in batch order.
        seqs = [c.task.seq for c in slots.children] + [r.seq for r in slots.carried.values()]
        self._next_seq = max(seqs, default=0) + 1
        # Off once stopped (stop all, a budget): the batch then ends with its last wave.
        self._schedules = ScheduleClock(schedules, clock(), self._id_taken) if schedules else None

    @property
    def scheduled(self) -> bool:
        """Whether more waves may come (the batch cannot end before they stop)."""
        return self._schedules is not None

    def end_schedules(self, why: str | None = None) -> None:
        """No more waves: the batch ends once the children it has are done. `why` (a budget
        reached) is said, once: nothing else would tell the operator why the waves stopped."""
        if why is not None and self._schedules is not None:
            why = why.removeprefix("not started: ")
            log.warning("the schedules end, no more waves: %s", why)
            self._record_event(None, SCHEDULES_END, why)  # for attached views: they say it too
        self._schedules = None

    # --- delegates -----------------------------------------------------------------------------

    def delegate(self, parent: Child, call: DelegateCall) -> None:
        """Queue a `delegate` call's sub-tasks ahead of everything else, and let the parent
        wait without its slot, so its delegates (or other parents') can have it."""
        slots = self._slots
        if self._spawn is None or parent.task.id not in slots.alive or parent.stop_status:
            call.refuse("delegation is not possible now: the child is stopping")
            return
        tasks = self._delegations.tasks(parent, call, self._next_seq)
        self._next_seq += len(tasks)
        made = slots.add([self._spawn(t) for t in tasks])
        slots.queues.requeue(made)
        slots.free_slot(parent)
        self._waits[parent.task.id] = call

    def resume_parents(self) -> None:
        """Parents whose delegates have all ended take a slot again, first come first."""
        slots = self._slots
        ready = self._delegations.ready
        while ready:
            parent, call, rows = ready[0]
            # Only the call its parent waits on now takes a slot back. An earlier attempt's
            # (retried, or lost with its worker and run again) would take one for the attempt
            # now waiting on delegates of its own, and hold it while that waits.
            current = self._waits.get(parent.task.id) is call
            if current and not slots.slot_again(parent):
                return
            if current:
                del self._waits[parent.task.id]
            ready.pop(0)
            call.finish(rows)

    def ended(self, row: ChildRow) -> None:
        """A final row is committed (or given up on): its parent is not left waiting."""
        self._delegations.ended(row)

    def subtree(self, ids: Iterable[str]) -> list[str]:
        """These children and all their delegates (a parent's delegates stop with it)."""
        return self._delegations.subtree(ids)

    # --- waves ---------------------------------------------------------------------------------

    def tick(self) -> None:
        """Queue the wave of each schedule whose time has come."""
        if self._schedules is None or self._spawn is None:
            return
        exhausted = self._exhausted()
        if exhausted is not None:  # max_runs and max_cost_usd span the waves
            self.end_schedules(exhausted)
            return
        for wave in self._schedules.due(self._clock(), self._live):
            tasks = [dataclasses.replace(t, seq=self._next_seq + i) for i, t in enumerate(wave)]
            self._next_seq += len(tasks)
            self._slots.queues.add(self._slots.add([self._spawn(t) for t in tasks]))
        for s in self._schedules.over():  # said once each; the last one ends the waves
            why = f"schedule {s.id}'s cron {s.cron!r} names no later date"
            if not self._schedules:
                self.end_schedules(why)
                return
            log.warning("%s: its waves end, the other schedules go on", why)

    def _id_taken(self, child_id: str) -> bool:
        """Whether a child has this id (running here, or kept from before a resume)."""
        return child_id in self._slots.by_id or child_id in self._taken

    def _live(self, child_id: str) -> bool:
        child = self._slots.by_id.get(child_id)
        return child is not None and child.status.live
