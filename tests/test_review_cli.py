"""Review and retry from the command line, on a batch whose owner is a real process: command
children (tests/fakes/edit_files.py) that edit files in git worktrees of a real repository;
`flightdeck diff`, `merge --into`, `discard` and `retry` (which starts an owner again) as an
operator runs them, and what git and the store say afterwards."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from flightdeck.engine.model import ChildRow, ChildStatus
from flightdeck.engine.records.reader import StoreReader
from flightdeck.tui.rework import _retryable

from gitrepo import GIT_ENV, branches, git, make_repo, worktrees
from helpers import ended, until
from test_store import make_child

pytestmark = pytest.mark.slow

FAKES = Path(__file__).parent / "fakes"
ENV = {**GIT_ENV, "NO_COLOR": "1"}


def fd(
    folder: Path, *args: str, timeout: float = 120, env: dict[str, str] = ENV
) -> subprocess.CompletedProcess[str]:
    """`flightdeck ARGS` in `folder`, as a user runs it (piped: plain output)."""
    return subprocess.run(
        [sys.executable, "-m", "flightdeck.tui.cli", *args, "--state-dir", str(folder / "state")],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def project(tmp_path: Path, goals: dict[str, str], *extra: str) -> tuple[Path, Path]:
    """A repository, and a batch of command children editing worktrees of it: each task's goal
    is its edits (FILE=TEXT ...)."""
    repo = make_repo(tmp_path / "repo", {"shared.txt": "base\n", "README.md": "hello\n"})
    folder = tmp_path / "work"
    folder.mkdir()
    argv = [sys.executable, str(FAKES / "edit_files.py"), *extra, "{goal}"]
    (folder / "flightdeck.toml").write_text(
        '[engine]\ndefault_route = "cli"\n[routes.cli]\nprovider = "command"\n'
        f'workspace = "worktree"\nargv = {json.dumps(argv)}\n'
    )
    tasks = "".join(f'[[tasks]]\nid = "{i}"\ngoal = "{g}"\n' for i, g in goals.items())
    (folder / "tasks.toml").write_text(f'[batch]\nworkspace = "{repo}"\n{tasks}')
    return repo, folder


def run(folder: Path, env: dict[str, str] = ENV) -> str:
    """Run the batch to its end (headless, its own owner); its id."""
    done = fd(folder, "run", "tasks.toml", "--headless", env=env)
    with StoreReader(folder / "state" / "flightdeck.db") as reader:
        [info] = reader.batches()
    assert done.returncode in (0, 1), done.stderr
    return info.id


def test_diff_merge_with_a_conflict_then_without_and_discard(tmp_path: Path) -> None:
    goals = {
        "c1": "x.txt=one",
        "c2": "shared.txt=from c2",
        "c3": "shared.txt=from c3",
    }
    repo, folder = project(tmp_path, goals)
    batch = run(folder)
    main_before = git(repo, "rev-parse", "main")
    assert len(worktrees(repo)) == 4  # each child's kept with its changes

    listed = fd(folder, "report", batch, "--format", "json")
    changes = {c["child_id"]: c for c in json.loads(listed.stdout)["changes"]}
    assert changes["c1"]["summary"] == "+1 −0 in 1 file" and changes["c1"]["state"] == "pending"

    diff = fd(folder, "diff", batch, "c2")
    assert diff.returncode == 0, diff.stderr
    assert "-base\n+from c2\n" in diff.stdout and "\x1b" not in diff.stdout  # plain: piped
    assert "+one" not in diff.stdout
    # One file: one it changed, one it did not (said, named, sanitized), and none (bad input).
    one = fd(folder, "diff", batch, "c2", "--file", "shared.txt")
    assert one.returncode == 0 and "+from c2\n" in one.stdout
    untouched = fd(folder, "diff", batch, "c2", "--file", "README.md")
    assert (untouched.returncode, untouched.stdout) == (1, "")
    assert untouched.stderr == "flightdeck: c2 did not change 'README.md'\n"
    # A path outside its worktree is a file it did not change: said so, not as git's refusal
    # with its pathspec magic (`:(literal)/etc/passwd: ... is outside repository`).
    for outside in ("/etc/passwd", "../../etc/passwd"):
        away = fd(folder, "diff", batch, "c2", "--file", outside)
        assert (away.returncode, away.stdout) == (1, ""), away.stderr
        assert away.stderr == f"flightdeck: c2 did not change {outside!r}\n"
    inside = fd(folder, "diff", batch, "c2", "--file", changes["c2"]["workspace"] + "/shared.txt")
    assert inside.returncode == 0 and "+from c2\n" in inside.stdout  # its own, named in full
    odd = fd(folder, "diff", batch, "c2", "--file", "no\x1b[31mne.txt")
    assert odd.returncode == 1 and "\x1b" not in odd.stderr and "ne.txt" in odd.stderr
    empty = fd(folder, "diff", batch, "c2", "--file", "")
    assert (empty.returncode, empty.stdout) == (2, "") and "--file: " in empty.stderr

    # A name git would refuse: a usage error before anything is sent, and nothing recorded.
    db = folder / "state" / "flightdeck.db"

    def recorded() -> tuple[int, int]:  # the events and requests in the store
        with contextlib.closing(sqlite3.connect(db)) as conn:
            events = conn.execute("SELECT count(*) FROM events").fetchone()[0]
            return events, conn.execute("SELECT count(*) FROM requests").fetchone()[0]

    before = recorded()
    bad = fd(folder, "merge", batch, "c1", "--into", "a..b")
    assert bad.returncode == 2 and "'a..b' is not a valid branch name" in bad.stderr
    assert recorded() == before

    # c2 and c3 both change shared.txt: said before, and the merge stops, nothing applied.
    clash = fd(folder, "merge", batch, "c1", "c2", "c3", "--into", "main")
    assert clash.returncode == 1
    # Each said once (found by an audit: the refusal said the overlap and "nothing applied"
    # again after the warning).
    assert clash.stderr == (
        "warning: changed by more than one of them: shared.txt (c2, c3)\n"
        "flightdeck: accept refused, nothing applied: c3 conflicts with main and c1, c2 in "
        "shared.txt (no branch moved, every worktree kept)\n"
    )
    assert git(repo, "rev-parse", "main") == main_before
    assert not [b for b in branches(repo) if b.startswith("flightdeck/")]
    assert len(worktrees(repo)) == 4

    # A child named twice is one: it shares no file with itself.
    merged = fd(folder, "merge", batch, "c1", "c2", "c2", "c1", "--into", "main")
    assert merged.returncode == 0, merged.stderr
    assert "more than one" not in merged.stderr
    assert "accepted c1, c2 into main" in merged.stdout
    assert (repo / "x.txt").read_text() == "one\n"  # the checkout of main moved with it
    assert git(repo, "show", "main:shared.txt") == "from c2"
    assert git(repo, "merge-base", "--is-ancestor", f"flightdeck/{batch}/c1", "main") == ""
    assert {f"flightdeck/{batch}/c1", f"flightdeck/{batch}/c2"} <= set(branches(repo))

    gone = fd(folder, "discard", batch, "c3", "c3")
    assert gone.returncode == 0, gone.stderr
    assert gone.stdout == "discarded c3\n"
    assert worktrees(repo) == [str(repo)]
    assert not [b for b in branches(repo) if b.endswith("/c3")]
    assert git(repo, "show", "main:shared.txt") == "from c2"

    again = fd(folder, "discard", batch, "c3")  # decided: nothing left to discard
    assert again.returncode == 1 and "nothing applied" in again.stderr

    with StoreReader(folder / "state" / "flightdeck.db") as reader:
        kinds = [(c, k) for _, c, k, _ in reader.events(batch)]
    assert (None, "review_refused") in kinds
    assert ("c1", "accept") in kinds and ("c2", "accept") in kinds and ("c3", "discard") in kinds
    report = json.loads(fd(folder, "report", batch, "--format", "json").stdout)
    states = {c["child_id"]: c["state"] for c in report["changes"]}
    assert states == {"c1": "accepted", "c2": "accepted", "c3": "discarded"}


def test_a_headless_run_names_the_changes_left_pending_and_how_to_see_them(
    tmp_path: Path,
) -> None:
    # Found following docs/agents.md: a batch of worktree children ended "completed", their
    # work waiting in the state folder for a merge, and nothing at the end said so.
    _, folder = project(tmp_path, {"c1": "x.txt=one", "c2": "README.md=hello"})
    done = fd(folder, "run", "tasks.toml", "--headless")
    assert done.returncode == 0, done.stderr
    batch = done.stdout.split()[1]
    [line] = [line for line in done.stdout.splitlines() if line.startswith("changes pending")]
    see = f"flightdeck diff {batch} c1 --state-dir {folder / 'state'}"
    # c2 wrote what was there: nothing of it is pending.
    assert line == (
        f"changes pending: c1 (+1 −0 in 1 file); see them with {see}, then merge … --into"
        " BRANCH or discard"
    )


def test_a_headless_run_of_copies_names_what_works_on_a_copy(tmp_path: Path) -> None:
    # Found by a docs audit: the line sent a copy's changes to `diff` and `merge`, which both
    # refuse a copy (it has no history); it names the copy and `discard` instead.
    _, folder = project(tmp_path, {"c1": "x.txt=one"})
    toml = folder / "flightdeck.toml"
    toml.write_text(toml.read_text().replace('"worktree"', '"copy"'))
    done = fd(folder, "run", "tasks.toml", "--headless")
    assert done.returncode == 0, done.stderr
    batch = done.stdout.split()[1]
    [line] = [line for line in done.stdout.splitlines() if line.startswith("changes pending")]
    copy = folder / "state" / "batches" / batch / "workspaces" / "c1"
    discard = f"flightdeck discard {batch} c1 --state-dir {folder / 'state'}"
    assert line == (
        f"changes pending: c1 (1 file changed); see them in {copy} (a copy: no diff or merge),"
        f" then {discard}"
    )
    assert (copy / "x.txt").read_text() == "one\n"
    assert fd(folder, *discard.split()[1:]).returncode == 0


def test_diff_of_a_running_child_says_it_has_not_ended(tmp_path: Path) -> None:
    # Its changes are recorded when it ends: till then diff says so, as merge does, not that
    # it changed nothing (it has: new.txt is in its worktree).
    marker = tmp_path / "release"
    repo, folder = project(tmp_path, {"s2": "new.txt=made"}, "--hold-after", str(marker))
    started = fd(folder, "run", "tasks.toml", "--detach")
    assert started.returncode == 0, started.stderr
    batch = started.stdout.strip()
    try:
        until(lambda: any(Path(w, "new.txt").exists() for w in worktrees(repo)), 60, what="edit")
        diff = fd(folder, "diff", batch, "s2")
        merge = fd(folder, "merge", batch, "s2", "--into", "main")
        assert "s2 has not ended (running): accept it once it has" in merge.stderr
        assert (diff.returncode, diff.stdout) == (merge.returncode, "")
        assert "s2 has not ended (running): its changes are known once it has" in diff.stderr
    finally:
        marker.touch()
        fd(folder, "wait", batch)
        with StoreReader(folder / "state" / "flightdeck.db") as reader:
            info = reader.batch(batch)
        assert info is not None and info.owner_pid is not None
        until(lambda: ended(info.owner_pid), 60, what="the detached owner gone")
    assert "+made" in fd(folder, "diff", batch, "s2").stdout


KEY = "sk-DIFFKEY-4r5t6y7u8i9o0p"


def test_a_key_a_child_wrote_into_a_file_is_redacted_from_its_diff_not_from_its_merge(
    tmp_path: Path,
) -> None:
    """An agent CLI that writes its key into a file of its worktree (a `.env`): `flightdeck
    diff` shows `[REDACTED]` in its place, as everything else shown of a child is redacted (of
    the keys the operator's environment holds under the names the batch's routes read them
    from). A merge commits the file as the CLI wrote it: what goes into a branch is the
    operator's to decide, and only what is shown is redacted."""
    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
    folder = tmp_path / "work"
    folder.mkdir()
    argv = ["sh", "-c", 'echo "API_KEY=$FD_TEST_KEY" > .env; echo "key: $FD_TEST_KEY" > notes.txt']
    (folder / "flightdeck.toml").write_text(
        '[engine]\ndefault_route = "cli"\n[routes.cli]\nprovider = "command"\n'
        f'workspace = "worktree"\nargv = {json.dumps(argv)}\napi_key_env = "FD_TEST_KEY"\n'
    )
    (folder / "tasks.toml").write_text(
        f'[batch]\nworkspace = "{repo}"\n[[tasks]]\nid = "c1"\ngoal = "keep your key"\n'
    )
    env = {**ENV, "FD_TEST_KEY": KEY}
    batch = run(folder, env)

    diff = fd(folder, "diff", batch, "c1", env=env)
    assert diff.returncode == 0, diff.stderr
    assert "+API_KEY=[REDACTED]\n" in diff.stdout and "+key: [REDACTED]\n" in diff.stdout
    one = fd(folder, "diff", batch, "c1", "--file", ".env", env=env)
    assert one.returncode == 0 and "+API_KEY=[REDACTED]\n" in one.stdout, one.stderr
    assert "notes.txt" not in one.stdout
    shown = diff.stdout + diff.stderr + one.stdout + one.stderr
    assert KEY not in shown and "DIFFKEY" not in shown

    merged = fd(folder, "merge", batch, "c1", "--into", "main", env=env)
    assert merged.returncode == 0, merged.stderr
    assert KEY not in merged.stdout + merged.stderr
    assert git(repo, "show", "main:.env") == f"API_KEY={KEY}"  # as the CLI wrote it
    after = fd(folder, "diff", batch, "c1", env=env)  # read from its branch once accepted
    assert "+API_KEY=[REDACTED]\n" in after.stdout and KEY not in after.stdout, after.stderr


