"""Whether a batch's owner process still lives: its pid, started when the batch row says.

A pid alone is not enough: after the owner dies the system may give the same number to any
other process. The row keeps the owner's start time (psutil's create_time, epoch seconds) and
only a process with that pid that started then counts. The heartbeat the owner writes a few
seconds apart says when it was last heard of: an abandoned batch's elapsed time stops there.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import psutil

__all__ = ["HEARTBEAT_EVERY_S", "STALE_AFTER_S", "Owner", "owner_of", "process_matches"]

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


def process_matches(pid: int, start: float | None) -> bool:
    """Whether process `pid` runs and is the one that started at `start`.

    `start` is epoch seconds; a schema 1 row kept seconds since boot, which is also accepted.
    With no start recorded, a live pid counts (the row cannot tell a reused one)."""
    if pid <= 0:
        return False
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
