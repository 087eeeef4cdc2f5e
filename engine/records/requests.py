"""Commands from clients (steer, stop, pause, limits, …), through the store to a batch's owner.

A client (`flightdeck steer`, `stop`, an attached TUI: engine/attached) records a command
(engine/commands.py) in the `requests` table, state `pending`: its kind, and its fields as JSON
in `payload` (the child ids also in `child_ids`, for a person reading the table). The owner
process reads pending requests within a fraction of a second, decodes each with the same code
that encoded it, and sends it as it would a command of its own; it marks them `applied` (with
the steer receipts they made) or `refused` (with a reason, and its `Refusal`: whether it came
after what it named had ended, which a client says as a notice). An owner that dies first
leaves them pending: `resume` settles them. Each call is one short transaction on its own
connection, and waits out a busy database.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from flightdeck.engine.commands import (
    Answer,
    Command,
    CommandError,
    Context,
    Steer,
    decode,
    encode,
)
from flightdeck.engine.errors import BatchEnded, StoreError
from flightdeck.engine.inputs.messages import expected
from flightdeck.engine.model import BatchStatus, Limits, SteerReceipt
from flightdeck.engine.records import schema
from flightdeck.engine.records.faults import rollback
from flightdeck.engine.records.rows import RECEIPT_COLUMNS, receipt
from flightdeck.engine.sanitize import one_line, redact

__all__ = [
    "REQUEST_COLUMNS",
    "Refusal",
    "RequestRow",
    "RequestState",
    "pending_requests",
    "read_request",
    "recorded_controls",
    "redacted_command",
    "refuse_pending",
    "request",
    "request_row",
    "submit",
    "typed",
    "with_connection",
]

REQUEST_COLUMNS = (
    "id, batch_id, kind, child_ids, message, now, state, reason, control_ids, created_ts, "
    "settled_ts, payload, refusal"
)
_T = TypeVar("_T")
# How long a caller that says what it waits for waits on a held lock before it says so again.
BUSY_SAID_MS = 1000


class RequestState(StrEnum):
    """pending → applied (by the owner, or by `resume`) or refused (with a reason)."""

    PENDING = "pending"
    APPLIED = "applied"
    REFUSED = "refused"


class Refusal(StrEnum):
    """Why a request was refused, as the owner recorded it (its reason says it in words)."""

    ENDED = "ended"  # what it named had ended before it came: nothing left to act on
    ERROR = "error"  # any other reason: the owner could not apply it, or would not


@dataclass(frozen=True, slots=True)
class RequestRow:
    """One client command and what became of it; for a steer, its receipts so far (one per
    child once applied, each queued, delivered or missed)."""

    id: int
    batch_id: str
    kind: str
    command: Command | CommandError  # as decoded, or why it cannot be
    state: RequestState
    reason: str | None  # why it was refused
    refusal: Refusal | None  # and that, in a word (None: not refused, or by an older owner)
    control_ids: tuple[int, ...]  # the steer receipts it made, once applied
    created_ts: float
    settled_ts: float | None
    receipts: tuple[SteerReceipt, ...] = ()

    @property
    def child_ids(self) -> tuple[str, ...]:
        """The children it names (none for a command on the batch, or one not read)."""
        return () if isinstance(self.command, CommandError) else self.command.targets


def submit(
    db_path: Path,
    batch_id: str,
    command: Command,
    *,
    max_chars: Callable[[], int | None] = lambda: None,
    limits: Callable[[], Limits | None] = lambda: None,
    reopens: bool = False,
    busy: Callable[[], None] | None = None,
    secrets: tuple[str, ...] = (),
) -> int:
    """Check `command` against the stored batch (`max_chars`, `limits`: how the caller reads
    them) and record it for the owner of a running batch, in one transaction; the request id.
    `reopens`: a batch that has finished takes it too (a retry: the owner the caller starts
    next applies it). `busy`: as with_connection's.

    LookupError for an unknown batch; CommandError (recording nothing) for a batch that has
    finished (BatchEnded), or a command its checks refuse (an unknown child id, a message too
    long …).
    `secrets`: keys redacted from a steer's or an answer's message before it is written."""
    command = redacted_command(typed(command), secrets)
    kind, body = encode(command)

    def write(conn: sqlite3.Connection) -> int:
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute("SELECT status FROM batches WHERE id = ?", (batch_id,)).fetchone()
            if row is None:
                raise LookupError(f"no batch {batch_id} in this state folder")
            if row[0] != BatchStatus.RUNNING and not reopens:
                raise BatchEnded(f"batch {batch_id} has ended ({row[0]})")
            command.check(Context(batch_id, _StoredIds(conn, batch_id), max_chars, limits))
            cursor = conn.execute(
                "INSERT INTO requests (batch_id, kind, child_ids, state, created_ts, payload)"
                " VALUES (?, ?, ?, 'pending', ?, ?)",
                (batch_id, kind, json.dumps(command.targets), time.time(), body),
            )
            conn.execute("COMMIT")
        except BaseException:
            rollback(conn)
            raise
        assert cursor.lastrowid is not None
        return cursor.lastrowid

    return with_connection(db_path, write, readonly=False, busy=busy)


class _StoredIds:
    """The ids of a batch's children, asked of the store one at a time (a command names a few
    of thousands)."""

    def __init__(self, conn: sqlite3.Connection, batch_id: str) -> None:
        self._conn = conn
        self._batch_id = batch_id

    def __contains__(self, child_id: object) -> bool:
        found = self._conn.execute(
            "SELECT 1 FROM children WHERE batch_id = ? AND id = ?", (self._batch_id, child_id)
        ).fetchone()
        return found is not None


def request(db_path: Path, batch_id: str, request_id: int) -> RequestRow | None:
    """A request's state now, with its receipts; None if there is no such request."""
    return with_connection(
        db_path, lambda conn: read_request(conn, batch_id, request_id), readonly=True
    )