@pytest.mark.parametrize("through", ["merge", "the attached TUI"])
def test_a_merge_the_owner_applies_is_said_as_one_applied_here(
    tmp_path: Path, through: str
) -> None:
    # Found by an audit: through a live owner it printed `fast: merged into main`, applied by
    # the command itself `accepted fast into main (now <sha>)`. The M key, attached, said
    # `merged 1 child into main` as soon as the request was recorded (before the owner had
    # merged, or refused to).
    marker = tmp_path / "release"
    repo, folder = project(tmp_path, {"fast": "x.txt=one", "slow": "y.txt=two"})
    argv = [sys.executable, str(FAKES / "edit_files.py"), "--hold", str(marker), "{goal}"]
    with open(folder / "flightdeck.toml", "a") as fh:  # slow holds the batch (and owner) open
        fh.write('[routes.held]\nprovider = "command"\nworkspace = "worktree"\n')
        fh.write(f"argv = {json.dumps(argv)}\n")
    tasks = (folder / "tasks.toml").read_text()
    (folder / "tasks.toml").write_text(tasks.replace('id = "slow"', 'id = "slow"\nroute = "held"'))
    started = fd(folder, "run", "tasks.toml", "--detach")
    assert started.returncode == 0, started.stderr
    batch = started.stdout.strip()
    db = folder / "state" / "flightdeck.db"

    def fast_done() -> bool:
        with StoreReader(db) as reader:
            row = reader.child(batch, "fast")
        return row is not None and row.changes is not None

    try:
        until(fast_done, 60, what="fast's changes recorded")
        said = merged_by(through, db, batch, folder)
        with StoreReader(db) as reader:
            info = reader.batch(batch)
        assert info is not None and info.finished_ts is None  # the owner applied it
        now = git(repo, "rev-parse", "main")[:12]
        assert said == f"accepted fast into main (now {now})\n"
    finally:
        marker.touch()
        fd(folder, "wait", batch)
        with StoreReader(db) as reader:
            info = reader.batch(batch)
        assert info is not None and info.owner_pid is not None
        until(lambda: ended(info.owner_pid), 60, what="the detached owner gone")
    gone = fd(folder, "discard", batch, "slow")  # no owner now: applied here, said alike
    assert (gone.returncode, gone.stdout) == (0, "discarded slow\n")


