"""A command child's working folder: the batch workspace, its own copy, or its own git
worktree of the workspace's repository (removed at the end unless kept)."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from pathlib import Path

from flightdeck.engine.inputs.settings.values import WorkspaceMode

GIT_TIMEOUT_S = 60.0

# git does not serialize `worktree add/remove/prune` in one repository: two at once can fail
# ("failed to read .git/worktrees/t4/commondir"). Children of one batch share the repository,
# so its worktree commands take turns (per process; one owner runs a batch).
_REPO_LOCKS: dict[str, threading.Lock] = {}
_REPO_LOCKS_GUARD = threading.Lock()


def _repo_lock(repo: Path) -> threading.Lock:
    key = os.path.realpath(repo)
    with _REPO_LOCKS_GUARD:
        return _REPO_LOCKS.setdefault(key, threading.Lock())


class WorkspaceError(Exception):
    """The child's folder could not be made (the child fails, the batch goes on)."""


def git_toplevel(folder: Path) -> Path | None:
    """The root of the git repository `folder` is in; None if it is in none (or no git)."""
    try:
        done = subprocess.run(
            ["git", "-C", str(folder), "rev-parse", "--show-toplevel"],
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return Path(done.stdout.strip()) if done.returncode == 0 and done.stdout.strip() else None


class Workspace:
    """Where one child runs; `prepare()` makes it, `release()` removes what it made."""

    def __init__(self, mode: WorkspaceMode, shared: Path, own: Path, *, keep: bool) -> None:
        self.mode = mode
        self._shared = shared
        self._own = own  # the child's own folder, for a copy or a worktree
        self._keep = keep
        self._repo: Path | None = None
        self.path = shared if mode == "shared" else own

    def prepare(self) -> Path:
        """Make the folder (a copy, a worktree); returns where the process runs."""
        if self.mode == "shared":
            return self.path
        self._own.parent.mkdir(parents=True, exist_ok=True)
        if self.mode == "copy":
            # One left by an owner that died (a resumed batch re-runs the child): made afresh.
            shutil.rmtree(self._own, ignore_errors=True)
            try:
                shutil.copytree(
                    self._shared, self._own, symlinks=True, ignore=self._inside_own_parent
                )
            except OSError as exc:
                raise WorkspaceError(f"cannot copy {self._shared}: {exc}") from exc
            return self.path
        repo = git_toplevel(self._shared)
        if repo is None:
            raise WorkspaceError(f"{self._shared} is not in a git repository")
        if self._own.exists():  # left by an owner that died: its worktree goes first
            self._git(repo, "worktree", "remove", "--force", str(self._own))
            self._git(repo, "worktree", "prune")
        self._git(repo, "worktree", "add", "--detach", str(self._own), "HEAD")
        self._repo = repo
        # The same place inside the repository as the batch workspace is.
        self.path = self._own / self._shared.resolve().relative_to(repo.resolve())
        return self.path

    def adopt(self) -> Path:
        """The folder a dead owner made for this child (its process still runs in it):
        used as it is, and removed at the end as if made here."""
        if self.mode == "worktree":
            repo = git_toplevel(self._shared)
            if repo is None:
                raise WorkspaceError(f"{self._shared} is not in a git repository")
            self._repo = repo
            self.path = self._own / self._shared.resolve().relative_to(repo.resolve())
        if not self.path.is_dir():
            raise WorkspaceError(f"{self.path} is gone")
        return self.path

    def _inside_own_parent(self, folder: str, names: list[str]) -> set[str]:
        """copytree's `ignore`: the folder the copies go into, when the state folder lies
        inside the workspace (`workspace = "."`), is never copied into itself."""
        here = Path(folder).resolve()
        where = self._own.parent.resolve()
        return {n for n in names if where == here / n or where.is_relative_to(here / n)}

    def release(self) -> str | None:
        """Remove the copy or worktree unless kept; a note for the transcript, or None."""
        if self.mode == "shared":
            return None
        if self._keep:
            return f"kept {self.mode}: {self._own}"
        if self.mode == "copy":
            shutil.rmtree(self._own, ignore_errors=True)
            return None
        if self._repo is None:
            return None  # it was never made
        try:
            self._git(self._repo, "worktree", "remove", "--force", str(self._own))
        except WorkspaceError as exc:
            return f"worktree not removed: {exc}"
        return None

    def _git(self, repo: Path, *args: str) -> None:
        try:
            with _repo_lock(repo):
                done = subprocess.run(
                    ["git", "-C", str(repo), *args],
                    capture_output=True,
                    text=True,
                    timeout=GIT_TIMEOUT_S,
                    check=False,
                )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise WorkspaceError(f"git {args[0]}: {exc}") from exc
        if done.returncode != 0:
            raise WorkspaceError(f"git {' '.join(args[:2])}: {done.stderr.strip()}")
