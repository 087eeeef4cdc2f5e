"""SQLite state: one writer thread owns the only write connection; readers have their own."""

from __future__ import annotations

import atexit
import functools
import itertools
import logging
import os
import queue
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any, NamedTuple

from flightdeck.engine.errors import StoreError
from flightdeck.engine.model import (
    Activity,
    BatchStatus,
    ChildRow,
    ChildStatus,
    SteerReceipt,
    SteerState,
    Usage,
    record,
)

log = logging.getLogger(__name__)

SCHEMA_VERSION = 1
BUSY_TIMEOUT_MS = 30_000
# Rows per transaction (an operation writing several counts each): transactions stay short, so
# another process's writer gets the lock between them, and fsyncs stay few. A multiple of the
# largest multi-row INSERT, so a big write's transactions are whole statements of it.
MAX_BATCH = 512

_SCHEMA = """
CREATE TABLE IF NOT EXISTS batches (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    source TEXT,
    spec_json TEXT NOT NULL,
    workspace TEXT NOT NULL,
    state_dir TEXT NOT NULL,
    owner_pid INTEGER NOT NULL,
    owner_start REAL,
    pool_size INTEGER NOT NULL,
    max_cost_usd TEXT,
    status TEXT NOT NULL,
    created_ts REAL NOT NULL,
    finished_ts REAL
);
CREATE TABLE IF NOT EXISTS children (
    batch_id TEXT NOT NULL,
    id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    goal TEXT NOT NULL,
    grp TEXT,
    route TEXT NOT NULL,
    model TEXT NOT NULL,
    status TEXT NOT NULL,
    api_calls INTEGER NOT NULL DEFAULT 0,
    tool_calls INTEGER NOT NULL DEFAULT 0,
    retries INTEGER NOT NULL DEFAULT 0,
    turns INTEGER NOT NULL DEFAULT 0,
    current_tool TEXT,
    tool_started_ts REAL,
    activity TEXT NOT NULL DEFAULT '',
    last_activity_ts REAL,
    tokens_in INTEGER NOT NULL DEFAULT 0,
    tokens_out INTEGER NOT NULL DEFAULT 0,
    cache_read INTEGER NOT NULL DEFAULT 0,
    cache_write INTEGER NOT NULL DEFAULT 0,
    cost_usd TEXT,
    queued_ts REAL NOT NULL,
    started_ts REAL,
    finished_ts REAL,
    error TEXT,
    result TEXT,
    transcript TEXT NOT NULL,
    PRIMARY KEY (batch_id, id)
);
CREATE INDEX IF NOT EXISTS children_by_seq ON children (batch_id, seq);
CREATE TABLE IF NOT EXISTS controls (
    id INTEGER NOT NULL,
    batch_id TEXT NOT NULL,
    child_id TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('steer', 'stop')),
    message TEXT NOT NULL,
    now INTEGER NOT NULL,
    state TEXT NOT NULL,
    created_ts REAL NOT NULL,
    settled_ts REAL,
    PRIMARY KEY (batch_id, id)
);
CREATE INDEX IF NOT EXISTS controls_by_child ON controls (batch_id, child_id, id);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    batch_id TEXT NOT NULL,
    child_id TEXT,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    detail TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_by_batch ON events (batch_id, id);
"""

_BATCH_COLUMNS = (
    "id, name, source, spec_json, workspace, state_dir, owner_pid, owner_start, pool_size, "
    "max_cost_usd, status, created_ts, finished_ts"
)
_CHILD_COLUMNS = (
    "batch_id, id, seq, goal, grp, route, model, status, api_calls, tool_calls, retries, turns, "
    "current_tool, tool_started_ts, activity, last_activity_ts, tokens_in, tokens_out, "
    "cache_read, cache_write, cost_usd, queued_ts, started_ts, finished_ts, error, result, "
    "transcript"
)
_CONTROL_COLUMNS = "id, batch_id, child_id, kind, message, now, state, created_ts, settled_ts"


