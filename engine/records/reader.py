"""`StoreReader`: a read-only connection to the store, for the UI, attach and reports."""

from __future__ import annotations

import dataclasses
import sqlite3
import threading
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from typing import Any

from flightdeck.engine.errors import StoreError
from flightdeck.engine.model import BatchStatus, ChildRow, ChildStatus, SteerReceipt, StopRecord
from flightdeck.engine.records.attempts import KEPT_KINDS, SUPERSEDED, kept_of
from flightdeck.engine.records.liveness import process_matches
from flightdeck.engine.records.loops import current_loops
from flightdeck.engine.records.rows import (
    RECEIPT_COLUMNS,
    BatchInfo,
    batch_columns,
    batch_info,
    child_columns,
    child_row,
    receipt,
)
from flightdeck.engine.records.schema import (
    SCHEMA_VERSION,
    StoreNotFoundError,
    connect,
    readable_without_shm,
    schema_version,
)
from flightdeck.engine.sanitize import quoted, sanitize

MAX_LINEAGE = 64  # deeper than any `max_depth`: a loop in bad data ends here
# The events read back into children's rows: who delegated whom, loop flags, attempts, changes.
_KEPT = ", ".join(f"'{k}'" for k in ("delegate", "loop", "node", *KEPT_KINDS))
# A row with spend recorded: a child ran at some time, even if it is queued again now.
# (A queued row's cost is '0', not NULL; the cost is a Decimal's text.)
_SPENT = "(CAST(cost_usd AS REAL) > 0 OR tokens_in + tokens_out + cache_read + cache_write > 0)"

_ENDED = frozenset(s.value for s in ChildStatus if s.terminal)
_FAILED = tuple(
    s.value
    for s in ChildStatus
    if s.terminal and s not in (ChildStatus.COMPLETED, ChildStatus.STOPPED)
)


# The event of a batch whose schedules a budget or a cron's last date ended (detail: why).
SCHEDULES_END = "schedules_end"
# Which of a batch's events end its schedules: its own stop (a stop-all's, of no child) and its
# SCHEDULES_END. One condition for every reader: `wait`, `stop --all`, a resume, attached views.
ENDS_SCHEDULES = f"(child_id IS NULL AND kind IN ('stop', '{SCHEDULES_END}'))"