def merged_by(through: str, db: Path, batch: str, folder: Path) -> str:
    """fast merged into main by `flightdeck merge` or the TUI's M (attached: StoreView); what
    it said, as a line."""
    if through == "merge":
        merged = fd(folder, "merge", batch, "fast", "--into", "main")
        assert merged.returncode == 0, merged.stderr
        return merged.stdout
    from flightdeck.engine.attached.view import StoreView
    from flightdeck.tui.screens.decisions import Ask, Say, SendOff, sent_off
    from flightdeck.tui.screens.review import merge
    from flightdeck.tui.screens.targets import Aim

    view = StoreView(db, batch, watch=False)
    try:
        rows = {r.id: r for r in view.snapshot().children}
        (ask,) = merge(Aim(("fast",), rows, None, None, False))
        assert isinstance(ask, Ask)
        (off,) = ask.then("main")
        assert isinstance(off, SendOff)
        (say, _) = sent_off(view, off, None)  # returns once the owner has applied it
        assert isinstance(say, Say) and say.severity == "information"
        return say.text + "\n"
    finally:
        view.close()


def test_retry_of_an_ended_batch_starts_its_owner_again(tmp_path: Path) -> None:
    marker = tmp_path / "fixed"
    repo, folder = project(
        tmp_path, {"t0": "x.txt=one", "t1": "y.txt=two"}, "--fail-unless", str(marker)
    )
    batch = run(folder)
    report = json.loads(fd(folder, "report", batch, "--format", "json").stdout)
    assert report["status"] == "failed"
    # A failed child's changes are pending: a fresh retry is refused until they are decided.
    refused = fd(folder, "retry", batch, "t0")
    assert refused.returncode == 2 and "accept or discard them first" in refused.stderr
    assert fd(folder, "discard", batch, "t0", "t1").returncode == 0
    marker.touch()
    done = fd(folder, "retry", batch, "--where", "status:failed")
    assert done.returncode == 0, done.stderr
    assert "2 children match `status:failed`, 2 of them ended" in done.stdout
    assert "retry (fresh) queued: 2 children" in done.stdout
    assert "had ended: owner pid" in done.stderr
    waited = fd(folder, "wait", batch)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    report = json.loads(fd(folder, "report", batch, "--format", "json").stdout)
    assert report["status"] == "completed"
    assert [(a["child_id"], a["attempt"], a["status"]) for a in report["attempts"]] == [
        ("t0", 1, "failed"),
        ("t0", 2, "completed"),
        ("t1", 1, "failed"),
        ("t1", 2, "completed"),
    ]
    assert {c["child_id"]: c["state"] for c in report["changes"]} == {
        "t0": "pending",
        "t1": "pending",
    }
    assert len(worktrees(repo)) == 3
    text = (folder / "state" / "batches" / batch / "t0.log").read_text()
    assert "retry requested: attempt 2 (fresh) after failed: exit 3" in text
    assert os.path.exists(folder / "state" / "batches" / batch / "owner.log")


