"""A child's changes in git (engine/review): read from its worktree, accepted into a branch all
or nothing, discarded; against real repositories in temporary folders."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from flightdeck.engine.agents.workspace import Workspace, WorkspaceError
from flightdeck.engine.review import merge
from flightdeck.engine.review.git import GitError, branch_name_problem
from flightdeck.engine.review.merge import Conflicted, Merged, Work, accept, discard, overlaps
from flightdeck.engine.review.tree import changes_patch
from flightdeck.engine.review.values import Changes, changes_from_json, changes_json

from gitrepo import GIT_ENV, branches, git, make_repo, worktrees


@pytest.fixture(autouse=True)
def _no_user_git_config(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM"):
        monkeypatch.setenv(name, GIT_ENV[name])
    for name in ("NAME", "EMAIL"):  # the engine's own identity is what is under test
        monkeypatch.delenv(f"GIT_AUTHOR_{name}", raising=False)
        monkeypatch.delenv(f"GIT_COMMITTER_{name}", raising=False)


def _child(repo: Path, tmp: Path, name: str, edits: dict[str, str | None]) -> Work:
    """A child's worktree of `repo` with `edits` made in it (None deletes), released."""
    ws = Workspace("worktree", repo, tmp / "workspaces" / name, keep=False)
    folder = ws.prepare()
    for rel, text in edits.items():
        if text is None:
            (folder / rel).unlink()
        else:
            (folder / rel).parent.mkdir(parents=True, exist_ok=True)
            (folder / rel).write_text(text)
    changes, note = ws.release()
    assert changes is not None, note
    return Work(name, changes, goal=f"edit for {name}")


def test_a_worktree_s_changes_are_read_without_touching_it(tmp_path: Path) -> None:
    repo = make_repo(
        tmp_path / "repo", {"a.py": "one\ntwo\n", "b.txt": "x\n", ".gitignore": "*.log\n"}
    )
    work = _child(
        repo,
        tmp_path,
        "c1",
        {"a.py": "one\n2\nthree\n", "new.txt": "n\n", "b.txt": None, "noise.log": "ignored\n"},
    )
    files = {f.path: (f.added, f.removed, f.kind) for f in work.changes.files}
    assert files == {
        "a.py": (2, 1, "modified"),
        "new.txt": (1, 0, "added"),
        "b.txt": (0, 1, "deleted"),
    }
    assert work.changes.summary == "+3 −2 in 3 files"
    folder = Path(work.changes.workspace)
    assert git(folder, "status", "--porcelain")  # its own index: untouched, nothing staged
    assert "?? new.txt" in git(folder, "status", "--porcelain")
    text = changes_patch(work.changes)
    assert "+2\n" in text and "+three\n" in text and "-two\n" in text and "noise.log" not in text
    one = changes_patch(work.changes, "new.txt")
    assert "new.txt" in one and "a.py" not in one
    assert changes_from_json(changes_json(work.changes)) == work.changes


def test_a_diff_names_a_file_outside_ascii_as_it_is(tmp_path: Path) -> None:
    # Found in a walkthrough: D and `flightdeck diff` showed "\303\274n\303\257c…" where the
    # detail pane listed ünïcødé.txt; a control character in a name is still quoted.
    repo = make_repo(tmp_path / "repo", {"a.py": "a\n"})
    work = _child(repo, tmp_path, "c1", {"ünïcødé.txt": "u\n", "tab\there.txt": "t\n"})
    text = changes_patch(work.changes)
    assert "+++ b/ünïcødé.txt\n" in text, text
    assert '"b/tab\\there.txt"' in text, text


