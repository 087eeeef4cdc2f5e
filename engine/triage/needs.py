"""What needs the operator: one queue, oldest first, each entry with its reason.

A child needs the operator when it:

- **asks**: a model child called `ask_operator` and waits (`ChildRow.question`), until
  answered (`flightdeck answer`, `a` in the TUI) or it ends;
- was **denied** a tool by its agent CLI's permissions (`ChildRow.denial`), until the operator
  steers it after that (or clears the entry);
- is **looping** (`ChildRow.loop`), until it makes progress, or the operator steers, nudges,
  pauses or stops it;
- ended **stalled**, **timed out**, **unknown** (lost with its owner) or **failed** in a way a
  retry may fix (a fatal provider error, such as a bad key, is not: the same request fails
  again), until it runs again or the operator clears the entry.

And the batch needs the operator while the soft budget holds its admission.

Clearing an entry (`Dismiss`, `c` in the queue) keeps its child as it is: the entry is gone
until something new happens to it (a later question, denial, loop or failure). A pure function
of a snapshot, so every view (in-process, attached, the command line) shows the same queue.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from flightdeck.engine.model import ChildRow, ChildStatus, Snapshot, record
from flightdeck.engine.sanitize import one_line

NeedKind = Literal[
    "budget", "asks", "denied", "looping", "stalled", "timed_out", "unknown", "failed"
]
KINDS: tuple[NeedKind, ...] = (
    "budget",
    "asks",
    "denied",
    "looping",
    "stalled",
    "timed_out",
    "unknown",
    "failed",
)
_RETRY_MAY_FIX = frozenset(
    {ChildStatus.STALLED, ChildStatus.TIMED_OUT, ChildStatus.UNKNOWN, ChildStatus.FAILED}
)
# A provider's fatal error (child/loop.py writes "FatalError: ..."): a bad key, an exhausted
# quota, a request the server refuses. Running it again sends the same request.
_FATAL = "FatalError:"
TEXT_CHARS = 300
QUESTION_CHARS = 2_000  # a question is read whole before it is answered


@record
class Need:
    """One entry of the queue: whose (None: the batch's), why, since when, and what it says."""

    child_id: str | None
    kind: NeedKind
    since: float | None  # None for the batch's (it comes first)
    text: str  # one line: the question, the denied call, the loop, the error

    @property
    def key(self) -> tuple[str | None, str, float | None]:
        """The same entry in two snapshots has the same key (a notification is given once)."""
        return self.child_id, self.kind, self.since


def need_of(row: ChildRow) -> Need | None:
    """What this child needs of the operator now (the most pressing reason), or None."""
    cleared = row.dismissed_ts if row.dismissed_ts is not None else float("-inf")
    if row.question is not None and row.status.live:
        return Need(row.id, "asks", row.question.ts, one_line(row.question.text, QUESTION_CHARS))
    denial = row.denial
    if denial is not None and denial.ts > cleared and not _steered_since(row, denial.ts):
        text = one_line(f"{denial.tool} {denial.input}", TEXT_CHARS)
        return Need(row.id, "denied", denial.ts, text)
    loop = row.loop
    if (
        loop is not None
        and row.status is ChildStatus.RUNNING
        and not row.pausing
        and loop.ts > cleared
        and not _steered_since(row, loop.ts)
    ):
        return Need(row.id, "looping", loop.ts, one_line(loop.summary, TEXT_CHARS))
    # A delegate of its parent's earlier attempt is history: the parent ran again since.
    if row.status in _RETRY_MAY_FIX and retry_may_fix(row) and not row.superseded:
        since = row.finished_ts if row.finished_ts is not None else row.queued_ts
        if since > cleared:
            kind: NeedKind = row.status.value  # type: ignore[assignment]
            return Need(row.id, kind, since, one_line(row.error or row.status.value, TEXT_CHARS))
    return None


def retry_may_fix(row: ChildRow) -> bool:
    """Whether running the child again may end otherwise: not after a fatal provider error."""
    return not (row.status is ChildStatus.FAILED and (row.error or "").startswith(_FATAL))


def needs(snapshot: Snapshot) -> tuple[Need, ...]:
    """The queue: the batch's entry first (the soft budget holds every child back), then the
    children's, oldest first."""
    held = snapshot.limits.soft_held if snapshot.limits is not None else None
    first = []
    if held is not None and snapshot.status.value == "running":
        first.append(Need(None, "budget", None, one_line(held, TEXT_CHARS)))
    return (*first, *sorted(children_needs(snapshot.children), key=_order))


def children_needs(rows: Iterable[ChildRow]) -> list[Need]:
    """Each child's entry, in the order of `rows`."""
    return [need for row in rows if (need := need_of(row)) is not None]


def _order(need: Need) -> tuple[float, str]:
    return (need.since or 0.0, need.child_id or "")


def _steered_since(row: ChildRow, ts: float) -> bool:
    """The operator acted on it after `ts`: a steer (or the nudge, a steer), a pause, a stop."""
    if row.pausing or row.status in (ChildStatus.PAUSED, ChildStatus.STOPPED):
        return True
    return any(r.by == "operator" and r.created_ts >= ts for r in row.steers)
