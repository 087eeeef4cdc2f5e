"""The database file: connections, WAL mode, and the schema with its version."""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path

from flightdeck.engine.errors import StoreError
from flightdeck.engine.records.faults import rollback

SCHEMA_VERSION = 7
BUSY_TIMEOUT_MS = 30_000

# Commands from clients (other processes: `flightdeck steer/stop`, an attached TUI), recorded
# before the owner applies them, so none is lost if the owner dies first: `resume` settles them.
# `refusal`: why one was refused, in a word the client decides on (records/requests.py
# `Refusal`): its reason is a sentence for the operator.
REQUESTS_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    batch_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    child_ids TEXT NOT NULL,
    message TEXT,
    now INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL CHECK (state IN ('pending', 'applied', 'refused')),
    reason TEXT,
    control_ids TEXT,
    created_ts REAL NOT NULL,
    settled_ts REAL,
    payload TEXT,
    refusal TEXT
);
CREATE INDEX IF NOT EXISTS requests_pending ON requests (batch_id, state, id);
"""

# The requests table as versions 3 to 6 had it: what the migrations from 1 and 2 make, before
# the step from 6 adds `refusal` (each step brings a file to the next version, no further).
REQUESTS_V3_SCHEMA = """
CREATE TABLE IF NOT EXISTS requests (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    batch_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    child_ids TEXT NOT NULL,
    message TEXT,
    now INTEGER NOT NULL DEFAULT 0,
    state TEXT NOT NULL CHECK (state IN ('pending', 'applied', 'refused')),
    reason TEXT,
    control_ids TEXT,
    created_ts REAL NOT NULL,
    settled_ts REAL,
    payload TEXT
);
CREATE INDEX IF NOT EXISTS requests_pending ON requests (batch_id, state, id);
"""

# From version 1: what the statements above add to its tables. Columns only ever added, so a
# version 1 row reads the same, with NULL in the new columns.
MIGRATE_1_TO_2 = (
    "ALTER TABLE batches ADD COLUMN heartbeat_ts REAL",
    "ALTER TABLE batches ADD COLUMN settings_json TEXT",
    "ALTER TABLE controls ADD COLUMN request_id INTEGER",
    "ALTER TABLE controls ADD COLUMN reason TEXT",
    *(s for s in REQUESTS_V3_SCHEMA.split(";") if s.strip()),
)

# From version 2: two batch columns, and requests of any kind (the kinds are the code's to
# check, `RequestKind`) with a JSON payload. SQLite cannot drop a CHECK, so the table is copied.
_REQUESTS_V2_COLUMNS = (
    "id, batch_id, kind, child_ids, message, now, state, reason, control_ids, created_ts, "
    "settled_ts"
)
MIGRATE_2_TO_3 = (
    "ALTER TABLE batches ADD COLUMN held TEXT",
    "ALTER TABLE batches ADD COLUMN limits_json TEXT",
    "ALTER TABLE requests RENAME TO requests_v2",
    "DROP INDEX IF EXISTS requests_pending",
    *(s for s in REQUESTS_V3_SCHEMA.split(";") if s.strip()),
    f"INSERT INTO requests ({_REQUESTS_V2_COLUMNS}) SELECT {_REQUESTS_V2_COLUMNS} FROM requests_v2",
    "DROP TABLE requests_v2",
)

# Command children's processes while they run (records/processes.py), so that the owner that
# resumes a batch whose owner died can adopt them, or end their whole tree, before any task
# runs again.
PROCESSES_SCHEMA = """
CREATE TABLE IF NOT EXISTS processes (
    batch_id TEXT NOT NULL,
    child_id TEXT NOT NULL,
    pid INTEGER NOT NULL,
    start INTEGER NOT NULL,
    holder_pid INTEGER,
    holder_start INTEGER,
    out_path TEXT NOT NULL,
    err_path TEXT NOT NULL,
    stdin_path TEXT,
    out_offset INTEGER NOT NULL DEFAULT 0,
    err_offset INTEGER NOT NULL DEFAULT 0,
    carried_json TEXT NOT NULL,
    PRIMARY KEY (batch_id, child_id)
);
"""

# From version 3: the processes table, added on its own.
MIGRATE_3_TO_4 = tuple(s for s in PROCESSES_SCHEMA.split(";") if s.strip())

# The owner's live figures for attached views (records/live.py): one row a batch, replaced a
# few times a second while it runs; not a record of what happened.
LIVE_SCHEMA = """
CREATE TABLE IF NOT EXISTS live (
    batch_id TEXT PRIMARY KEY,
    body TEXT NOT NULL
)
"""

# From version 4: the live table, nothing else.
MIGRATE_4_TO_5 = (LIVE_SCHEMA,)

# From version 5: each child row's change counter, so that an attached view reads only the rows
# written since its last read (attached/reading.py), not every row of a 5,000-child batch. Each
# write of a row gives it a value above any in the store (one counter for the store: a statement
# may write rows of several batches). The statements that write a child set it (rows.py); the
# triggers set it after any writer that does not: an older flightdeck still running when a newer
# one migrated the file, or an operator's own SQL. Rows of one statement may share a value: they
# are committed together, and a reader sees all or none. Child rows are never deleted: deleting
# the rows that hold the highest value would let the counter go back below what a reader saw.
NEXT_REV = "(SELECT coalesce(max(rev), 0) + 1 FROM children)"
REV_INDEX = "CREATE INDEX IF NOT EXISTS children_by_rev ON children (rev)"
REV_TRIGGERS = (
    "CREATE TRIGGER IF NOT EXISTS children_rev_inserted AFTER INSERT ON children"
    f" WHEN NEW.rev = 0 BEGIN UPDATE children SET rev = {NEXT_REV} WHERE rowid = NEW.rowid; END",
    "CREATE TRIGGER IF NOT EXISTS children_rev_updated AFTER UPDATE ON children"
    f" WHEN NEW.rev = OLD.rev BEGIN UPDATE children SET rev = {NEXT_REV} WHERE rowid = NEW.rowid;"
    " END",
)
MIGRATE_5_TO_6 = (
    "ALTER TABLE children ADD COLUMN rev INTEGER NOT NULL DEFAULT 0",
    REV_INDEX,
    *REV_TRIGGERS,
)

# From version 6: why the owner refused a request, in a word (an older owner that still runs on
# the file leaves it NULL, as rows refused before the migration have it); and of a child whose
# cost is unknown, the part that is known (model ChildRow's `cost_floor_usd`; NULL in an older
# row, as in a row whose cost is known: none).
MIGRATE_6_TO_7 = (
    "ALTER TABLE requests ADD COLUMN refusal TEXT",
    "ALTER TABLE children ADD COLUMN cost_floor_usd TEXT",
)

# The steps from each older version to the next.
MIGRATIONS = {
    1: MIGRATE_1_TO_2,
    2: MIGRATE_2_TO_3,
    3: MIGRATE_3_TO_4,
    4: MIGRATE_4_TO_5,
    5: MIGRATE_5_TO_6,
    6: MIGRATE_6_TO_7,
}

SCHEMA = (
    """
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
    finished_ts REAL,
    heartbeat_ts REAL,
    settings_json TEXT,
    held TEXT,
    limits_json TEXT
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
    rev INTEGER NOT NULL DEFAULT 0,
    cost_floor_usd TEXT,
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
    request_id INTEGER,
    reason TEXT,
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
    + REQUESTS_SCHEMA
    + PROCESSES_SCHEMA
    + LIVE_SCHEMA
    + ";\n"
    + REV_INDEX
)


