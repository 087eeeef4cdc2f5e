"""`Engine`: the small API that the TUI, the headless CLI and the tests all drive.

Its lifecycle (start, finish, close) and the reads are here; what it hands on lives beside it:
control/sending.py (`send`: a command checked and handed to the coordinator, from this process
or a client's request), owner/ (resume.py: taking over a batch; batchdir.py: the folder and
manifest; health.py: `problem`; duties.py: the heartbeat and client requests), subscribers.py
(events). Below the imports, what the UI and scripts use of the engine besides `Engine`, from
this one place.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path
from types import TracebackType
from typing import Literal

from flightdeck.engine.child.facts import ChildFact
from flightdeck.engine.child.state import Child
from flightdeck.engine.child.tools import Toolbox
from flightdeck.engine.commands import (
    Command,
    StopAll,
)
from flightdeck.engine.control.coordinator import Carried, Coordinator
from flightdeck.engine.control.pool import tune_interpreter, worker_pool
from flightdeck.engine.control.sending import CommandMethods, Sender
from flightdeck.engine.control.throttle import RouteThrottle
from flightdeck.engine.control.workers import WorkerPool
from flightdeck.engine.inputs.livelimits import (
    limits_from_json,
    limits_of,
    with_limits,
)
from flightdeck.engine.inputs.settings import (
    MAX_CONCURRENT,
    DesktopNotify,
    Route,
    Settings,
    TuiSettings,
    load_settings,
    state_dir_from,
)
from flightdeck.engine.inputs.tasks import Batch, Task, check_routes, load_batch
from flightdeck.engine.model import (
    OPERATOR_HOLD,
    BatchFinished,
    BatchStatus,
    ChildRow,
    Limits,
    Snapshot,
    SteerReceipt,
)
from flightdeck.engine.owner import assembly, batchdir, health
from flightdeck.engine.owner.assembly import new_batch_id, steady_clock
from flightdeck.engine.owner.duties import OwnerDuties
from flightdeck.engine.owner.recording import StoreRecorder
from flightdeck.engine.owner.resume import NothingToResume, Resumed, Stored
from flightdeck.engine.providers.base import Provider
from flightdeck.engine.records.forecast import Forecast, burn_rate, forecast
from flightdeck.engine.records.lines import CONTINUED, SEPARATOR, STAMP_WIDTH, parse
from flightdeck.engine.records.live import live_json
from flightdeck.engine.records.liveness import OwnerAlive
from flightdeck.engine.records.meter import Meter, route_totals, spend_known, totals_of
from flightdeck.engine.records.processes import ProcessLog
from flightdeck.engine.records.sink import TranscriptSink
from flightdeck.engine.records.store import Store
from flightdeck.engine.subscribers import Subscriber, Subscribers
from flightdeck.engine.triage.outliers import Kind, MedianRows, Medians
from flightdeck.engine.triage.query import (
    STATUS_ALIASES,
    QueryError,
    RowFilter,
    is_retrying,
    parse_filter,
)
from flightdeck.engine.triage.signatures import error_signature

# Beside `Engine`, what the UI and scripts use of the engine, from this one place: the task and
# settings loaders, the filter language, outliers and error signatures of rows, forecasts, the
# transcript line format (the UI imports no other engine part: pyproject's import contract).
__all__ = [
    "CONTINUED",
    "MAX_CONCURRENT",
    "SEPARATOR",
    "STAMP_WIDTH",
    "STATUS_ALIASES",
    "DesktopNotify",
    "Engine",
    "Forecast",
    "Kind",
    "MedianRows",
    "Medians",
    "NothingToResume",
    "OwnerAlive",
    "QueryError",
    "RowFilter",
    "Settings",
    "Subscriber",
    "TuiSettings",
    "burn_rate",
    "error_signature",
    "forecast",
    "is_retrying",
    "load_batch",
    "load_settings",
    "new_batch_id",
    "parse",
    "parse_filter",
    "route_totals",
    "state_dir_from",
    "steady_clock",
    "tune_interpreter",
]

log = logging.getLogger("flightdeck.engine")


class Engine(CommandMethods):
    """Runs one batch on the coordinator thread and a pool of worker threads."""

    def __init__(
        self,
        batch: Batch,
        settings: Settings,
        *,
        state_dir: Path,
        max_concurrent: int | Literal["auto"] | None = None,
        clock: Callable[[], float] | None = None,
        providers: Mapping[str, Provider] | None = None,
        batch_id: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> None:
        check_routes(batch, settings.routes.keys(), settings.engine.default_route)
        assembly.check_task_text(batch, settings.engine.max_task_chars)
        self.batch = batch
        self.settings = settings
        self.state_dir = Path(state_dir).absolute()  # records stay valid from any cwd
        self.clock = clock = clock or steady_clock()
        self._id_given = batch_id is not None
        self.batch_id = batch_id or new_batch_id(clock)
        self.batch_dir = self.state_dir / "batches" / self.batch_id
        templates = [t for s in batch.schedules for t in s.tasks]
        used = {settings.route(t.route).name for t in (*batch.tasks, *templates)}
        self.routes: dict[str, Route] = {name: settings.routes[name] for name in sorted(used)}
        self.pool_size = assembly.pool_size(max_concurrent, settings, self.routes.values())
        assembly.check_budget(settings, self.routes.values())
        assembly.check_commands(batch, self.routes.values(), settings.source)
        # Model clients and command routes are built before anything is written: a missing
        # key or program fails cleanly here.
        self._providers, self._commands = assembly.clients(
            self.routes, providers or {}, env, settings.source
        )
        self.meter = Meter()
        self._subscribers = Subscribers()
        self._store: Store | None = None
        self._sink: TranscriptSink | None = None
        self._pool: WorkerPool | None = None
        self._coordinator: Coordinator | None = None
        self._sender: Sender | None = None  # made with the coordinator
        self._status = BatchStatus.RUNNING
        self._manifest_children = "[]"  # JSON, set by start()
        self._started_ts = clock()
        self._finished_ts: float | None = None
        self._closed = False
        self._duties: OwnerDuties | None = None
        self._live = ""  # the live figures last published (records/live.py)
        self._unsteerable: set[str] = set()  # routes whose children take no steer
        self._resuming: tuple[Stored, bool] | None = None  # set by `resume`
        self.resumed: Resumed | None = None  # what resuming found, once started
        self._carried: tuple[ChildRow, ...] = ()  # final rows an earlier owner left
        self._lost_cost: Decimal | None = Decimal(0)  # what attempts lost with owners cost

    @classmethod
    def resume(
        cls,
        state_dir: Path,
        batch_id: str,
        *,
        rerun: bool = True,
        clock: Callable[[], float] | None = None,
        providers: Mapping[str, Provider] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Engine:
        """An engine for a batch whose owner died, built from the store alone; `start()`
        claims it and runs what is left. Raises NothingToResume for a finished batch, an
        InputError for one this state folder cannot resume."""
        from flightdeck.engine.owner import resume

        state_dir = Path(state_dir).absolute()
        stored = resume.load(state_dir, batch_id)
        settings = stored.settings
        if stored.info.limits_json:  # what the operator changed live is kept (pool size too)
            settings = with_limits(settings, limits_from_json(stored.info.limits_json))
        engine = cls(
            stored.batch,
            settings,
            state_dir=state_dir,
            max_concurrent=stored.info.pool_size,
            clock=clock,
            providers=providers,
            batch_id=batch_id,
            env=env,
        )
        engine._resuming = (stored, rerun)
        return engine

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> str:
        """Record the batch, then start the coordinator; returns the batch id. Once only: an
        engine runs one batch, and its tasks must never run twice."""
        if self._store is not None or self._closed:
            raise RuntimeError("Engine.start() can be called once, before close()")
        # The database first: one that cannot be used (not a database, a newer schema, another
        # program's) is reported before this batch writes anything.
        self._store = Store(
            batchdir.folder(self.state_dir, self.state_dir) / "flightdeck.db",
            retry_s=self.settings.engine.store_retry_s,
        )
        if self._resuming is not None:
            from flightdeck.engine.owner import resume

            resume.claim(self._store, self.batch_id, self.clock)
        self.batch_id, self.batch_dir = batchdir.claim(
            self.batch_dir, id_given=self._id_given, clock=self.clock, state_dir=self.state_dir
        )
        own = self.batch.workspace is None  # the batch's own, in its folder: private
        workspace = self.batch.workspace or self.batch_dir / "workspace"
        self.workspace = batchdir.folder(workspace, self.state_dir, private=own)
        secrets = tuple(s for provider in self._providers.values() for s in provider.secrets)
        secrets += tuple(s for command in self._commands.values() for s in command.secrets)
        toolbox = Toolbox(workspace, secrets=secrets, private=own)
        self._pool = worker_pool(self.pool_size)
        self._sink = TranscriptSink()
        throttles = {name: RouteThrottle() for name in self.routes}
        now = self.clock()
        self._started_ts = now
        # One way to make a child: for each task now, for a delegate or a wave later (on the
        # coordinator thread).
        make_child = functools.partial(
            assembly.build_child,
            batch=self.batch,
            settings=self.settings,
            providers=self._providers,
            commands=self._commands,
            throttles=throttles,
            toolbox=toolbox,
            batch_dir=self.batch_dir,
            meter=self.meter,
            clock=self.clock,
            report=self._report,
            sink=self._sink,
            processes=ProcessLog(self._store, self.batch_id),
            batch_id=self.batch_id,
        )
        children = [make_child(task, queued_ts=now) for task in self.batch.tasks]

        def spawn(task: Task) -> Child:
            child = make_child(task, queued_ts=self.clock())
            store.add_queued(self.batch_id, assembly.queued_rows([child]))
            if task.parent is not None:  # the report's record of who delegated it
                store.record_event(self.batch_id, task.id, self.clock(), "delegate", task.parent)
            return child

        # Written before the batch row, so a manifest that cannot be written leaves no batch
        # "running" for ever.
        self._manifest_children = assembly.manifest_children(children)
        try:
            self._manifest()
        except OSError as exc:  # a full disk, say: nothing of this batch is recorded yet
            raise batchdir.unusable(exc, self.state_dir) from exc
        store = self._store
        first_receipt = 1
        if self._resuming is None:
            store.create_batch(
                assembly.batch_info(
                    self.batch_id,
                    self.batch,
                    self.settings,
                    workspace=self.workspace,
                    state_dir=self.state_dir,
                    pool_size=self.pool_size,
                    now=now,
                )
            )
            store.add_queued(self.batch_id, assembly.queued_rows(children))
        else:
            found = self._settle_resumed(children)
            children = found.live
            first_receipt = found.first_receipt_id
        recorder = StoreRecorder(store, self.batch_id, self.clock)
        self._coordinator = Coordinator(
            children,
            self.routes,
            pool=self._pool,
            pool_size=self.pool_size,
            settings=self.settings,
            meter=self.meter,
            clock=self.clock,
            recorder=recorder,
            publish=self._subscribers.publish,
            on_finished=self._finish,
            throttles=throttles,
            between_facts=self._sink.pump,
            carried=Carried(
                self._carried,
                first_receipt,
                # The operator paused admission before the owner died: it stays paused.
                admission_paused=self._resuming is not None
                and OPERATOR_HOLD in (self._resuming[0].info.held or ""),
            ),
            spawn=spawn,
            schedules=self.batch.schedules,
            publish_live=self._publish_live,
        )
        self._coordinator.start()
        self._sender = sender = Sender(
            self._coordinator,
            recorder,
            self.batch_id,
            carried=self._carried,
            max_chars=self.settings.engine.max_task_chars,
        )
        self._duties = OwnerDuties(
            store.path,
            self.batch_id,
            store,
            lambda request: sender.apply_request(request.id, request.command),
            self.clock,
        )
        self._duties.start()
        return self.batch_id

    def _publish_live(self, rows: tuple[ChildRow, ...]) -> None:
        """Coordinator thread: the alive children's live figures, the route gauges and the
        problem, for attached views (records/live.py); recorded only when they changed."""
        assert self._store is not None and self._coordinator is not None
        if self._store.trouble is not None:  # held in memory until it commits: not this
            return
        c = self._coordinator
        # Steerability is a route's (a command route may take none): learned per route once.
        self._unsteerable.update(r.route for r in rows if not r.steerable)
        body = live_json(rows, c.headroom(), self.problem(), self._unsteerable)
        if body != self._live:
            self._live = body
            self._store.set_live(self.batch_id, body)

    def _settle_resumed(self, children: list[Child]) -> Resumed:
        from flightdeck.engine.owner import resume

        assert self._store is not None and self._resuming is not None
        stored, rerun = self._resuming
        found, self._lost_cost = resume.take_over(
            stored,
            children,
            rerun=rerun,
            batch_id=self.batch_id,
            store=self._store,
            meter=self.meter,
            clock=self.clock,
        )
        self._started_ts = stored.info.created_ts
        self._carried = tuple(found.carried)
        self.resumed = found
        return found

    def _report(self, fact: ChildFact) -> None:
        assert self._coordinator is not None
        self._coordinator.report(fact)

    def _manifest(self, status: BatchStatus = BatchStatus.RUNNING) -> None:
        batchdir.manifest(
            self.batch_dir,
            self.batch,
            status,
            workspace=self.workspace,
            pool_size=self.pool_size,
            routes=self.routes,
            children_json=self._manifest_children,
        )

    def _finish(self, status: BatchStatus) -> BatchFinished:
        """Coordinator thread, once every child is final; returns the event it then publishes."""
        assert self._store is not None and self._coordinator is not None
        self._status = status
        if self._sink is not None:
            self._sink.flush()  # every transcript is complete before the batch says finished
        self._finished_ts = finished = self.clock()
        self._publish_live(())  # the route gauges as they ended, nothing in flight
        self._store.finish_batch(self.batch_id, status, finished)
        if not self._store.flush():
            log.error(
                "flightdeck engine: the store could not record that batch %s %s",
                self.batch_id,
                status.value,
            )
        try:
            self._manifest(status)
        except OSError as exc:
            log.error("flightdeck engine: cannot write the batch manifest: %s", exc)
        return BatchFinished(self.batch_id, status)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every child is final; False on timeout."""
        coordinator = self._require()
        if coordinator.on_thread and not coordinator.finished.is_set():
            # A subscriber runs on the coordinator thread, which the batch needs to finish:
            # it cannot finish while this waits, so a timed wait answers at once.
            if timeout is None:
                raise RuntimeError(
                    "Engine.wait() without a timeout cannot be called from an engine event "
                    "subscriber: it would wait on itself"
                )
            return False
        return coordinator.finished.wait(timeout)

    def flush(self, timeout: float | None = None) -> bool:
        """Block until what is recorded so far is committed to the store and written to the
        transcripts (at most `timeout` for each); False if either took longer.

        For a process that leaves without `close()` (a second Ctrl+C): what already finished
        is kept, and the running children's counters as they are now."""
        if self._coordinator is not None and not self._closed:
            self._coordinator.record_progress(timeout)
        written = self._sink is None or self._sink.flush(timeout)
        committed = self._store is None or self._store.flush(timeout)
        return written and committed

    def close(self) -> None:
        """Stop what still runs, wait for the coordinator, release the store and providers."""
        if self._closed:
            return
        if self._coordinator is not None and self._coordinator.on_thread:
            # It waits for the coordinator thread to end: from a subscriber, that is itself.
            raise RuntimeError("Engine.close() cannot be called from an engine event subscriber")
        self._closed = True
        if self._coordinator is not None:
            if not self._coordinator.finished.is_set():
                self._require_sender().send(StopAll())  # `self.send` is a no-op once closed
                self._coordinator.finished.wait()
            if self._duties is not None:
                # Requests recorded before the batch finished are settled, not left pending
                # (the coordinator still answers until shutdown: late steers end missed).
                self._duties.stop()
                self._duties.drain()
                self._duties.stop()
            self._coordinator.shutdown()  # and its pool
        elif self._pool is not None:  # start() failed before the coordinator existed
            self._pool.shutdown()
        if self._sink is not None:
            self._sink.close()
        if self._store is not None:
            self._store.close()
        for provider in self._providers.values():
            provider.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # --- read ----------------------------------------------------------------------------------

    @property
    def status(self) -> BatchStatus:
        return self._status

    @property
    def unrecorded(self) -> int:
        """Finished children whose final row the store gave up on (never announced)."""
        return self._coordinator.unrecorded if self._coordinator else 0

    @property
    def failure(self) -> str | None:
        """Why the batch failed as a whole (the store gave up, the engine failed), if it did."""
        return self._coordinator.failure if self._coordinator else None

    def problem(self) -> str | None:
        """What keeps the engine from recording or running as it should, in a sentence for the
        operator; None when all is well."""
        c = self._coordinator
        trouble = self._store.trouble if self._store else None
        if c is None:
            return None
        return health.problem(c, trouble, self.settings.engine.store_retry_s)

    @property
    def held(self) -> str | None:
        """Why admission is held (`Snapshot.held`), without building a snapshot."""
        return self._coordinator.hold if self._coordinator else None

    @property
    def stopped_by_stop_all(self) -> int:
        """Children a stop-all (`stop_all()`, or `close()` before the end) found still queued or
        running: 0 when every child had ended on its own."""
        return self._coordinator.stopped_by_stop_all if self._coordinator else 0

    def snapshot(self) -> Snapshot:
        """An immutable view of every child and the totals; cheap enough to poll."""
        c = self._coordinator
        rows: tuple[ChildRow, ...] = tuple(ch.row() for ch in c.children) if c else ()
        if self._carried:  # a resumed batch: what an earlier owner finished, in seq order
            rows = tuple(sorted((*self._carried, *rows), key=lambda r: r.seq))
        return Snapshot(
            batch_id=self.batch_id,
            status=self._status,
            started_ts=self._started_ts,
            now=self.clock(),
            children=rows,
            totals=totals_of(rows),
            pool_size=c.pool_size if c else self.pool_size,
            max_cost_usd=self.settings.budget.max_cost_usd,
            routes=c.headroom() if c else (),
            finished_ts=self._finished_ts,
            problem=self.problem(),
            lost_cost_usd=self._lost_cost,
            held=c.hold if c else None,
            limits=self.limits(),
        )

    def subscribe(self, fn: Subscriber) -> Callable[[], None]:
        """Call `fn` for each engine event, on the coordinator thread; keep it fast. Returns
        what unsubscribes it."""
        return self._subscribers.add(fn)

    # --- control -------------------------------------------------------------------------------

    def send(self, command: Command) -> tuple[int, ...]:
        """Send an operator's command (engine/commands.py) to the coordinator, which applies it
        at once; the receipt ids of a steer (one per child, in order), () for the others.

        Raises CommandError (a ValueError), sending nothing, if the command cannot be applied:
        an id that names no child of this batch, a steer message that cannot be sent (empty, a
        lone surrogate, longer than `[engine] max_task_chars`), a bad limit (LimitError)."""
        sender = self._require_sender()
        if self._closed:  # every child has ended
            if command.answered:  # nothing would ever settle a receipt, or apply a limit
                raise RuntimeError(
                    f"Engine.send({command.title}) after close(): every child has ended"
                )
            return ()
        return sender.send(command)

    def limits(self) -> Limits:
        """The live limits: pool size, each route's caps, the soft budget and its hold."""
        c = self._coordinator
        if c is not None:
            return c.limits()
        return limits_of(self.settings, self.routes, self.pool_size, spend_known)

    def receipts(self) -> list[SteerReceipt]:
        snap = self.snapshot()
        return [r for row in snap.children for r in row.steers]

    def _require(self) -> Coordinator:
        if self._coordinator is None:
            raise RuntimeError("Engine.start() has not been called")
        return self._coordinator

    def _require_sender(self) -> Sender:
        self._require()
        assert self._sender is not None  # made with the coordinator
        return self._sender