class StoreReader:
    """A read-only connection for the UI, attach and reports; safe to share between threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if not path.is_file():
            raise StoreNotFoundError(
                f"no flightdeck database at {path} (run a batch first, or pass --state-dir)"
            )
        self._uri = f"{path.resolve().as_uri()}?mode=ro"
        self._conn = connect(self._uri, uri=True)
        self._lock = threading.Lock()
        self._ready = False
        self._version = 0

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

    def children(
        self, batch_id: str, *, results: bool = True, started: bool = False
    ) -> list[ChildRow]:
        """A batch's children in seq order, each with its steer receipts; with `results` False,
        every `result` is None and never read (a report's memory then does not grow with the
        answers); with `started`, only those that have run: no longer queued, or queued again
        with earlier attempts' spend (a retry, a re-run after a lost owner)."""
        where = f" AND (status != 'queued' OR {_SPENT})" if started else ""
        with self._lock:
            if not self._check_ready():
                return []
            columns = child_columns(self._version, results=results)
            with self._snapshot():
                rows = self._conn.execute(
                    f"SELECT {columns} FROM children WHERE batch_id = ?{where} ORDER BY seq, id",
                    (batch_id,),
                ).fetchall()
                steers: dict[str, list[SteerReceipt]] = {}
                for steer in self._controls(batch_id, None, "steer"):
                    steers.setdefault(steer.child_id, []).append(steer)
                # What the store keeps as events, not in the rows.
                kept = self._conn.execute(
                    "SELECT ts, child_id, kind, detail FROM events WHERE batch_id = ?"
                    f" AND kind IN ({_KEPT}) AND child_id IS NOT NULL ORDER BY id",
                    (batch_id,),
                ).fetchall()
        parents = {str(c): str(d) for _, c, kind, d in kept if kind == "delegate"}
        loops = current_loops((float(t), str(c), str(k), str(d)) for t, c, k, d in kept)
        out = with_lineage([child_row(r, tuple(steers.get(r[1], ()))) for r in rows], parents)
        if loops:
            out = [dataclasses.replace(r, loop=loops[r.id]) if r.id in loops else r for r in out]
        # Where each ran, on a cluster (the last node it was placed on).
        nodes = {str(c): str(d) for _, c, kind, d in kept if kind == "node"}
        if nodes:
            out = [dataclasses.replace(r, node=nodes[r.id]) if r.id in nodes else r for r in out]
        return kept_of((str(c), str(k), str(d)) for _, c, k, d in kept).rows(out)

    def child_ids(self, batch_id: str) -> set[str]:
        """The ids of a batch's children (cheap: no rows built)."""
        with self._lock:
            if not self._check_ready():
                return set()
            rows = self._conn.execute(
                "SELECT id FROM children WHERE batch_id = ?", (batch_id,)
            ).fetchall()
        return {str(r[0]) for r in rows}

    def batches_of_child(self, child_id: str) -> list[str]:
        """The ids of at most two batches with a child of this id: what a batch id that names
        no batch may have meant (the child's id given in its place)."""
        with self._lock:
            if not self._check_ready():
                return []
            rows = self._conn.execute(
                "SELECT DISTINCT batch_id FROM children WHERE id = ? LIMIT 2", (child_id,)
            ).fetchall()
        return [str(r[0]) for r in rows]

    def child(self, batch_id: str, child_id: str) -> ChildRow | None:
        """One child with its steer receipts, or None."""
        with self._lock:
            if not self._check_ready():
                return None
            with self._snapshot():
                row = self._conn.execute(
                    f"SELECT {child_columns(self._version)} FROM children"
                    " WHERE batch_id = ? AND id = ?",
                    (batch_id, child_id),
                ).fetchone()
                steers = tuple(self._controls(batch_id, child_id, "steer"))
                kept = self._conn.execute(
                    "SELECT child_id, kind, detail FROM events WHERE batch_id = ?"
                    f" AND child_id = ? AND kind IN ({_KEPT}) ORDER BY id",
                    (batch_id, child_id),
                ).fetchall()
        if row is None:
            return None
        return kept_of(kept).rows([child_row(row, steers)])[0]

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

    def schedules_ended(self, batch_id: str) -> bool:
        """Whether the batch's schedules were ended: by a stop-all (the batch's own stop), a
        budget or a cron's last date."""
        with self._lock:
            if not self._check_ready():
                return False
            found = self._conn.execute(
                f"SELECT 1 FROM events WHERE batch_id = ? AND {ENDS_SCHEDULES} LIMIT 1",
                (batch_id,),
            ).fetchone()
        return found is not None

    def live(self, batch_id: str) -> str | None:
        """The owner's last published live figures (records/live.py), or None."""
        with self._lock:
            if not self._check_ready():
                return None
            row = self._conn.execute(
                "SELECT body FROM live WHERE batch_id = ?", (batch_id,)
            ).fetchone()
        return None if row is None else str(row[0])

    def stops(self, batch_id: str) -> list[StopRecord]:
        """The stops asked for in a batch (by the operator, a stop-all), oldest first; one of
        the batch itself (its schedules ended by a stop-all) has no child."""
        with self._lock:
            if not self._check_ready():
                return []
            rows = self._conn.execute(
                "SELECT child_id, ts, detail FROM events"
                " WHERE batch_id = ? AND kind = 'stop' ORDER BY id",
                (batch_id,),
            ).fetchall()
        return [
            StopRecord(None if r[0] is None else str(r[0]), float(r[1]), str(r[2])) for r in rows
        ]

    # Everything below runs with the lock held.

    def _check_ready(self) -> bool:
        # A reader may open the file in the instant before the writer has made the schema.
        if not self._ready:
            try:
                try:
                    version = schema_version(self._conn, self.path)
                except sqlite3.OperationalError as exc:
                    if not readable_without_shm(self.path, exc):
                        raise
                    self._conn.close()
                    self._conn = connect(f"{self._uri}&immutable=1", uri=True)
                    version = schema_version(self._conn, self.path)
            except sqlite3.DatabaseError as exc:  # not a database, unreadable
                raise StoreError(
                    self.path, None, None, f"cannot read the database: {exc}"
                ) from None
            # A version 1 or 2 file nobody has opened to write since (an old state folder,
            # read only) reads the same, without what later versions added.
            self._ready = 1 <= version <= SCHEMA_VERSION
            self._version = version
        return self._ready

    def _snapshot(self) -> _ReadTransaction:
        return _ReadTransaction(self._conn)

    def _batches(self, batch_id: str | None) -> list[BatchInfo]:
        where, args = ("WHERE id = ?", (batch_id,)) if batch_id is not None else ("", ())
        columns = batch_columns(self._version)
        with self._snapshot():
            batch_rows = self._conn.execute(
                f"SELECT {columns} FROM batches {where} ORDER BY created_ts DESC, rowid DESC",
                args,
            ).fetchall()
            child_where = "WHERE batch_id = ?" if batch_id is not None else ""
            floor = "cost_floor_usd" if self._version >= 7 else "NULL"
            child_rows = self._conn.execute(
                f"SELECT batch_id, id, status, cost_usd, {floor},"
                " max(coalesce(finished_ts, 0), coalesce(last_activity_ts, 0))"
                f" FROM children {child_where}",
                args,
            ).fetchall()
            # Delegates of their parents' earlier attempts: history, in no outcome count.
            where = "WHERE batch_id = ? AND" if batch_id is not None else "WHERE"
            history = set(
                self._conn.execute(
                    f"SELECT batch_id, child_id FROM events {where} kind = ?", (*args, SUPERSEDED)
                ).fetchall()
            )
        # Costs are exact Decimal strings: sum them here, not as SQL floats.
        summary: dict[str, _Summary] = {}
        for bid, cid, status, cost, floor, last_ts in child_rows:
            s = summary.get(bid)
            if s is None:
                s = summary[bid] = _Summary()
            s.add(status, cost, floor, superseded=(bid, cid) in history)
            s.last_ts = max(s.last_ts, float(last_ts or 0))
        empty = _Summary()
        out = []
        for r in batch_rows:
            s = summary.get(r[0], empty)
            out.append(
                batch_info(
                    r,
                    children=s.children,
                    completed=s.completed,
                    failed=s.failed,
                    stopped=s.stopped,
                    cost_usd=s.cost_usd,
                    cost_unknown=s.cost_unknown,
                )
            )
            out[-1] = _abandoned(out[-1], s.last_ts)
        return out

    def _controls(
        self, batch_id: str, child_id: str | None, kind: str | None
    ) -> list[SteerReceipt]:
        sql = f"SELECT {RECEIPT_COLUMNS} FROM controls WHERE batch_id = ?"
        args: list[Any] = [batch_id]
        if child_id is not None:
            sql += " AND child_id = ?"
            args.append(child_id)
        if kind is not None:
            sql += " AND kind = ?"
            args.append(kind)
        return [receipt(r) for r in self._conn.execute(sql + " ORDER BY id", args).fetchall()]


