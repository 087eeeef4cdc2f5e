"""Commands from clients (steer, stop, stop all, …), through the store to a batch's owner.

A client (`flightdeck steer`, `stop`, an attached TUI) records its command in the `requests`
table, state `pending`, and returns its id; the owner process applies pending commands within
a fraction of a second and marks them `applied` (with the steer receipts they made) or
`refused` (with a reason). An owner that dies first leaves them pending: `resume` settles them.
Each call is one short transaction on its own connection, and waits out a busy database.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from flightdeck.engine.errors import StoreError
from flightdeck.engine.inputs.messages import id_list
from flightdeck.engine.inputs.tasks import unicode_problem
from flightdeck.engine.model import BatchStatus, SteerReceipt
from flightdeck.engine.records import schema
from flightdeck.engine.records.rows import RECEIPT_COLUMNS, receipt
from flightdeck.engine.sanitize import one_line

__all__ = [
    "REQUEST_COLUMNS",
    "RequestKind",
    "RequestRow",
    "RequestState",
    "UnreadableRequest",
    "pending_requests",
    "recorded_controls",
    "refuse_pending",
    "request",
    "request_row",
    "submit",
    "submit_steer",
    "submit_stop",
    "submit_stop_all",
    "with_connection",
]

REQUEST_COLUMNS = (
    "id, batch_id, kind, child_ids, message, now, state, reason, control_ids, created_ts, "
    "settled_ts, payload"
)
_T = TypeVar("_T")


class RequestKind(StrEnum):
    """What a client asked for."""

    STEER = "steer"
    STOP = "stop"
    STOP_ALL = "stop_all"
    LIMITS = "limits"  # payload: a change to the live limits (engine/limits.py)
    PAUSE = "pause"
    CONTINUE = "continue"
    PAUSE_ADMISSION = "pause_admission"
    CONTINUE_ADMISSION = "continue_admission"


# The kinds that act on children a client names (the others act on the batch).
_NAMES_CHILDREN = frozenset(
    {RequestKind.STEER, RequestKind.STOP, RequestKind.PAUSE, RequestKind.CONTINUE}
)


class RequestState(StrEnum):
    """pending → applied (by the owner, or by `resume`) or refused (with a reason)."""

    PENDING = "pending"
    APPLIED = "applied"
    REFUSED = "refused"


@dataclass(frozen=True, slots=True)
class RequestRow:
    """One client command and what became of it; for a steer, its receipts so far (one per
    child once applied, each queued, delivered or missed)."""

    id: int
    batch_id: str
    kind: RequestKind
    child_ids: tuple[str, ...]  # empty for stop_all
    message: str | None  # a steer's text
    now: bool  # a steer that interrupts the current turn
    state: RequestState
    reason: str | None  # why it was refused
    control_ids: tuple[int, ...]  # the steer receipts it made, once applied
    created_ts: float
    settled_ts: float | None
    receipts: tuple[SteerReceipt, ...] = ()
    payload: dict[str, Any] | None = None  # the arguments of a kind that takes more (JSON)


def submit(
    db_path: Path,
    batch_id: str,
    kind: RequestKind,
    child_ids: Iterable[str] = (),
    payload: dict[str, Any] | None = None,
) -> int:
    """Record a request of `kind` (with its JSON `payload`) for a running batch; the request id.

    Child ids are checked as for a steer; a kind that names no child passes none."""
    return _submit(db_path, batch_id, kind, id_list(child_ids), None, False, payload)


def submit_steer(
    db_path: Path, batch_id: str, child_ids: Iterable[str], message: str, *, now: bool = False
) -> int:
    """Record a steer for these children of a running batch; returns the request id.

    Raises LookupError for an unknown batch, ValueError (recording nothing) for a batch that
    has finished, an unknown child id, no child ids, or a message that cannot be sent."""
    ids = id_list(child_ids)
    problem = unicode_problem(message)
    if problem:
        raise ValueError(f"steer message: {problem}")
    if not message.strip():
        raise ValueError("steer message is empty")
    return _submit(db_path, batch_id, RequestKind.STEER, ids, message, now)


def submit_stop(db_path: Path, batch_id: str, child_ids: Iterable[str]) -> int:
    """Record a stop for these children of a running batch; returns the request id (errors as
    `submit_steer`)."""
    return _submit(db_path, batch_id, RequestKind.STOP, id_list(child_ids), None, False)


def submit_stop_all(db_path: Path, batch_id: str) -> int:
    """Record a stop of every child of a running batch that has not ended; the request id."""
    return _submit(db_path, batch_id, RequestKind.STOP_ALL, (), None, False)


def request(db_path: Path, batch_id: str, request_id: int) -> RequestRow | None:
    """A request's state now, with its receipts; None if there is no such request."""

    def read(conn: sqlite3.Connection) -> RequestRow | None:
        conn.execute("BEGIN")  # the request and its receipts from one snapshot
        try:
            row = conn.execute(
                f"SELECT {REQUEST_COLUMNS} FROM requests WHERE batch_id = ? AND id = ?",
                (batch_id, request_id),
            ).fetchone()
            if row is None:
                return None
            receipts = conn.execute(
                f"SELECT {RECEIPT_COLUMNS} FROM controls"
                " WHERE batch_id = ? AND request_id = ? AND kind = 'steer' ORDER BY id",
                (batch_id, request_id),
            ).fetchall()
        finally:
            conn.execute("COMMIT")
        return request_row(row, tuple(receipt(r) for r in receipts))

    return with_connection(db_path, read, readonly=True)