def test_a_worktree_left_as_it_was_is_removed_at_the_end(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    ws = Workspace("worktree", repo, tmp_path / "workspaces" / "c1", keep=False)
    ws.prepare()
    assert ws.release() == (None, None)
    assert worktrees(repo) == [str(repo)]


def test_accept_merges_every_child_into_the_branch_and_makes_their_branches(
    tmp_path: Path,
) -> None:
    repo = make_repo(tmp_path / "repo", {"a.py": "a\n", "b.py": "b\n"})
    git(repo, "branch", "review")  # not checked out: its ref is moved
    works = [
        _child(repo, tmp_path, "c1", {"a.py": "A\n"}),
        _child(repo, tmp_path, "c2", {"b.py": "B\n"}),
    ]
    before = git(repo, "rev-parse", "review")
    done = accept(repo, "review", works, "20260101-000000-abcd")
    assert isinstance(done, Merged) and done.before == before
    assert git(repo, "rev-parse", "review") == done.commit
    assert git(repo, "show", "review:a.py") == "A" and git(repo, "show", "review:b.py") == "B"
    assert sorted(branches(repo)) == [
        "flightdeck/20260101-000000-abcd/c1",
        "flightdeck/20260101-000000-abcd/c2",
        "main",
        "review",
    ]
    # Each child's commit is its own, on top of the commit its worktree was made from.
    c1 = git(repo, "rev-parse", "flightdeck/20260101-000000-abcd/c1")
    assert git(repo, "rev-parse", f"{c1}^") == before
    assert git(repo, "log", "-1", "--format=%an <%ae>", c1) == "flightdeck <flightdeck@localhost>"
    assert worktrees(repo) == [str(repo)]  # their worktrees are removed once merged


class _Killed(BaseException):
    """The owner killed (-9) at that point: nothing after it runs."""


@pytest.mark.parametrize("at", ["_remove_worktree", "_move"])
def test_an_accept_cut_short_is_finished_by_the_next_without_merging_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at: str
) -> None:
    # Found in a walkthrough: the owner killed after `review` moved, then `resume` applied the
    # pending accept again: every child's work was committed and merged into `review` twice.
    repo = make_repo(tmp_path / "repo", {"a.py": "a\n", "b.py": "b\n"})
    git(repo, "branch", "review")
    works = [
        _child(repo, tmp_path, "c1", {"a.py": "A\n"}),
        _child(repo, tmp_path, "c2", {"b.py": "B\n"}),
    ]
    real = getattr(merge, at)

    def killed(*args: object) -> None:
        raise _Killed

    monkeypatch.setattr(merge, at, killed)
    with pytest.raises(_Killed):
        accept(repo, "review", works, "b1")
    cut_short = git(repo, "rev-parse", "review")
    monkeypatch.setattr(merge, at, real)
    done = accept(repo, "review", works, "b1")
    assert isinstance(done, Merged)
    merges = git(repo, "log", "--merges", "--format=%s", "review").splitlines()
    assert sorted(merges) == [
        "Merge flightdeck/b1/c1 into review",
        "Merge flightdeck/b1/c2 into review",
    ], merges
    if at == "_remove_worktree":  # `review` had moved: nothing more to merge
        assert done.commit == cut_short
    assert git(repo, "show", "review:a.py") == "A" and git(repo, "show", "review:b.py") == "B"
    for child, (branch, sha) in done.branches.items():
        assert git(repo, "rev-parse", branch) == sha
        assert git(repo, "merge-base", "--is-ancestor", sha, "review") == "", child
    assert worktrees(repo) == [str(repo)]


