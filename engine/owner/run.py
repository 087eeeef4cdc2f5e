"""`BatchRun`: one batch this process started and owns, from `Engine.start()` to `close()`.

The parts a started batch has (the store, the transcript sink, the worker pool, the coordinator,
the command sender, the owner's duties) are made here, in order, and kept here; `Engine` reads
them. The coordinator's hooks back to its owner are this class's: the live figures published,
the batch's end recorded, a resumed batch's rows settled.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path

from flightdeck.engine.agents import tree
from flightdeck.engine.agents.launch import CommandRoute
from flightdeck.engine.child.elsewhere import Elsewhere
from flightdeck.engine.child.facts import ChildFact
from flightdeck.engine.child.state import Child
from flightdeck.engine.child.tools import Toolbox
from flightdeck.engine.control.attempts import Rework
from flightdeck.engine.control.coordinator import Coordinator
from flightdeck.engine.control.parts import Setup
from flightdeck.engine.control.sending import Sender
from flightdeck.engine.control.slots import Carried
from flightdeck.engine.control.softbudget import SOFT_HOLD
from flightdeck.engine.control.throttle import RouteThrottle
from flightdeck.engine.executors.base import Executor
from flightdeck.engine.executors.opening import open_executor
from flightdeck.engine.inputs.settings import Route, Settings
from flightdeck.engine.inputs.tasks import Batch, Task
from flightdeck.engine.model import OPERATOR_HOLD, BatchFinished, BatchStatus, ChildRow, EngineEvent
from flightdeck.engine.owner import assembly, batchdir, health, keys
from flightdeck.engine.owner.duties import OwnerDuties
from flightdeck.engine.owner.recording import StoreRecorder
from flightdeck.engine.owner.resume import Resumed, Stored
from flightdeck.engine.providers.base import Provider
from flightdeck.engine.records.live import live_json
from flightdeck.engine.records.meter import Meter
from flightdeck.engine.records.processes import ProcessLog, session_of
from flightdeck.engine.records.sink import TranscriptSink
from flightdeck.engine.records.store import Store
from flightdeck.engine.review.apply import Reviewer

log = logging.getLogger("flightdeck.engine")  # the engine's own voice, as api.py's

FLUSH_S = 2.0  # how long a retry that continues waits for the transcript it reads


class BatchRun:
    """A started batch's parts and its hooks; `start()` once, then `close()`."""

    def __init__(
        self,
        batch: Batch,
        settings: Settings,
        routes: Mapping[str, Route],
        *,
        pool_size: int,
        state_dir: Path,
        batch_id: str,
        id_given: bool,  # a taken id is an error, not drawn again
        clock: Callable[[], float],
        meter: Meter,
        clients: tuple[Mapping[str, Provider], Mapping[str, CommandRoute]],
        publish: Callable[[EngineEvent], None],
        resuming: tuple[Stored, bool] | None,  # a dead owner's batch, and whether to re-run
        reopen: bool = False,  # resuming a finished batch: the operator's retries pending run
        auto_pool: bool = False,  # `max_concurrent = "auto"`: the executor sizes the pool
    ) -> None:
        self.batch = batch
        self.settings = settings
        self.routes = routes
        self.pool_size = pool_size
        self.state_dir = state_dir
        self.batch_id = batch_id
        self.batch_dir = state_dir / "batches" / batch_id
        self._id_given = id_given
        self.clock = clock
        self.meter = meter
        self._providers, self._commands = clients
        self._publish = publish
        self._resuming = resuming
        self._reopen = reopen
        self._auto_pool = auto_pool
        self.store: Store | None = None
        self.sink: TranscriptSink | None = None
        self.pool: Executor | None = None
        self.coordinator: Coordinator | None = None
        self.sender: Sender | None = None  # made with the coordinator
        self.duties: OwnerDuties | None = None
        self.workspace: Path | None = None
        self.status = BatchStatus.RUNNING
        self.started_ts = clock()
        self.finished_ts: float | None = None
        self.resumed: Resumed | None = None  # what resuming found, once started
        self.carried: tuple[ChildRow, ...] = ()  # final rows an earlier owner left
        self.lost_cost: Decimal | None = Decimal(0)  # what attempts lost with earlier owners cost
        self._manifest_children = "[]"  # JSON, set by start()
        self._live = ""  # the live figures last published (records/live.py)
        self._unsteerable: set[str] = set()  # routes whose children take no steer
        self._opened = False  # counted among the process's open batches (agents/tree.py)
        self._unrecorded: batchdir.Claimed | None = None  # a new batch's folder, until its row

    def start(self) -> None:
        """Record the batch, then start the coordinator. Each part is kept as it is made, so
        `close()` releases what a failed start made (a new batch's folder too, until its row
        is recorded: a batch that never started leaves nothing behind)."""
        tree.batch_opened()  # the process stays the subreaper of its command children until close
        self._opened = True
        # The database first: one that cannot be used (not a database, a newer schema, another
        # program's) is reported before this batch writes anything.
        self.store = store = Store(
            batchdir.folder(self.state_dir, self.state_dir, self.settings) / "flightdeck.db",
            retry_s=self.settings.engine.store_retry_s,
        )
        if self._resuming is not None:
            from flightdeck.engine.owner import resume

            resume.claim(store, self.batch_id, self.clock, reopen=self._reopen)
        claimed = batchdir.claim(
            self.batch_dir,
            id_given=self._id_given,
            clock=self.clock,
            state_dir=self.state_dir,
            settings=self.settings,
        )
        self.batch_id, self.batch_dir = claimed.folder.name, claimed.folder
        if self._resuming is None:  # a resumed batch's folder and row are an earlier start's
            self._unrecorded = claimed
        own = self.batch.workspace is None  # the batch's own, in its folder: private
        workspace = self.batch.workspace or self.batch_dir / "workspace"
        self.workspace = made = batchdir.folder(
            workspace, self.state_dir, self.settings, private=own
        )
        if own:
            claimed.workspace = made
        self._secrets = secrets = keys.batch_secrets(self._providers, self._commands)
        toolbox = Toolbox(workspace, secrets=secrets, private=own)
        throttles = {name: RouteThrottle() for name in self.routes}
        self.pool, self.pool_size = open_executor(
            self.settings,
            pool_size=self.pool_size,
            auto=self._auto_pool and self._resuming is None,
            report=self._report,
            meter=self.meter,
            routes=self.routes,
            throttles=throttles,
            clock=self.clock,
            batch_id=self.batch_id,
            batch_dir=self.batch_dir,
            workspace=made,
            delegate=self.batch.delegate,
            private=own,
        )
        self.sink = sink = TranscriptSink()
        now = self.clock()
        self.started_ts = now
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
            sink=self.sink,
            processes=ProcessLog(store, self.batch_id, self.clock),
            batch_id=self.batch_id,
            kind=Elsewhere if self.settings.engine.executor == "ray" else Child,
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
        claimed.manifest = True
        try:
            self._manifest()
        except OSError as exc:  # a full disk, say: nothing of this batch is recorded yet
            raise batchdir.unusable(exc, self.state_dir, self.settings) from exc
        first_receipt, adopted = 1, frozenset[str]()
        if self._resuming is None:
            store.create_batch(
                assembly.batch_info(
                    self.batch_id,
                    self.batch,
                    self.settings,
                    workspace=made,
                    state_dir=self.state_dir,
                    pool_size=self.pool_size,
                    now=now,
                )
            )
            self._unrecorded = None  # the batch is recorded: it is kept, whatever happens next
            store.add_queued(self.batch_id, assembly.queued_rows(children))
        else:
            found = self._settle_resumed(children)
            children = found.live
            first_receipt, adopted = found.first_receipt_id, frozenset(found.adopted)
        recorder = StoreRecorder(store, self.batch_id, self.clock)
        # What held the admission of a resumed batch (the holds joined as Snapshot.held).
        held = (self._resuming[0].info.held or "").split("; ") if self._resuming else []
        setup = Setup(
            children,
            self.routes,
            pool=self.pool,
            pool_size=self.pool_size,
            settings=self.settings,
            meter=self.meter,
            clock=self.clock,
            recorder=recorder,
            publish=self._publish,
            on_finished=self._finish,
            throttles=throttles,
            between_facts=self.sink.pump,
            carried=Carried(
                self.carried,
                first_receipt,
                # The operator paused admission before the owner died: it stays paused.
                admission_paused=OPERATOR_HOLD in held,
                soft_held=next((h for h in held if h.startswith(SOFT_HOLD)), None),
                adopted=adopted,
                runs=self.resumed.runs if self.resumed is not None else 0,
                tasks=frozenset(t.id for t in self.batch.tasks),
                units_told=self.resumed.units_told if self.resumed is not None else {},
            ),
            spawn=spawn,
            schedules=self.batch.schedules,
            publish_live=self._publish_live,
            rework=Rework(
                remake=lambda task, kept: make_child(task, queued_ts=self.clock(), kept=kept),
                tasks={t.id: t for t in self.batch.tasks},
                session_of=functools.partial(session_of, store.path, self.batch_id),
                flush_transcripts=lambda: sink.flush(FLUSH_S),
                reviewer=Reviewer(self.batch_id, self.batch_dir, recorder.record_event, self.clock),
                on_reopened=self._reopened,
                context_chars=self.settings.engine.max_task_chars,
            ),
        )
        self.coordinator = Coordinator(setup)
        self.sender = sender = Sender(
            self.coordinator,
            recorder,
            self.batch_id,
            carried=self.carried,
            max_chars=self.settings.engine.max_task_chars,
            secrets=self._secrets,
        )
        self.duties = OwnerDuties(
            store.path,
            self.batch_id,
            store,
            lambda request: sender.apply_request(request.id, request.command),
            self.clock,
        )
        self.duties.start()  # before the coordinator: what was pending is applied first
        self.coordinator.start()

    def problem(self) -> str | None:
        """What keeps the engine from recording or running as it should, in a sentence."""
        if self.coordinator is None:
            return None
        trouble = self.store.trouble if self.store else None
        return health.problem(self.coordinator, trouble, self.settings.engine.store_retry_s)

    def close(self) -> None:
        """Stop the coordinator (once every child has ended), the duties, the pool, the sink and
        the store: each that was made."""
        if self.coordinator is not None:
            if self.duties is not None:
                # Requests recorded before the batch finished are settled, not left pending
                # (the coordinator still answers until shutdown: late steers end missed).
                self.duties.stop()
                self.duties.drain()
                self.duties.stop()
            self.coordinator.shutdown()  # and its pool
        elif self.pool is not None:  # start() failed before the coordinator existed
            self.pool.shutdown()
        if self.sink is not None:
            self.sink.close()
        if self._unrecorded is not None:  # start() failed before the batch was recorded
            self._unrecorded.forget()
            self._unrecorded = None
        if self.store is not None:
            self.store.close()
        if self._opened:
            self._opened = False
            tree.batch_closed()

    # --- the coordinator's hooks ---------------------------------------------------------------

    def _publish_live(self, rows: tuple[ChildRow, ...]) -> None:
        """Coordinator thread: the alive children's live figures, the route gauges and the
        problem, for attached views (records/live.py); recorded only when they changed."""
        assert self.store is not None and self.coordinator is not None
        if self.store.trouble is not None:  # held in memory until it commits: not this
            return
        # Steerability is a route's (a command route may take none): learned per route once.
        self._unsteerable.update(r.route for r in rows if not r.steerable)
        body = live_json(rows, self.coordinator.headroom(), self.problem(), self._unsteerable)
        if body != self._live:
            self._live = body
            self.store.set_live(self.batch_id, body)

    def _settle_resumed(self, children: list[Child]) -> Resumed:
        from flightdeck.engine.owner import resume

        assert self.store is not None and self._resuming is not None
        stored, rerun = self._resuming
        found, self.lost_cost = resume.take_over(
            stored,
            children,
            rerun=rerun,
            batch_id=self.batch_id,
            store=self.store,
            meter=self.meter,
            clock=self.clock,
        )
        self.started_ts = stored.info.created_ts
        self.carried = tuple(found.carried)
        self.resumed = found
        return found

    def _reopened(self) -> None:
        """Coordinator thread: a retry came after the batch had ended; it runs again."""
        assert self.store is not None
        self.status, self.finished_ts = BatchStatus.RUNNING, None
        self.store.reopen_batch(self.batch_id)
        try:
            self._manifest()
        except OSError as exc:
            log.error("flightdeck engine: cannot write the batch manifest: %s", exc)

    def _report(self, fact: ChildFact) -> None:
        assert self.coordinator is not None
        self.coordinator.report(fact)

    def _manifest(self, status: BatchStatus = BatchStatus.RUNNING) -> None:
        assert self.workspace is not None  # made before the first manifest
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
        assert self.store is not None and self.coordinator is not None
        self.status = status
        if self.sink is not None:
            self.sink.flush()  # every transcript is complete before the batch says finished
        self.finished_ts = finished = self.clock()
        self._publish_live(())  # the route gauges as they ended, nothing in flight
        self.store.finish_batch(self.batch_id, status, finished)
        if not self.store.flush():
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
