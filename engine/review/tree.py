"""What a child changed in its git worktree: everything in it now (untracked files too, ignored
ones not) written as a tree with a temporary index, compared with the commit the worktree was
made from. The worktree's own index and files are never touched, so this works on a child that
still runs, and on one an agent CLI made commits in.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from flightdeck.engine.review.git import GitError, run
from flightdeck.engine.review.values import Changes, FileChange

MAX_PATCH_BYTES = 4 * 1024 * 1024  # of a diff shown or printed; the rest is said, not shown
_KIND = {"A": "added", "D": "deleted"}


def _unquoted() -> dict[str, str]:
    """git's environment to name a file outside ASCII as it is (`ünïcødé.txt`), not in octal
    (`"\\303\\274n…"`), as the detail pane lists it (a control character is still quoted);
    after any config the operator passes the same way."""
    given = os.environ.get("GIT_CONFIG_COUNT", "0")
    n = int(given) if given.isdigit() else 0
    return {
        "GIT_CONFIG_COUNT": str(n + 1),
        f"GIT_CONFIG_KEY_{n}": "core.quotePath",
        f"GIT_CONFIG_VALUE_{n}": "false",
    }


def work_tree(worktree: Path) -> str:
    """The id of a tree of everything in `worktree` now, as `git add -A` would stage it."""
    with tempfile.TemporaryDirectory(prefix="flightdeck-index-") as tmp:
        index = Path(tmp) / "index"
        env = {"GIT_INDEX_FILE": str(index)}
        own = Path(run(worktree, "rev-parse", "--path-format=absolute", "--git-path", "index").text)
        if own.is_file():  # its stat data spares hashing every unchanged file again
            shutil.copy2(own, index)  # its time too: git tells racily clean entries by it
        else:
            run(worktree, "read-tree", "HEAD", env=env)
        run(worktree, "add", "-A", env=env)
        return run(worktree, "write-tree", env=env).text


def file_changes(repo: Path, base: str, tree: str) -> tuple[FileChange, ...]:
    """The files that differ between `base` and `tree`, with their line counts."""
    kinds: dict[str, str] = {}
    fields = run(repo, "diff-tree", "-r", "-z", "--no-renames", "--name-status", base, tree)
    parts = fields.out.split(b"\0")
    for status, path in zip(parts[0::2], parts[1::2], strict=False):
        kinds[_name(path)] = _KIND.get(status.decode("ascii", "replace")[:1], "modified")
    out = []
    stats = run(repo, "diff-tree", "-r", "-z", "--no-renames", "--numstat", base, tree)
    for record in stats.out.split(b"\0"):
        if not record:
            continue
        added, removed, path = record.split(b"\t", 2)
        name = _name(path)
        out.append(
            FileChange(
                name,
                None if added == b"-" else int(added),
                None if removed == b"-" else int(removed),
                kinds.get(name, "modified"),  # type: ignore[arg-type]
            )
        )
    return tuple(out)


def changes_of(worktree: Path, base: str, repo: Path) -> Changes:
    """The changes in `worktree` (a worktree of `repo`) since `base` (no files: it changed
    nothing)."""
    files = file_changes(worktree, base, work_tree(worktree))
    return Changes(files, str(worktree), base=base, repo=str(repo))


def patch(repo: Path, base: str, tree: str, path: str | None = None) -> str:
    """The unified diff from `base` to `tree` (of one file, or all), as text; a very big one
    is cut at MAX_PATCH_BYTES, and says so."""
    if path is not None and _outside(repo, path):
        return ""  # no file of it: git's own refusal named its pathspec magic, not the file
    args = ["diff", "--no-color", "--no-ext-diff", "--no-renames", base, tree]
    pathspec = ["--", f":(literal){path}"] if path is not None else []
    done = run(repo, *args, *pathspec, env=_unquoted())
    data = done.out
    cut = len(data) - MAX_PATCH_BYTES
    text = data[:MAX_PATCH_BYTES].decode("utf-8", "replace")
    return text + (f"\n… {cut:,} more bytes of diff not shown\n" if cut > 0 else "")


def _outside(root: Path, path: str) -> bool:
    """Whether `path`, read from `root` as git reads it, names nothing under `root` (`..`, or
    an absolute path elsewhere); symlinks are not followed, as git does not."""
    full = os.path.normpath(os.path.join(os.path.abspath(root), path))
    roots = {os.path.abspath(root), os.path.realpath(root)}
    return not any(full == r or full.startswith(r.rstrip(os.sep) + os.sep) for r in roots)


def changes_patch(changes: Changes, path: str | None = None) -> str:
    """The diff of a child's changes: of its worktree as it is now while pending, of its branch
    once accepted. GitError if there is nothing left to read it from."""
    if changes.base is None:
        raise GitError("its worktree's first commit was not recorded: no diff to read")
    folder = Path(changes.workspace)
    if changes.pending:
        if not folder.is_dir():
            raise GitError(f"its worktree is gone: {changes.workspace}")
        return patch(folder, changes.base, work_tree(folder), path)
    if changes.state == "accepted" and changes.branch and changes.repo:
        return patch(Path(changes.repo), changes.base, changes.branch, path)
    raise GitError(f"its changes were {changes.state}: nothing is left to show")


def _name(path: bytes) -> str:
    """A path as git wrote it (-z: never quoted), as text."""
    return path.decode("utf-8", "replace").strip("\n")
