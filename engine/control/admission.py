"""Admission: which queued children start now, handed to the pool; the run and cost caps.

Run on the coordinator thread only (as pauses.py is), so a task leaves the queue before it runs
and never runs twice, without locks. Holds (the operator's, the soft budget's, the store's) stop
new starts; what already runs goes on.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable

from flightdeck.engine.child.state import Child
from flightdeck.engine.control.arrivals import Arrivals
from flightdeck.engine.control.gate import CacheGate
from flightdeck.engine.control.pauses import Pauses
from flightdeck.engine.control.questions import Questions
from flightdeck.engine.control.recorder import ROW_WAIT_S, Recorder
from flightdeck.engine.control.slots import Ends, Slots
from flightdeck.engine.control.workers import ThreadRefused
from flightdeck.engine.inputs.settings import Budget
from flightdeck.engine.model import ChildStarted, ChildStatus, EngineEvent
from flightdeck.engine.money import fmt_usd
from flightdeck.engine.records.faults import StoreTrouble
from flightdeck.engine.records.meter import Meter

log = logging.getLogger(__name__)


class Admission:
    """The prompt-cache gate, the count of children started, and the admitting step."""

    def __init__(
        self,
        slots: Slots,
        ends: Ends,
        *,
        pauses: Pauses,
        arrivals: Arrivals,
        questions: Questions,
        budget: Budget,
        meter: Meter,
        clock: Callable[[], float],
        recorder: Recorder,
        publish: Callable[[EngineEvent], None],
        started: int,  # children an earlier owner ran (they count against max_runs)
    ) -> None:
        self._slots = slots
        self._ends = ends
        self._pauses = pauses
        self._arrivals = arrivals
        self._questions = questions
        self._budget = budget
        self._meter = meter
        self._clock = clock
        self._recorder = recorder
        self._publish = publish
        self.gate = CacheGate()
        self.started = started
        self.store_paused = False  # no child starts while the store cannot commit

    def admit(self, *, held: bool, failed: bool, behind: bool) -> None:
        """FIFO among tasks whose route is under its cap; capped routes wait in place. `held`:
        the operator or the soft budget holds admission; `failed`: the batch is failing;
        `behind`: the store has many final rows still to commit (nothing new starts until it
        catches up)."""
        slots = self._slots
        self._arrivals.resume_parents()  # not new work: a parent finishing what it began
        self._questions.admit()  # nor a child the operator answered
        self._pauses.admit(functools.partial(self.launch, new=False))  # nor a continued child
        budget_reason = self.budget_exhausted()
        if budget_reason is not None:
            self._cancel_queued(budget_reason)
            return
        slots.queues.requeue(self.gate.expired(self._clock()))
        if slots.full() or self.store_paused or failed or behind:
            return
        if not held:
            candidates = slots.queues.ready()
        else:
            # The operator's or the soft budget's hold: nothing new starts, and what runs goes
            # on, so the delegates a running parent waits on do start (they are its work).
            candidates = slots.queues.heads(lambda c: c.task.parent in slots.waiting)
        now = self._clock()
        launched = []
        for child in candidates:
            # Before the gate: a paused child parked in a gate was lost when the gate opened.
            if self._pauses.park(child):
                continue
            if self.gate.holds(child, now):
                slots.queues.ended(child)  # handed out, held back: it takes no slot
                continue
            if self.launch(child):
                launched.append(child)
            if slots.full() or self.budget_exhausted() is not None:
                break
        # In the store at once, not at the next progress tick: an owner that dies now leaves
        # them `running` there, so `resume` knows they were lost (unknown), not never run.
        # After the loop, so the submits follow each other as closely as before.
        for child in launched:
            self._recorder.record_running(child.task.id, functools.partial(child.row, ROW_WAIT_S))

    def launch_adopted(self, ids: frozenset[str]) -> None:
        """The children whose process a dead owner started (`resume` adopted them), watched at
        once: before any request is applied, and whatever holds or budgets say, which concern
        new starts. Left queued, a pending stop ended them "before start", or a hold kept them
        waiting, and their processes ran on with nobody watching."""
        if not ids:
            return
        for child in self._slots.queues.pull(lambda c: c.task.id in ids):
            if self.launch(child):
                self._recorder.record_running(
                    child.task.id, functools.partial(child.row, ROW_WAIT_S)
                )

    def launch(self, child: Child, *, new: bool = True) -> bool:
        """Hand the child to the pool (`new`: not a paused child continued); False if it could
        not be (the process is exiting)."""
        slots = self._slots
        try:
            slots.pool.submit(child)
        except ThreadRefused as exc:
            # The child waits in the pool for a thread already started: no more children than
            # there are threads run at once.
            slots.pool_size = slots.busy()
            log.warning(
                "cannot start another worker thread (%s): at most %d children run at once",
                exc,
                slots.pool_size,
            )
        except RuntimeError:
            # Shut down: the interpreter is exiting without Engine.close().
            slots.queues.ended(child)
            if child.finalize(ChildStatus.STOPPED, "not started: the process is exiting"):
                self._ends.finish(child)
            return False
        # It holds a slot from here, though its thread may not have taken it yet.
        child.mark_running()
        slots.alive[child.task.id] = child
        if new and child.node is not None:  # run on a cluster: where (the row shows it too)
            self._recorder.record_event(child.task.id, "node", child.node)
        if new:
            self.started += 1
            self._publish(ChildStarted(child.task.id, self._clock()))
        return True

    def store_trouble(self, trouble: StoreTrouble | None) -> None:
        """No child starts while the store cannot commit (`trouble`); they start again once it
        commits."""
        if (trouble is not None) == self.store_paused:
            return
        self.store_paused = trouble is not None
        if trouble is not None:
            log.error(
                "flightdeck engine: no new child starts while the store cannot commit (%s)",
                trouble.reason,
            )
        else:
            log.warning("flightdeck engine: the store commits again; children start again")

    def budget_exhausted(self) -> str | None:
        """Why no more children may start (max_runs or max_cost_usd reached); None: they may."""
        runs = self._budget.max_runs
        if runs is not None and self.started >= runs:
            return f"not started: max_runs ({runs}) reached"
        cap = self._budget.max_cost_usd
        if cap is not None and self._meter.totals().cost_usd >= cap:
            return f"not started: budget of {fmt_usd(cap)} reached"
        return None

    def room(self, runs: int) -> str | None:
        """Why `runs` more children (retries) may not start: the budget holds them as it holds
        any start. None: they may."""
        cap = self._budget.max_runs
        if cap is not None and self.started + runs > cap:
            left = max(0, cap - self.started)
            return f"max_runs ({cap}) leaves room for {left} more run{'' if left == 1 else 's'}"
        spent = self.budget_exhausted()
        return None if spent is None else spent.removeprefix("not started: ")

    def _cancel_queued(self, reason: str) -> None:
        slots = self._slots
        self._arrivals.end_schedules(reason)  # max_runs and max_cost_usd count across waves
        drained = (*slots.queues.drain(), *self.gate.drain(), *self._pauses.unstarted())
        for child in drained:
            if child.finalize(ChildStatus.STOPPED, reason):
                self._ends.finish(child)
