"""The "since you last looked" digest: what changed in a batch between two points in time.

A point is a `Mark` (when, and what had been spent), small enough to keep on disk between two
attaches; the digest compares it with a later `Snapshot`. Pure functions over what any
`EngineView` gives (rows, totals, steer receipts), so the in-process and the attached view agree.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from decimal import Decimal
from functools import lru_cache

from flightdeck.engine.apilight import error_signature
from flightdeck.engine.model import ChildStatus, Snapshot, SteerState

TOP_SIGNATURES = 3  # error signatures the digest names; the rest are counted as "other"
# Ended without completing, and not by the operator (stalled is counted apart).
_FAILED = frozenset({ChildStatus.FAILED, ChildStatus.TIMED_OUT, ChildStatus.UNKNOWN})
# A digest on screen is recomputed every poll, over the same error texts: each regex pass once.
_signature = lru_cache(maxsize=4096)(error_signature)


@dataclass(frozen=True, slots=True)
class Mark:
    """A point in a batch's life the operator saw: its time (the snapshot's clock) and spend."""

    batch_id: str
    ts: float
    spent_usd: Decimal

    @classmethod
    def of(cls, snap: Snapshot) -> Mark:
        """The point `snap` shows."""
        return cls(snap.batch_id, snap.now, snap.totals.cost_usd)


@dataclass(frozen=True, slots=True)
class Digest:
    """What happened from `since` to `until`: children that ended (by how), children flagged
    looping (whether or not they still are), money spent, steers settled."""

    since: float
    until: float
    completed: int = 0
    failed: int = 0
    stalled: int = 0
    stopped: int = 0
    looped: int = 0
    spent_usd: Decimal = Decimal(0)
    steers_delivered: int = 0
    steers_missed: int = 0
    # The commonest error signatures of the failed ones, most first: (signature, children).
    signatures: tuple[tuple[str, int], ...] = ()
    other_failures: int = 0  # failed children whose signature is not among `signatures`

    @property
    def empty(self) -> bool:
        """Nothing to tell: no child ended, no loop, nothing spent, no steer settled."""
        return not (
            self.completed
            or self.failed
            or self.stalled
            or self.stopped
            or self.looped
            or self.spent_usd
            or self.steers_delivered
            or self.steers_missed
        )


def _after(ts: float | None, since: float) -> bool:
    return ts is not None and ts > since


def digest(mark: Mark, snap: Snapshot) -> Digest:
    """What `snap` shows happened after `mark` (a child counts once, by how it ended)."""
    since = mark.ts
    ended: Counter[ChildStatus] = Counter()
    signatures: Counter[str] = Counter()
    looped = delivered = missed = 0
    for row in snap.children:
        # A superseded delegate is its parent's earlier attempt's: not news of how things end.
        if _after(row.finished_ts, since) and not row.superseded:
            ended[row.status] += 1
            if row.status in _FAILED:
                signatures[_signature(row.error) or "(no error message)"] += 1
        if _after(row.looped_ts, since):  # flagged since, looping still or not
            looped += 1
        for receipt in row.steers:
            if _after(receipt.settled_ts, since):
                delivered += receipt.state is SteerState.DELIVERED
                missed += receipt.state is SteerState.MISSED
    failed = sum(ended[s] for s in _FAILED)
    top = tuple(signatures.most_common(TOP_SIGNATURES))
    spent = snap.totals.cost_usd - mark.spent_usd
    return Digest(
        since=since,
        until=snap.now,
        completed=ended[ChildStatus.COMPLETED],
        failed=failed,
        stalled=ended[ChildStatus.STALLED],
        stopped=ended[ChildStatus.STOPPED],
        looped=looped,
        # A resumed batch can count less than an earlier owner did: never a negative spend.
        spent_usd=max(spent, Decimal(0)),
        steers_delivered=delivered,
        steers_missed=missed,
        signatures=top,
        other_failures=failed - sum(n for _, n in top),
    )