def _upsert(
    table: str, columns: str, keys: tuple[str, ...], fixed: Mapping[str, str] | None = None
) -> str:
    """An upsert of every column; `fixed` columns take an SQL literal instead of a parameter."""
    names = [c.strip() for c in columns.split(",")]
    if unknown := set(fixed or {}) - set(names):
        raise ValueError(f"not columns of {table}: {sorted(unknown)}")
    updates = ", ".join(f"{c} = excluded.{c}" for c in names if c not in keys)
    marks = ", ".join((fixed or {}).get(n, "?") for n in names)
    return (
        f"INSERT INTO {table} ({columns}) VALUES ({marks}) "
        f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {updates}"
    )


_UPSERT_BATCH = _upsert("batches", _BATCH_COLUMNS, ("id",))
_UPSERT_CHILD = _upsert("children", _CHILD_COLUMNS, ("batch_id", "id"))
# A child that has not started: everything but what its task says is the same for all, so it
# is written as literals and a queued row binds 9 values instead of 27 (sqlite3 spends more
# binding a parameter than SQLite spends storing it). A test keeps the rows equal to the
# full upsert's.
_NOT_STARTED = {
    "status": f"'{ChildStatus.QUEUED.value}'",
    **dict.fromkeys(("api_calls", "tool_calls", "retries", "turns"), "0"),
    **dict.fromkeys(("tokens_in", "tokens_out", "cache_read", "cache_write"), "0"),
    **dict.fromkeys(("current_tool", "tool_started_ts", "last_activity_ts"), "NULL"),
    **dict.fromkeys(("started_ts", "finished_ts", "error", "result"), "NULL"),
    "activity": "''",
    "cost_usd": "'0'",
}
_UPSERT_QUEUED = _upsert("children", _CHILD_COLUMNS, ("batch_id", "id"), _NOT_STARTED)
_UPSERT_CONTROL = _upsert("controls", _CONTROL_COLUMNS, ("batch_id", "id"))
_INSERT_EVENT = "INSERT INTO events (batch_id, child_id, ts, kind, detail) VALUES (?, ?, ?, ?, ?)"
_FINISH_BATCH = "UPDATE batches SET status = ?, finished_ts = ? WHERE id = ?"
_SETTLE_LIVE = (
    "UPDATE children SET status = ?, finished_ts = coalesce(finished_ts, ?), current_tool = NULL "
    "WHERE batch_id = ? AND status IN ('queued', 'gated', 'running')"
)
_TERMINAL_NOT_COMPLETED = tuple(
    s.value for s in ChildStatus if s.terminal and s is not ChildStatus.COMPLETED
)


class StoreNotFoundError(FileNotFoundError):
    """There is no flightdeck database at the given path."""


class StoreVersionError(StoreError):
    """The database was written by a newer flightdeck."""


def _newer_schema(path: Path, version: int) -> StoreVersionError:
    return StoreVersionError(
        path,
        None,
        None,
        f"database schema {version} is newer than this flightdeck understands "
        f"({SCHEMA_VERSION}); upgrade flightdeck",
    )


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """One batch as stored, plus summary fields filled in when read back."""

    id: str
    name: str
    source: str | None
    spec_json: str
    workspace: str
    state_dir: str
    owner_pid: int
    owner_start: float | None
    pool_size: int
    max_cost_usd: Decimal | None
    status: BatchStatus
    created_ts: float
    finished_ts: float | None
    children: int = 0
    completed: int = 0
    failed: int = 0  # every terminal status other than completed
    cost_usd: Decimal = Decimal(0)  # sum of the known costs
    cost_unknown: int = 0  # children whose price is unknown


def process_start_time(pid: int | None = None) -> float | None:
    """Seconds since boot at which `pid` (default: this process) started; None if unknown."""
    try:
        with open(f"/proc/{os.getpid() if pid is None else pid}/stat", "rb") as fh:
            stat = fh.read().decode("ascii", "replace")
        # comm (field 2) may contain spaces and parentheses: split after the last ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        return int(fields[19]) / os.sysconf("SC_CLK_TCK")  # field 22, starttime in ticks
    except (OSError, ValueError, IndexError):
        return None


def _dec(value: Decimal | None) -> str | None:
    return None if value is None else str(value)