def read_request(conn: sqlite3.Connection, batch_id: str, request_id: int) -> RequestRow | None:
    """`request` on an open connection."""
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


def refuse_pending(db_path: Path, batch_id: str, reason: str) -> int:
    """Settle every request still pending for a finished batch as refused, as come after it
    ended (its owner died after the batch's end was committed, before it could apply them);
    how many."""

    def refuse(conn: sqlite3.Connection) -> int:
        conn.execute("BEGIN IMMEDIATE")
        try:
            cursor = conn.execute(
                "UPDATE requests SET state = 'refused', reason = ?, refusal = ?, settled_ts = ?"
                " WHERE batch_id = ? AND state = 'pending'",
                (reason, Refusal.ENDED.value, time.time(), batch_id),
            )
            conn.execute("COMMIT")
        except BaseException:
            rollback(conn)
            raise
        return cursor.rowcount

    return with_connection(db_path, refuse, readonly=False)


def pending_requests(
    conn: sqlite3.Connection, batch_id: str, after: int = 0, limit: int = -1
) -> list[RequestRow]:
    """A batch's pending requests with ids above `after`, oldest first, at most `limit` (for
    the owner); each command decoded, or the CommandError saying why it cannot be."""
    rows = conn.execute(
        f"SELECT {REQUEST_COLUMNS} FROM requests"
        " WHERE batch_id = ? AND state = 'pending' AND id > ? ORDER BY id LIMIT ?",
        (batch_id, after, limit),
    ).fetchall()
    return [request_row(r) for r in rows]


def recorded_controls(conn: sqlite3.Connection, batch_id: str, request_id: int) -> list[int]:
    """The steer receipts already recorded for a request (by an owner that died before it
    could mark the request applied), oldest first."""
    rows = conn.execute(
        "SELECT id FROM controls WHERE batch_id = ? AND request_id = ? ORDER BY id",
        (batch_id, request_id),
    ).fetchall()
    return [int(r[0]) for r in rows]