def refuse_pending(db_path: Path, batch_id: str, reason: str) -> int:
    """Settle every request still pending for a finished batch as refused (its owner died
    after the batch's end was committed, before it could apply them); how many."""

    def refuse(conn: sqlite3.Connection) -> int:
        conn.execute("BEGIN IMMEDIATE")
        try:
            cursor = conn.execute(
                "UPDATE requests SET state = 'refused', reason = ?, settled_ts = ?"
                " WHERE batch_id = ? AND state = 'pending'",
                (reason, time.time(), batch_id),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        return cursor.rowcount

    return with_connection(db_path, refuse, readonly=False)


@dataclass(frozen=True, slots=True)
class UnreadableRequest:
    """A pending request this flightdeck cannot read (a kind it does not know, bad JSON):
    the owner refuses it with `reason`, and goes on with the others."""

    id: int
    reason: str


def pending_requests(
    conn: sqlite3.Connection, batch_id: str, after: int = 0
) -> list[RequestRow | UnreadableRequest]:
    """A batch's pending requests with ids above `after`, oldest first (for the owner)."""
    rows = conn.execute(
        f"SELECT {REQUEST_COLUMNS} FROM requests"
        " WHERE batch_id = ? AND state = 'pending' AND id > ? ORDER BY id",
        (batch_id, after),
    ).fetchall()
    out: list[RequestRow | UnreadableRequest] = []
    known = {k.value for k in RequestKind}
    for r in rows:
        # The schema does not check kinds (a newer client may know more): the code does.
        if r[2] not in known:
            kind = one_line(str(r[2]), 40)
            out.append(UnreadableRequest(int(r[0]), f"this owner cannot apply a {kind!r} request"))
            continue
        try:
            out.append(request_row(r))
        except (ValueError, TypeError) as exc:  # bad JSON in a column
            why = f"this owner cannot read the request: {one_line(str(exc), 120)}"
            out.append(UnreadableRequest(int(r[0]), why))
    return out


def recorded_controls(conn: sqlite3.Connection, batch_id: str, request_id: int) -> list[int]:
    """The steer receipts already recorded for a request (by an owner that died before it
    could mark the request applied), oldest first."""
    rows = conn.execute(
        "SELECT id FROM controls WHERE batch_id = ? AND request_id = ? ORDER BY id",
        (batch_id, request_id),
    ).fetchall()
    return [int(r[0]) for r in rows]


def request_row(r: Sequence[Any], receipts: tuple[SteerReceipt, ...] = ()) -> RequestRow:
    """A REQUEST_COLUMNS row."""
    return RequestRow(
        id=int(r[0]),
        batch_id=str(r[1]),
        kind=RequestKind(r[2]),
        child_ids=tuple(json.loads(r[3])),
        message=r[4],
        now=bool(r[5]),
        state=RequestState(r[6]),
        reason=r[7],
        control_ids=tuple(json.loads(r[8])) if r[8] else (),
        created_ts=float(r[9]),
        settled_ts=None if r[10] is None else float(r[10]),
        receipts=receipts,
        payload=json.loads(r[11]) if r[11] else None,
    )


# -- one short transaction ---------------------------------------------------------------------


def _submit(
    db_path: Path,
    batch_id: str,
    kind: RequestKind,
    ids: tuple[str, ...],
    message: str | None,
    now: bool,
    payload: dict[str, Any] | None = None,
) -> int:
    if kind in _NAMES_CHILDREN and not ids:
        raise ValueError("name at least one child")
    body = None if payload is None else json.dumps(payload)

    def write(conn: sqlite3.Connection) -> int:
        conn.execute("BEGIN IMMEDIATE")
        try:
            _check_target(conn, batch_id, ids)
            cursor = conn.execute(
                "INSERT INTO requests (batch_id, kind, child_ids, message, now, state,"
                " created_ts, payload) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?)",
                (batch_id, kind.value, json.dumps(ids), message, int(now), time.time(), body),
            )
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    return with_connection(db_path, write, readonly=False)


def _check_target(conn: sqlite3.Connection, batch_id: str, ids: tuple[str, ...]) -> None:
    row = conn.execute("SELECT status FROM batches WHERE id = ?", (batch_id,)).fetchone()
    if row is None:
        raise LookupError(f"no batch {batch_id} in this state folder")
    if row[0] != BatchStatus.RUNNING:
        raise ValueError(f"batch {batch_id} has finished ({row[0]})")
    unknown = [
        i
        for i in dict.fromkeys(ids)
        if conn.execute(
            "SELECT 1 FROM children WHERE batch_id = ? AND id = ?", (batch_id, i)
        ).fetchone()
        is None
    ]
    if unknown:
        shown = ", ".join(repr(i) for i in unknown[:5]) + (" …" if len(unknown) > 5 else "")
        raise ValueError(f"no child with id {shown} in batch {batch_id}")


def with_connection(
    db_path: Path, work: Callable[[sqlite3.Connection], _T], *, readonly: bool
) -> _T:
    """`work` on a fresh connection to a database of this schema version, tried again while another
    connection holds the lock past the busy timeout; sqlite errors become StoreError."""
    path = Path(db_path)
    if not path.is_file():
        raise schema.StoreNotFoundError(f"no flightdeck database at {path}")
    target = f"{path.resolve().as_uri()}?mode=ro" if readonly else f"{path.resolve().as_uri()}"
    try:
        conn = schema.connect(target, uri=True)
    except sqlite3.Error as exc:
        raise StoreError(path, None, None, f"cannot open the database: {exc}") from None
    try:
        version = schema.schema_version(conn, path)
        if version != schema.SCHEMA_VERSION:
            raise StoreError(
                path,
                None,
                None,
                f"the database has schema {version}: its batches take no commands from here "
                "(run a batch with this flightdeck first)",
            )
        attempt = 0
        while True:
            try:
                return work(conn)
            except sqlite3.OperationalError as exc:
                if not schema.is_busy(exc):
                    raise StoreError(path, None, None, str(exc)) from None
            schema.back_off(attempt)
            attempt += 1
    except sqlite3.DatabaseError as exc:
        raise StoreError(path, None, None, f"cannot use the database: {exc}") from None
    finally:
        conn.close()