def _batch_params(info: BatchInfo) -> tuple[Any, ...]:
    return (
        info.id,
        info.name,
        info.source,
        info.spec_json,
        info.workspace,
        info.state_dir,
        info.owner_pid,
        info.owner_start,
        info.pool_size,
        _dec(info.max_cost_usd),
        info.status.value,
        info.created_ts,
        info.finished_ts,
    )


def _child_params(batch_id: str, row: ChildRow) -> tuple[Any, ...]:
    act, use = row.activity, row.usage
    return (
        batch_id,
        row.id,
        row.seq,
        row.goal,
        row.group,
        row.route,
        row.model,
        str(row.status),  # the StrEnum's value, cheaper than its `.value` property
        act.api_calls,
        act.tool_calls,
        act.retries,
        act.turns,
        act.current_tool,
        act.tool_started_ts,
        act.text,
        act.last_activity_ts,
        use.input_tokens,
        use.output_tokens,
        use.cache_read_tokens,
        use.cache_write_tokens,
        _dec(row.cost_usd),
        row.queued_ts,
        row.started_ts,
        row.finished_ts,
        row.error,
        row.result,
        row.transcript,
    )


class QueuedChild(NamedTuple):
    """A child as first recorded, before it runs: all `add_queued` needs, without building a
    full `ChildRow` (and its `Activity` and `Usage`) for each of thousands of queued children."""

    id: str
    seq: int
    goal: str
    group: str | None
    route: str
    model: str
    queued_ts: float
    transcript: str


def _queued_params(batch_id: str, c: QueuedChild) -> tuple[Any, ...]:
    # The parameters of _UPSERT_QUEUED, in column order; a batch records thousands at once.
    return (batch_id, c.id, c.seq, c.goal, c.group, c.route, c.model, c.queued_ts, c.transcript)


def _null(value: None) -> None:
    return value


# sqlite3 binds int, float, str and bytes as they are, but sends every other value, None
# included, through its adapter protocol: a registry miss and two failed attribute lookups,
# 0.8 µs per None, and a child's rows bind four to eight of them. A registered adapter is found
# at the first step (0.25 µs). It returns None itself, so what is bound is still NULL, for
# every connection in the process.
sqlite3.register_adapter(type(None), _null)


def _connect(target: str, *, uri: bool = False) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN/COMMIT ourselves. check_same_thread=False because
    # the writer connection is made here and used on the writer thread, and readers lock.
    conn = sqlite3.connect(
        target,
        uri=uri,
        isolation_level=None,
        check_same_thread=False,
        timeout=BUSY_TIMEOUT_MS / 1000,
    )
    conn.execute(f"PRAGMA busy_timeout = {BUSY_TIMEOUT_MS}")
    return conn


@record
class _Write:
    what: str  # for the log line when it fails; never the parameters (they may be large)
    sql: str
    params: Sequence[Any]
    many: bool = False
    key: tuple[str, str] | None = None  # (batch, child) for update_child coalescing
    # Runs like a `_Then` queued right after this write: carried here, a child's final row
    # and its callback are one queued item instead of two (thousands of children a second).
    # A write coalesced away still has its callback run.
    then: Callable[[], object] | None = None


class _Then:
    """Runs `call` on the writer thread once every write queued before it has been committed
    (or, for a write that can never succeed, given up on and logged)."""

    __slots__ = ("call",)

    def __init__(self, call: Callable[[], object]) -> None:
        self.call = call


_Op = _Write | _Then | None  # None: stop the writer


