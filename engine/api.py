"""`Engine`: the small API that the TUI, the headless CLI and the tests all drive.

Its lifecycle (start, close) and the reads are here; what it hands on lives beside it:
owner/run.py (the started batch's parts, made in order, and the coordinator's hooks: the live
figures, the batch's end), control/sending.py (`send`: a command checked and handed to the
coordinator, from this process or a client's request), owner/resume.py (taking over a batch),
subscribers.py (events). Below the imports, what the UI and scripts use of the engine besides
`Engine`, from this one place.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path
from types import TracebackType
from typing import Literal

from flightdeck.engine.apilight import (
    CONTINUED,
    MAX_CONCURRENT,
    SEPARATOR,
    STAMP_WIDTH,
    STATUS_ALIASES,
    DesktopNotify,
    Forecast,
    Kind,
    MedianRows,
    Medians,
    Membership,
    Need,
    QueryError,
    RowFilter,
    Settings,
    TuiSettings,
    burn_rate,
    error_signature,
    forecast,
    is_retrying,
    load_settings,
    needs,
    parse,
    parse_filter,
    route_totals,
    state_dir_from,
)
from flightdeck.engine.commands import Command, StopAll
from flightdeck.engine.control.coordinator import Coordinator
from flightdeck.engine.control.pool import tune_interpreter
from flightdeck.engine.control.sending import CommandMethods, Sender
from flightdeck.engine.executors import ray_missing
from flightdeck.engine.executors.base import Executor
from flightdeck.engine.inputs.tasks import Batch, load_batch
from flightdeck.engine.model import (
    BatchStatus,
    ChildRow,
    Limits,
    Snapshot,
    SteerReceipt,
)
from flightdeck.engine.model.livelimits import (
    limits_from_json,
    limits_of,
    with_limits,
)
from flightdeck.engine.owner import assembly, batchdir, keys
from flightdeck.engine.owner.assembly import steady_clock
from flightdeck.engine.owner.batchdir import new_batch_id
from flightdeck.engine.owner.checks import check_batch
from flightdeck.engine.owner.duties import OwnerDuties
from flightdeck.engine.owner.resume import NothingToResume, Resumed, Stored
from flightdeck.engine.owner.run import BatchRun
from flightdeck.engine.providers.base import Provider
from flightdeck.engine.records.liveness import OwnerAlive
from flightdeck.engine.records.meter import Meter, spend_known, totals_of
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.requests import typed
from flightdeck.engine.records.store import Store
from flightdeck.engine.subscribers import Subscriber, Subscribers

# Beside `Engine`, what the UI and scripts use of the engine, from this one place: the task
# loader, and apilight.py's (the settings loader, the filter language, ...), which a process
# that runs no batch imports instead (the UI imports neither the store nor the inputs directly:
# pyproject's import contract).
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
    "Membership",
    "Need",
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
    "needs",
    "new_batch_id",
    "parse",
    "parse_filter",
    "ray_missing",
    "route_totals",
    "state_dir_from",
    "steady_clock",
    "tune_interpreter",
]

log = logging.getLogger("flightdeck.engine")

FLUSH_S = 2.0  # how long a retry that continues waits for the transcript it reads


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
        stored: bool = False,  # the batch as the store kept it (`resume`): its names recorded
    ) -> None:
        checked = check_batch(
            batch,
            settings,
            max_concurrent=max_concurrent,
            batch_id=batch_id,
            given=providers,
            env=env,
            stored=stored,
        )
        self._own = frozenset(t.id for t in batch.tasks)  # each snapshot's `own`: one set
        self.settings = settings
        self.state_dir = Path(state_dir).absolute()  # records stay valid from any cwd
        self.clock = clock = clock or steady_clock()
        self._id_given = batch_id is not None
        self.batch_id = batch_id or new_batch_id(clock)
        self.batch_dir = self.state_dir / "batches" / self.batch_id
        self.routes = checked.routes
        self.pool_size = checked.pool_size
        self._auto_pool = checked.auto_pool
        self._providers, self._commands = checked.providers, checked.commands
        # A key the operator typed into a goal or a context is redacted before anything keeps
        # or sends it; one in a name is refused (owner/keys.py), but in one already recorded.
        secrets = keys.batch_secrets(self._providers, self._commands)
        self.batch = keys.redacted_batch(batch, secrets)
        self.meter = Meter()
        self._subscribers = Subscribers()
        self._created_ts = clock()  # the batch's start, until it starts
        self._run: BatchRun | None = None  # the batch's parts, once started
        self._closed = False
        self._resuming: tuple[Stored, bool] | None = None  # set by `resume`
        self._reopen = False  # set by `resume`: a finished batch runs again
        self.resumed: Resumed | None = None  # what resuming found, once started

    @classmethod
    def resume(
        cls,
        state_dir: Path,
        batch_id: str,
        *,
        rerun: bool = True,
        reopen: bool = False,
        clock: Callable[[], float] | None = None,
        providers: Mapping[str, Provider] | None = None,
        env: Mapping[str, str] | None = None,
    ) -> Engine:
        """An engine for a batch whose owner died, built from the store alone; `start()`
        claims it and runs what is left. Raises NothingToResume for a finished batch (unless
        `reopen`: the operator's retries pending for it run), an InputError for one this state
        folder cannot resume."""
        from flightdeck.engine.owner import resume

        state_dir = Path(state_dir).absolute()
        stored = resume.load(state_dir, batch_id, reopen=reopen)
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
            stored=True,
        )
        engine._resuming = (stored, rerun)
        engine._reopen = reopen
        return engine

    # --- lifecycle -----------------------------------------------------------------------------

    def start(self) -> str:
        """Record the batch, then start the coordinator; returns the batch id. Once only: an
        engine runs one batch, and its tasks must never run twice."""
        if self._run is not None or self._closed:
            raise RuntimeError("Engine.start() can be called once, before close()")
        if self._id_given and self._resuming is None:
            batchdir.check_not_taken(self.batch_id, self.state_dir)
        self._run = run = BatchRun(
            self.batch,
            self.settings,
            self.routes,
            pool_size=self.pool_size,
            state_dir=self.state_dir,
            batch_id=self.batch_id,
            id_given=self._id_given,
            clock=self.clock,
            meter=self.meter,
            clients=(self._providers, self._commands),
            publish=self._subscribers.publish,
            resuming=self._resuming,
            reopen=self._reopen,
            auto_pool=self._auto_pool,
        )
        run.start()
        self.batch_id, self.batch_dir, self.resumed = run.batch_id, run.batch_dir, run.resumed
        assert run.workspace is not None
        self.workspace = run.workspace
        return self.batch_id

    # The started batch's parts (owner/run.py), None before start().

    @property
    def _coordinator(self) -> Coordinator | None:
        return self._run.coordinator if self._run else None

    @property
    def _store(self) -> Store | None:
        return self._run.store if self._run else None

    @property
    def _pool(self) -> Executor | None:
        return self._run.pool if self._run else None

    @property
    def _duties(self) -> OwnerDuties | None:
        return self._run.duties if self._run else None

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
        sink = self._run.sink if self._run else None
        written = sink is None or sink.flush(timeout)
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
        if self._coordinator is not None and not self._coordinator.finished.is_set():
            self._require_sender().send(StopAll())  # `self.send` is a no-op once closed
            self._coordinator.finished.wait()
        if self._run is not None:
            self._run.close()
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
        return self._run.status if self._run else BatchStatus.RUNNING

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
        return self._run.problem() if self._run else None

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
        """An immutable view of every child and the totals; cheap enough to poll. Before
        `start()`, the children it will run: every task queued (a resumed batch's children as
        its store keeps them)."""
        run, c = self._run, self._coordinator
        rows = tuple(ch.row() for ch in list(c.slots.children)) if c else self._unstarted()
        if c is not None and c.slots.carried:  # a resumed batch: what an earlier owner finished
            rows = tuple(sorted((*c.slots.carried.values(), *rows), key=lambda r: r.seq))
        # Attempts lost with earlier owners, and with workers in this run (unknown: None).
        lost = run.lost_cost if run else Decimal(0)
        here = c.lost_cost if c else Decimal(0)
        return Snapshot(
            batch_id=self.batch_id,
            status=self.status,
            started_ts=run.started_ts if run else self._created_ts,
            now=self.clock(),
            children=rows,
            totals=totals_of(rows),
            pool_size=c.slots.pool_size if c else self.pool_size,
            max_cost_usd=self.settings.budget.max_cost_usd,
            routes=c.headroom() if c else (),
            finished_ts=run.finished_ts if run else None,
            problem=self.problem(),
            lost_cost_usd=None if lost is None or here is None else lost + here,
            held=c.hold if c else None,
            limits=self.limits(),
            own=self._own,
            scheduled=c is not None and c.scheduled and self.status is BatchStatus.RUNNING,
        )

    def _unstarted(self) -> tuple[ChildRow, ...]:
        """The children `start()` will run, as they stand before it."""
        if self._run is not None:  # started, and failed before its coordinator ran
            return ()
        if self._resuming is not None:
            with StoreReader(self.state_dir / "flightdeck.db") as reader:
                return tuple(reader.children(self.batch_id, results=False))
        return assembly.unstarted_rows(self.batch, self.settings, self.batch_dir, self._created_ts)

    def secrets(self) -> tuple[str, ...]:
        """The batch's keys (its routes' keys and header values): what the engine redacts from
        all it records, and a caller from what it shows of a child's own files (its diff)."""
        return keys.batch_secrets(self._providers, self._commands)

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
        lone surrogate, longer than `[engine] max_task_chars`), a bad limit (LimitError), a
        field of the wrong type; TypeError for what is no command."""
        command = typed(command)
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
        assert self._run is not None and self._run.sender is not None  # with the coordinator
        return self._run.sender
