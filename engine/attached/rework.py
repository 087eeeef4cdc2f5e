"""A child that ended, worked on again from outside its batch's owner: retried (the batch's
owner started again if it has ended or died), its diff read, its changes accepted or discarded.

A retry is a request like any other (client.py), recorded even for a batch that has finished;
if no owner is alive to apply it, a new one is started (`flightdeck resume BATCH --reopen`,
through spawn.py), which applies it before anything else and runs the batch on. An accept or
a discard goes to the owner while one lives; with none, this process applies it itself (the
same `Reviewer` the owner uses, its events written to the store here).
"""

from __future__ import annotations

import sqlite3
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from flightdeck.engine.attached.client import Client, OwnerGone, batch_keys
from flightdeck.engine.attached.spawn import restart_owner
from flightdeck.engine.commands import Accept, CommandError, Context, Discard, Retry
from flightdeck.engine.errors import check_known
from flightdeck.engine.model import ChildRow
from flightdeck.engine.model.units import is_wave
from flightdeck.engine.records.reader import StoreReader, no_batch
from flightdeck.engine.records.requests import RequestRow, RequestState, with_connection
from flightdeck.engine.records.rows import INSERT_EVENT
from flightdeck.engine.review.apply import Outcome, Reviewer, overlap_text, said_of
from flightdeck.engine.review.git import GitError, branch_name_problem
from flightdeck.engine.review.tree import changes_patch
from flightdeck.engine.review.values import Changes, changes_from_json
from flightdeck.engine.sanitize import redact

__all__ = [
    "Changes",
    "Restarted",
    "branch_name_problem",
    "diff_of",
    "overlap_in",
    "overlap_of",
    "owner_command",
    "patch_of",
    "retry",
    "review",
    "said_of",
    "send_retry",
]


def owner_command(state_dir: Path, batch_id: str) -> list[str]:
    """The command that makes a new owner of a batch, and runs what was retried in it."""
    return [
        *(sys.executable, "-m", "flightdeck.tui.cli", "resume", batch_id, "--reopen"),
        *("--state-dir", str(state_dir)),
    ]


@dataclass(frozen=True, slots=True)
class Restarted:
    """A retry recorded, and the owner started for it (None: the owner alive applied it)."""

    request_id: int
    owner_pid: int | None


def retry(
    db: Path,
    batch_id: str,
    command: Retry,
    start: Callable[[Path, str], list[str]] = owner_command,
) -> Iterator[RequestRow | Restarted]:
    """Send `command`, starting an owner if none lives; yields what it did (`Restarted`) and
    then the request as it is looked at until it is settled. CommandError (nothing recorded)
    for a retry the stored batch refuses; OwnerFailed if an owner could not be started."""
    rid, pid = send_retry(db, batch_id, command, start)
    with Client(db, batch_id) as client:
        yield Restarted(rid, pid)
        for again in (True, True, False):  # an owner may end before it reads it: start another
            try:
                yield from client.follow(rid)
                return
            except OwnerGone:
                if not again or client.request(rid).state is not RequestState.PENDING:
                    raise
                restart_owner(start(db.parent, batch_id), db.parent, batch_id)


def send_retry(
    db: Path,
    batch_id: str,
    command: Retry,
    start: Callable[[Path, str], list[str]] = owner_command,
) -> tuple[int, int | None]:
    """Record `command` (checked first against the stored rows, as the owner checks it: no
    owner is started for a retry it would refuse), and start an owner if none lives: the
    request's id, and the started owner's pid (None: one was alive)."""
    rows = rows_of(db, batch_id)
    command.check(Context(batch_id, rows, rows=lambda: rows))
    with Client(db, batch_id) as client:
        own = client.own()
        for child_id in command.child_ids:
            if is_wave(rows[child_id], own):
                raise CommandError(
                    f"{child_id} is a schedule's wave, not one of the batch's own tasks: "
                    "not retried"
                )
        rid = client.send(command, reopens=True)
        if client.owner().alive:
            return rid, None
    return rid, restart_owner(start(db.parent, batch_id), db.parent, batch_id).pid


