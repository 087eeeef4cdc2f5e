"""The lifecycles: a child's, a batch's, a steer's."""

from __future__ import annotations

from enum import StrEnum


class ChildStatus(StrEnum):
    """Lifecycle of a child: queued → gated → running → a final status (`unknown` only from
    crash recovery); `paused` (by the operator, from queued or running) is live, not final."""

    QUEUED = "queued"
    GATED = "gated"
    RUNNING = "running"
    PAUSED = "paused"
    COMPLETED = "completed"
    FAILED = "failed"
    STOPPED = "stopped"
    TIMED_OUT = "timed_out"
    STALLED = "stalled"
    UNKNOWN = "unknown"

    @property
    def terminal(self) -> bool:
        """True once the child has ended."""
        return self not in _LIVE

    @property
    def live(self) -> bool:
        """True while queued, gated, running or paused."""
        return self in _LIVE


_LIVE = frozenset({ChildStatus.QUEUED, ChildStatus.GATED, ChildStatus.RUNNING, ChildStatus.PAUSED})


class BatchStatus(StrEnum):
    """Lifecycle of a batch."""

    RUNNING = "running"
    COMPLETED = "completed"  # every child completed
    FAILED = "failed"  # finished, a child failed, timed out or stalled
    STOPPED = "stopped"  # the rest were stopped (stop-all, one by one, a budget); none failed
    ABANDONED = "abandoned"  # owner process died (crash recovery)


def batch_ended(batch_id: str, status: BatchStatus) -> str:
    """Why no command acts on a batch that has ended (an attached view's `read_only`; the TUI's
    batch-wide keys in-process)."""
    return f"batch {batch_id} has ended ({status.value}): nothing left to steer or stop"


class SteerState(StrEnum):
    """What became of a steer: queued, delivered to the model, or missed (the child ended)."""

    QUEUED = "queued"
    DELIVERED = "delivered"
    MISSED = "missed"