class Store:
    """The write side: non-blocking enqueuers in front of one writer thread."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            conn = _connect(str(path))
        except sqlite3.Error as exc:  # a folder by that name, no permission, ...
            raise StoreError(path, None, None, f"cannot open the database: {exc}") from None
        try:
            _use_wal(conn, path)
            # A commit survives the process dying (a crash, kill -9); only an OS crash or a
            # power cut can lose the last ones. FULL would fsync the log at every commit.
            conn.execute("PRAGMA synchronous = NORMAL")
            _ensure_schema(conn, path)
        except sqlite3.DatabaseError as exc:  # not a database, corrupt, read-only, ...
            conn.close()
            raise StoreError(path, None, None, f"cannot use the database: {exc}") from None
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        # SimpleQueue: put is one C call, no Python-level lock and condition per row
        self._queue: queue.SimpleQueue[_Op] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._closed = False
        self.failed_writes = 0
        self._thread = threading.Thread(target=self._run, name="flightdeck-store", daemon=True)
        self._thread.start()
        # Daemon, so a forgotten close() cannot hang exit; atexit still drains the queue.
        atexit.register(self.close)

    # -- enqueuers (any thread, never block) -------------------------------------------------

    def create_batch(self, info: BatchInfo) -> None:
        """Insert (or replace) a batch row."""
        self._put(_Write("create_batch", _UPSERT_BATCH, _batch_params(info)))

    def add_children(self, batch_id: str, rows: Sequence[ChildRow]) -> None:
        """Insert many children; a long list goes in several transactions (see MAX_BATCH)."""
        params = [_child_params(batch_id, row) for row in rows]
        self._put_rows("add_children", _UPSERT_CHILD, params)

    def add_queued(self, batch_id: str, children: Iterable[QueuedChild]) -> None:
        """Insert children that have not started; several transactions for a long list."""
        params = [_queued_params(batch_id, c) for c in children]
        self._put_rows("add_queued", _UPSERT_QUEUED, params)

    def update_child(
        self, batch_id: str, row: ChildRow, then: Callable[[], object] | None = None
    ) -> None:
        """Upsert every column of one child; `then` runs (on the writer thread) once committed."""
        params = _child_params(batch_id, row)
        self._put(_Write("update_child", _UPSERT_CHILD, params, key=(batch_id, row.id), then=then))

    def record_control(self, batch_id: str, receipt: SteerReceipt, kind: str = "steer") -> None:
        """Upsert a steer or stop command and its receipt state."""
        params = (
            receipt.id,
            batch_id,
            receipt.child_id,
            kind,
            receipt.message,
            int(receipt.now),
            receipt.state.value,
            receipt.created_ts,
            receipt.settled_ts,
        )
        self._put(_Write("record_control", _UPSERT_CONTROL, params))

    def record_event(
        self, batch_id: str, child_id: str | None, ts: float, kind: str, detail: str
    ) -> None:
        """Append an operator action or notable engine event."""
        self._put(_Write("record_event", _INSERT_EVENT, (batch_id, child_id, ts, kind, detail)))

    def finish_batch(self, batch_id: str, status: BatchStatus, ts: float) -> None:
        """Set a batch's final status and finish time."""
        self._put(_Write("finish_batch", _FINISH_BATCH, (status.value, ts, batch_id)))

    def settle_live_children(self, batch_id: str, status: ChildStatus, ts: float) -> None:
        """Give every queued/gated/running child of a batch a final status (crash recovery)."""
        self._put(_Write("settle_live_children", _SETTLE_LIVE, (status.value, ts, batch_id)))

    # -- synchronisation ---------------------------------------------------------------------

    def flush(self, timeout: float | None = None) -> bool:
        """Block until everything enqueued before this call is committed; False on timeout."""
        done = threading.Event()
        # Bounded like the wait: a second Ctrl+C's handler calls this, and may have interrupted
        # this very thread while it held the lock (queuing a big batch's rows).
        if not self._lock.acquire(timeout=-1 if timeout is None else timeout):
            return False
        try:
            closed = self._closed
            if not closed:
                self._queue.put(_Then(done.set))
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

    def _put(self, *ops: _Write | _Then) -> None:
        with self._lock:  # several ops queue together, in order
            if self._closed:
                raise RuntimeError(f"store {self.path} is closed")
            for op in ops:
                self._queue.put(op)

    def _put_rows(self, what: str, sql: str, params: list[tuple[Any, ...]]) -> None:
        # One transaction for a 200,000-task batch held the write lock for seconds, and another
        # process's finished children waited (unwritten, lost on a kill) all that time.
        self._put(
            *(
                _Write(what, sql, params[i : i + MAX_BATCH], many=True)
                for i in range(0, len(params), MAX_BATCH)
            )
        )

    # -- the writer thread -------------------------------------------------------------------

    def _run(self) -> None:
        stopping = False
        try:
            while not stopping:
                ops: list[_Op] = []
                rows = 0
                op = self._queue.get()
                while True:
                    ops.append(op)
                    rows += len(op.params) if isinstance(op, _Write) and op.many else 1
                    if rows >= MAX_BATCH:
                        break
                    try:
                        op = self._queue.get_nowait()
                    except queue.Empty:
                        break
                writes = _coalesce([op for op in ops if isinstance(op, _Write)])
                if writes:
                    self._commit(writes)
                for op in ops:
                    if op is None:
                        stopping = True
                        continue
                    call = op.call if isinstance(op, _Then) else op.then
                    if call is not None:
                        try:
                            call()
                        except Exception:  # the caller's bug must not stop the writer
                            log.exception("flightdeck store: a commit callback failed")
        finally:
            self._conn.close()

    def _commit(self, writes: list[_Write]) -> None:
        # Broad excepts: a bad value (e.g. an int too large for SQLite raises OverflowError)
        # must cost one write, never the writer thread.
        try:
            self._transaction(writes)
        except Exception:
            # Find the bad operation(s): retry one per transaction so the good ones still land.
            self._rollback()
            for write in writes:
                try:
                    try:
                        self._transaction([write])
                    except UnicodeEncodeError:
                        # Text SQLite cannot take (a lone surrogate, which JSON task files and
                        # model output may carry): kept with U+FFFD in its place, not lost.
                        self._rollback()
                        self._transaction([_scrubbed(write)])
                except Exception as exc:
                    self._rollback()
                    self.failed_writes += 1
                    log.error("flightdeck store: %s failed: %s", write.what, exc)

    def _transaction(self, writes: list[_Write]) -> None:
        # Another process holding the write lock past the busy timeout (a long transaction, a
        # process stopped mid-write) is no reason to lose a child's final row: wait it out, for
        # as long as it takes. close() waits too; flush(timeout) still returns in time.
        waits = 0
        while True:
            try:
                self._attempt(writes)
                return
            except sqlite3.OperationalError as exc:
                if not _busy(exc):
                    raise
                self._rollback()
                if not waits:
                    log.warning("flightdeck store: %s by another process; still trying", exc)
                _back_off(waits)
                waits += 1

    def _attempt(self, writes: list[_Write]) -> None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        for sql, params in _runs(writes):
            if sql in _MULTI_ROW and len(params) > 1:
                _insert_rows(conn, sql, params)
            else:
                conn.executemany(sql, params)
        conn.execute("COMMIT")

    def _rollback(self) -> None:
        if self._conn.in_transaction:
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error as exc:
                log.error("flightdeck store: rollback failed: %s", exc)


