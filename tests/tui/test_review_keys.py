"""R, D, M and delete in the TUI (Pilot) on a real engine whose command children edit git
worktrees of a real repository: the row and the detail pane say what each changed, D shows the
diff, delete discards, R retries a failed child, M merges into a branch git then has."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flightdeck.engine.api import Engine, load_settings
from flightdeck.engine.attached.view import StoreView
from flightdeck.engine.inputs.tasks import Batch, Task
from flightdeck.engine.model import ChildStatus
from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.options import UiOptions
from flightdeck.tui.screens.review import AcceptDialog, DiffScreen, DiscardDialog, RetryDialog
from flightdeck.tui.view import LiveView
from flightdeck.tui.widgets.detail import ChildDetail
from textual.widgets import Label, Static
from textual.widgets._footer import FooterKey
from tui_support import (
    SIZE,
    EngineFactory,
    app_for,
    held,
    notices_of,
    on_screen,
    until,
    view_when_ready,
)

from gitrepo import GIT_ENV, git, make_repo, worktrees
from helpers import Hold

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

FAKES = Path(__file__).parent.parent / "fakes"


def review_engine(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    name: str,
    goals: dict[str, str],
    state: str = "state",
) -> Engine:
    """An engine whose command children each edit a worktree of a fresh repository as their
    goal says (`file=text`), then fail until `tmp_path/fixed` exists; started. Its state folder
    is `tmp_path/STATE`."""
    for var in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM"):
        monkeypatch.setenv(var, GIT_ENV[var])
    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
    argv = [sys.executable, str(FAKES / "edit_files.py")]
    argv += ["--fail-unless", str(tmp_path / "fixed"), "{goal}"]
    (tmp_path / "flightdeck.toml").write_text(
        '[engine]\ndefault_route = "cli"\n[routes.cli]\nprovider = "command"\n'
        f'workspace = "worktree"\nargv = {json.dumps(argv)}\n'
    )
    tasks = tuple(Task(id=i, goal=goal, seq=n) for n, (i, goal) in enumerate(goals.items()))
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    settings = load_settings(tmp_path / "flightdeck.toml")
    batch = Batch(name=name, tasks=tasks, workspace=repo)
    e = Engine(batch, settings, state_dir=tmp_path / state, env=env)
    e.start()
    return e


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    e = review_engine(tmp_path, monkeypatch, "review", {"t0": "x.txt=one", "t1": "README.md=bye"})
    yield e
    e.close()


def _both_ended(table: Any) -> bool:
    rows = table.rows_by_id
    return len(rows) == 2 and all(r.status.terminal for r in rows.values())


def _detail(app: object) -> str:
    return str(app.main.query_one("#detail", ChildDetail).render())  # type: ignore[attr-defined]


def _title(app: Any) -> str:
    """The open dialog's first line."""
    return str(app.screen.query(Label).first().render())


def _toasts(app: Any) -> list[str]:
    return [str(n.message) for n in app._notifications]


async def diff_of_t0(app: Any, pilot: Any, shows: str) -> DiffScreen:
    """The diff screen `D` opens over t0 once it has ended with changes, read until `shows`."""
    table = app.main.table
    await until(pilot, lambda: "t0" in table.rows_by_id, "the child")
    await until(pilot, lambda: table.rows_by_id["t0"].changes is not None, "its changes", 90)
    await pilot.press("D")
    await until(pilot, lambda: on_screen(app, DiffScreen), "the diff screen")
    diff = app.screen
    assert isinstance(diff, DiffScreen)
    await until(pilot, lambda: shows in diff.text, "the diff read", 90)
    return diff