def _abandoned(info: BatchInfo, last_child_ts: float) -> BatchInfo:
    """A `running` batch whose owner process is gone, as `abandoned`: its elapsed time stops
    at the last thing recorded of it, its heartbeat or a child's (a full disk that refused the
    heartbeats let a child's end through: the time until then is known)."""
    if info.status != BatchStatus.RUNNING or process_matches(info.owner_pid, info.owner_start):
        return info
    last = max(info.heartbeat_ts or 0.0, last_child_ts)
    return dataclasses.replace(
        info, status=BatchStatus.ABANDONED, finished_ts=max(last, info.created_ts)
    )


class _Summary:
    """A batch's children counted by outcome, and the exact sum of what is known of their
    costs."""

    __slots__ = (
        "children",
        "completed",
        "cost_unknown",
        "cost_usd",
        "failed",
        "last_ts",
        "stopped",
        "superseded",
    )

    def __init__(self) -> None:
        self.children = 0
        self.completed = 0
        self.failed = 0
        self.stopped = 0
        self.superseded = 0
        self.cost_usd = Decimal(0)
        self.cost_unknown = 0
        self.last_ts = 0.0

    def add(self, status: str, cost: str | None, floor: str | None, *, superseded: bool) -> None:
        """A child's row: `floor`, of one whose `cost` is unknown, the part that is known."""
        self.children += 1
        if superseded and status in _ENDED:
            self.superseded += 1
        elif status == ChildStatus.COMPLETED:
            self.completed += 1
        elif status == ChildStatus.STOPPED:
            self.stopped += 1
        elif status in _FAILED:
            self.failed += 1
        if cost is None:
            self.cost_unknown += 1
        self.cost_usd += Decimal(cost if cost is not None else floor or 0)


class _ReadTransaction:
    """BEGIN … COMMIT around several SELECTs so they see one consistent WAL snapshot."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def __enter__(self) -> None:
        self._conn.execute("BEGIN")

    def __exit__(self, *exc: object) -> None:
        self._conn.execute("COMMIT")


def depth_of(child_id: str, parents: Mapping[str, str]) -> int:
    """How many delegations deep a child is (0: one of the batch's own tasks)."""
    depth, at = 0, child_id
    while at in parents and depth < MAX_LINEAGE:
        depth, at = depth + 1, parents[at]
    return depth


def with_lineage(rows: list[ChildRow], parents: Mapping[str, str]) -> list[ChildRow]:
    """The rows with `parent` and `depth` set from who delegated whom (the store keeps a
    delegate's parent as its "delegate" event, not in its row)."""
    if not parents:
        return rows
    return [
        dataclasses.replace(r, parent=parents[r.id], depth=depth_of(r.id, parents))
        if r.id in parents
        else r
        for r in rows
    ]


def require_state(db: Path) -> None:
    """StoreError unless `db` is there: a path with no state is said, not met by SQLite's
    "unable to open database file" at the first read."""
    if not db.is_file():
        raise StoreError(db, None, None, "no flightdeck state here (run a batch first)")


def no_batch(batch_id: str, state_dir: Path, instead: str | None = None) -> str:
    """How every command says that an id names no batch of this state folder (`logs`,
    `report`, `resume`, `steer`, `stop`, `wait`… alike); `instead`: what the id names, if
    that says more than where to look."""
    where = instead or "(flightdeck ls lists them; another state folder: --state-dir)"
    return f"no batch {quoted(batch_id, 80)} in {sanitize(str(state_dir.absolute()))} {where}"