# Row inserts that may go several rows to a statement. sqlite3 releases the interpreter lock
# around every step, and `executemany` steps once per row: with 64 busy worker threads, winning
# the lock back after each row cost the writer more than SQLite's own work (on the engine
# benchmark, the final child rows cost 70 µs of CPU per child that way). One multi-row INSERT
# is one step. Chunks come in a few fixed sizes, so sqlite3's statement cache keeps them.
_MULTI_ROW = frozenset({_UPSERT_CHILD, _UPSERT_QUEUED, _UPSERT_CONTROL, _INSERT_EVENT})
_CHUNKS = (64, 16, 4, 1)


@functools.lru_cache(maxsize=32)
def _rows_sql(sql: str, rows: int) -> str:
    """`sql` (an INSERT with one VALUES tuple) inserting `rows` rows."""
    head, values, tail = sql.partition(" VALUES ")
    one, close, rest = tail.partition(")")
    return f"{head}{values}{', '.join([one + close] * rows)}{rest}"


def _insert_rows(conn: sqlite3.Connection, sql: str, params: list[Sequence[Any]]) -> None:
    """Insert rows in order, as few statements as the chunk sizes allow."""
    i, n = 0, len(params)
    for size in _CHUNKS:
        while n - i >= size:
            chunk = params[i : i + size]
            # Flattened in C: a comprehension ran bytecode for each of 27 values a row.
            conn.execute(_rows_sql(sql, size), list(itertools.chain.from_iterable(chunk)))
            i += size


