"""Commands to a batch whose owner is another process, and what became of them.

A `Client` checks a command (engine/commands.py) against the batch as its store has it, with the
same checks the owner makes, records it in the requests table, and follows it there until it
is settled: applied (a steer's receipts delivered or missed) or refused. The owner it waits on
is watched too (its pid and start time): one that dies is said at once, with the command that
runs the batch on, rather than waited on for ever. Used by `flightdeck steer/stop/pause/...`,
the attached TUI (view.py) and scripts alike.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from flightdeck.engine.attached.hints import command_line
from flightdeck.engine.commands import Answer, Command, Steer
from flightdeck.engine.errors import FlightdeckError
from flightdeck.engine.model import BatchStatus, ChildRow, Limits, RouteHeadroom, SteerState
from flightdeck.engine.records.live import live_from_json
from flightdeck.engine.records.liveness import STALE_AFTER_S, process_matches
from flightdeck.engine.records.processes import still_running
from flightdeck.engine.records.reader import StoreReader, require_state
from flightdeck.engine.records.requests import (
    Refusal,
    RequestRow,
    RequestState,
    read_request,
    submit,
)
from flightdeck.engine.records.rows import (
    BatchInfo,
    batch_columns,
    batch_info,
    own_tasks,
    stored_spec,
)
from flightdeck.engine.records.schema import connect
from flightdeck.engine.triage.outliers import batch_medians
from flightdeck.engine.triage.query import QueryError, RowFilter, parse_filter

# The filter language `--where` takes (the TUI's), parsed before anything is read.
__all__ = [
    "MOOT_ONCE_ENDED",
    "POLL_S",
    "Client",
    "OwnerGone",
    "OwnerState",
    "QueryError",
    "RowFilter",
    "batch_keys",
    "parse_filter",
    "settled",
]

POLL_S = 0.1  # how often a request and its owner are looked at while waiting


def batch_keys(info: BatchInfo | None) -> tuple[str, ...]:
    """The keys of a stored batch that this process holds: its environment's values under the
    names the batch's stored settings read keys from (stored.py `stored_keys`). What a process
    other than the owner redacts from what it records (a steer) or shows (a child's diff)."""
    if info is None or not info.settings_json:
        return ()
    from flightdeck.engine.inputs.settings.stored import settings_from_json, stored_keys

    return stored_keys(settings_from_json(info.settings_json), os.environ)


class OwnerGone(FlightdeckError):
    """The owner of the batch died before it settled the request: nothing will until the batch
    is resumed (the message says how)."""


@dataclass(frozen=True, slots=True)
class OwnerState:
    """A batch's owner as its store and the process table say now."""

    pid: int
    alive: bool
    heartbeat_age_s: float | None  # since its last heartbeat (None: never written)
    status: BatchStatus

    @property
    def stale(self) -> bool:
        """Alive, but silent past the time after which a client may call it hung."""
        age = self.heartbeat_age_s
        return self.alive and age is not None and age > STALE_AFTER_S


class Client:
    """One batch's commands, sent through its store (`db`) to its owner process."""

    def __init__(self, db: Path, batch_id: str) -> None:
        require_state(db)
        self.db = db
        self.batch_id = batch_id
        self._conn: sqlite3.Connection | None = None

    def close(self) -> None:
        """Close the read connection; idempotent."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- sending --------------------------------------------------------------------------------

    def send(
        self, command: Command, *, reopens: bool = False, busy: Callable[[], None] | None = None
    ) -> int:
        """Check `command` against the stored batch and record it for the owner; the request id.
        `reopens`: recorded for a batch that has finished too (a retry; see rework.py).
        `busy`: called each second another process holds the database's lock.

        CommandError (nothing recorded) for one that cannot be applied (an unknown child, a
        message too long, a bad limit, a batch that has finished); LookupError for an unknown
        batch; StoreError for a store that cannot take it."""
        info = self._row()
        if info is None:
            raise LookupError(f"no batch {self.batch_id} in this state folder")

        from flightdeck.engine.inputs.settings.stored import settings_from_json

        def max_chars() -> int | None:  # the owner's, as it started (settings are kept whole)
            if not info.settings_json:
                return None
            return settings_from_json(info.settings_json).engine.max_task_chars

        # A key typed into a steer or an answer is never written, not even for the owner to
        # redact: the keys this process holds under the routes' names are redacted here.
        secrets = batch_keys(info) if isinstance(command, Steer | Answer) else ()

        return submit(
            self.db,
            self.batch_id,
            command,
            max_chars=max_chars,
            limits=lambda: self.limits(info),
            reopens=reopens,
            busy=busy,
            secrets=secrets,
        )

    # --- reading --------------------------------------------------------------------------------

    def info(self) -> BatchInfo | None:
        """The batch's row (abandoned if its owner is gone), or None if there is no such batch."""
        with StoreReader(self.db) as reader:
            return reader.batch(self.batch_id)

    def scheduled(self) -> bool:
        """Whether the batch's schedules may fire again: it has some, and no stop-all, budget
        or cron's last date has ended them."""
        row = self._row()
        if row is None or not stored_spec(row.spec_json).get("schedules"):
            return False
        with StoreReader(self.db) as reader:
            return not reader.schedules_ended(self.batch_id)

    def own(self) -> frozenset[str]:
        """The ids of the batch's own tasks: not a schedule's waves, nor delegates."""
        row = self._row()
        return own_tasks(row.spec_json) if row is not None else frozenset()

    def held(self) -> str | None:
        """Why the batch's admission is held (paused by the operator, the soft budget), or
        None; read from its row alone, cheap enough to ask every poll."""
        row = self._row()
        return None if row is None else row.held

    def _row(self) -> BatchInfo | None:
        """The batch's row as stored, without the sums `info` adds (a TUI sends from its
        event loop: a command is not held up by a 10,000-child sum)."""
        conn = self._connection()
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        found = conn.execute(
            f"SELECT {batch_columns(version)} FROM batches WHERE id = ?", (self.batch_id,)
        ).fetchone()
        return None if found is None else batch_info(found)

    def limits(self, info: BatchInfo | None = None) -> Limits:
        """The live limits the owner recorded (those the settings began with, for an older
        batch)."""
        from flightdeck.engine.attached.limits import stored_limits  # the settings: only here

        info = info or self.info()
        if info is None:
            raise LookupError(f"no batch {self.batch_id} in this state folder")

        def routes() -> list[str]:
            with StoreReader(self.db) as reader:
                return [r.route for r in reader.children(self.batch_id, results=False)]

        return stored_limits(info, routes)

    def routes(self) -> tuple[RouteHeadroom, ...]:
        """The route gauges the owner last published (learned limits among them): () when it
        published none (a finished batch, an older flightdeck)."""
        conn = self._connection()
        try:
            found = conn.execute(
                "SELECT body FROM live WHERE batch_id = ?", (self.batch_id,)
            ).fetchone()
        except sqlite3.OperationalError:  # a store from before the live table
            return ()
        return live_from_json(found[0]).routes if found else ()

    def matching(self, row_filter: RowFilter, *, ended: bool = False) -> tuple[int, list[str]]:
        """How many of the batch's children `row_filter` keeps, and the ids of those that have
        not ended (`ended`: of those that have), in batch order (what `--where` acts on)."""
        rows = self.rows()
        now = time.time()
        # is:outlier against the whole batch's medians, whatever else the query says.
        medians = batch_medians(rows, now) if row_filter.outliers_only else None
        kept = [r for r in rows if row_filter.matches(r, False, now, medians)]
        return len(kept), [r.id for r in kept if r.status.live != ended]

    def rows(self) -> tuple[ChildRow, ...]:
        """The batch's children now, in batch order, as an attached view reads them (a
        question, a loop flag, a parent among what the store keeps beside the rows), so a
        query keeps what it would keep there."""
        from flightdeck.engine.attached.reading import BatchReading

        conn = self._connection()
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        snapshot = BatchReading(conn, self.batch_id, version, time.time).read()
        if snapshot is None:
            raise LookupError(f"no batch {self.batch_id} in this state folder")
        return snapshot.children

    def request(self, request_id: int) -> RequestRow:
        """A request this client recorded, as it stands now."""
        row = read_request(self._connection(), self.batch_id, request_id)
        if row is None:
            raise LookupError(f"no request {request_id} for batch {self.batch_id}")
        return row

    def owner(self) -> OwnerState:
        """The batch's owner now: alive or gone (its pid and start time), its heartbeat."""
        found = (
            self._connection()
            .execute(
                "SELECT status, owner_pid, owner_start, heartbeat_ts FROM batches WHERE id = ?",
                (self.batch_id,),
            )
            .fetchone()
        )
        if found is None:
            raise LookupError(f"no batch {self.batch_id} in this state folder")
        status, pid, start, beat = BatchStatus(found[0]), int(found[1]), found[2], found[3]
        alive = status is BatchStatus.RUNNING and process_matches(pid, start)
        if status is BatchStatus.RUNNING and not alive:
            status = BatchStatus.ABANDONED
        age = None if beat is None else max(0.0, time.time() - float(beat))
        return OwnerState(pid, alive, age, status)

    def paused(self) -> int:
        """How many of the batch's children are paused (the batch ends with none)."""
        found = (
            self._connection()
            .execute(
                "SELECT count(*) FROM children WHERE batch_id = ? AND status = 'paused'",
                (self.batch_id,),
            )
            .fetchone()
        )
        return int(found[0])

    def still_running(self) -> int:
        """How many of the batch's command children's processes outlived its owner."""
        return still_running(self.db, self.batch_id)

    def follow(self, request_id: int, poll_s: float = POLL_S) -> Iterator[RequestRow]:
        """The request each time it is looked at (every `poll_s`), from now until it is
        settled: refused, or applied with every receipt delivered or missed. OwnerGone if the
        batch's owner dies first, or is found silent past STALE_AFTER_S (alive, but stopped)."""
        while True:
            row = self.request(request_id)
            yield row
            if settled(row):
                return
            owner = self.owner()
            if not owner.alive:
                row = self.request(request_id)  # it may have settled it just before it died
                if settled(row):
                    yield row
                    return
                raise OwnerGone(self.gone_message(owner, row))
            if owner.stale:  # alive, but silent (stopped, a hung disk): not waited on for ever
                raise OwnerGone(self.silent_message(owner))
            time.sleep(poll_s)

    def gone_message(self, owner: OwnerState, row: RequestRow | None = None) -> str:
        """Why nothing will apply a request now, and what runs the batch on."""
        b = self.batch_id
        if owner.status is not BatchStatus.ABANDONED:
            return f"batch {b} has ended ({owner.status.value}) before the request was settled"
        what = "the request stays pending"
        if row is not None and row.state is RequestState.APPLIED:
            what = "its steers stay queued"
        return (
            f"the owner of batch {b} (pid {owner.pid}) is gone: {what}; "
            f"`{command_line(self.db.parent, 'resume', b)}` runs the batch on"
        )

    def silent_message(self, owner: OwnerState) -> str:
        """Why a request is not waited on: its owner lives, but has not answered for long."""
        age = int(owner.heartbeat_age_s or 0)
        return (
            f"the owner of batch {self.batch_id} (pid {owner.pid}) has not answered for {age} s "
            "(stopped with SIGSTOP or a debugger, or its disk hangs): the request stays "
            "pending, applied once it goes on"
        )

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = connect(f"{self.db.resolve().as_uri()}?mode=ro", uri=True)
        return self._conn


# The kinds of command that have nothing left to do once what they name (children, or the
# batch) has ended: refused as come after that, they did nothing and failed in nothing.
MOOT_ONCE_ENDED = frozenset(
    ("stop", "pause", "continue", "stop_all", "pause_admission", "continue_admission")
)


def ended_first(
    kind: str,
    child_ids: Sequence[str],
    refusal: str | None,
    rows: Callable[[], Iterable[ChildRow]],
) -> bool:
    """Whether a refused request was a stop, pause or continue that the owner refused only
    because what it named had ended first (`refusal` "ended": its AlreadyEnded, or a batch that
    had finished): it did nothing and failed in nothing, as for a child its sender found ended.
    Refused for any other reason, it failed, whatever its children's rows say now. Only for a
    refusal an older owner left without its word are the children's `rows` asked (read then):
    every one it names has ended."""
    if kind not in MOOT_ONCE_ENDED:
        return False
    if refusal is not None:
        return refusal == Refusal.ENDED
    if not child_ids:  # an older owner refused none of these as come too late
        return False
    live = {r.id for r in rows() if r.status.live}
    return not any(i in live for i in child_ids)


def settled(row: RequestRow) -> bool:
    """Refused, or applied with every receipt it made delivered or missed."""
    if row.state is RequestState.REFUSED:
        return True
    return row.state is RequestState.APPLIED and all(
        r.state is not SteerState.QUEUED for r in row.receipts
    )
