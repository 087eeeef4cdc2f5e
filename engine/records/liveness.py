"""Whether a batch's owner process still lives: its pid, started when the batch row says.

A pid alone is not enough: after the owner dies the system may give the same number to any
other process. The row keeps the owner's start time (psutil's create_time, epoch seconds) and
only a process with that pid that started then counts. The heartbeat the owner writes a few
seconds apart says when it was last heard of: an abandoned batch's elapsed time stops there.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path

from flightdeck.engine.records.faults import rollback

__all__ = [
    "HEARTBEAT_EVERY_S",
    "STALE_AFTER_S",
    "Owner",
    "OwnerAlive",
    "Pid",
    "alive",
    "claim_batch",
    "owner_of",
    "process_matches",
    "read_proc",
]

HEARTBEAT_EVERY_S = 2.0  # how often a live owner stamps its batch row
# A live owner whose heartbeat is older than this is alive but not keeping up (a stopped
# process, a disk that hangs): still its batch's owner, never resumed under it.
STALE_AFTER_S = 30.0
# create_time is computed from the process's start in clock ticks and the boot time: the same
# process reads back equal to well within this; another process started later is further off.
_START_TOLERANCE_S = 0.05


@dataclass(frozen=True, slots=True)
class Owner:
    """What is known of a batch's owner process."""

    pid: int
    alive: bool
    heartbeat_ts: float | None  # None: a batch written before heartbeats (schema 1)
    heartbeat_age_s: float | None

    @property
    def stale(self) -> bool:
        """Alive, but its heartbeat stopped a while ago."""
        age = self.heartbeat_age_s
        return self.alive and age is not None and age > STALE_AFTER_S


@dataclass(frozen=True, slots=True)
class Pid:
    """A process (a command child's, read from /proc): its pid, and the start time that tells
    it from a later one with that pid."""

    pid: int
    start: int  # clock ticks since boot


def read_proc(path: str) -> bytes | None:
    """A /proc file's bytes; None if it cannot be read (its process is gone). By `os` calls: a
    file object makes five more system calls a read, each a turn at the interpreter lock."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
            # The kernel fills a read of /proc from a buffer of a page or more, stopping short
            # only at the file's end or that buffer's: one under half a page was the end.
            if len(chunk) < 2048:
                break
        return b"".join(chunks)
    except OSError:
        return None
    finally:
        os.close(fd)


def stat_fields(pid: int) -> list[bytes] | None:
    """A process's /proc/PID/stat from its state (field 3) on; None if no such process."""
    data = read_proc(f"/proc/{pid}/stat")
    if data is None:
        return None
    # The command name (field 2) is in parentheses and may hold spaces or parentheses.
    return data[data.rfind(b")") + 2 :].split()


def stat_of(pid: int) -> tuple[str, int] | None:
    """A process's state letter and start time; None if no such process."""
    fields = stat_fields(pid)
    try:
        return None if fields is None else (fields[0].decode(), int(fields[19]))
    except (IndexError, ValueError):
        return None


def identify(pid: int) -> Pid | None:
    """`pid` as a `Pid`, while it runs; None once gone."""
    found = stat_of(pid)
    return None if found is None else Pid(pid, found[1])


def alive(proc: Pid) -> bool:
    """True while `proc` (that very process) runs; a zombie has ended."""
    found = stat_of(proc.pid)
    return found is not None and found[1] == proc.start and found[0] not in ("Z", "X")


def process_matches(pid: int, start: float | None) -> bool:
    """Whether process `pid` runs and is the one that started at `start`.

    `start` is epoch seconds; a schema 1 row kept seconds since boot, which is also accepted.
    With no start recorded, a live pid counts (the row cannot tell a reused one)."""
    if pid <= 0:
        return False
    import psutil  # here: a reader asks only of a running batch's owner, or a serve's

    try:
        process = psutil.Process(pid)
        created = process.create_time()
        if process.status() == psutil.STATUS_ZOMBIE:  # killed, not yet reaped by its parent
            return False
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:  # another user's process holds that pid: not our owner
        return False
    if start is None:
        return True
    if abs(created - start) <= _START_TOLERANCE_S:
        return True
    # Schema 1 recorded /proc's starttime (seconds since boot).
    return start < 10**8 and abs(created - psutil.boot_time() - start) <= _START_TOLERANCE_S + 1


def owner_of(
    pid: int, start: float | None, heartbeat_ts: float | None, now: float | None = None
) -> Owner:
    """The owner recorded for a batch, and whether it lives now."""
    now = time.time() if now is None else now
    age = None if heartbeat_ts is None else max(0.0, now - heartbeat_ts)
    return Owner(pid, process_matches(pid, start), heartbeat_ts, age)


class OwnerAlive(Exception):
    """The batch's owner process still runs: nobody else may own it."""

    def __init__(self, batch_id: str, pid: int) -> None:
        super().__init__(f"batch {batch_id} is owned by a live process (pid {pid})")
        self.batch_id = batch_id
        self.pid = pid


def claim_batch(
    db_path: Path,
    batch_id: str,
    pid: int,
    start: float | None,
    now: float,
    *,
    reopen: bool = False,
) -> str:
    """Make process `pid` the owner of a `running` batch whose owner is gone; returns the
    batch's stored status (a finished batch is left as it is, and its status returned; with
    `reopen`, it is running again, owned by `pid`: the operator retried a child of it).

    One IMMEDIATE transaction, so of two claims at once one wins and the other finds the
    winner alive. LookupError for an unknown batch; OwnerAlive if its owner lives."""
    # Here: the commands' module it brings is an owner's, not a reader's.
    from flightdeck.engine.records.requests import with_connection

    def claim(conn: sqlite3.Connection) -> str:
        conn.execute("BEGIN IMMEDIATE")
        try:
            row = conn.execute(
                "SELECT status, owner_pid, owner_start FROM batches WHERE id = ?", (batch_id,)
            ).fetchone()
            if row is None:
                raise LookupError(f"no batch {batch_id} in this state folder")
            status, owner_pid, owner_start = str(row[0]), int(row[1]), row[2]
            if reopen and status != "running":
                conn.execute(
                    "UPDATE batches SET status = 'running', finished_ts = NULL, owner_pid = ?,"
                    " owner_start = ?, heartbeat_ts = ? WHERE id = ?",
                    (pid, start, now, batch_id),
                )
                status = "running"
            elif status == "running":
                if owner_pid != pid and process_matches(owner_pid, owner_start):
                    raise OwnerAlive(batch_id, owner_pid)
                conn.execute(
                    "UPDATE batches SET owner_pid = ?, owner_start = ?, heartbeat_ts = ?"
                    " WHERE id = ?",
                    (pid, start, now, batch_id),
                )
            conn.execute("COMMIT")
        except BaseException:
            rollback(conn)
            raise
        return status

    return with_connection(db_path, claim, readonly=False)