class StoreNotFoundError(FileNotFoundError):
    """There is no flightdeck database at the given path."""


class StoreVersionError(StoreError):
    """The database was written by a newer flightdeck."""


def connect(target: str, *, uri: bool = False) -> sqlite3.Connection:
    """A connection that waits out other connections' locks; transactions are explicit."""
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


def is_busy(exc: sqlite3.Error) -> bool:
    """Whether another connection holds a lock the statement needed ("database is locked"):
    worth trying again. Not SQLITE_LOCKED, a conflict inside one connection: waiting never
    ends that."""
    return exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY


def back_off(attempt: int) -> None:
    """Sleep before another try at a busy database."""
    time.sleep(0.001 * 2 ** min(attempt, 7))  # 1 ms doubling to 128 ms, however long it lasts


def use_wal(conn: sqlite3.Connection, path: Path) -> None:
    """Put the database in WAL mode, so readers never block the writer."""
    # Turning a new file to WAL takes an exclusive lock and fails at once, without the busy
    # timeout, while another process does the same (two runs started together).
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    attempt = 0
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            break
        except sqlite3.OperationalError as exc:
            if not is_busy(exc) or time.monotonic() >= deadline:
                raise
        back_off(attempt)
        attempt += 1
    if mode != "wal":  # refused without an error: readers would block the writer
        raise StoreError(path, None, None, f"cannot use WAL mode (the journal stays {mode})")


def ensure_schema(conn: sqlite3.Connection, path: Path) -> None:
    """Create the tables in a new file, or bring an older version's file to this one; refuse
    another program's database or a newer one."""
    if schema_version(conn, path) == SCHEMA_VERSION:
        return
    conn.execute("BEGIN IMMEDIATE")
    try:
        # Another process may have made the schema while this one waited for the lock.
        version = schema_version(conn, path)
        if version == SCHEMA_VERSION:
            conn.execute("COMMIT")
            return
        if version in MIGRATIONS:
            for step in range(version, SCHEMA_VERSION):
                for statement in MIGRATIONS[step]:
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
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
        for statement in SCHEMA.split(";"):
            if statement.strip():
                conn.execute(statement)
        for statement in REV_TRIGGERS:  # statements with ";" in them
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        rollback(conn)
        raise


def schema_version(conn: sqlite3.Connection, path: Path) -> int:
    """The file's schema version (0: no schema yet); StoreVersionError if it is newer."""
    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
    if version > SCHEMA_VERSION:
        raise StoreVersionError(
            path,
            None,
            None,
            f"database schema {version} is newer than this flightdeck understands "
            f"({SCHEMA_VERSION}); upgrade flightdeck",
        )
    return version


def readable_without_shm(path: Path, exc: sqlite3.Error) -> bool:
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


def check_writable(path: Path) -> None:
    """StoreError unless this process may write the database. SQLite opens a file it may
    only read (another user's, a read-only mount) read-only without a word, and a schema
    already there needs no write: the first commit failed, once the batch had started."""
    # Asked of the kernel, not by opening the file: closing any descriptor of it in this
    # process drops every lock SQLite holds on it, and another connection then took the WAL
    # for its own and deleted it, the commits in it lost.
    if not os.access(path, os.W_OK):
        raise StoreError(
            path, None, None, "read-only here: its permissions, or its file system, refuse writes"
        )


def file_id(path: Path) -> tuple[int, int] | None:
    """The file's device and inode (None: no file): a store deleted or replaced under its
    writer is another file."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)