async def test_review_and_retry_keys(engine: Engine, tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    app = app_for(engine)
    async with app.run_test(size=SIZE) as pilot:
        table = app.main.table
        await until(pilot, lambda: _both_ended(table), "both children failed", 90)
        assert table.displayed("t0", "doing").startswith("failed (+1 −0 in 1 file): exit 3")
        table.select("t1")
        await until(pilot, lambda: "changes +1 −1 in 1 file" in _detail(app), "the files")
        assert "README.md +1 −1" in _detail(app)

        # D: the diff, coloured, plain text kept for the test; escape goes back.
        await pilot.press("D")
        await until(pilot, lambda: on_screen(app, DiffScreen), "the diff screen")
        diff = app.screen
        assert isinstance(diff, DiffScreen)
        await until(pilot, lambda: "-hello\n+bye\n" in diff.text, "the diff read", 90)
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is app.main, "back")

        # delete: t1's changes discarded (confirmed), its worktree gone. A Mac's delete key
        # sends backspace: it opens and confirms the dialog as well.
        await pilot.press("backspace")
        await until(pilot, lambda: on_screen(app, DiscardDialog), "asked on backspace")
        await pilot.press("escape")
        await until(pilot, lambda: app.screen is app.main, "kept")
        await pilot.press("delete")
        await until(pilot, lambda: on_screen(app, DiscardDialog), "asked")
        assert _title(app) == "Discard 1 child's changes?"  # it read "1 child' changes?"
        await pilot.press("backspace")
        await until(
            pilot,
            lambda: (c := table.rows_by_id["t1"].changes) is not None and c.state == "discarded",
            "t1 discarded",
            90,
        )
        assert len(worktrees(repo)) == 2
        # Said as `flightdeck discard` says it (it said "discarded 1 child' changes").
        await until(pilot, lambda: "discarded t1" in _toasts(app), "the discard said")

        # R: t1 runs again, fresh, and (the marker there now) completes.
        (tmp_path / "fixed").touch()
        await pilot.press("R")
        await until(pilot, lambda: on_screen(app, RetryDialog), "the retry dialog")
        await pilot.press("f")
        await until(
            pilot,
            lambda: (
                table.rows_by_id["t1"].attempt == 2
                and table.rows_by_id["t1"].status is ChildStatus.COMPLETED
            ),
            "t1 retried and completed",
            90,
        )
        await until(pilot, lambda: "attempt 2" in _detail(app), "its attempt said")

        # M: t0's changes merged into main.
        table.select("t0")
        await pilot.press("M")
        await until(pilot, lambda: on_screen(app, AcceptDialog), "the merge dialog")
        await pilot.press(*"main", "enter")
        await until(
            pilot,
            lambda: (c := table.rows_by_id["t0"].changes) is not None and c.state == "accepted",
            "t0 merged",
            90,
        )
        assert git(repo, "show", "main:x.txt") == "one"
        assert table.displayed("t0", "doing").startswith("failed (+1 −0 in 1 file merged)")
        # Said as `flightdeck merge` says it (it said "merged 1 child into main").
        said = f"accepted t0 into main (now {git(repo, 'rev-parse', 'main')[:12]})"
        await until(pilot, lambda: said in _toasts(app), "the merge said")


async def test_r_over_a_running_child_names_it_as_d_does(
    engine_factory: EngineFactory, hold: Hold
) -> None:
    # Found in a walkthrough: it said "nothing here to retry: none failed or was stopped".
    engine = engine_factory(["first"], pool=1, sim=held(hold))
    app = app_for(engine)
    async with app.run_test(size=SIZE) as pilot:
        notices = notices_of(app)
        table = app.main.table
        await until(pilot, lambda: "c1" in table.rows_by_id, "c1 shown")
        await until(
            pilot, lambda: table.rows_by_id["c1"].status is ChildStatus.RUNNING, "c1 running"
        )
        table.select("c1")
        await pilot.press("R")
        said = "c1 has not ended (running): nothing to retry"
        await until(pilot, lambda: said in notices, "said, naming the child")
        assert app.screen is app.main  # no dialog


@pytest.fixture
def same_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Engine]:
    """Two children that both change x.txt, then fail (their worktrees kept for review)."""
    e = review_engine(tmp_path, monkeypatch, "overlap", {"a": "x.txt=one", "b": "x.txt=two"})
    yield e
    e.close()


async def test_the_diff_screens_footer_shows_the_arrows_its_title_and_the_docs_name(
    engine: Engine,
) -> None:
    # Found by a walk-through: the footer showed `]` and `[` for the next and previous file,
    # where the screen's title and docs/tui.md say ← and →.
    app = app_for(engine)
    async with app.run_test(size=SIZE) as pilot:
        table = app.main.table
        await until(pilot, lambda: _both_ended(table), "both children ended", 90)
        table.select("t1")
        await pilot.press("D")
        await until(pilot, lambda: on_screen(app, DiffScreen), "the diff screen")
        diff = app.screen
        assert isinstance(diff, DiffScreen)
        head = diff.query_one("#diff-head", Static)
        await until(pilot, lambda: "←/→ file" in str(head.render()), "the title")
        await until(pilot, lambda: list(diff.query(FooterKey)), "the footer's keys")
        shown = {key.action: key.key_display for key in diff.query(FooterKey)}
        assert shown["file(1)"] == "→" and shown["file(-1)"] == "←"


async def test_m_on_children_that_changed_one_file_warns_before_merging(
    same_file: Engine, tmp_path: Path
) -> None:
    app = app_for(same_file)
    async with app.run_test(size=SIZE) as pilot:
        table = app.main.table
        await until(pilot, lambda: _both_ended(table), "both children failed", 90)
        for child in ("a", "b"):
            table.select(child)
            await pilot.press("space")
        await pilot.press("M")
        await until(pilot, lambda: on_screen(app, AcceptDialog), "the merge dialog")
        dialog = app.screen
        assert isinstance(dialog, AcceptDialog) and sorted(dialog.child_ids) == ["a", "b"]
        assert _title(app) == "Merge 2 children's changes"  # it read "2 children' changes"
        warning = str(dialog.query_one("#overlap").render())
        assert "changed by more than one of them" in warning and "x.txt" in warning
        await pilot.press("escape")  # merges nothing
        await until(pilot, lambda: app.screen is app.main, "back")
        assert all(table.rows_by_id[c].changes.state != "accepted" for c in ("a", "b"))  # type: ignore[union-attr]


