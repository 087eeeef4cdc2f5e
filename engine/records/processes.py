"""The `processes` table: each command child's process while it runs (its pid and start time,
the holder of its input, its files and how far they were read, and what the child had spent
before it), so a new owner can adopt it, or end its whole tree, after the owner died."""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from flightdeck.engine.model import Usage
from flightdeck.engine.model.session import CliSession, usage_figures
from flightdeck.engine.records.liveness import Pid, alive
from flightdeck.engine.records.schema import connect
from flightdeck.engine.records.store import Store

_COLUMNS = (
    "child_id, pid, start, holder_pid, holder_start, out_path, err_path, stdin_path, "
    "out_offset, err_offset, carried_json"
)
UPSERT = (
    f"INSERT OR REPLACE INTO processes (batch_id, {_COLUMNS}) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
READ_TO = "UPDATE processes SET out_offset = ?, err_offset = ? WHERE batch_id = ? AND child_id = ?"
DELETE = "DELETE FROM processes WHERE batch_id = ? AND child_id = ?"
# A child whose process is recorded has started, whatever its row says yet: the coordinator
# records its start apart, and may be later than the process's whole run (`ProcessLog.started`).
MARK_STARTED = (
    "UPDATE children SET status = 'running', started_ts = COALESCE(started_ts, ?) "
    "WHERE batch_id = ? AND id = ? AND status = 'queued'"
)
# Beyond the store's retry window, how long a process row may take to commit: the writes queued
# before it, and another process holding the write lock (which the store waits out).
COMMIT_MARGIN_S = 15.0


@dataclass(frozen=True, slots=True)
class ProcessRow:
    """One running process of a command child, as the store keeps it."""

    child_id: str
    pid: int
    start: int  # clock ticks since boot: tells it from a later process with its pid
    holder_pid: int | None
    holder_start: int | None
    out_path: str
    err_path: str
    stdin_path: str | None
    out_offset: int
    err_offset: int
    usage: Usage  # what the child had spent before this process started
    cost_usd: Decimal | None
    known_usd: Decimal  # what is known of that cost (all of it, unless `cost_usd` is None)
    # What the CLI's session had been reported to use before this process (it resumed one):
    # an adopter's reader of a Codex thread bills only what the process adds.
    thread: Usage


def _carried(row: ProcessRow) -> str:
    cost = None if row.cost_usd is None else str(row.cost_usd)
    carried = {"usage": usage_figures(row.usage), "cost_usd": cost, "known_usd": str(row.known_usd)}
    return json.dumps(carried | {"thread": usage_figures(row.thread)})


class ProcessLog:
    """Writes one batch's process rows through the store's writer thread."""

    def __init__(self, store: Store, batch_id: str, clock: Callable[[], float] = time.time) -> None:
        self._store = store
        self._batch_id = batch_id
        self._clock = clock

    def started(self, row: ProcessRow) -> str | None:
        """A process started (held, not yet running): its row, replacing any earlier one,
        committed before this returns; else why not (it must not run: a new owner would not
        find it). Bounded: the store gives up on a full disk after its retry window. Its
        child's row is marked started first, if it still says queued: the process's end deletes
        its row, and a new owner finding neither would run the child afresh, as never run."""
        started = (self._clock(), self._batch_id, row.child_id)
        self._store.write("mark_started", MARK_STARTED, started)
        params = (
            self._batch_id,
            row.child_id,
            row.pid,
            row.start,
            row.holder_pid,
            row.holder_start,
            row.out_path,
            row.err_path,
            row.stdin_path,
            row.out_offset,
            row.err_offset,
            _carried(row),
        )
        done = threading.Event()
        committed: list[bool] = []

        def then(ok: bool) -> None:
            committed.append(ok)
            done.set()

        self._store.write("record_process", UPSERT, params, then)
        wait_s = self._store.retry_s + COMMIT_MARGIN_S
        if done.wait(wait_s) and committed[0]:
            return None
        trouble = self._store.trouble
        why = f" ({trouble.reason})" if trouble is not None else ""
        if not committed:
            return f"its process was not recorded in the store within {wait_s:g}s{why}"
        return f"its process could not be recorded in the store{why}"

    def read_to(self, child_id: str, out_offset: int, err_offset: int) -> None:
        """How far its output has been read."""
        params = (out_offset, err_offset, self._batch_id, child_id)
        self._store.write("process_read_to", READ_TO, params)

    def ended(self, child_id: str) -> None:
        """It and its tree have ended: nothing to adopt."""
        self._store.write("end_process", DELETE, (self._batch_id, child_id))

    def session(self, child_id: str, session: CliSession, ts: float) -> None:
        """The session its CLI reported, kept as a "session" event (its id; JSON since the
        thread's usage was kept too): a retry that continues (by a later owner, too) resumes
        it."""
        detail = json.dumps({"id": session.id, "thread": usage_figures(session.thread)})
        self._store.record_event(self._batch_id, child_id, ts, "session", detail)


def processes(db: Path, batch_id: str) -> list[ProcessRow]:
    """The processes a batch's owner recorded as running (read-only)."""
    conn = connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM processes WHERE batch_id = ? ORDER BY child_id", (batch_id,)
        ).fetchall()
    except sqlite3.OperationalError:  # a file from before the table: none recorded
        return []
    finally:
        conn.close()
    out = []
    for r in rows:
        carried = json.loads(r[10])
        cost = carried.get("cost_usd")
        # A row from before `known_usd`: all of its cost, or nothing, is known.
        known = carried.get("known_usd", cost or "0")
        out.append(
            ProcessRow(
                child_id=r[0],
                pid=r[1],
                start=r[2],
                holder_pid=r[3],
                holder_start=r[4],
                out_path=r[5],
                err_path=r[6],
                stdin_path=r[7],
                out_offset=r[8],
                err_offset=r[9],
                usage=Usage(*carried["usage"]),
                cost_usd=None if cost is None else Decimal(cost),
                known_usd=Decimal(known),
                thread=Usage(*carried.get("thread", ())),  # a row from before: none known
            )
        )
    return out


def still_running(db: Path, batch_id: str) -> int:
    """How many of a batch's command children still run (their processes outlived a dead
    owner): what `resume` can adopt, or must end before their tasks run again."""
    return sum(1 for row in processes(db, batch_id) if alive(Pid(row.pid, row.start)))


def session_of(db: Path, batch_id: str, child_id: str) -> CliSession | None:
    """The CLI session a child's runs last reported (its "session" events); None: none."""
    conn = connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
    try:
        found = conn.execute(
            "SELECT detail FROM events WHERE batch_id = ? AND child_id = ? AND kind = 'session'"
            " ORDER BY id DESC LIMIT 1",
            (batch_id, child_id),
        ).fetchone()
    finally:
        conn.close()
    return None if found is None else _session(str(found[0]))


def _session(detail: str) -> CliSession:
    """A "session" event's detail: JSON, or the bare id an owner before the thread's usage
    was kept wrote (no session id is a JSON object: Claude Code's and Codex's are UUIDs)."""
    try:
        found = json.loads(detail)
    except ValueError:
        return CliSession(detail)
    if not isinstance(found, dict):  # a bare id that happens to read as JSON: "42"
        return CliSession(detail)
    return CliSession(str(found["id"]), Usage(*found.get("thread", ())))