def test_accept_into_the_checked_out_branch_fast_forwards_its_checkout(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.py": "a\n"})
    work = _child(repo, tmp_path, "c1", {"a.py": "A\n", "n.py": "n\n"})
    (repo / "local.txt").write_text("the operator's own untracked file\n")
    done = accept(repo, "main", [work], "b1")
    assert isinstance(done, Merged)
    assert (repo / "a.py").read_text() == "A\n" and (repo / "n.py").read_text() == "n\n"
    assert git(repo, "status", "--porcelain") == "?? local.txt"


def test_a_conflicting_pair_is_reported_and_nothing_is_applied(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.py": "a\nb\nc\n"})
    works = [
        _child(repo, tmp_path, "c1", {"a.py": "a\nONE\nc\n", "x.py": "x\n"}),
        _child(repo, tmp_path, "c2", {"a.py": "a\nTWO\nc\n"}),
    ]
    assert overlaps(works) == {"a.py": ("c1", "c2")}
    main, status = git(repo, "rev-parse", "main"), git(repo, "status", "--porcelain")
    done = accept(repo, "main", works, "b1")
    assert isinstance(done, Conflicted)
    assert (done.child_id, done.paths, done.after) == ("c2", ("a.py",), ("c1",))
    assert "c2 conflicts with main and c1 in a.py (no branch moved" in done.report
    # Nothing half-applied: the branch, its checkout, the branches and the worktrees as before.
    assert git(repo, "rev-parse", "main") == main
    assert (
        git(repo, "status", "--porcelain") == status and (repo / "a.py").read_text() == "a\nb\nc\n"
    )
    assert branches(repo) == ["main"]
    assert len(worktrees(repo)) == 3
    assert not (repo / ".git" / "MERGE_HEAD").exists()


def test_accept_refuses_what_the_checkout_s_local_changes_would_lose(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo", {"a.py": "a\n"})
    work = _child(repo, tmp_path, "c1", {"a.py": "A\n"})
    (repo / "a.py").write_text("the operator's edit\n")
    main = git(repo, "rev-parse", "main")
    with pytest.raises(GitError, match="overwritten"):
        accept(repo, "main", [work], "b1")
    assert git(repo, "rev-parse", "main") == main
    assert (repo / "a.py").read_text() == "the operator's edit\n"
    assert branches(repo) == ["main"] and len(worktrees(repo)) == 2
    with pytest.raises(GitError, match="no branch 'nope'"):
        accept(repo, "nope", [work], "b1")


def test_discard_leaves_no_worktree_and_no_branch(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    work = _child(repo, tmp_path, "c1", {"README.md": "changed\n"})
    git(repo, "branch", "flightdeck/b1/c1")  # as if an earlier accept had made it
    discard(repo, work, "b1")
    assert worktrees(repo) == [str(repo)] and branches(repo) == ["main"]
    assert not Path(work.changes.workspace).exists()
    assert not Path(work.changes.workspace + ".base").exists()


def test_a_fresh_start_never_removes_an_earlier_attempt_s_changes(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    work = _child(repo, tmp_path, "c1", {"README.md": "changed\n"})
    again = Workspace("worktree", repo, tmp_path / "workspaces" / "c1", keep=False)
    with pytest.raises(WorkspaceError, match="earlier attempt's changes"):
        again.prepare()
    assert (Path(work.changes.workspace) / "README.md").read_text() == "changed\n"
    # Continuing works on in it, and finds its changes (and what it adds) at the end.
    folder = again.reuse()
    (folder / "more.txt").write_text("more\n")
    changes, _ = again.release()
    assert isinstance(changes, Changes) and {f.path for f in changes.files} == {
        "README.md",
        "more.txt",
    }


def test_a_copy_that_changed_is_kept_and_one_that_did_not_is_removed(tmp_path: Path) -> None:
    shared = tmp_path / "ws"
    shared.mkdir()
    (shared / "a.txt").write_text("a")
    same = Workspace("copy", shared, tmp_path / "copies" / "c0", keep=False)
    same.prepare()
    assert same.release() == (None, None) and not (tmp_path / "copies" / "c0").exists()
    ws = Workspace("copy", shared, tmp_path / "copies" / "c1", keep=False)
    folder = ws.prepare()
    (folder / "b.txt").write_text("b")
    os.remove(folder / "a.txt")
    changes, note = ws.release()
    assert changes is not None and changes.summary == "2 files changed"
    assert {(f.path, f.kind) for f in changes.files} == {("b.txt", "added"), ("a.txt", "deleted")}
    assert folder.is_dir() and note is not None and "until accepted or discarded" in note


@pytest.mark.parametrize("name", ["a..b", "HEAD", "-f", "x.lock", "two words", "x\u202ey", " "])
def test_a_branch_name_git_would_refuse_is_said(name: str) -> None:
    problem = branch_name_problem(name)
    assert problem is not None and ("not a valid branch name" in problem or "name the" in problem)


@pytest.mark.parametrize("name", ["main", "release/1.2", "feat/x-y_z"])
def test_a_branch_name_git_takes_is_fine(name: str) -> None:
    assert branch_name_problem(name) is None
