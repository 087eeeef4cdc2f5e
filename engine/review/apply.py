"""The operator's accept and discard (engine/commands.py) applied to children's changes, and
recorded: each child's changes as decided, as an "accept" or "discard" event (the store's
history, and what readers show); a line in its transcript, marked as the operator's; a merge
that could not be made, as a "review_refused" event. Used by a batch's owner (off its deciding
thread) and, for a batch with no owner alive, by the client that sends the command; one at a
time per batch, whichever process applies it (a lock file in the batch's folder).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from flightdeck.engine.commands import Accept, CommandError, Context, Discard
from flightdeck.engine.model import ChildRow
from flightdeck.engine.records.transcripts import TranscriptWriter
from flightdeck.engine.review.git import GitError
from flightdeck.engine.review.merge import Conflicted, Work, accept, discard, overlaps
from flightdeck.engine.review.values import Changes, changes_json

LOCK_NAME = "review.lock"

RecordEvent = Callable[[str | None, str, str], None]  # (child id or None, kind, detail)


@dataclass(frozen=True, slots=True)
class Outcome:
    """What an accept or discard did: each child's changes as now decided, in a sentence."""

    decided: dict[str, Changes]
    said: str
    overlapping: dict[str, tuple[str, ...]] = field(default_factory=dict)


class Reviewer:
    """Applies accept and discard to one batch's children, and records what it did."""

    def __init__(
        self, batch_id: str, batch_dir: Path, record_event: RecordEvent, clock: Callable[[], float]
    ) -> None:
        self._batch_id = batch_id
        self._lock = batch_dir / LOCK_NAME
        self._record = record_event
        self._clock = clock

    def apply(self, command: Accept | Discard, rows: Mapping[str, ChildRow]) -> Outcome:
        """Apply `command` to these children (`rows`: the batch's, as they are now);
        CommandError, recorded, nothing applied, if it cannot be (a conflict, say)."""
        command.check(Context(self._batch_id, rows, rows=lambda: rows))
        works = [
            Work(i, rows[i].changes, rows[i].goal)  # type: ignore[arg-type]  # checked: pending
            for i in dict.fromkeys(command.child_ids)
        ]
        with _one_at_a_time(self._lock):
            try:
                outcome = self._apply(command, works)
            except (GitError, OSError) as exc:
                self._refused(command, str(exc))
                raise CommandError(str(exc)) from None
        for child_id, changes in outcome.decided.items():
            self._record(child_id, command.kind, changes_json(changes))
            _tell(rows[child_id], self._line(changes), self._clock)
        return outcome

    def _apply(self, command: Accept | Discard, works: list[Work]) -> Outcome:
        if isinstance(command, Discard):
            decided = {}
            for work in works:
                repo = _repo(work)
                if work.changes.mode == "copy":
                    _remove_copy(Path(work.changes.workspace))
                else:
                    discard(repo, work, self._batch_id)
                decided[work.child_id] = work.changes.decided("discarded")
            return Outcome(decided, said_of(decided))
        repos = {_repo(w) for w in works}
        if len(repos) != 1:
            raise GitError("these children's worktrees are of different repositories")
        done = accept(repos.pop(), command.into, works, self._batch_id)
        if isinstance(done, Conflicted):  # the files they share were said before it was sent
            raise GitError(done.report)
        decided = {
            w.child_id: w.changes.decided(
                "accepted", branch=done.branches[w.child_id][0], into=done.into, commit=done.commit
            )
            for w in works
        }
        return Outcome(decided, said_of(decided), overlaps(works))

    def _refused(self, command: Accept | Discard, reason: str) -> None:
        detail = {"kind": command.kind, "child_ids": list(command.child_ids), "reason": reason}
        if isinstance(command, Accept):
            detail["into"] = command.into
        self._record(None, "review_refused", json.dumps(detail, ensure_ascii=False))

    @staticmethod
    def _line(changes: Changes) -> str:
        if changes.state == "accepted":
            return (
                f"accepted: {changes.summary} committed on {changes.branch}, merged into "
                f"{changes.into} ({(changes.commit or '')[:12]})"
            )
        return f"discarded: {changes.summary}; its {changes.mode} removed"


def said_of(decided: Mapping[str, Changes]) -> str:
    """What an accept or discard did, in the one sentence every process that applies it (or
    reads what the owner applied) prints: `accepted c1, c2 into main (now 1a2b3c4d5e6f)`."""
    ids = ", ".join(decided)
    first = next(iter(decided.values()), None)
    if first is None or first.state != "accepted":
        return f"discarded {ids}"
    now = f" (now {first.commit[:12]})" if first.commit else ""
    return f"accepted {ids} into {first.into}{now}"


def overlap_text(rows: Mapping[str, ChildRow], ids: tuple[str, ...]) -> str | None:
    """The files more than one of these children changed (and who), in a line; None: none."""
    works = [
        Work(i, r.changes)
        for i in ids
        if (r := rows.get(i)) is not None and r.changes is not None and r.changes.pending
    ]
    shared = overlaps(works)
    return _overlap_text(shared) if shared else None


def _overlap_text(shared: Mapping[str, tuple[str, ...]]) -> str:
    items = [f"{path} ({', '.join(ids)})" for path, ids in shared.items()]
    return ", ".join(items[:8]) + (f" and {len(items) - 8} more" if len(items) > 8 else "")


def _repo(work: Work) -> Path:
    if work.changes.repo is None:
        raise GitError(f"{work.child_id}: the repository of its worktree was not recorded")
    return Path(work.changes.repo)


def _remove_copy(folder: Path) -> None:
    import shutil

    shutil.rmtree(folder, ignore_errors=True)


def _tell(row: ChildRow, text: str, clock: Callable[[], float]) -> None:
    """A line in an ended child's transcript, as the operator's."""
    writer = TranscriptWriter(row.transcript, clock)
    try:
        writer.write("operator", text)
    finally:
        writer.close()


@contextmanager
def _one_at_a_time(path: Path) -> Iterator[None]:
    """An exclusive lock on `path` (made if need be), across processes."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
