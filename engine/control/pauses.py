"""The operator's pause and continue, of children and of the batch's admission.

Run on the coordinator thread, on the batch's queues, slots and pool (slots.py). A model child
paused at a turn boundary gives back its slot and its thread (`parked`: its run returned, its
messages kept); a process child is suspended on its thread (`suspended`: alive, no slot), and
the pool may start one more thread while it is, so paused processes never leave the others
without a thread. A continued child waits in `continuing` for a slot, ahead of new work.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from flightdeck.engine.child.state import Child
from flightdeck.engine.control.recorder import Recorder
from flightdeck.engine.control.slots import Ends, Slots
from flightdeck.engine.model import OPERATOR_HOLD, ChildStatus


class Pauses:
    """What the operator has paused, and the continues waiting for a slot."""

    def __init__(self, slots: Slots, ends: Ends, recorder: Recorder) -> None:
        self._slots = slots
        self._ends = ends
        self._recorder = recorder
        self.parked: dict[str, Child] = {}  # paused: no thread, no slot, off the queue
        self.suspended: dict[str, Child] = {}  # paused processes: their thread, no slot
        self.continuing: list[Child] = []  # continued, to take a slot first come first
        self.admission = False  # the operator paused the batch's admission

    # --- the operator's commands ---------------------------------------------------------------

    def pause(self, ids: Iterable[str]) -> None:
        """Pause these children: queued ones never start until continued, running ones hold
        at their next turn boundary."""
        slots = self._slots
        for child_id in ids:
            child = slots.by_id.get(child_id)
            if child is None or child.status.terminal:
                continue
            if child in self.continuing:  # continued, and paused again before it got a slot
                self.continuing.remove(child)
                child.show_waiting(False)
                if child_id not in self.suspended:
                    self.parked[child_id] = child  # still paused: it waits to be continued
            elif child.pause_wanted:
                continue  # paused already (or pausing)
            else:
                child.request_pause()
            child.transcript.write("operator", "pause requested")
            self._recorder.record_event(child_id, "pause", "paused by operator")
            self._recorder.record(child.row())

    def continue_(self, ids: Iterable[str]) -> None:
        """Continue these paused children (a pause not yet taken is dropped)."""
        slots = self._slots
        for child_id in ids:
            child = slots.by_id.get(child_id)
            if child is None or child.status.terminal or child in self.continuing:
                continue
            if child_id in self.parked:
                del self.parked[child_id]
                if child.started_ts is None:  # never started: queued again, at the front
                    child.cancel_pause()
                    slots.queues.requeue([child])
                else:
                    self.continuing.append(child)
                    child.show_waiting(True)  # until admit() gives it a slot
            elif child_id in self.suspended:
                self.continuing.append(child)
                child.show_waiting(True)
            elif child.pause_wanted:
                child.cancel_pause()  # not taken yet, or queued and not handed out since
            else:
                continue  # not paused: nothing to continue
            child.transcript.write("operator", "continue requested")
            self._recorder.record_event(child_id, "continue", "continued by operator")
            self._recorder.record(child.row())

    def hold_admission(self, on: bool) -> bool:
        """Pause (or continue) the batch's admission; False if it already was."""
        if on == self.admission:
            return False
        self.admission = on
        kind = "pause_admission" if on else "continue_admission"
        self._recorder.record_event(None, kind, "by operator")
        return True

    # --- what the coordinator hears and does ---------------------------------------------------

    def paused(self, child: Child) -> None:
        """The child took its pause (at a turn boundary, or its process suspended)."""
        slots = self._slots
        child_id = child.task.id
        if child_id not in slots.alive:
            return  # the watchdog gave up on it meanwhile
        if child.runner.keeps_thread:
            if child.pause_wanted:  # else continued before this was heard: its slot is kept
                slots.free_slot(child)
                self.suspended[child_id] = child
                slots.pool.lend(1)
        else:
            self._ends.release(child)
            if child.stop_status is not None:
                # Stopped while it took its pause: nothing will run it again, so it ends now.
                reason = (child.stop_reason or "stopped") + " while paused"
                if child.finalize(child.stop_status, reason):
                    self._ends.finish(child)
                return
            if child.pause_wanted:
                self.parked[child_id] = child
            else:  # continued while it paused: it takes a slot again at once
                self.continuing.append(child)
        self._recorder.record(child.row())

    def park(self, child: Child) -> bool:
        """A child handed out of the queue that the operator paused meanwhile: off the queue,
        no slot, until continued. False if it may start."""
        if child.status is not ChildStatus.PAUSED and not child.pause_wanted:
            return False
        self._slots.queues.ended(child)  # handed out, held back: it takes no slot
        child.request_pause()  # a gated child asked to pause is paused now it is queued
        self.parked[child.task.id] = child
        return True

    def admit(self, launch: Callable[[Child], object]) -> None:
        """Continued children take a slot again, first come first, ahead of new work (and
        while admission is paused: they are not new); `launch` runs a parked one again."""
        slots = self._slots
        while self.continuing:
            child = self.continuing[0]
            if child.status.terminal:
                self.continuing.pop(0)
                continue
            if slots.full() or not slots.queues.take(child):
                return
            self.continuing.pop(0)
            if self.suspended.pop(child.task.id, None) is not None:
                slots.take_slot(child)
                slots.pool.lend(-1)
                child.cancel_pause()  # its thread sends SIGCONT
            else:
                child.cancel_pause()
                launch(child)

    def ended(self, child: Child) -> None:
        """A child is final: nothing of it stays paused."""
        child_id = child.task.id
        self.parked.pop(child_id, None)
        if self.suspended.pop(child_id, None) is not None:
            self._slots.pool.lend(-1)
        if child in self.continuing:
            self.continuing.remove(child)

    def unstarted(self) -> Iterator[Child]:
        """Parked children that never started (a budget ends them as it ends queued ones)."""
        for child in list(self.parked.values()):
            if child.started_ts is None:
                yield child

    def holds(self) -> list[str]:
        """The operator's hold on admission, as `Snapshot.held` says it."""
        return [OPERATOR_HOLD] if self.admission else []