def rows_of(db: Path, batch_id: str) -> dict[str, ChildRow]:
    """The batch's children's rows by id (LookupError: no such batch)."""
    with StoreReader(db) as reader:
        if reader.batch(batch_id) is None:
            raise LookupError(no_batch(batch_id, db.parent))
        return {r.id: r for r in reader.children(batch_id)}


def diff_of(db: Path, batch_id: str, child_id: str, path: str | None = None) -> str:
    """A child's changes as a unified diff (of one file, or all), redacted of the batch's keys
    this process holds (`batch_keys`). CommandError if it has none (or none in `path`), has not
    ended (none recorded yet), or they cannot be read any more (discarded, its worktree gone)."""
    rows = rows_of(db, batch_id)
    with StoreReader(db) as reader:
        secrets = batch_keys(reader.batch(batch_id))
    check_known((child_id,), rows, batch_id)
    row = rows[child_id]
    if row.changes is None and row.status.live:  # its changes are recorded when it ends
        raise CommandError(
            f"{child_id} has not ended ({row.status.value}): its changes are known once it has"
        )
    if row.changes is None:
        raise CommandError(f"{child_id} changed no file in a workspace of its own")
    try:
        text = patch_of(row.changes, path, secrets)
    except CommandError as exc:
        raise CommandError(f"{child_id}: {exc}") from None
    if path is not None and not text:
        raise CommandError(f"{child_id} did not change {path!r}")
    return text


def patch_of(changes: Changes, path: str | None, secrets: Iterable[str]) -> str:
    """The diff of a child's changes (of one file, or all), as git prints it, redacted of
    `secrets` (the batch's keys): the one text shown of a child that nothing redacted before,
    its files as it wrote them (a `.env` it made). Only what is shown: an accept commits the
    files as they are. CommandError if it cannot be read (its worktree gone, its changes
    discarded)."""
    if changes.mode == "copy":
        raise CommandError("it worked in a copy: there is no history to diff against")
    try:
        return redact(changes_patch(changes, path), secrets)
    except GitError as exc:
        raise CommandError(redact(str(exc), secrets)) from None


def overlap_of(db: Path, batch_id: str, ids: tuple[str, ...]) -> str | None:
    """The files more than one of these children changed (and who), in a line; None: none."""
    return overlap_text(rows_of(db, batch_id), ids)


overlap_in = overlap_text  # the same, of rows the caller has


def review(db: Path, batch_id: str, command: Accept | Discard, poll_s: float = 0.1) -> Outcome:
    """Apply an accept or discard: through the batch's owner while one lives, else here.
    CommandError (nothing applied) saying why it could not be."""
    with Client(db, batch_id) as client:
        if client.owner().alive:
            rid = client.send(command)
            for row in client.follow(rid, poll_s):
                if row.state is RequestState.REFUSED:
                    raise CommandError(row.reason or f"{command.title} refused")
            return _applied(db, batch_id, command)
    return review_here(db, batch_id, command)


def _applied(db: Path, batch_id: str, command: Accept | Discard) -> Outcome:
    """What the owner decided, read back from its events (written before it settled the
    request): said as this process says what it applies itself."""
    decided: dict[str, Changes] = {}
    with StoreReader(db) as reader:
        for _, child_id, kind, detail in reader.events(batch_id):
            changes = changes_from_json(detail) if kind == command.kind else None
            if changes is not None and child_id in command.child_ids:
                decided[child_id] = changes
    ordered = {i: decided[i] for i in dict.fromkeys(command.child_ids) if i in decided}
    return Outcome(ordered, said_of(ordered))


def review_here(db: Path, batch_id: str, command: Accept | Discard) -> Outcome:
    """Apply an accept or discard in this process (the batch has no owner alive to)."""
    rows = rows_of(db, batch_id)
    folder = db.parent / "batches" / batch_id
    return Reviewer(batch_id, folder, _recorder(db, batch_id), time.time).apply(command, rows)


def _recorder(db: Path, batch_id: str) -> Callable[[str | None, str, str], None]:
    """An event written to the store from this process (no owner is writing it)."""

    def record(child_id: str | None, kind: str, detail: str) -> None:
        def write(conn: sqlite3.Connection) -> None:
            with conn:
                conn.execute(INSERT_EVENT, (batch_id, child_id, time.time(), kind, detail))

        with_connection(db, write, readonly=False)

    return record