def test_a_retry_that_continues_a_merged_or_discarded_child_says_it_starts_afresh(
    tmp_path: Path,
) -> None:
    # Found in use: `retry --continue` of a child whose changes were merged started it in a
    # fresh worktree (the merge had removed its own) and said nothing of it.
    marker = tmp_path / "fixed"
    _, folder = project(
        tmp_path, {"t0": "x.txt=one", "t1": "y.txt=two"}, "--fail-unless", str(marker)
    )
    batch = run(folder)
    assert fd(folder, "merge", batch, "t0", "--into", "main").returncode == 0
    assert fd(folder, "discard", batch, "t1").returncode == 0
    marker.touch()
    done = fd(folder, "retry", batch, "t0", "t1", "--continue")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1:] == [
        "t0: its worktree went when its changes were merged into main: it continues in a fresh "
        "worktree",
        "t1: its worktree went when its changes were discarded: it continues in a fresh worktree",
    ], done.stdout
    assert fd(folder, "wait", batch).returncode == 0
    for child in ("t0", "t1"):  # its transcript says so too
        said = fd(folder, "logs", batch, child).stdout
        assert "(a fresh worktree: the earlier attempt's is gone)" in said, said


def test_an_attached_view_s_retry_starts_the_owner_and_its_merge_applies_here(
    tmp_path: Path,
) -> None:
    # The attached TUI sends through StoreView: with no owner alive, a retry starts one and
    # an accept is applied in the view's own process.
    from flightdeck.engine.attached.view import StoreView
    from flightdeck.engine.commands import Accept, CommandError, Retry

    marker = tmp_path / "fixed"
    repo, folder = project(tmp_path, {"t0": "x.txt=one"}, "--fail-unless", str(marker))
    batch = run(folder)
    db = folder / "state" / "flightdeck.db"
    view = StoreView(db, batch, watch=False)
    try:
        with pytest.raises(CommandError, match="accept or discard them first"):
            view.send(Retry(("t0",), False))
        marker.touch()
        view.send(Retry(("t0",), True))  # continuing: in its worktree as it was left

        def completed() -> bool:
            view.refresh()
            row = view.snapshot().child("t0")
            return row is not None and row.attempt == 2 and row.status.value == "completed"

        until(completed, 60, what="t0's second attempt completed by a new owner")
        until(lambda: (view.refresh(), view.read_only)[1] is not None, 60, what="it ended")
        view.send(Accept(("t0",), "main"))
        view.refresh()
        row = view.snapshot().child("t0")
        assert row is not None and row.changes is not None and row.changes.state == "accepted"
    finally:
        view.close()
    assert git(repo, "show", "main:x.txt") == "one"