async def test_d_says_why_there_is_no_diff_without_escape_sequences(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """D on a child whose worktree is gone says so, naming the worktree: a folder whose name
    holds escape sequences and a bidi override (a state folder named so) is shown sanitized, as
    every path on screen is; the reason was put on the screen as it was."""
    state = "st\x1b]0;title\x07\x1b[31mred\u202eate"
    e = review_engine(tmp_path, monkeypatch, "gone", {"t0": "x.txt=one"}, state)
    try:
        app = app_for(e)
        async with app.run_test(size=SIZE) as pilot:
            table = app.main.table
            await until(pilot, lambda: "t0" in table.rows_by_id, "the child")
            await until(
                pilot, lambda: table.rows_by_id["t0"].changes is not None, "its changes", 90
            )
            changes = table.rows_by_id["t0"].changes
            assert changes is not None and "\x1b" in changes.workspace
            shutil.rmtree(changes.workspace)
            await pilot.press("D")
            await until(pilot, lambda: on_screen(app, DiffScreen), "the diff screen")
            diff = app.screen
            assert isinstance(diff, DiffScreen)
            await until(pilot, lambda: "its worktree is gone" in diff.text, "why no diff", 90)
            assert "stredate/batches/" in diff.text, repr(diff.text)  # named, sanitized
    finally:
        e.close()


async def test_d_shows_every_file_after_one_that_leaves_an_escape_sequence_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file holding a control string it never closes (an OSC) loses the rest of its line on
    screen, not the rest of the diff: the files after it are shown too."""
    for var in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM"):
        monkeypatch.setenv(var, GIT_ENV[var])
    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
    argv = ["sh", "-c", "printf 'red\\033]0;never closed\\n' > a.txt; echo after > z.txt"]
    (tmp_path / "flightdeck.toml").write_text(
        '[engine]\ndefault_route = "cli"\n[routes.cli]\nprovider = "command"\n'
        f'workspace = "worktree"\nargv = {json.dumps(argv)}\n'
    )
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    batch = Batch(name="osc", tasks=(Task(id="t0", goal="write", seq=0),), workspace=repo)
    e = Engine(
        batch, load_settings(tmp_path / "flightdeck.toml"), state_dir=tmp_path / "st", env=env
    )
    e.start()
    try:
        app = app_for(e)
        async with app.run_test(size=SIZE) as pilot:
            diff = await diff_of_t0(app, pilot, "a.txt")
            assert "\x1b" not in diff.text
            assert "+red\n" in diff.text and "+after\n" in diff.text, repr(diff.text)
    finally:
        e.close()


KEY = "sk-DIFFKEY-4r5t6y7u8i9o0p"


@pytest.mark.parametrize("attached", [False, True], ids=["in-process", "attached"])
async def test_d_shows_a_key_the_child_wrote_into_a_file_redacted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, attached: bool
) -> None:
    """An agent CLI that writes its key into a file of its worktree (a `.env`): D shows
    `[REDACTED]` in its place, of the keys the engine holds (in-process) or the operator's
    environment holds under the names the batch's routes read them from (attached)."""
    for var in ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM"):
        monkeypatch.setenv(var, GIT_ENV[var])
    monkeypatch.setenv("FD_TEST_KEY", KEY)  # the operator's environment (an attached view's)
    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})
    argv = ["sh", "-c", 'echo "API_KEY=$FD_TEST_KEY" > .env']
    (tmp_path / "flightdeck.toml").write_text(
        '[engine]\ndefault_route = "cli"\n[routes.cli]\nprovider = "command"\n'
        f'workspace = "worktree"\nargv = {json.dumps(argv)}\napi_key_env = "FD_TEST_KEY"\n'
    )
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "FD_TEST_KEY": KEY}
    batch = Batch(name="keyed", tasks=(Task(id="t0", goal="keep your key", seq=0),), workspace=repo)
    e = Engine(
        batch, load_settings(tmp_path / "flightdeck.toml"), state_dir=tmp_path / "st", env=env
    )
    e.start()
    view: LiveView | StoreView = LiveView(e)
    try:
        if attached:  # once the batch's row is committed, a moment after start()
            view = view_when_ready(tmp_path / "st" / "flightdeck.db", e.batch_id, poll_s=0.05)
        options = UiOptions(poll_s=0.1, transcript_poll_s=0.1, cursor_blink=False)
        app = FlightdeckApp(view, options)
        async with app.run_test(size=SIZE) as pilot:
            diff = await diff_of_t0(app, pilot, ".env")
            assert "+API_KEY=[REDACTED]\n" in diff.text, diff.text
            assert KEY not in diff.text and "DIFFKEY" not in diff.text
    finally:
        if isinstance(view, StoreView):
            view.close()
        e.close()
