"""`Store`: the write side of the SQLite state, one writer thread owning the only write
connection and draining a queue in short `BEGIN IMMEDIATE` transactions."""

from __future__ import annotations

import atexit
import errno
import functools
import itertools
import json
import logging
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from flightdeck.engine.errors import StoreError
from flightdeck.engine.model import BatchStatus, ChildRow, ChildStatus, SteerReceipt
from flightdeck.engine.private import private_dir, private_file
from flightdeck.engine.records import schema
from flightdeck.engine.records.faults import (
    RETRY_S,
    GaveUp,
    RefusedCommits,
    StoreTrouble,
    rollback,
    storage_fault,
)
from flightdeck.engine.records.rows import (
    FINISH_BATCH,
    HEARTBEAT,
    INSERT_EVENT,
    REOPEN_BATCH,
    SET_HELD,
    SET_LIMITS,
    SET_LIVE,
    SETTLE_LIVE,
    SETTLE_REQUEST,
    UPSERT_BATCH,
    UPSERT_CHILD,
    UPSERT_QUEUED,
    BatchInfo,
    QueuedChild,
    batch_params,
    child_params,
    control_write,
    queued_params,
    running_params,
)
from flightdeck.engine.records.writes import (
    MULTI_ROW,
    Op,
    Queued,
    Then,
    Together,
    Write,
    coalesce,
    fates,
    insert_rows,
    made,
    runs,
    scrubbed,
    take,
    units,
)

__all__ = ["MAX_BATCH", "RETRY_S", "Event", "Store", "StoreTrouble", "storage_fault"]

log = logging.getLogger(__name__)

# A batch event: its child (None: the batch's own), time, kind and detail.
Event = tuple[str | None, float, str, str]

# Rows per transaction (an operation writing several counts each): transactions stay short, so
# another process's writer gets the lock between them, and fsyncs stay few. A multiple of the
# largest multi-row INSERT, so a big write's transactions are whole statements of it.
MAX_BATCH = 512