def test_a_retry_by_query_leaves_out_the_children_it_could_not_take() -> None:
    # Named one by one, a completed child or a delegate is refused; kept by a query among
    # others, it is left out and said so, and the rest are retried.
    rows = [
        make_child(0, id="p", status=ChildStatus.STOPPED),
        make_child(1, id="p.1", status=ChildStatus.STOPPED, parent="p"),
        make_child(2, id="p.2", status=ChildStatus.STOPPED, parent="p"),
        make_child(3, id="done", status=ChildStatus.COMPLETED),
        make_child(4, id="f", status=ChildStatus.FAILED),
        make_child(5, id="scan-w1", status=ChildStatus.UNKNOWN),  # a schedule's wave
    ]

    class Rows:
        def rows(self) -> list[ChildRow]:
            return rows

        def own(self) -> frozenset[str]:
            return frozenset({"p", "done", "f"})

    ids, said = _retryable(Rows(), [r.id for r in rows])  # type: ignore[arg-type]
    assert ids == ["p", "f"]  # the owner refused a retry with a wave whole (a walkthrough)
    assert said == (
        "; left out: 1 completed, 2 delegates (they run again with their parents), "
        "1 schedule wave (not retried)"
    )
    assert _retryable(Rows(), ["p", "f"]) == (["p", "f"], "")  # type: ignore[arg-type]


