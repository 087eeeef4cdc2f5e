"""A child's working folder: the batch workspace, its own copy, or its own git worktree of the
workspace's repository.

A child's work is never deleted without the operator's accept or discard: at its end, a copy or
worktree it changed is kept, and what it changed is reported (engine/review); one it left as it
was is removed (unless `keep_worktrees`). A fresh start never removes one an earlier attempt
left with changes in it: it fails and says so.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from flightdeck.engine.inputs.settings.values import WorkspaceMode
from flightdeck.engine.private import private_dir
from flightdeck.engine.review.git import GitError, head, repo_lock, run, toplevel
from flightdeck.engine.review.merge import base_file, remove_worktree
from flightdeck.engine.review.tree import changes_of
from flightdeck.engine.review.values import Changes, FileChange

__all__ = ["Workspace", "WorkspaceError", "git_toplevel"]

git_toplevel = toplevel  # the name its callers know


class WorkspaceError(Exception):
    """The child's folder could not be made (the child fails, the batch goes on)."""


Manifest = dict[str, tuple[int, int]]  # a copy's files: relative path -> (size, mtime in ns)


class Workspace:
    """Where one child runs; `prepare()` makes it, `release()` removes it unless it holds work."""

    def __init__(self, mode: WorkspaceMode, shared: Path, own: Path, *, keep: bool) -> None:
        self.mode = mode
        self._shared = shared
        self._own = own  # the child's own folder, for a copy or a worktree
        self._keep = keep
        self._repo: Path | None = None
        self._base: str | None = None  # the commit a worktree was made from
        self._manifest: Manifest | None = None  # a copy's files as copied
        self.path = shared if mode == "shared" else own
        self.remade = False  # reuse() found no folder left and made one (`note`)

    def prepare(self) -> Path:
        """Make the folder (a copy, a worktree); returns where the child works."""
        self.remade = False
        if self.mode == "shared":
            return self.path
        private_dir(self._own.parent)  # `workspaces/` in the batch folder: the user's alone
        if self.mode == "copy":
            if self._own.exists():  # left by an earlier attempt, or an owner that died
                left = copy_changes(self._own, self._shared, None)
                if left.files:
                    raise WorkspaceError(
                        f"its copy holds an earlier attempt's changes ({left.summary}): "
                        "discard them, or retry --continue to work on in it"
                    )
                shutil.rmtree(self._own, ignore_errors=True)
            try:
                shutil.copytree(
                    self._shared, self._own, symlinks=True, ignore=self._inside_own_parent
                )
            except OSError as exc:
                raise WorkspaceError(f"cannot copy {self._shared}: {exc}") from exc
            self._manifest = manifest(self._own)
            return self.path
        repo = self._repository()
        if self._own.exists():  # left by an earlier attempt, or an owner that died
            self._repo, self._base = repo, self._read_base()
            found = self._changes()
            if found is not None and found.files:
                raise WorkspaceError(
                    f"its worktree holds an earlier attempt's changes ({found.summary}): "
                    "accept or discard them, or retry --continue to work on in it"
                )
            self._git(repo, "worktree", "remove", "--force", str(self._own))
            self._git(repo, "worktree", "prune")
        self._git(repo, "worktree", "add", "--detach", str(self._own), "HEAD")
        self._repo, self._base = repo, head(self._own)
        if self._base is not None:
            base_file(self._own).write_text(self._base + "\n")
        self.path = self._inner()
        return self.path

    def reuse(self) -> Path:
        """The folder an earlier attempt left, to work on in (a retry that continues); made
        afresh if there is none."""
        if self.mode == "shared":
            return self.prepare()
        if not self._own.is_dir():  # a merge or a discard removed it, say
            path = self.prepare()
            self.remade = True
            return path
        if self.mode == "worktree":
            self._repo, self._base = self._repository(), self._read_base()
            self.path = self._inner()
            return self.path
        self._manifest = None  # what it was copied as is not known here: any file counts
        return self.path

    @property
    def note(self) -> str:
        """What the transcript's workspace line adds: a retry that continues found no folder
        of the earlier attempt left, and works in a fresh one."""
        return f" (a fresh {self.mode}: the earlier attempt's is gone)" if self.remade else ""

    def adopt(self) -> Path:
        """The folder a dead owner made for this child (its process still runs in it): used as
        it is, and released at the end as if made here."""
        if self.mode == "worktree":
            self._repo, self._base = self._repository(), self._read_base()
            self.path = self._inner()
        if not self.path.is_dir():
            raise WorkspaceError(f"{self.path} is gone")
        return self.path

    def release(self) -> tuple[Changes | None, str | None]:
        """At the child's end: what it changed (its folder kept for the operator's accept or
        discard), or None (the folder removed unless kept); and a note for the transcript."""
        if self.mode == "shared" or (self.mode == "worktree" and self._repo is None):
            return None, None  # shared, or its worktree was never made
        try:
            found = self._changes()
        except GitError as exc:
            return None, f"{self.mode} kept, its changes could not be read: {exc}"
        if found is not None and found.files:
            return found, (
                f"changes {found.summary} kept in its {self.mode} until accepted or "
                f"discarded: {self._own}"
            )
        if self._keep:
            return None, f"kept {self.mode}: {self._own}"
        try:
            if self.mode == "copy":
                shutil.rmtree(self._own)
            else:
                assert self._repo is not None
                remove_worktree(self._repo, self._own)
        except (OSError, GitError) as exc:
            return None, f"{self.mode} not removed: {exc}"
        return None, None

    def _changes(self) -> Changes | None:
        """What the child changed in its copy or worktree (None: nothing to compare with)."""
        if self.mode == "copy":
            return copy_changes(self._own, self._shared, self._manifest)
        if self._repo is None or self._base is None:
            return None
        return changes_of(self._own, self._base, self._repo)

    def _inner(self) -> Path:
        """The same place inside the worktree as the batch workspace is in its repository."""
        assert self._repo is not None
        return self._own / self._shared.resolve().relative_to(self._repo.resolve())

    def _repository(self) -> Path:
        repo = toplevel(self._shared)
        if repo is None:
            raise WorkspaceError(f"{self._shared} is not in a git repository")
        return repo

    def _read_base(self) -> str | None:
        try:
            return base_file(self._own).read_text().strip() or None
        except OSError:
            return head(self._own)  # made before bases were kept: its checkout's commit

    def _inside_own_parent(self, folder: str, names: list[str]) -> set[str]:
        """copytree's `ignore`: the folder the copies go into, when the state folder lies
        inside the workspace (`workspace = "."`), is never copied into itself."""
        here = Path(folder).resolve()
        where = self._own.parent.resolve()
        return {n for n in names if where == here / n or where.is_relative_to(here / n)}

    def _git(self, repo: Path, *args: str) -> None:
        try:
            with repo_lock(repo):
                run(repo, *args)
        except GitError as exc:
            raise WorkspaceError(str(exc)) from exc