def _runs(writes: list[_Write]) -> Iterator[tuple[str, list[Sequence[Any]]]]:
    """Consecutive writes of one statement, merged: one executemany instead of a call each."""
    sql: str | None = None
    params: list[Sequence[Any]] = []
    for write in writes:
        if write.sql != sql:
            if sql is not None:
                yield sql, params
            sql, params = write.sql, []
        if write.many:
            params.extend(write.params)
        else:
            params.append(write.params)
    if sql is not None:
        yield sql, params


def _scrubbed(write: _Write) -> _Write:
    """The same write with every string made valid Unicode (lone surrogates become U+FFFD)."""

    def row(params: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(_valid_text(v) if isinstance(v, str) else v for v in params)

    params = [row(p) for p in write.params] if write.many else row(write.params)
    return _Write(write.what, write.sql, params, write.many, write.key)


def _valid_text(text: str) -> str:
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _coalesce(writes: list[_Write]) -> list[_Write]:
    """Drop update_child writes superseded by a later one for the same child in this batch."""
    last: dict[tuple[str, str], int] = {}
    for i, write in enumerate(writes):
        if write.key is not None:
            last[write.key] = i
    if len(last) == sum(1 for w in writes if w.key is not None):
        return writes
    return [w for i, w in enumerate(writes) if w.key is None or last[w.key] == i]


def _busy(exc: sqlite3.Error) -> bool:
    """Whether another connection holds a lock the statement needed ("database is locked"):
    worth trying again. Not SQLITE_LOCKED, a conflict inside one connection: waiting never
    ends that."""
    return exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY


def _back_off(attempt: int) -> None:
    time.sleep(0.001 * 2 ** min(attempt, 7))  # 1 ms doubling to 128 ms, however long it lasts


def _use_wal(conn: sqlite3.Connection, path: Path) -> None:
    # Turning a new file to WAL takes an exclusive lock and fails at once, without the busy
    # timeout, while another process does the same (two runs started together).
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    attempt = 0
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            break
        except sqlite3.OperationalError as exc:
            if not _busy(exc) or time.monotonic() >= deadline:
                raise
        _back_off(attempt)
        attempt += 1
    if mode != "wal":  # refused without an error: readers would block the writer
        raise StoreError(path, None, None, f"cannot use WAL mode (the journal stays {mode})")


def _ensure_schema(conn: sqlite3.Connection, path: Path) -> None:
    if _schema_version(conn, path) == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Another process may have made the schema while this one waited for the lock.
        if _schema_version(conn, path) == SCHEMA_VERSION:
            conn.execute("COMMIT")
            return
        # Version 0 is a new file, or another program's database: never add tables to that.
        tables = [
            str(r[0])
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            )
        ]
        if tables:
            shown = ", ".join(sorted(tables)[:5]) + (", ..." if len(tables) > 5 else "")
            message = f"not a flightdeck database (it has other tables: {shown})"
            raise StoreError(path, None, None, message)
        for statement in _SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _schema_version(conn: sqlite3.Connection, path: Path) -> int:
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise _newer_schema(path, version)
    return version


