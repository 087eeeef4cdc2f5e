"""The operator's retry: a child that ended runs again under a new attempt of its id.

Run on the coordinator thread (as pauses.py is), between two steps. The new attempt is a new
`Child` for the same task and transcript file, queued at the front: it carries what the earlier
attempts were billed (spent is spent: the batch's totals and its budget count them), and its
`Kept` says which attempt it is and, for a retry that continues, what it goes on from (its
workspace as the earlier attempt left it, the end of its transcript, the CLI's session). The
earlier attempt is kept as a "retry" event: its status, error, usage, cost and times; the
delegates it made are history ("superseded": they no longer decide the batch's outcome). A batch
that had ended is reopened.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from flightdeck.engine.child.kept import Attempt, Kept
from flightdeck.engine.child.state import Child
from flightdeck.engine.commands import CommandError, Context, Retry
from flightdeck.engine.control.finals import Finals
from flightdeck.engine.control.recorder import Recorder
from flightdeck.engine.control.slots import Slots
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.model import ChildRow
from flightdeck.engine.model.session import CliSession
from flightdeck.engine.records.attempts import SUPERSEDED
from flightdeck.engine.records.transcripts import tail_lines
from flightdeck.engine.review.apply import Reviewer
from flightdeck.engine.review.values import Changes, changes_json

CONTEXT_LINES = 400  # of the earlier attempt's transcript, given to one that continues


@dataclass(frozen=True, slots=True)
class Rework:
    """What retries, accepts and discards need of the engine that runs the batch."""

    remake: Callable[[Task, Kept], Child]  # a child for a task, as at start
    tasks: Mapping[str, Task]  # the batch's own tasks, for children a resume carried
    session_of: Callable[[str], CliSession | None]  # the CLI session a child's run reported
    flush_transcripts: Callable[[], object]
    reviewer: Reviewer | None  # accept and discard (None: nowhere to apply them)
    on_reopened: Callable[[], None]  # a batch that had ended runs again
    context_chars: int  # of an earlier attempt's transcript, for one that continues


class Attempts:
    """Retries of the coordinator's children (and of those a resumed batch carried)."""

    def __init__(
        self,
        slots: Slots,
        finals: Finals,
        recorder: Recorder,
        rework: Rework | None,
        *,
        room: Callable[[int], str | None],  # why this many more runs cannot start (a budget)
        forget: Callable[[str], None],  # a child's progress as last recorded (it runs again)
        reopen: Callable[[], None],  # the batch runs again, if it had ended
    ) -> None:
        self._slots = slots
        self._finals = finals
        self._recorder = recorder
        self._forget = forget
        self._reopen = reopen
        self._remake = rework.remake if rework is not None else None
        self._tasks = rework.tasks if rework is not None else {}
        self._session_of = rework.session_of if rework is not None else lambda _: None
        self._flush = rework.flush_transcripts if rework is not None else lambda: None
        self._room = room
        self._context_chars = rework.context_chars if rework is not None else 0

    def retry(self, ids: tuple[str, ...], resume: bool) -> None:
        """Run each again; CommandError (none of them retried) if one cannot be."""
        slots = self._slots
        rows = {i: self._row(i) for i in dict.fromkeys(ids)}
        for child_id, row in rows.items():
            if row is None:
                raise CommandError(f"no child {child_id!r} in this batch", "child_ids")
            if self._task(row) is None:
                raise CommandError(f"{child_id} is not one of the batch's own tasks: not retried")
            if child_id not in slots.carried and not self._finals.committed(child_id):
                raise CommandError(f"{child_id} is still ending: retry it in a moment")
        # The sender's own checks, against the batch as it is now.
        known = {r.id: r for r in rows.values() if r is not None}
        Retry(ids, resume).check(Context("", known, rows=lambda: known))
        reason = self._room(len(known))
        if reason is not None:
            raise CommandError(f"not retried: {reason}")
        if resume:
            self._flush()  # the earlier attempts' last lines are in the file they read
        made = [self._again(row, resume) for row in known.values()]
        slots.queues.requeue(made)
        self._reopen()

    def _row(self, child_id: str) -> ChildRow | None:
        child = self._slots.by_id.get(child_id)
        return child.row() if child is not None else self._slots.carried.get(child_id)

    def _task(self, row: ChildRow) -> Task | None:
        child = self._slots.by_id.get(row.id)
        if child is not None:
            return child.task
        return self._tasks.get(row.id) if self._remake is not None else None

    def _again(self, row: ChildRow, resume: bool) -> Child:
        """The next attempt of `row`'s child, queued in its place."""
        task = self._task(row)
        assert task is not None and self._remake is not None
        before = row.status.value + (f": {row.error}" if row.error else "")
        old = self._slots.by_id.get(row.id)
        attempt = Attempt(
            row.attempt + 1,
            resume,
            before,
            context=self._context(row) if resume else "",
            session=self._session(row, old) if resume else None,
        )
        kept = Kept(attempt.number, attempt, row.changes if resume else None)
        child = self._remake(task, kept)
        child.carry(row.usage, row.cost_usd, row.cost_known_usd)  # its earlier attempts' spend
        mode = "continue" if resume else "fresh"
        for kid in self._slots.supersede(row.id):  # recorded before the attempt that makes it so
            self._recorder.record_event(kid, SUPERSEDED, row.id)
        child.transcript.write(
            "operator", f"retry requested: attempt {attempt.number} ({mode}) after {before}"
        )
        self._replace(old, child)
        # In one transaction: a retry event without its queued row would say it ran again.
        self._recorder.record(child.row(), [("retry", retry_json(row, attempt.number, mode))])
        return child

    def _replace(self, old: Child | None, new: Child) -> None:
        """`new` in the place of `old`, or of the carried row of its id."""
        slots, child_id = self._slots, new.task.id
        if old is not None:
            slots.children[slots.children.index(old)] = new
        else:
            slots.children.append(new)
            slots.carried = {k: v for k, v in slots.carried.items() if k != child_id}
        self._finals.reopen(child_id)
        slots.by_id[child_id] = new
        self._forget(child_id)

    def _context(self, row: ChildRow) -> str:
        """The end of the earlier attempts' transcript, as a model reads it."""
        lines, _ = tail_lines(Path(row.transcript), CONTEXT_LINES)
        return "\n".join(lines)[-self._context_chars :]

    def _session(self, row: ChildRow, old: Child | None) -> CliSession | None:
        if old is not None and old.runner.session is not None:
            return old.runner.session
        return self._session_of(row.id)


def retry_json(row: ChildRow, attempt: int, mode: str) -> str:
    """The "retry" event's detail: the new attempt, and the one before as it ended."""
    return json.dumps(
        {
            "attempt": attempt,
            "mode": mode,
            "before": {
                "attempt": row.attempt,
                "status": row.status.value,
                "error": row.error,
                "usage": dataclasses.asdict(row.usage),
                "tokens_unknown": row.tokens_unknown,  # its CLI counted none: not 0
                "cost_usd": None if row.cost_usd is None else str(row.cost_usd),
                "started_ts": row.started_ts,
                "finished_ts": row.finished_ts,
            },
        },
        ensure_ascii=False,
    )


class ChangesTold:
    """What each ended child changed in its own workspace, kept as a "changes" event once (a
    run the watchdog gave up on tells it later, when its run returns)."""

    def __init__(self, record_event: Callable[[str | None, str, str], None]) -> None:
        self._record_event = record_event
        self._told: dict[str, Changes] = {}

    def changes(self, child: Child) -> None:
        changes = child.kept.changes
        if changes is not None and self._told.get(child.task.id) is not changes:
            self._told[child.task.id] = changes
            self._record_event(child.task.id, "changes", changes_json(changes))