def request_row(r: Sequence[Any], receipts: tuple[SteerReceipt, ...] = ()) -> RequestRow:
    """A REQUEST_COLUMNS row; a command that cannot be read (a kind this flightdeck does not
    know, bad JSON: the schema takes any, a newer client may send one) is kept as the reason."""
    kind = str(r[2])
    command: Command | CommandError
    try:
        body = r[11]
        if body is None:  # written before commands were kept whole: the steer's columns
            body = {"child_ids": json.loads(r[3]), "message": r[4], "now": bool(r[5])}
        elif kind == "limits":  # ... and a limits change was the payload itself
            loaded = json.loads(body)
            if not (isinstance(loaded, dict) and "change" in loaded):
                body = {"change": loaded}
        command = decode(kind, body)
    except (CommandError, ValueError, TypeError) as exc:
        why = f"this owner cannot read the request: {one_line(str(exc), 120)}"
        command = exc if isinstance(exc, CommandError) else CommandError(why)
    return RequestRow(
        id=int(r[0]),
        batch_id=str(r[1]),
        kind=kind,
        command=command,
        state=RequestState(r[6]),
        reason=r[7],
        refusal=None if r[12] is None else _refusal(str(r[12])),
        control_ids=tuple(json.loads(r[8])) if r[8] else (),
        created_ts=float(r[9]),
        settled_ts=None if r[10] is None else float(r[10]),
        receipts=receipts,
    )


def _refusal(word: str) -> Refusal:
    """A recorded refusal; a word this flightdeck does not know (a newer owner's) as an error:
    never read as the notice `ended` is."""
    try:
        return Refusal(word)
    except ValueError:
        return Refusal.ERROR


# -- one short transaction ---------------------------------------------------------------------


def with_connection(
    db_path: Path,
    work: Callable[[sqlite3.Connection], _T],
    *,
    readonly: bool,
    busy: Callable[[], None] | None = None,
) -> _T:
    """`work` on a fresh connection to a database of this schema version, tried again while another
    connection holds the lock past the busy timeout; sqlite errors become StoreError. `busy`:
    called after each second the lock is held (a stopped owner can hold it for good), where
    the caller says what it waits for."""
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
        if busy is not None:
            conn.execute(f"PRAGMA busy_timeout = {BUSY_SAID_MS}")
        attempt = 0
        while True:
            try:
                return work(conn)
            except sqlite3.OperationalError as exc:
                if not schema.is_busy(exc):
                    raise StoreError(path, None, None, str(exc)) from None
                if busy is not None:
                    busy()
            schema.back_off(attempt)
            attempt += 1
    except sqlite3.DatabaseError as exc:
        raise StoreError(path, None, None, f"cannot use the database: {exc}") from None
    finally:
        conn.close()


def redacted_command(command: Command, secrets: tuple[str, ...]) -> Command:
    """A steer's or an answer's message with these keys redacted (the operator typed one,
    which must be neither kept nor sent: docs/safety.md); any other command as it is."""
    if secrets and isinstance(command, Steer | Answer):
        message = redact(command.message, secrets)
        if message != command.message:
            return dataclasses.replace(command, message=message)
    return command


def typed(command: object) -> Command:
    """`command` with each field read as the owner reads a client's (`decode`): CommandError
    naming a field of the wrong type (`Steer("c1", …)` is no list of ids, `now="yes"` no flag)
    before it is checked or sent, rather than a string read as its letters or a coordinator
    failing on it."""
    if not isinstance(command, Command):
        raise TypeError(expected("a command of flightdeck.engine.commands", command))
    fields = dataclasses.fields(command)  # type: ignore[arg-type]
    return decode(command.kind, {f.name: getattr(command, f.name) for f in fields})