def manifest(root: Path) -> Manifest:
    """Every file under `root` (links not followed): its size and modification time."""
    out: Manifest = {}
    for folder, _, files in os.walk(root):
        for name in files:
            path = Path(folder) / name
            try:
                st = path.lstat()
            except OSError:
                continue
            out[str(path.relative_to(root))] = (st.st_size, st.st_mtime_ns)
    return out


def copy_changes(copy: Path, shared: Path, before: Manifest | None) -> Changes:
    """The files of a copy changed since it was made (`before`; None: not known, so every file
    of the copy that differs from the batch workspace's now). Lines are not counted: a copy has
    no history to count them against."""
    now = manifest(copy)
    files = []
    for rel, stat in sorted(now.items()):
        if before is not None:
            if rel not in before:
                files.append(FileChange(rel, None, None, "added"))
            elif before[rel] != stat:
                files.append(FileChange(rel, None, None, "modified"))
        elif _differs(shared / rel, copy / rel):
            files.append(FileChange(rel, None, None, "modified"))
    if before is not None:
        files += [FileChange(rel, None, None, "deleted") for rel in sorted(before.keys() - now)]
    return Changes(tuple(files), str(copy), mode="copy", repo=str(shared))


def _differs(a: Path, b: Path) -> bool:
    try:
        return a.read_bytes() != b.read_bytes()
    except OSError:
        return True
