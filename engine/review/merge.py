"""Accepting and discarding children's work in git.

Accept commits each child's worktree (everything in it, with a temporary index) on a commit of
its own whose parent is the commit its worktree was made from, and merges those commits one
after another into the target branch with `git merge-tree --write-tree`: in the object store
only, no checkout touched. The first conflict stops it, and nothing has been applied: no ref
moved, no branch made, every worktree still there. Only once every merge is clean is each
child's branch (`flightdeck/BATCH/CHILD`) made and the target moved, in one step: a
fast-forward of the checkout that has it (git refuses it if local changes would be lost: the
branches are then taken back), or a compare-and-swap of its ref; then the worktrees are
removed. An accept cut short after the move (its process killed) is finished by the next: a
child whose branch holds the same work, merged already, is not merged again. Discard removes a
child's worktree and its branch, if it has one.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from flightdeck.engine.review.git import GitError, branch_name_problem, identity, repo_lock, run
from flightdeck.engine.review.tree import work_tree
from flightdeck.engine.review.values import Changes

BRANCH_PREFIX = "flightdeck"


@dataclass(frozen=True, slots=True)
class Work:
    """One child's pending changes, to accept or discard."""

    child_id: str
    changes: Changes
    goal: str = ""


@dataclass(frozen=True, slots=True)
class Merged:
    """Every child merged into `into`: its tip before and after, and each child's branch and
    commit."""

    into: str
    before: str
    commit: str
    branches: dict[str, tuple[str, str]] = field(default_factory=dict)  # child -> (branch, sha)


@dataclass(frozen=True, slots=True)
class Conflicted:
    """A child's work conflicts with what was merged before it (the target branch and the
    children ahead of it): nothing was applied."""

    child_id: str
    paths: tuple[str, ...]
    into: str
    after: tuple[str, ...]  # the children merged (in memory) ahead of it

    @property
    def report(self) -> str:
        """What conflicts, in a sentence."""
        shown = ", ".join(self.paths[:8]) + (" …" if len(self.paths) > 8 else "")
        ahead = f" and {', '.join(self.after)}" if self.after else ""
        return (
            # Whoever says it says first that nothing was applied: not said twice.
            f"{self.child_id} conflicts with {self.into}{ahead} in {shown} "
            f"(no branch moved, every worktree kept)"
        )


def branch_name(batch_id: str, child_id: str) -> str:
    """`flightdeck/BATCH/CHILD`, each part made a valid ref name component."""
    return f"{BRANCH_PREFIX}/{_component(batch_id)}/{_component(child_id)}"


def _component(text: str) -> str:
    part = re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip(".-") or "child"
    part = re.sub(r"\.\.+", ".", part)
    return part[:-5] + "-lock" if part.endswith(".lock") else part


def overlaps(works: Iterable[Work]) -> dict[str, tuple[str, ...]]:
    """The files more than one of these children changed, with who changed each."""
    by_path: dict[str, list[str]] = {}
    for work in works:
        for f in work.changes.files:
            by_path.setdefault(f.path, []).append(work.child_id)
    return {p: tuple(ids) for p, ids in sorted(by_path.items()) if len(ids) > 1}


def accept(repo: Path, into: str, works: Sequence[Work], batch_id: str) -> Merged | Conflicted:
    """Merge each child's work into branch `into`, in order; all of it, or (at the first
    conflict) none. GitError for what git refused (no such branch, a checkout whose local
    changes the merge would overwrite): nothing applied then either."""
    env = identity(repo)
    before = _branch_tip(repo, into)
    tip = before
    made: dict[str, tuple[str, str]] = {}
    for work in works:
        changes = work.changes
        folder = Path(changes.workspace)
        if changes.base is None or not folder.is_dir():
            raise GitError(f"{work.child_id}: its worktree is gone ({changes.workspace})")
        branch = branch_name(batch_id, work.child_id)
        tree = work_tree(folder)
        own = _merged_before(repo, branch, tree, changes.base, tip)
        if own is not None:  # an accept cut short (its owner killed) after `into` moved
            made[work.child_id] = (branch, own)
            continue
        title = work.goal.strip().splitlines()[0][:72] if work.goal.strip() else "its work"
        message = f"{work.child_id}: {title}\n\nflightdeck batch {batch_id}, child {work.child_id}"
        own = _commit(repo, tree, (changes.base,), message, env)
        done = run(
            repo, "merge-tree", "--write-tree", "--name-only", "--no-messages", "-z", tip, own,
            ok=(0, 1),
        )  # fmt: skip
        parts = done.out.split(b"\0")
        if done.code == 1:
            paths = tuple(p.decode("utf-8", "replace") for p in parts[1:] if p)
            return Conflicted(work.child_id, paths, into, tuple(made))
        merged = parts[0].decode("ascii")
        tip = _commit(repo, merged, (tip, own), f"Merge {branch} into {into}", env)
        made[work.child_id] = (branch, own)
    # The children's branches before `into` moves: an accept cut short after the move finds
    # them in it, and is finished without merging the same work twice (`_merged_before`).
    was = {b: _ref(repo, f"refs/heads/{b}") for b, _ in made.values()}
    for branch, sha in made.values():
        run(repo, "update-ref", f"refs/heads/{branch}", sha)
    try:
        _move(repo, into, before, tip)
    except GitError:
        for branch, old in was.items():  # nothing applied: no branch made either
            run(
                repo,
                "update-ref",
                *((f"refs/heads/{branch}", old) if old else ("-d", f"refs/heads/{branch}")),
            )
        raise
    for work in works:
        _remove_worktree(repo, Path(work.changes.workspace))
    return Merged(into, before, tip, made)


