"""The one deciding thread: its loop, the inbox's dispatch, slots, watchdog and progress.

Everything that decides whether work may start runs on the coordinator thread, so a task leaves
the queue before it runs and never runs twice, without locks. Workers only wait (streams, tools);
they report facts back through the inbox, and callers' commands arrive the same way. The parts
that decide are small classes it owns and calls on this thread: admission.py (who starts),
controls.py (the operator's commands), pauses.py, arrivals.py (delegates, waves), softbudget.py,
finals.py (final rows, the batch's status). parts.py builds them from a `Setup` and wires them:
they are handed the state they share (slots.py), where to record (recorder.py) and `Duties`
(what only this class does), never the coordinator.
"""

from __future__ import annotations

import dataclasses
import logging
import queue
import threading
import time
from decimal import Decimal

from flightdeck.engine.child.facts import (
    Asked,
    ChildDone,
    ChildLost,
    ChildPaused,
    Delegated,
    FirstChunk,
    HeadroomSeen,
    LoopFlagged,
    ReceiptSettled,
    ToolDenied,
)
from flightdeck.engine.child.state import Child
from flightdeck.engine.control.inbox import (
    Message,
    Order,
    Recorded,
    RecordProgress,
    Reviewed,
    Shutdown,
    UnitRecorded,
    Unrecorded,
)
from flightdeck.engine.control.liverows import PROGRESS_EVERY_S
from flightdeck.engine.control.lost import rerun_lost
from flightdeck.engine.control.parts import Setup, build_parts
from flightdeck.engine.control.watchdog import overdue
from flightdeck.engine.inputs.settings import Settings
from flightdeck.engine.model import (
    BatchStatus,
    EngineEvent,
    Limits,
    RouteHeadroom,
    SteerSettled,
    SteerState,
)
from flightdeck.engine.model.livelimits import limits_of
from flightdeck.engine.records.meter import spend_known

log = logging.getLogger(__name__)

TICK_S = 0.25  # the coordinator wakes at least this often while children are alive
WATCH_EVERY_S = 0.05  # timeouts and stalls are checked at most this often, not on every wake
WIND_DOWN_S = 10.0  # after this thread failed, how long the stopped children get to end
# Final rows the store may have to commit before no new child starts. Children that end
# faster than the store's thread commits them (instant ones, sharing the interpreter lock
# with 64 workers) left it 16,000 rows behind at 50,000 children: a second and more between
# the last child's end and the batch's, and every one of those rows held in memory.
STORE_BEHIND_ROWS = 500