class StoreReader:
    """A read-only connection for the UI, attach and reports; safe to share between threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.is_file():
            raise StoreNotFoundError(
                f"no flightdeck database at {path} (run a batch first, or pass --state-dir)"
            )
        self._uri = f"{path.resolve().as_uri()}?mode=ro"
        self._conn = _connect(self._uri, uri=True)
        self._lock = threading.Lock()
        self._ready = False

    def close(self) -> None:
        """Close the connection; idempotent."""
        with self._lock:
            self._conn.close()

    def __enter__(self) -> StoreReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def batches(self) -> list[BatchInfo]:
        """Every batch, newest first, with summary fields."""
        with self._lock:
            if not self._check_ready():
                return []
            return self._batches(None)

    def batch(self, batch_id: str) -> BatchInfo | None:
        """One batch with summary fields, or None."""
        with self._lock:
            if not self._check_ready():
                return None
            found = self._batches(batch_id)
            return found[0] if found else None

    def latest_batch_id(self) -> str | None:
        """The id of the most recently created batch, or None."""
        with self._lock:
            if not self._check_ready():
                return None
            row = self._conn.execute(
                "SELECT id FROM batches ORDER BY created_ts DESC, rowid DESC LIMIT 1"
            ).fetchone()
            return None if row is None else str(row[0])

    def children(self, batch_id: str) -> list[ChildRow]:
        """A batch's children in seq order, each with its steer receipts."""
        with self._lock:
            if not self._check_ready():
                return []
            with self._snapshot():
                rows = self._conn.execute(
                    f"SELECT {_CHILD_COLUMNS} FROM children WHERE batch_id = ? ORDER BY seq, id",
                    (batch_id,),
                ).fetchall()
                steers: dict[str, list[SteerReceipt]] = {}
                for receipt in self._controls(batch_id, None, "steer"):
                    steers.setdefault(receipt.child_id, []).append(receipt)
        return [_child_row(r, tuple(steers.get(r[1], ()))) for r in rows]

    def child(self, batch_id: str, child_id: str) -> ChildRow | None:
        """One child with its steer receipts, or None."""
        with self._lock:
            if not self._check_ready():
                return None
            with self._snapshot():
                row = self._conn.execute(
                    f"SELECT {_CHILD_COLUMNS} FROM children WHERE batch_id = ? AND id = ?",
                    (batch_id, child_id),
                ).fetchone()
                steers = tuple(self._controls(batch_id, child_id, "steer"))
        return None if row is None else _child_row(row, steers)

    def controls(
        self, batch_id: str, child_id: str | None = None, kind: str | None = None
    ) -> list[SteerReceipt]:
        """Steer and stop receipts of a batch (or one child), oldest first."""
        with self._lock:
            if not self._check_ready():
                return []
            return self._controls(batch_id, child_id, kind)

    def events(self, batch_id: str) -> list[tuple[float, str | None, str, str]]:
        """A batch's events as (ts, child_id, kind, detail), oldest first."""
        with self._lock:
            if not self._check_ready():
                return []
            rows = self._conn.execute(
                "SELECT ts, child_id, kind, detail FROM events WHERE batch_id = ? ORDER BY id",
                (batch_id,),
            ).fetchall()
        return [(float(r[0]), r[1], str(r[2]), str(r[3])) for r in rows]

    # Everything below runs with the lock held.

    def _check_ready(self) -> bool:
        # A reader may open the file in the instant before the writer has made the schema.
        if not self._ready:
            try:
                try:
                    version = _schema_version(self._conn, self.path)
                except sqlite3.OperationalError as exc:
                    if not _readable_without_shm(self.path, exc):
                        raise
                    self._conn.close()
                    self._conn = _connect(f"{self._uri}&immutable=1", uri=True)
                    version = _schema_version(self._conn, self.path)
            except sqlite3.DatabaseError as exc:  # not a database, unreadable
                raise StoreError(
                    self.path, None, None, f"cannot read the database: {exc}"
                ) from None
            self._ready = version == SCHEMA_VERSION
        return self._ready

    def _snapshot(self) -> _ReadTransaction:
        return _ReadTransaction(self._conn)

    def _batches(self, batch_id: str | None) -> list[BatchInfo]:
        where, args = ("WHERE id = ?", (batch_id,)) if batch_id is not None else ("", ())
        with self._snapshot():
            batch_rows = self._conn.execute(
                f"SELECT {_BATCH_COLUMNS} FROM batches {where} "
                "ORDER BY created_ts DESC, rowid DESC",
                args,
            ).fetchall()
            child_where = "WHERE batch_id = ?" if batch_id is not None else ""
            child_rows = self._conn.execute(
                f"SELECT batch_id, status, cost_usd FROM children {child_where}", args
            ).fetchall()
        # Costs are exact Decimal strings: sum them here, not as SQL floats.
        summary: dict[str, list[Any]] = {}
        for bid, status, cost in child_rows:
            s = summary.setdefault(bid, [0, 0, 0, Decimal(0), 0])
            s[0] += 1
            if status == ChildStatus.COMPLETED:
                s[1] += 1
            elif status in _TERMINAL_NOT_COMPLETED:
                s[2] += 1
            if cost is None:
                s[4] += 1
            else:
                s[3] += Decimal(cost)
        out = []
        for r in batch_rows:
            n, completed, failed, cost, unknown = summary.get(r[0], [0, 0, 0, Decimal(0), 0])
            out.append(
                BatchInfo(
                    id=r[0],
                    name=r[1],
                    source=r[2],
                    spec_json=r[3],
                    workspace=r[4],
                    state_dir=r[5],
                    owner_pid=r[6],
                    owner_start=r[7],
                    pool_size=r[8],
                    max_cost_usd=None if r[9] is None else Decimal(r[9]),
                    status=BatchStatus(r[10]),
                    created_ts=r[11],
                    finished_ts=r[12],
                    children=n,
                    completed=completed,
                    failed=failed,
                    cost_usd=cost,
                    cost_unknown=unknown,
                )
            )
        return out

    def _controls(
        self, batch_id: str, child_id: str | None, kind: str | None
    ) -> list[SteerReceipt]:
        sql = "SELECT id, child_id, message, now, state, created_ts, settled_ts FROM controls "
        sql += "WHERE batch_id = ?"
        args: list[Any] = [batch_id]
        if child_id is not None:
            sql += " AND child_id = ?"
            args.append(child_id)
        if kind is not None:
            sql += " AND kind = ?"
            args.append(kind)
        rows = self._conn.execute(sql + " ORDER BY id", args).fetchall()
        return [
            SteerReceipt(
                id=r[0],
                child_id=r[1],
                message=r[2],
                now=bool(r[3]),
                state=SteerState(r[4]),
                created_ts=r[5],
                settled_ts=r[6],
            )
            for r in rows
        ]