def test_an_attached_merge_the_store_cannot_take_is_said_not_applied(tmp_path: Path) -> None:
    # StoreView logged a store's refusal as a warning and returned: the TUI then said the merge
    # applied ("applied to 1 child") beside it. As a refusal by the owner: CommandError.
    from flightdeck.engine.attached.view import StoreView
    from flightdeck.engine.commands import Accept, CommandError

    repo, folder = project(tmp_path, {"t0": "x.txt=one"})
    batch = run(folder)
    db = folder / "state" / "flightdeck.db"
    view = StoreView(db, batch, watch=False)
    try:
        for path in db.parent.glob("flightdeck.db*"):  # the state folder emptied under it
            path.unlink()
        with pytest.raises(CommandError):
            view.send(Accept(("t0",), "main"))
    finally:
        view.close()
    assert git(repo, "show", "main:README.md") == "hello"  # nothing merged


# `flightdeck discard` as the CLI runs it, with a warning quoting untrusted text (a file name a
# child made, say) logged on its way: no TUI and no headless run installs a handler there.
NOISY_DISCARD = """
import logging, sys
from flightdeck.engine.review.apply import Reviewer
from flightdeck.tui.cli import main

applied = Reviewer.apply

def apply(self, command, rows):
    logging.getLogger("flightdeck.engine.review").warning("could not tidy %s", sys.argv[1])
    return applied(self, command, rows)

Reviewer.apply = apply
sys.exit(main(sys.argv[2:]))
"""


