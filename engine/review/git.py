"""Running git: one way to call it (bounded in time, never prompting, its output as bytes), the
lock that makes one repository's worktree commands take turns, and the repository a folder is in.
"""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

GIT_TIMEOUT_S = 60.0

# git does not serialize `worktree add/remove/prune` in one repository: two at once can fail
# ("failed to read .git/worktrees/t4/commondir"). Children of one batch share the repository,
# so its worktree commands take turns (per process; one owner runs a batch).
_REPO_LOCKS: dict[str, threading.Lock] = {}
_REPO_LOCKS_GUARD = threading.Lock()


def repo_lock(repo: Path) -> threading.Lock:
    """The lock of `repo`'s worktree commands in this process."""
    key = os.path.realpath(repo)
    with _REPO_LOCKS_GUARD:
        return _REPO_LOCKS.setdefault(key, threading.Lock())


class GitError(Exception):
    """git could not be run, or refused: the message is its own, on one line."""


@dataclass(frozen=True, slots=True)
class Done:
    """A git command that ran: its exit status and its output."""

    code: int
    out: bytes
    err: str

    @property
    def text(self) -> str:
        """Its output as text (what is not UTF-8 replaced), without the last newline."""
        return self.out.decode("utf-8", "replace").rstrip("\n")


def run(
    cwd: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    ok: tuple[int, ...] = (0,),
) -> Done:
    """`git -C cwd args`; GitError if it cannot run, or exits with a status not in `ok`."""
    environ = {**os.environ, "GIT_TERMINAL_PROMPT": "0", **(env or {})}
    try:
        done = subprocess.run(
            ["git", "-C", str(cwd), *args],
            capture_output=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
            env=environ,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise GitError(f"git {args[0]}: {exc}") from exc
    err = done.stderr.decode("utf-8", "replace").strip()
    if done.returncode not in ok:
        lines = [
            ln.strip().removeprefix("error: ").removeprefix("fatal: ") for ln in err.splitlines()
        ]
        said = " ".join(ln for ln in lines if ln)[:400] or f"exit {done.returncode}"
        raise GitError(f"git {' '.join(args[:2])}: {said}")
    return Done(done.returncode, done.stdout, err)


def branch_text_problem(name: str) -> str | None:
    """What is wrong with `name` as a branch that needs no git to see: nothing given, a space,
    or characters a terminal would not show (bidi and C1 controls git itself accepts). A
    command's check, which runs where no process should be started (in the store's write
    transaction, on the coordinator's thread)."""
    if not name.strip():
        return "name the branch"
    if not name.isprintable() or " " in name:
        return f"{name!r} is not a valid branch name"
    return None


def branch_name_problem(name: str) -> str | None:
    """Why `name` cannot name a branch (None: it can, or there is no git to ask, which the
    next git command will say): `branch_text_problem`, then git's own rules, which need no
    repository (`..`, a leading `-`, `HEAD`, spaces and the rest)."""
    if (problem := branch_text_problem(name)) is not None:
        return problem
    try:
        done = run(Path("/"), "check-ref-format", "--branch", name, ok=(0, 1, 128))
    except GitError:
        return None
    return None if done.code == 0 else f"{name!r} is not a valid branch name"


def toplevel(folder: Path) -> Path | None:
    """The root of the git repository `folder` is in; None if it is in none (or no git)."""
    try:
        done = run(folder, "rev-parse", "--show-toplevel")
    except GitError:
        return None
    return Path(done.text) if done.text else None


def head(folder: Path) -> str | None:
    """The commit checked out in `folder` (None: none, or no repository)."""
    try:
        return run(folder, "rev-parse", "--verify", "HEAD^{commit}").text or None
    except GitError:
        return None


# Who commits a child's work when the repository names nobody (a fresh CI checkout): git would
# refuse to commit, or make up a name from the host. The operator's own name is used whenever
# git has one.
FALLBACK_IDENTITY = {"name": "flightdeck", "email": "flightdeck@localhost"}


def identity(repo: Path) -> dict[str, str]:
    """The environment a commit in `repo` needs: nothing for what git is told already."""
    env: dict[str, str] = {}
    for field, fallback in FALLBACK_IDENTITY.items():
        if os.environ.get(f"GIT_COMMITTER_{field.upper()}"):
            continue
        try:
            known = run(repo, "config", f"user.{field}", ok=(0, 1)).text
        except GitError:
            known = ""
        if not known:
            env[f"GIT_AUTHOR_{field.upper()}"] = fallback
            env[f"GIT_COMMITTER_{field.upper()}"] = fallback
    return env