def _ref(repo: Path, ref: str) -> str | None:
    found = run(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", ok=(0, 1))
    return found.text if found.code == 0 and found.text else None


def _merged_before(repo: Path, branch: str, tree: str, base: str, tip: str) -> str | None:
    """The child's branch when it holds this very work (its tree, on its base) and is merged
    into `tip` already; else None."""
    sha = _ref(repo, f"refs/heads/{branch}")
    if sha is None or _ref(repo, f"{sha}^") != base:
        return None
    if run(repo, "rev-parse", f"{sha}^{{tree}}").text != tree:
        return None
    merged = run(repo, "merge-base", "--is-ancestor", sha, tip, ok=(0, 1))
    return sha if merged.code == 0 else None


def discard(repo: Path, work: Work, batch_id: str) -> None:
    """Remove the child's worktree and its branch (if it has one)."""
    _remove_worktree(repo, Path(work.changes.workspace))
    branch = f"refs/heads/{branch_name(batch_id, work.child_id)}"
    if run(repo, "show-ref", "--verify", "--quiet", branch, ok=(0, 1)).code == 0:
        run(repo, "update-ref", "-d", branch)


def remove_worktree(repo: Path, folder: Path) -> None:
    """`git worktree remove --force` (its base file too), the worktree list pruned."""
    _remove_worktree(repo, folder)


def _remove_worktree(repo: Path, folder: Path) -> None:
    with repo_lock(repo):
        if folder.exists():
            run(repo, "worktree", "remove", "--force", str(folder))
        run(repo, "worktree", "prune")
    with contextlib.suppress(FileNotFoundError):
        base_file(folder).unlink()


def base_file(folder: Path) -> Path:
    """Where the commit a child's worktree was made from is kept beside it."""
    return folder.with_name(folder.name + ".base")


def _branch_tip(repo: Path, branch: str) -> str:
    problem = branch_name_problem(branch)
    if problem is not None:
        raise GitError(problem)
    found = run(
        repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}", ok=(0, 1)
    )
    if found.code != 0 or not found.text:
        raise GitError(f"no branch {branch!r} in {repo} (make it first: git branch {branch})")
    return found.text


def _commit(
    repo: Path, tree: str, parents: Sequence[str], message: str, env: dict[str, str]
) -> str:
    args = ["commit-tree", tree, *(a for p in parents for a in ("-p", p)), "-m", message]
    return run(repo, *args, env=env).text


def _move(repo: Path, into: str, before: str, tip: str) -> None:
    """Move branch `into` from `before` to `tip` (a descendant): its checkout fast-forwarded if
    one has it checked out, else its ref swapped only if it still points at `before`."""
    checkout = _checked_out(repo, into)
    if checkout is None:
        run(repo, "update-ref", "-m", "flightdeck: accept", f"refs/heads/{into}", tip, before)
        return
    now = run(checkout, "rev-parse", "HEAD").text
    if now != before:
        raise GitError(f"{into} moved while the merge was prepared")
    run(checkout, "merge", "--ff-only", "--quiet", tip)


def _checked_out(repo: Path, branch: str) -> Path | None:
    """The worktree (the main checkout or another) that has `branch` checked out, if any."""
    listing = run(repo, "worktree", "list", "--porcelain", "-z").out.split(b"\0")
    where: Path | None = None
    for line in listing:
        text = line.decode("utf-8", "surrogateescape")
        if text.startswith("worktree "):
            where = Path(text[len("worktree ") :])
        elif text == f"branch refs/heads/{branch}" and where is not None:
            return where
    return None