def _readable_without_shm(path: Path, exc: sqlite3.Error) -> bool:
    """Whether a read failed only because the -shm file (WAL's shared index, which even a
    read-only connection needs) cannot be made, and the database can be read without it.

    A clean close removes the -shm; in a folder this process cannot write (a read-only mount,
    another user's state folder) it cannot be made again. With no -shm, no connection has the
    file open, so no writer is at work; and with no frames in the -wal, everything is in the
    database file, which `immutable` then reads without the -shm or any lock."""
    if exc.sqlite_errorcode & 0xFF not in (sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_READONLY):
        return False
    try:
        if os.path.lexists(f"{path}-shm") or os.path.getsize(f"{path}-wal"):
            return False
    except FileNotFoundError:
        pass
    except OSError:
        return False
    return not os.access(path.parent, os.W_OK)


class _ReadTransaction:
    """BEGIN … COMMIT around several SELECTs so they see one consistent WAL snapshot."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN")

    def __exit__(self, *exc: object) -> None:
        self._conn.execute("COMMIT")


def _child_row(r: Sequence[Any], steers: tuple[SteerReceipt, ...]) -> ChildRow:
    return ChildRow(
        id=r[1],
        seq=r[2],
        goal=r[3],
        group=r[4],
        route=r[5],
        model=r[6],
        status=ChildStatus(r[7]),
        activity=Activity(
            api_calls=r[8],
            tool_calls=r[9],
            retries=r[10],
            turns=r[11],
            current_tool=r[12],
            tool_started_ts=r[13],
            last_activity_ts=r[15],
            text=r[14],
        ),
        usage=Usage(
            input_tokens=r[16],
            output_tokens=r[17],
            cache_read_tokens=r[18],
            cache_write_tokens=r[19],
        ),
        cost_usd=None if r[20] is None else Decimal(r[20]),
        queued_ts=r[21],
        started_ts=r[22],
        finished_ts=r[23],
        error=r[24],
        result=r[25],
        transcript=r[26],
        steers=steers,
    )