class Store:
    """The write side: non-blocking enqueuers in front of one writer thread."""

    def __init__(self, path: Path, *, retry_s: float = RETRY_S) -> None:
        self.path = path
        # The user's alone: other users can neither read the batches nor send them commands.
        # A folder that holds a database already is a state folder: made private if it was not.
        private_dir(path.parent, tighten=path.exists())
        try:
            conn = schema.connect(str(path))
        except sqlite3.Error as exc:  # a folder by that name, no permission, ...
            raise StoreError(path, None, None, f"cannot open the database: {exc}") from None
        try:
            # Before the -wal and -shm, which SQLite makes with the database's mode (an older
            # version's may be there already).
            for made in (
                path,
                path.with_name(path.name + "-wal"),
                path.with_name(path.name + "-shm"),
            ):
                private_file(made)
            schema.use_wal(conn, path)
            # A commit survives the process dying (a crash, kill -9); only an OS crash or a
            # power cut can lose the last ones. FULL would fsync the log at every commit.
            conn.execute("PRAGMA synchronous = NORMAL")
            schema.ensure_schema(conn, path)
            schema.check_writable(path)
        except sqlite3.DatabaseError as exc:  # not a database, corrupt, read-only, ...
            conn.close()
            raise StoreError(path, None, None, f"cannot use the database: {exc}") from None
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        self._file_id = schema.file_id(path)
        # SimpleQueue: put is one C call, no Python-level lock and condition per row
        self._queue: queue.SimpleQueue[Queued] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._groups = itertools.count()  # for the writes of a `Together`
        self._closed = False
        self.failed_writes = 0
        self._refused = RefusedCommits(path, retry_s)
        self._thread = threading.Thread(target=self._run, name="flightdeck-store", daemon=True)
        self._thread.start()
        # Daemon, so a forgotten close() cannot hang exit; atexit still drains the queue.
        atexit.register(self.close)

    # -- enqueuers (any thread, never block) -------------------------------------------------

    def create_batch(self, info: BatchInfo) -> None:
        """Insert (or replace) a batch row."""
        self._put(Write("create_batch", UPSERT_BATCH, batch_params(info)))

    def add_children(self, batch_id: str, rows: Sequence[ChildRow]) -> None:
        """Insert many children; a long list goes in several transactions (see MAX_BATCH)."""
        params = [child_params(batch_id, row) for row in rows]
        self._put_rows("add_children", UPSERT_CHILD, params)

    def add_queued(self, batch_id: str, children: Iterable[QueuedChild]) -> None:
        """Insert children that have not started; several transactions for a long list."""
        params = [queued_params(batch_id, c) for c in children]
        self._put_rows("add_queued", UPSERT_QUEUED, params)

    def update_child(
        self,
        batch_id: str,
        row: ChildRow,
        then: Callable[[bool], object] | None = None,
        *,
        events: Sequence[Event] = (),
    ) -> None:
        """Upsert every column of one child; `then` runs (on the writer thread) once the write
        is committed, `then(True)`, or given up on, `then(False)`. `events`: batch events
        committed in the same transaction, never apart from the row."""
        params = child_params(batch_id, row)
        key = (batch_id, row.id)
        if not events:
            self._put(Write("update_child", UPSERT_CHILD, params, key=key, then=then))
            return
        group = next(self._groups)
        first = [
            Write("record_event", INSERT_EVENT, (batch_id, *event), group=group) for event in events
        ]
        write = Write("update_child", UPSERT_CHILD, params, key=key, then=then, group=group)
        self._put(Together((*first, write)))

    def update_running(self, batch_id: str, child_id: str, row: Callable[[], ChildRow]) -> None:
        """Upsert a running child's row as `row()` gives it at its commit, never its end (see
        rows.running_params); not made if a later write of the child in its transaction is."""
        later = functools.partial(running_params, batch_id, row)
        self._put(Write("update_child", UPSERT_CHILD, (), key=(batch_id, child_id), later=later))

    def record_control(
        self,
        batch_id: str,
        receipt: SteerReceipt,
        kind: str = "steer",
        request_id: int | None = None,
        reason: str | None = None,
    ) -> None:
        """Upsert a steer or stop command and its receipt state; `request_id` names the
        client request it came from (its first write; later ones keep it), `reason` why it
        was missed when the child's own end does not say (the owner was lost)."""
        sql, params = control_write(batch_id, receipt, kind, request_id, reason)
        self._put(Write("record_control", sql, params))

    def write(
        self,
        what: str,
        sql: str,
        params: Sequence[Any],
        then: Callable[[bool], object] | None = None,
    ) -> None:
        """Queue one statement of a part that keeps its own table (records/processes.py);
        `then` as for update_child."""
        self._put(Write(what, sql, params, then=then))

    def heartbeat(self, batch_id: str, ts: float) -> None:
        """Stamp the batch row: its owner is alive at `ts`."""
        self._put(Write("heartbeat", HEARTBEAT, (ts, batch_id)))

    def set_live(self, batch_id: str, body: str) -> None:
        """Replace the batch's live figures (records/live.py), for attached views."""
        self._put(Write("set_live", SET_LIVE, (batch_id, body)))

    def set_held(self, batch_id: str, held: str | None) -> None:
        """Record why the batch's admission is held (None: released), for attached views."""
        self._put(Write("set_held", SET_HELD, (held, batch_id)))

    def set_limits(self, batch_id: str, pool_size: int, limits_json: str | None) -> None:
        """Record the pool size and the limits changed while the batch runs."""
        self._put(Write("set_limits", SET_LIMITS, (pool_size, limits_json, batch_id)))

    def settle_request(
        self,
        batch_id: str,
        request_id: int,
        state: str,
        ts: float,
        *,
        control_ids: Sequence[int] = (),
        reason: str | None = None,
        refusal: str | None = None,  # why refused, in a word (records/requests.py `Refusal`)
        payload: str | None = None,  # the command as applied (keys redacted), else as sent
    ) -> None:
        """Mark a pending client request applied or refused (a settled one stays as it is)."""
        ids = json.dumps(list(control_ids))
        params = (state, reason, refusal, ids, ts, payload, batch_id, request_id)
        self._put(Write("settle_request", SETTLE_REQUEST, params))

    def record_event(
        self,
        batch_id: str,
        child_id: str | None,
        ts: float,
        kind: str,
        detail: str,
        then: Callable[[bool], object] | None = None,
    ) -> None:
        """Append an operator action or notable engine event; `then` as for update_child."""
        params = (batch_id, child_id, ts, kind, detail)
        self._put(Write("record_event", INSERT_EVENT, params, then=then))

    def finish_batch(self, batch_id: str, status: BatchStatus, ts: float) -> None:
        """Set a batch's final status and finish time."""
        self._put(Write("finish_batch", FINISH_BATCH, (status.value, ts, batch_id)))

    def reopen_batch(self, batch_id: str) -> None:
        """A batch that had ended runs again (the operator retried a child): running, no end."""
        self._put(Write("reopen_batch", REOPEN_BATCH, (batch_id,)))

    def settle_live_children(self, batch_id: str, status: ChildStatus, ts: float) -> None:
        """Give every queued/gated/running child of a batch a final status (crash recovery)."""
        self._put(Write("settle_live_children", SETTLE_LIVE, (status.value, ts, batch_id)))

    @property
    def trouble(self) -> StoreTrouble | None:
        """Set while commits are refused (a full disk, say), and for good once the store has
        given up on one; any thread may read it."""
        return self._refused.trouble

    @property
    def retry_s(self) -> float:
        """How long a commit the storage refuses is tried again before the store gives up."""
        return self._refused.retry_s

    # -- synchronisation ---------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Block until everything enqueued before this call is committed; False on timeout,
        and once the store has given up on a commit (`trouble`)."""
        return self._flushed(timeout) and not (self.trouble is not None and self.trouble.gave_up)

    def _flushed(self, timeout: float | None) -> bool:
        done = threading.Event()
        # Bounded like the wait: a second Ctrl+C's handler calls this, and may have interrupted
        # this very thread while it held the lock (queuing a big batch's rows).
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            return False
        try:
            closed = self._closed
            if not closed:
                self._queue.put(Then(done.set))
        finally:
            self._lock.release()
        if closed:  # close() drains the queue: wait for it to finish
            self._thread.join(timeout)
            return not self._thread.is_alive()
        if timeout is not None:
            return done.wait(timeout)
        # Wait in slices so a writer that died (it should not) cannot hang the caller forever.
        while not done.wait(0.5):
            if not self._thread.is_alive():
                return False
        return True

    def close(self) -> None:
        """Commit everything enqueued, stop the writer and close the connection; idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._queue.put(None)
        self._thread.join()
        atexit.unregister(self.close)

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _put(self, *ops: Write | Then | Together) -> None:
        with self._lock:  # several ops queue together, in order
            if self._closed:
                raise RuntimeError(f"store {self.path} is closed")
            for op in ops:
                self._queue.put(op)

    def _put_rows(self, what: str, sql: str, params: list[tuple[Any, ...]]) -> None:
        # One transaction for a very long list would hold the write lock for seconds, while
        # another process's finished children waited (unwritten, lost on a kill).
        self._put(
            *(
                Write(what, sql, params[i : i + MAX_BATCH], many=True)
                for i in range(0, len(params), MAX_BATCH)
            )
        )

    # -- the writer thread -------------------------------------------------------------------

    def _run(self) -> None:
        stopping = False
        try:
            while not stopping:
                stopping = self._handle(take(self._queue, MAX_BATCH))
        finally:
            self._conn.close()

    def _handle(self, ops: list[Op]) -> bool:
        """Commit these ops, then run their callbacks; True if they hold the stop marker. The
        writer's one error path: whatever goes wrong costs these writes (logged, counted, their
        callbacks told so), never the writer thread."""
        writes = [op for op in ops if isinstance(op, Write)]
        try:
            kept = coalesce(writes)
            ready, failed = made(kept)
            self.failed_writes += len(failed)
            failed += self._commit(ready) if ready else []
        except Exception:
            self._rollback()
            self.failed_writes += len(writes)
            log.exception("flightdeck store: %d write(s) not committed", len(writes))
            kept = failed = writes
        told = fates(writes, kept, failed)
        stop = False
        for op in ops:
            try:
                if op is None:
                    stop = True
                elif isinstance(op, Then):
                    op.call()
                elif op.then is not None:
                    op.then(told[id(op)])
            except Exception:  # the caller's bug must not stop the writer
                log.exception("flightdeck store: a commit callback failed")
        return stop

    def _commit(self, writes: list[Write]) -> list[Write]:
        """Commit `writes`; returns those that could not be (each counted and logged)."""
        # Broad excepts: a bad value (e.g. an int too large for SQLite raises OverflowError)
        # must cost one write, never the writer thread.
        try:
            self._durably(writes)
            return []
        except GaveUp as exc:
            self._lost(writes, str(exc))
            return writes
        except Exception:
            self._rollback()
        # Find the bad operation(s): retry one per transaction (a group's together) so the
        # good ones still land.
        failed: list[Write] = []
        for unit in units(writes):
            try:
                try:
                    self._durably(unit)
                except UnicodeEncodeError:
                    # Text SQLite cannot take (a lone surrogate, which JSON task files and
                    # model output may carry): kept with U+FFFD in its place, not lost.
                    self._rollback()
                    self._durably([scrubbed(w) for w in unit])
            except Exception as exc:
                self._rollback()
                self._lost(unit, str(exc))
                failed.extend(unit)
        return failed

    def _lost(self, writes: list[Write], reason: str) -> None:
        self.failed_writes += len(writes)
        what = ", ".join(sorted({w.what for w in writes}))
        if len(writes) == 1:
            log.error("flightdeck store: %s failed: %s", what, reason)
        else:
            log.error("flightdeck store: %d writes (%s) failed: %s", len(writes), what, reason)

    def _durably(self, writes: list[Write]) -> None:
        """One transaction of `writes`, retried for a while if the storage refuses it
        (`faults.py`); GaveUp once that is over."""
        held = sum(len(w.params) if w.many else 1 for w in writes) + self._queue.qsize()
        self._refused.commit(lambda: self._transaction(writes), self._rollback, held)

    def _transaction(self, writes: list[Write]) -> None:
        # Another process holding the write lock past the busy timeout (a long transaction, a
        # process stopped mid-write) is no reason to lose a child's final row: wait it out, for
        # as long as it takes. close() waits too; flush(timeout) still returns in time.
        if schema.file_id(self.path) != self._file_id:
            # Deleted (or replaced) under us: SQLite would go on writing the file it has open,
            # which nobody will ever read. A storage fault like a full disk, said and held.
            raise FileNotFoundError(errno.ENOENT, f"{self.path} was deleted or replaced")
        waits = 0
        while True:
            try:
                self._attempt(writes)
                return
            except sqlite3.OperationalError as exc:
                if getattr(exc, "sqlite_errorcode", None) is None or not schema.is_busy(exc):
                    raise
                self._rollback()
                if not waits:
                    log.warning("flightdeck store: %s by another process; still trying", exc)
                schema.back_off(waits)
                waits += 1

    def _attempt(self, writes: list[Write]) -> None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        for sql, params in runs(writes):
            if sql in MULTI_ROW and len(params) > 1:
                insert_rows(conn, sql, params)
            else:
                conn.executemany(sql, params)
        conn.execute("COMMIT")

    def _rollback(self) -> None:
        try:
            rollback(self._conn)
        except sqlite3.Error as exc:
            log.error("flightdeck store: rollback failed: %s", exc)
