"""The one deciding thread: its loop, the inbox's dispatch, slots, watchdog and progress.

Everything that decides whether work may start runs on the coordinator thread, so a task leaves
the queue before it runs and never runs twice, without locks. Workers only wait (streams, tools);
they report facts back through the inbox, and callers' commands arrive the same way. The parts
that decide are small classes it owns and calls on this thread: admission.py (who starts),
controls.py (the operator's commands), pauses.py, arrivals.py (delegates, waves), softbudget.py,
finals.py (final rows, the batch's status).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from flightdeck.engine.child.facts import (
    ChildDone,
    ChildPaused,
    Delegated,
    FirstChunk,
    HeadroomSeen,
    LoopFlagged,
    ReceiptSettled,
)
from flightdeck.engine.child.state import Child
from flightdeck.engine.control.admission import Admission
from flightdeck.engine.control.arrivals import Arrivals
from flightdeck.engine.control.controls import Controls, SettleRequest
from flightdeck.engine.control.finals import Finals
from flightdeck.engine.control.inbox import (
    Message,
    Order,
    Recorded,
    RecordProgress,
    Shutdown,
    Unrecorded,
)
from flightdeck.engine.control.pauses import Pauses
from flightdeck.engine.control.queues import RouteQueues
from flightdeck.engine.control.softbudget import SoftBudget
from flightdeck.engine.control.throttle import RouteThrottle
from flightdeck.engine.control.watchdog import overdue
from flightdeck.engine.control.workers import WorkerPool
from flightdeck.engine.inputs.livelimits import limits_of
from flightdeck.engine.inputs.settings import Budget, CannedSteers, EngineSettings, Route, Settings
from flightdeck.engine.inputs.tasks import Schedule, Task
from flightdeck.engine.model import (
    BatchStatus,
    ChildRow,
    ChildStatus,
    EngineEvent,
    Limits,
    RouteHeadroom,
    SteerReceipt,
    SteerSettled,
    SteerState,
)
from flightdeck.engine.records.faults import StoreTrouble
from flightdeck.engine.records.meter import Meter, spend_known

log = logging.getLogger(__name__)

TICK_S = 0.25  # the coordinator wakes at least this often while children are alive
PROGRESS_EVERY_S = 0.1  # how often running children's counters reach the store (for attach)
# How often the alive children's live figures (calls in flight, retry notices) are published
# for attached views: with their reading, well within half a second.
LIVE_EVERY_S = 0.2
WATCH_EVERY_S = 0.05  # timeouts and stalls are checked at most this often, not on every wake
WIND_DOWN_S = 10.0  # after this thread failed, how long the stopped children get to end


class Coordinator:
    """Owns the queue and the pool; `Engine` is its public face."""

    def __init__(
        self,
        children: list[Child],
        routes: Mapping[str, Route],
        *,
        pool: WorkerPool,
        pool_size: int,
        engine: EngineSettings,
        budget: Budget,
        meter: Meter,
        clock: Callable[[], float],
        record: Callable[[ChildRow], None],
        record_final: Callable[[ChildRow, Callable[[bool], None]], None],
        record_receipt: Callable[[SteerReceipt, int | None], None],  # and its client request
        record_event: Callable[[str | None, str, str], None],
        publish: Callable[[EngineEvent], None],
        on_finished: Callable[[BatchStatus], EngineEvent],
        throttles: Mapping[str, RouteThrottle] | None = None,
        between_facts: Callable[[], None] = lambda: None,
        carried: tuple[ChildRow, ...] = (),  # final rows an earlier owner left (a resume)
        first_receipt_id: int = 1,
        spawn: Callable[[Task], Child] | None = None,
        schedules: tuple[Schedule, ...] = (),
        store_trouble: Callable[[], StoreTrouble | None] = lambda: None,
        canned: CannedSteers | None = None,
        # The rows the soft budget's projection counts (all the batch's: a resumed one's too).
        rows: Callable[[], Sequence[ChildRow]] | None = None,
        # The live limits changed, or a hold began or ended: (limits, what `hold` says now).
        on_limits: Callable[[Limits, str | None], None] = lambda limits, hold: None,
        record_held: Callable[[str | None], None] = lambda held: None,
        admission_paused: bool = False,  # the operator's pause, kept across a resume
        # A client's request applied (with the receipts it made) or refused (with why).
        settle_request: SettleRequest = lambda request, receipts, refused: None,
        # Every LIVE_EVERY_S: the latest rows of the children alive (for attached views).
        publish_live: Callable[[tuple[ChildRow, ...]], None] = lambda rows: None,
    ) -> None:
        self.children = children
        self.by_id = {c.task.id: c for c in children}
        self.pool_size = pool_size
        self._engine = engine
        self._budget = budget
        self._meter = meter
        self._clock = clock
        self.record = record  # a child's row to the store
        self._record_receipt = record_receipt
        self.record_event = record_event  # an operator action to the store's events
        self._publish = publish
        self._on_finished = on_finished
        # Cheap work that must not wait for another thread (framing transcript lines).
        self._between_facts = between_facts
        self._store_trouble = store_trouble
        self.queues = RouteQueues(routes, children)  # the routes' queues and children alive
        # Alive children without a slot: parents waiting on delegates, paused processes.
        self.waiting: dict[str, Child] = {}
        self._throttles = dict(throttles or {})
        self._inbox: queue.SimpleQueue[Message] = queue.SimpleQueue()
        self.alive: dict[str, Child] = {}  # started and not ended (a suspended process too)
        self._stop_requested: dict[str, float] = {}  # child id -> when its stop was asked
        self._receipt_ids = itertools.count(first_receipt_id)
        self._receipt_lock = threading.Lock()
        self._finals = Finals(
            children,
            carried=tuple(r.status for r in carried),
            record_final=record_final,
            report=self.report,
            publish=publish,
        )
        # Why the batch is ending before its time: the store gave up, or this thread failed.
        self.failure: str | None = None
        self._on_limits = on_limits
        self._soft = SoftBudget(
            budget.soft_cost_usd,
            clock=clock,
            meter=meter,
            rows=rows or (lambda: [c.row() for c in self.children]),
            record_event=record_event,
            announce=self._announce_limits,
        )
        # Children a stop-all found still queued or running; any makes the batch `stopped`.
        self.stopped_by_stop_all = 0
        self._shutdown = False
        self._last_progress = 0.0
        self._last_watch = 0.0
        self._progress_versions: dict[str, int] = {}
        self._publish_live = publish_live
        self._last_live = 0.0
        self._live_rows: dict[str, ChildRow] = {}  # alive children's rows, as last recorded
        self.pool = pool  # the threads children run on
        self._pauses = Pauses(self)
        self._arrivals = Arrivals(
            self,
            spawn=spawn,
            schedules=schedules,
            taken_ids=frozenset(r.id for r in carried),
            clock=clock,
            exhausted=lambda: self._admission.budget_exhausted(),
        )
        self._admission = Admission(
            self,
            pauses=self._pauses,
            arrivals=self._arrivals,
            budget=budget,
            meter=meter,
            clock=clock,
            record=record,
            publish=publish,
            started=len(carried),
        )
        self._controls = Controls(
            self,
            clock=clock,
            canned=canned or CannedSteers(),
            throttles=self._throttles,
            soft=self._soft,
            pauses=self._pauses,
            arrivals=self._arrivals,
            carried={r.id: r for r in carried},
            record_held=record_held,
            record_receipt=record_receipt,
            settle_request=settle_request,
            publish=publish,
            announce=self._announce_limits,
        )
        self._pauses.admission = admission_paused
        self._thread = threading.Thread(target=self._run, name="flightdeck-coordinator")
        self.finished = threading.Event()

    @property
    def unrecorded(self) -> int:
        """Final rows the store gave up on: those children ended, but were never announced."""
        return self._finals.unrecorded

    # --- called from any thread ----------------------------------------------------------------

    def start(self) -> None:
        """Start the coordinator thread."""
        self._thread.start()

    def report(self, fact: Message) -> None:
        """Workers hand facts here (thread-safe)."""
        self._inbox.put(fact)

    def next_receipt_id(self) -> int:
        """A steer receipt id no other steer of this batch has."""
        with self._receipt_lock:
            return next(self._receipt_ids)

    def command(self, command: Order | RecordProgress | Shutdown) -> None:
        """Queue an operator's order (or the engine's own request) for the coordinator thread
        (thread-safe)."""
        self._inbox.put(command)

    @property
    def on_thread(self) -> bool:
        """True when called on the coordinator thread (from an event subscriber)."""
        return threading.current_thread() is self._thread

    def shutdown(self) -> None:
        """End the coordinator thread and the pool; queued work is dropped, not waited for."""
        self.command(Shutdown())
        self._thread.join()
        # Workers still inside a stalled call are abandoned, not waited for.
        self.pool.shutdown()

    def record_progress(self, timeout: float | None = None) -> bool:
        """Record every running child's current row now, not at the next progress tick; False
        if the coordinator did not get to it within `timeout` (or has ended)."""
        if self.on_thread:
            self._record_progress()
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
        return self.queues.headroom(self._throttles, self._clock)

    def limits(self) -> Limits:
        """The live limits (any thread: each value is replaced whole, never changed in place)."""
        routes = {name: state.route for name, state in self.queues.routes.items()}
        base = limits_of(self._settings_view(), routes, self.pool_size, spend_known)
        return dataclasses.replace(base, soft_cost_usd=self._soft.cost, soft_held=self._soft.held)

    @property
    def hold(self) -> str | None:
        """Why admission is held, every hold that is on in one sentence; None: it is not."""
        holds = [*self._pauses.holds(), *self._soft.holds()]
        return "; ".join(holds) or None

    def _settings_view(self) -> Settings:
        routes = {name: state.route for name, state in self.queues.routes.items()}
        return Settings(routes=routes, budget=self._budget)

    # --- for its collaborators (admission, controls, pauses), on the coordinator thread --------

    def release(self, child: Child) -> None:
        """Free the child's slot (in the pool and on its route); a gate it led opens."""
        del self.alive[child.task.id]
        self._pauses.ended(child)
        if self.waiting.pop(child.task.id, None) is None:  # a waiting parent had none
            self.queues.ended(child)
        self.queues.requeue(self._admission.gate.ended(child))

    def busy(self) -> int:
        """Slots in use: alive children, less the parents waiting on their delegates."""
        return len(self.alive) - len(self.waiting)

    def free_slot(self, child: Child) -> None:
        """An alive child gives up its slot, as a parent waiting on delegates does."""
        self.waiting[child.task.id] = child
        self.queues.ended(child)

    def take_slot(self, child: Child) -> None:
        """A child that gave up its slot has it again (its route's was taken by the caller)."""
        del self.waiting[child.task.id]

    def interrupt(self, child: Child, status: ChildStatus, reason: str) -> None:
        """Ask a running child to end with `status` (the watchdog times how long it takes)."""
        self._stop_requested.setdefault(child.task.id, self._clock())
        child.request_stop(status, reason)

    def relaunch(self, child: Child) -> None:
        """Run a paused child on a thread again (its route's slot taken by the caller)."""
        self._admission.launch(child, new=False)

    # --- the coordinator thread ----------------------------------------------------------------

    def _run(self) -> None:
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
        # Keep answering commands until shutdown, so a late steer is settled as missed; but not
        # past the end of the program: one that never called close() would wait for ever.
        while not self._shutdown and threading.main_thread().is_alive():
            try:
                self._drain()
            except Exception:
                log.exception("flightdeck engine: a command after the batch ended failed")

    def _loop(self) -> None:
        self._watch_store()
        self._soft.watch()
        self._admission.admit()
        while not self._all_done():
            self._drain()
            self._watch_store()
            now = self._clock()
            if now - self._last_watch >= WATCH_EVERY_S:
                self._last_watch = now
                self._watchdog()
            self._arrivals.tick()
            self._soft.watch()
            self._admission.admit()
            self._progress()
            self._between_facts()

    def _failed(self, exc: Exception) -> None:
        """This thread's one error path: say so, stop every child, let them end (for a bounded
        time), so the batch ends `failed` with the reason rather than stay `running`."""
        log.exception("flightdeck engine: the coordinator failed; stopping every child")
        self.failure = f"engine error: {type(exc).__name__}: {exc}"
        try:
            self._controls.stop_everything(f"stopped: {self.failure}")
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
            else self._finals.status(self.stopped_by_stop_all)
        )
        if self._soft.end():  # an ended batch holds nothing back
            try:
                self._announce_limits()
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
        trouble = self._store_trouble()
        if (trouble is not None) != self._admission.store_paused:
            self._admission.store_paused = trouble is not None
            if trouble is not None:
                log.error(
                    "flightdeck engine: no new child starts while the store cannot commit (%s)",
                    trouble.reason,
                )
            else:
                log.warning("flightdeck engine: the store commits again; children start again")
        if trouble is not None and trouble.gave_up and self.failure is None:
            self.failure = f"the store cannot record ({trouble.reason})"
            log.error("flightdeck engine: %s: stopping every child; the batch fails", self.failure)
            self._controls.stop_everything(f"stopped: {self.failure}")

    @property
    def held(self) -> int:
        """Final rows handed to the store and not yet committed (nor given up on)."""
        return self._finals.held

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

    def _handle(self, message: Message) -> None:
        match message:
            case ChildDone(child_id):
                child = self.by_id[child_id]
                if child_id in self.alive:
                    self.release(child)
                    self.finish(child)
                else:
                    # The watchdog abandoned it and recorded its final row; its call has come
                    # back since, and may have been billed: the store must say what was spent.
                    # (Only while the engine is open: a call stuck at close() is not waited for.)
                    self.record(child.row())
            case Recorded(row):
                self._finals.recorded(row)
                self._arrivals.ended(row)
            case Unrecorded(row):
                self._finals.lost()
                self._arrivals.ended(row)  # its parent is not left waiting
            case ReceiptSettled(receipt):
                if receipt.by == "policy" and receipt.state is SteerState.DELIVERED:
                    self._controls.loop_policies.delivered(receipt.child_id, self._clock())
                self._record_receipt(receipt, None)
                self._publish(SteerSettled(receipt))
            case Delegated(child_id, call):
                self._arrivals.delegate(self.by_id[child_id], call)
            case ChildPaused(child_id):
                self._pauses.paused(self.by_id[child_id])
            case FirstChunk(child_id):
                self.queues.requeue(self._admission.gate.first_chunk(self.by_id[child_id]))
            case HeadroomSeen(route, event):
                self.queues.saw_headroom(route, event, self._clock())
            case LoopFlagged(child_id, evidence, again):
                self._controls.looped(child_id, evidence, again)
            case Order():
                self._controls.apply(message)
            case RecordProgress(done):
                self._record_progress()
                done.set()
            case Shutdown():
                self._shutdown = True

    def finish(self, child: Child) -> None:
        """Record a final child at once; it counts as done, and is announced, once committed.

        So a finish that a UI shows (a headless line, say) is already on disk: a process
        killed right after loses none of them, and the batch ends only when all are written.
        Its slot is free already (`release`): admission never waits for the store.
        """
        self._stop_requested.pop(child.task.id, None)
        self._controls.loop_policies.ended(child.task.id)
        self._pauses.ended(child)
        self._finals.hand(child.row())

    def _all_done(self) -> bool:
        return self._finals.done >= len(self.children) and not self._arrivals.scheduled

    # --- watchdog and progress -----------------------------------------------------------------

    def _watchdog(self) -> None:
        """Timeouts, stalls, and children that ignore a stop past the grace period."""
        self._controls.loop_steps()
        now = self._clock()
        for child in list(self.alive.values()):
            found = overdue(child, now, self._engine, self._stop_requested.get(child.task.id))
            if found is None:
                continue
            if not found.abandon:
                self.interrupt(child, found.status, found.reason)
            elif child.finalize(found.status, found.reason):
                self.release(child)
                self.finish(child)

    def _progress(self) -> None:
        """Running children's counters reach the store every PROGRESS_EVERY_S (for attach),
        and their live figures every LIVE_EVERY_S."""
        now = self._clock()
        if now - self._last_progress >= PROGRESS_EVERY_S:
            self._last_progress = now
            self._record_progress()
            if now - self._last_live >= LIVE_EVERY_S:
                self._last_live = now
                self._publish_live(tuple(self._live_rows.values()))

    def _record_progress(self) -> None:
        alive, rows = self.alive, self._live_rows
        for child in alive.values():
            if self._progress_versions.get(child.task.id) != child.version:
                self._progress_versions[child.task.id] = child.version
                row = rows[child.task.id] = child.row()
                self.record(row)
        if len(rows) > len(alive) or any(cid not in alive for cid in rows):
            self._live_rows = {cid: row for cid, row in rows.items() if cid in alive}

    def _announce_limits(self) -> None:
        """The live limits changed, or a hold began or ended: for attached views and resume."""
        self._on_limits(self.limits(), self.hold)