def test_a_warning_a_command_logs_reaches_stderr_sanitized(tmp_path: Path) -> None:
    """A command with no owner running applies a discard itself; a flightdeck warning it logs
    is one sanitized line on stderr, never an escape sequence through Python's last resort."""
    _, folder = project(tmp_path, {"c1": "x.txt=one"})
    batch = run(folder)
    hostile = "evil\x1b]0;pwned\x07.txt\x1b[2J\x1b[31m"
    state = ["--state-dir", str(folder / "state")]
    gone = subprocess.run(
        [sys.executable, "-c", NOISY_DISCARD, hostile, "discard", batch, "c1", *state],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=120,
        env=ENV,
    )
    assert (gone.returncode, gone.stdout) == (0, "discarded c1\n"), gone.stderr
    assert "flightdeck: warning: could not tidy evil" in gone.stderr
    assert "\x1b" not in gone.stderr and "\x07" not in gone.stderr


def test_a_file_that_leaves_an_escape_sequence_open_hides_no_other_file_of_the_diff(
    tmp_path: Path,
) -> None:
    # Found in a walkthrough: a child wrote a file holding an OSC it never closed, and `diff`
    # printed that file's first line and nothing after it: every other file was hidden from
    # the operator about to merge them.
    _, folder = project(tmp_path, {"c1": "z.txt=after"}, "a.txt=red\x1b]0;never closed")
    batch = run(folder)
    diff = fd(folder, "diff", batch, "c1")
    assert diff.returncode == 0, diff.stderr
    assert "\x1b" not in diff.stdout
    assert "+red\n" in diff.stdout, diff.stdout
    assert "+++ b/z.txt\n" in diff.stdout and "+after\n" in diff.stdout, diff.stdout


def test_resume_runs_a_lost_child_again_in_the_worktree_it_left(tmp_path: Path) -> None:
    # Found in a walkthrough: the owner killed (-9) while a command child had edited its
    # worktree; `resume` said the child "restarts from the start", then failed it at once:
    # "its worktree holds an earlier attempt's changes" (its own lost attempt's), and the
    # batch ended failed with nothing run again.
    marker = tmp_path / "release"
    repo, folder = project(tmp_path, {"r1": "r1.txt=made"}, "--hold-after", str(marker))
    started = fd(folder, "run", "tasks.toml", "--detach")
    assert started.returncode == 0, started.stderr
    batch = started.stdout.strip()
    until(lambda: any(Path(w, "r1.txt").exists() for w in worktrees(repo)), 60, what="edit")
    with StoreReader(folder / "state" / "flightdeck.db") as reader:
        info = reader.batch(batch)
    assert info is not None and info.owner_pid is not None
    os.kill(info.owner_pid, 9)
    until(lambda: ended(info.owner_pid), 60, what="the owner gone")
    marker.touch()
    resumed = fd(folder, "resume", batch)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    log = fd(folder, "logs", batch, "r1").stdout
    assert "(as its lost attempt left it)" in log, log
    assert "+made" in fd(folder, "diff", batch, "r1").stdout