class Coordinator:
    """Owns the queue and the pool; `Engine` is its public face."""

    def __init__(self, setup: Setup) -> None:
        self._engine = setup.settings.engine
        self._budget = setup.settings.budget
        self._clock = setup.clock
        self._recorder = setup.recorder
        self._publish = setup.publish
        self._on_finished = setup.on_finished
        self._between_facts = setup.between_facts
        self._throttles = setup.throttles
        self._rework = setup.rework
        self._adopted = setup.carried.adopted
        self._meter = setup.meter  # a lost worker's call in flight is billed to it (lost.py)
        self._inbox: queue.SimpleQueue[Message] = queue.SimpleQueue()
        # Why the batch is ending before its time: the store gave up, or this thread failed.
        self.failure: str | None = None
        # What attempts lost with their workers cost (`lost.py`; in the totals already: spent
        # is spent); None once one had no price.
        self.lost_cost: Decimal | None = Decimal(0)
        self._shutdown = False
        self._last_watch = 0.0
        self._thread = threading.Thread(target=self._run, name="flightdeck-coordinator")
        self.finished = threading.Event()
        self._reopen = False  # a retry came after the batch had ended: it runs again
        self._parts = parts = build_parts(setup, self)  # `self`: its duties (parts.py)
        self.slots, self.receipt_ids, self.questions = (
            parts.slots,
            parts.receipt_ids,
            parts.questions,
        )

    @property
    def stopped_by_stop_all(self) -> int:
        """Children a stop-all found still queued or running; any makes the batch `stopped`."""
        return self._parts.controls.stopped_by_stop_all

    @property
    def unrecorded(self) -> int:
        """Final rows the store gave up on: those children ended, but were never announced."""
        return self._parts.finals.unrecorded

    @property
    def unrecorded_unstarted(self) -> int:
        """Of `unrecorded`, the children that ended without starting (queued at the end)."""
        return self._parts.finals.unrecorded_unstarted

    # --- called from any thread ----------------------------------------------------------------

    def start(self) -> None:
        """Start the coordinator thread."""
        self._thread.start()

    def report(self, fact: Message) -> None:
        """Workers hand facts here (thread-safe)."""
        self._inbox.put(fact)

    def command(self, command: Order | RecordProgress | Shutdown) -> None:
        """Queue an operator's order (or the engine's own request) for the coordinator thread
        (thread-safe)."""
        self._inbox.put(command)

    @property
    def running(self) -> bool:
        """Whether the coordinator thread runs (started, and not shut down)."""
        return self._thread.is_alive()

    @property
    def on_thread(self) -> bool:
        """True when called on the coordinator thread (from an event subscriber)."""
        return threading.current_thread() is self._thread

    def shutdown(self) -> None:
        """End the coordinator thread and the pool; queued work is dropped, not waited for."""
        self.command(Shutdown())
        self._thread.join()
        # Workers still inside a stalled call are abandoned, not waited for.
        self.slots.pool.shutdown()

    def record_progress(self, timeout: float | None = None) -> bool:
        """Record every running child's current row now, not at the next progress tick; False
        if the coordinator did not get to it within `timeout` (or has ended)."""
        if self.on_thread:
            self._parts.live_rows.record(self.slots.alive)
            return True
        done = threading.Event()
        self.command(RecordProgress(done))
        deadline = None if timeout is None else self._clock() + timeout
        while not done.wait(TICK_S if deadline is None else min(TICK_S, deadline - self._clock())):
            if not self._thread.is_alive() or (deadline is not None and self._clock() >= deadline):
                return False
        return True

    def headroom(self) -> tuple[RouteHeadroom, ...]:
        """Per route: provider headroom last seen, a pause a 429 put on the whole route, the
        limits it is paced to, its 429s in the last minute and its children alive."""
        return self.slots.queues.headroom(self._throttles, self._clock)

    def limits(self) -> Limits:
        """The live limits (any thread: each value is replaced whole, never changed in place)."""
        routes = {name: state.route for name, state in self.slots.queues.routes.items()}
        settings = Settings(routes=routes, budget=self._budget)
        base = limits_of(settings, routes, self.slots.pool_size, spend_known)
        return dataclasses.replace(
            base, soft_cost_usd=self._parts.soft.cost, soft_held=self._parts.soft.held
        )

    @property
    def scheduled(self) -> bool:
        """Whether a schedule may still start waves (none stopped them, nor a budget)."""
        return self._parts.arrivals.scheduled

    @property
    def hold(self) -> str | None:
        """Why admission is held, every hold that is on in one sentence; None: it is not."""
        holds = [*self._parts.pauses.holds(), *self._parts.soft.holds()]
        return "; ".join(holds) or None

    # --- for its parts (parts.Duties), on the coordinator thread -----------------------------

    def release(self, child: Child) -> None:
        """Free the child's slot (in the pool and on its route); a gate it led opens."""
        slots = self.slots
        del slots.alive[child.task.id]
        self._parts.pauses.ended(child)
        if slots.waiting.pop(child.task.id, None) is None:  # a waiting parent had none
            slots.queues.ended(child)
        slots.queues.requeue(self._parts.admission.gate.ended(child))

    def finish(self, child: Child) -> None:
        """Record a final child at once; it counts as done, and is announced, once committed.

        So a finish that a UI shows (a headless line, say) is already on disk: a process
        killed right after loses none of them, and the batch ends only when all are written.
        Its slot is free already (`release`): admission never waits for the store.
        """
        self.slots.stop_requested.pop(child.task.id, None)
        self._parts.controls.loop_policies.ended(child.task.id)
        self._parts.pauses.ended(child)
        self.questions.ended(child)
        self._parts.told.changes(child)
        self._parts.finals.hand(child.row())
        self._parts.controls.finished(child.task.id)  # a refusal that waited for its row

    def reopen_ended(self) -> None:
        """A retry came (control/attempts.py): a batch that had ended runs again."""
        if not self.finished.is_set():
            return
        self._reopen = True
        self._parts.controls.stopped_by_stop_all = 0
        self.failure = None
        self.finished.clear()
        if self._rework is not None:
            self._rework.on_reopened()

    def announce_limits(self) -> None:
        """The live limits changed, or a hold began or ended: for attached views and resume."""
        self._recorder.record_limits(self.limits(), self.hold)

    # --- the coordinator thread ----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            finished: EngineEvent | None = None
            try:
                try:
                    self._loop()
                except Exception as exc:
                    self._failed(exc)
                finished = self._end()
            finally:
                self.finished.set()
            if finished is not None:
                # Announced once waiters are released: a subscriber that calls `wait()` on it
                # (from this thread) finds the batch finished rather than blocking it.
                self._publish(finished)
            # Keep answering commands until shutdown, so a late steer is settled as missed
            # (and a retry reopens the batch); but not past the end of the program: one that
            # never called close() would wait for ever.
            self._reopen = False
            while not self._shutdown and threading.main_thread().is_alive() and not self._reopen:
                try:
                    self._drain()
                except Exception:
                    log.exception("flightdeck engine: a command after the batch ended failed")
            if not self._reopen:
                return

    def _loop(self) -> None:
        self._parts.admission.launch_adopted(self._adopted)  # their processes run already
        self._parts.finals.carried_units()  # a resumed batch's units no owner announced
        self._handle_queued()  # sent before this thread started (a resumed batch's requests)
        self._watch_store()
        self._parts.soft.watch()
        self._admit()
        while not self._all_done():
            self._drain()
            self._watch_store()
            now = self._clock()
            if now - self._last_watch >= WATCH_EVERY_S:
                self._last_watch = now
                self._watchdog()
            self._parts.arrivals.tick()
            self._parts.soft.watch()
            self._admit()
            self._progress()
            self._between_facts()

    def _admit(self) -> None:
        behind = self._parts.finals.waiting > STORE_BEHIND_ROWS
        self._parts.admission.admit(
            held=self.hold is not None, failed=self.failure is not None, behind=behind
        )

    def _failed(self, exc: Exception) -> None:
        """This thread's one error path: say so, stop every child, let them end (for a bounded
        time), so the batch ends `failed` with the reason rather than stay `running`."""
        log.exception("flightdeck engine: the coordinator failed; stopping every child")
        self.failure = f"engine error: {type(exc).__name__}: {exc}"
        try:
            self._parts.controls.stop_everything(f"stopped: {self.failure}")
            deadline = time.monotonic() + WIND_DOWN_S
            while not self._all_done() and time.monotonic() < deadline:
                self._drain()
                self._watchdog()
        except Exception:
            log.exception("flightdeck engine: the coordinator failed again; ending the batch now")

    def _end(self) -> EngineEvent | None:
        status = (
            BatchStatus.FAILED
            if self.failure or self.unrecorded
            else self._parts.finals.status(self._parts.controls.stopped_by_stop_all)
        )
        if self._parts.soft.end():  # an ended batch holds nothing back
            try:
                self.announce_limits()
            except Exception:
                log.exception("flightdeck engine: the end of the soft budget's hold")
        try:
            return self._on_finished(status)
        except Exception:
            log.exception("flightdeck engine: the batch's end could not be recorded")
            return None

    def _watch_store(self) -> None:
        """No child starts while the store cannot commit; once it gives up, every child is
        stopped and the batch fails (its rows could not be kept)."""
        trouble = self._recorder.trouble()
        self._parts.admission.store_trouble(trouble)
        if trouble is not None and trouble.gave_up and self.failure is None:
            self.failure = f"the store cannot record ({trouble.reason})"
            log.error("flightdeck engine: %s: stopping every child; the batch fails", self.failure)
            self._parts.controls.stop_everything(f"stopped: {self.failure}")

    @property
    def held(self) -> int:
        """Final rows handed to the store and not yet committed (nor given up on)."""
        return self._parts.finals.held

    def _drain(self) -> None:
        """Wait for the next fact or command (at most TICK_S, and no longer than the next
        progress record is due), then handle all that queued."""
        try:
            item = self._inbox.get(timeout=min(TICK_S, PROGRESS_EVERY_S))
        except queue.Empty:
            return
        while True:
            self._handle(item)
            try:
                item = self._inbox.get_nowait()
            except queue.Empty:
                return

    def _handle_queued(self) -> None:
        """Handle what is queued now, without waiting for more."""
        while True:
            try:
                self._handle(self._inbox.get_nowait())
            except queue.Empty:
                return

    def _handle(self, message: Message) -> None:
        match message:
            case ChildDone(child_id):
                child = self.slots.by_id[child_id]
                if child_id in self.slots.alive:
                    self.release(child)
                    self.finish(child)
                else:
                    # The watchdog abandoned it and recorded its final row; its call has come
                    # back since, and may have been billed: the store must say what was spent.
                    # (Only while the engine is open: a call stuck at close() is not waited for.)
                    self._parts.told.changes(child)
                    self._recorder.record(child.row())
            case Recorded(row):
                self._parts.finals.recorded(row)
                self._parts.arrivals.ended(row)
            case Unrecorded(row):
                self._parts.finals.lost(row)
                self._parts.arrivals.ended(row)  # its parent is not left waiting
            case UnitRecorded(unit, committed):
                self._parts.finals.unit_recorded(unit, committed)
            case ReceiptSettled(receipt):
                if receipt.by == "policy" and receipt.state is SteerState.DELIVERED:
                    self._parts.controls.loop_policies.delivered(receipt.child_id, self._clock())
                self._recorder.record_receipt(receipt, None)
                self._publish(SteerSettled(receipt))
            case Delegated(child_id, call):
                self._parts.arrivals.delegate(self.slots.by_id[child_id], call)
            case Asked(child_id, call):
                self.questions.asked(self.slots.by_id[child_id], call)
            case ToolDenied(child_id, denial):
                self.questions.denied(self.slots.by_id[child_id], denial)
            case ChildPaused(child_id):
                self._parts.pauses.paused(self.slots.by_id[child_id])
            case FirstChunk(child_id):
                self.slots.queues.requeue(
                    self._parts.admission.gate.first_chunk(self.slots.by_id[child_id])
                )
            case HeadroomSeen(route, event):
                self.slots.queues.saw_headroom(route, event, self._clock())
            case ChildLost(child_id, why):
                child = self.slots.by_id[child_id]
                pauses, meter = self._parts.pauses, self._meter
                lost = rerun_lost(self.slots, self, pauses, self._recorder, meter, child, why)
                if lost is None or self.lost_cost is None:
                    self.lost_cost = None
                else:
                    self.lost_cost += lost
            case LoopFlagged(child_id, evidence, again):
                self._parts.controls.looped(child_id, evidence, again)
            case Order():
                self._parts.controls.apply(message)
            case Reviewed():
                self._parts.controls.reviewed(message)
            case RecordProgress(done):
                self._parts.live_rows.record(self.slots.alive)
                done.set()
            case Shutdown():
                self._shutdown = True

    def _all_done(self) -> bool:
        finals = self._parts.finals
        # A unit is announced before the batch's end is.
        return (
            finals.done >= len(self.slots.children)
            and not finals.units_held
            and not self._parts.arrivals.scheduled
        )

    # --- watchdog and progress -----------------------------------------------------------------

    def _watchdog(self) -> None:
        """Timeouts, stalls, and children that ignore a stop past the grace period."""
        self._parts.controls.loop_steps()
        now = self._clock()
        slots = self.slots
        for child in list(slots.alive.values()):
            found = overdue(child, now, self._engine, slots.stop_requested.get(child.task.id))
            if found is None:
                continue
            if not found.abandon:
                slots.interrupt(child, found.status, found.reason)
            elif child.finalize(found.status, found.reason):
                self.release(child)
                self.finish(child)

    def _progress(self) -> None:
        """Running children's counters reach the store every PROGRESS_EVERY_S (for attach),
        and their live figures every LIVE_EVERY_S."""
        self._parts.live_rows.tick(self.slots.alive, self._clock())
