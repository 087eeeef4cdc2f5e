"""The discrete facts an attached view publishes, as the engine publishes them in-process: the
differences between two reads of a batch (a child started or finished, the last member of a
unit's group ended, the batch finished)."""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence

from flightdeck.engine.model import (
    BatchFinished,
    BatchStatus,
    ChildFinished,
    ChildRow,
    ChildStarted,
    ChildStatus,
    EngineEvent,
    GroupFinished,
)
from flightdeck.engine.model.units import attempts, unit_rows
from flightdeck.engine.records.rows import BatchInfo


class Facts:
    """The facts of one batch's reads, read after read."""

    def __init__(self) -> None:
        # Groups whose unit result was published, with their rows' attempts then: a retried
        # member's group is told again once it ends again, as the engine does.
        self._units_told: dict[str, int] = {}

    def children(
        self,
        built: Sequence[tuple[ChildRow | None, ChildRow]],
        done: int,
        total: int,
        events: list[EngineEvent],
    ) -> None:
        """Each child's facts between its row as last read and as read now, in batch order
        (`done` of `total` children have ended, as of this read)."""
        for before, row in sorted(built, key=lambda b: (b[1].seq, b[1].id)):
            was = before.status if before is not None else ChildStatus.QUEUED
            if row.status is ChildStatus.RUNNING and not _had_started(before):
                events.append(ChildStarted(row.id, row.started_ts or 0.0))
            if was.live and row.status.terminal:
                events.append(ChildFinished(row, done, total))

    def units(
        self,
        order: Sequence[ChildRow],
        own: Container[str],
        events: list[EngineEvent],
        told: Iterable[str] = (),
    ) -> None:
        """A unit whose last child (a member or a delegate of one) ended since the last read,
        or that the owner announced since (`told`: a resumed batch's units whose members had
        ended before it): its result, once (and once more after each retry of a member, as the
        engine does). `own`: the batch's own tasks (model/units.py: who is in a unit)."""
        ended = {e.row.group for e in events if isinstance(e, ChildFinished) and e.row.group}
        ended.update(told)
        if not ended:
            return
        units = unit_rows(order, own)
        for group in sorted(ended & units.keys()):
            rows = units[group]
            tries = attempts(rows)  # its members' retries
            if all(r.status.terminal for r in rows) and self._units_told.get(group) != tries:
                self._units_told[group] = tries
                events.append(GroupFinished.of(group, rows))

    @staticmethod
    def batch(was: BatchInfo | None, info: BatchInfo, events: list[EngineEvent]) -> None:
        """The batch's end, read for the first time."""
        running = BatchStatus.RUNNING
        if was is not None and was.status is running and info.status is not running:
            events.append(BatchFinished(info.id, info.status))


def _had_started(before: ChildRow | None) -> bool:
    """Whether a child running now had started by the last read: it was running then, or
    paused mid-run (and has been continued since)."""
    if before is None:
        return False
    was = before.status
    return was is ChildStatus.RUNNING or (
        was is ChildStatus.PAUSED and before.started_ts is not None
    )
