"""A real git repository in a temporary folder, and what git says of it, for the review tests."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

# Commits made here name their author; nothing from the user's own git config is read.
GIT_ENV = {
    **os.environ,
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.com",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.com",
}


def git(repo: Path, *args: str) -> str:
    """Run git in `repo`; its output, stripped. Fails the test if git does."""
    done = subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, text=True, env=GIT_ENV, check=False
    )
    assert done.returncode == 0, f"git {' '.join(args)}: {done.stderr}"
    return done.stdout.strip()


def make_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    """A repository on branch `main` with one commit of `files`."""
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    for name, text in (files or {"README.md": "hello\n"}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "start")
    return path


def worktrees(repo: Path) -> list[str]:
    """The folders of every worktree of `repo`, the main checkout first."""
    out = git(repo, "worktree", "list", "--porcelain")
    return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("worktree ")]


def branches(repo: Path) -> list[str]:
    """Every local branch of `repo`."""
    return git(repo, "for-each-ref", "--format=%(refname:short)", "refs/heads").splitlines()
