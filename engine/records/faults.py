"""Storage faults: which errors say the disk or the database file is at fault (full, I/O error,
gone, read-only, corrupt), and the bounded retry of a commit the storage refuses.

A commit refused that way is tried again, its rows held by the caller, for up to `retry_s`
from the first refusal; then the caller is told to give up (`GaveUp`), and from then on every
commit is tried once. `trouble` says, to any thread, which of the two is happening.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "RETRY_S",
    "GaveUp",
    "RefusedCommits",
    "StoreTrouble",
    "disk_full",
    "rollback",
    "storage_fault",
]

log = logging.getLogger("flightdeck.engine.records.store")

# How long a commit the disk refuses is tried again ([engine] store_retry_s).
RETRY_S = 60.0
_MAX_WAIT_S = 1.0  # the longest pause between two tries

# SQLite's primary result codes that say the storage, not the statement, is at fault.
_STORAGE_CODES = frozenset(
    {
        sqlite3.SQLITE_FULL,
        sqlite3.SQLITE_IOERR,
        sqlite3.SQLITE_CANTOPEN,
        sqlite3.SQLITE_READONLY,
        sqlite3.SQLITE_CORRUPT,
        sqlite3.SQLITE_NOTADB,
    }
)
_STORAGE_WORDS = ("disk is full", "disk i/o error", "unable to open", "readonly", "malformed")


@dataclass(frozen=True, slots=True)
class StoreTrouble:
    """The store cannot commit: since when (time.monotonic), why, and whether it gave up."""

    reason: str
    since: float
    gave_up: bool = False
    """The retry window passed: each write is now tried once, and dropped (and counted) if it
    fails."""


class GaveUp(Exception):
    """A commit the storage refused for longer than the retry window."""


def storage_fault(exc: BaseException) -> str | None:
    """What is wrong with the storage, if `exc` says the disk or the database file is at fault;
    None for a fault of the statement or of a value."""
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    if not isinstance(exc, sqlite3.DatabaseError):
        return None
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return str(exc) if code & 0xFF in _STORAGE_CODES else None
    text = str(exc).lower()  # raised without a code (by a wrapper, say): its words tell
    return str(exc) if any(word in text for word in _STORAGE_WORDS) else None


class RefusedCommits:
    """One store's commits under storage faults (used on its writer thread only)."""

    def __init__(self, path: Path, retry_s: float = RETRY_S) -> None:
        self.path = path
        self.retry_s = retry_s
        # Replaced, never mutated: any thread may read it.
        self.trouble: StoreTrouble | None = None

    def commit(
        self, transaction: Callable[[], None], rollback: Callable[[], None], held: int
    ) -> None:
        """Run `transaction`; a storage fault is rolled back and tried again within the window
        (`held`: the rows waiting on it, for the message), then GaveUp. Other errors raise."""
        reason = self._attempt(transaction, rollback)
        if reason is None:
            if self.trouble is not None and not self.trouble.gave_up:
                self._recovered()
            return
        trouble = self.trouble
        if trouble is not None and trouble.gave_up:
            raise GaveUp(reason)
        if trouble is None:
            trouble = self.trouble = StoreTrouble(reason, time.monotonic())
            log.error(
                "flightdeck store: cannot commit to %s (%s); %d row(s) held in memory, "
                "trying again for up to %gs",
                self.path,
                reason,
                held,
                self.retry_s,
            )
        tries = 0
        while (left := trouble.since + self.retry_s - time.monotonic()) > 0:
            time.sleep(min(left, _MAX_WAIT_S, 0.01 * 2**tries))
            tries += 1
            fault = self._attempt(transaction, rollback)
            if fault is None:
                self._recovered()
                return
            reason = fault
        self.trouble = dataclasses.replace(trouble, reason=reason, gave_up=True)
        log.error("flightdeck store: gave up on %s after %gs: %s", self.path, self.retry_s, reason)
        raise GaveUp(reason)

    @staticmethod
    def _attempt(transaction: Callable[[], None], rollback: Callable[[], None]) -> str | None:
        """Run `transaction` once; the storage fault it was rolled back for, or None if it
        committed. Any other error raises."""
        try:
            transaction()
        except Exception as exc:
            reason = storage_fault(exc)
            if reason is None:
                raise
            rollback()
            return reason
        return None

    def _recovered(self) -> None:
        trouble, self.trouble = self.trouble, None
        if trouble is not None:
            held = time.monotonic() - trouble.since
            log.warning("flightdeck store: commits land again (after %.1fs)", held)


def rollback(conn: sqlite3.Connection) -> None:
    """End a failed transaction. A COMMIT the storage refused (a full disk) may have rolled it
    back already: a ROLLBACK then raises "no transaction is active", in place of the reason."""
    if conn.in_transaction:
        conn.execute("ROLLBACK")


def disk_full(folder: Path) -> bool:
    """Whether the disk holding `folder` has less than a MiB free (SQLite's commits fail): of
    an abandoned batch, the store gave up there, as no row can say (none could be written)."""
    try:
        return shutil.disk_usage(folder).free < 1 << 20
    except OSError:
        return False
