"""A child's changes as a value: the files it changed in its own workspace (a git worktree or a
copy), and what the operator decided about them; kept as JSON in the store's events."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

ReviewState = Literal["pending", "accepted", "discarded"]
REVIEW_STATES: tuple[ReviewState, ...] = ("pending", "accepted", "discarded")
ChangesMode = Literal["worktree", "copy"]


@dataclass(frozen=True, slots=True)
class FileChange:
    """One file a child changed: lines added and removed (None for a binary file)."""

    path: str
    added: int | None
    removed: int | None
    kind: Literal["added", "modified", "deleted"] = "modified"


@dataclass(frozen=True, slots=True)
class Changes:
    """What a child changed in its own workspace, and what became of it: `pending` until the
    operator accepts it (merged into a branch) or discards it (its workspace removed)."""

    files: tuple[FileChange, ...]
    workspace: str  # the child's worktree or copy (removed once accepted or discarded)
    mode: ChangesMode = "worktree"
    base: str | None = None  # the commit its worktree was made from
    repo: str | None = None  # the repository the worktree belongs to
    state: ReviewState = "pending"
    branch: str | None = None  # accepted: the branch its work was committed on
    into: str | None = None  # accepted: the branch it was merged into
    commit: str | None = None  # accepted: the merge commit on `into`

    @property
    def added(self) -> int:
        """Lines added over every text file."""
        return sum(f.added or 0 for f in self.files)

    @property
    def removed(self) -> int:
        """Lines removed over every text file."""
        return sum(f.removed or 0 for f in self.files)

    @property
    def summary(self) -> str:
        """E.g. "+12 −3 in 4 files"."""
        n = len(self.files)
        files = f"{n} file{'' if n == 1 else 's'}"
        if self.mode == "copy":  # a copy has no history to count lines against
            return f"{files} changed"
        return f"+{self.added} −{self.removed} in {files}"

    @property
    def pending(self) -> bool:
        """Neither accepted nor discarded yet: its workspace is kept."""
        return self.state == "pending"

    def decided(
        self,
        state: ReviewState,
        *,
        branch: str | None = None,
        into: str | None = None,
        commit: str | None = None,
    ) -> Changes:
        """The same changes, accepted or discarded."""
        return replace(self, state=state, branch=branch, into=into, commit=commit)

    def renamed(self, name: Callable[[str], str]) -> Changes:
        """The same changes, each file's path through `name`."""
        return replace(self, files=tuple(replace(f, path=name(f.path)) for f in self.files))


def changes_json(changes: Changes | None) -> str:
    """The changes as the events table keeps them (`null`: none)."""
    if changes is None:
        return "null"
    body = {
        "files": [[f.path, f.added, f.removed, f.kind] for f in changes.files],
        "workspace": changes.workspace,
        "mode": changes.mode,
        "base": changes.base,
        "repo": changes.repo,
        "state": changes.state,
        "branch": changes.branch,
        "into": changes.into,
        "commit": changes.commit,
    }
    return json.dumps(body, ensure_ascii=False)


def changes_from_json(text: str) -> Changes | None:
    """The inverse of `changes_json`; None for none, or a detail it cannot read."""
    try:
        data = json.loads(text)
        if not isinstance(data, dict):
            return None
        files = tuple(
            FileChange(str(p), _count(a), _count(r), k if k in _KINDS else "modified")
            for p, a, r, k in data["files"]
        )
        state = data.get("state", "pending")
        mode = data.get("mode", "worktree")
        return Changes(
            files=files,
            workspace=str(data["workspace"]),
            mode=mode if mode in ("worktree", "copy") else "worktree",
            base=_text(data.get("base")),
            repo=_text(data.get("repo")),
            state=state if state in REVIEW_STATES else "pending",
            branch=_text(data.get("branch")),
            into=_text(data.get("into")),
            commit=_text(data.get("commit")),
        )
    except (ValueError, KeyError, TypeError):
        return None


_KINDS = ("added", "modified", "deleted")


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
