"""`F`: search every transcript from the TUI; enter on a result opens that transcript at the
matching line."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from flightdeck.engine.model import ChildStatus
from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.screens.search import HitScreen, SearchScreen
from test_attach import OPTIONS, Owner
from textual.widgets import Input, Label, OptionList
from tui_support import SIZE, EngineFactory, app_for, on_screen, until

from helpers import HANG_S
from helpers import until as wait_for

pytestmark = pytest.mark.anyio


async def test_f_lists_matching_children_and_enter_opens_the_transcript_at_the_hit(
    engine_factory: EngineFactory,
) -> None:
    goals = [f"Review item {i}" for i in range(1, 6)] + ["Check the zanzibar config"]
    engine = engine_factory(goals, pool=3)
    assert engine.wait(HANG_S)
    app = app_for(engine)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(app.main.table.rows_by_id) == 6, "rows")
        await pilot.press("F")
        await until(pilot, lambda: on_screen(app, SearchScreen), "the search screen")
        screen = app.screen
        assert isinstance(screen, SearchScreen)
        await pilot.press(*"zanzibar", "enter")
        await until(pilot, lambda: bool(screen.found), "results")
        assert [(f.child_id, f.role, f.text) for f in screen.found] == [
            ("c6", "user", "Check the zanzibar config")
        ]
        await pilot.press("enter")
        await until(pilot, lambda: on_screen(app, HitScreen), "the transcript")
        hit = app.screen
        assert isinstance(hit, HitScreen)
        await until(pilot, lambda: hit.at is not None, "its lines read")
        assert hit.line is not None and hit.line.endswith("user      │ Check the zanzibar config")
        await pilot.press("escape")
        assert app.screen is screen
        # A regex over the whole line (ctrl+r): every user line, one result per child.
        await pilot.press("shift+tab", "ctrl+r")
        screen.query_one("#search-pattern").value = r"  user +│ Review item [24]$"  # type: ignore[attr-defined]
        screen.run_search()
        await until(pilot, lambda: len(screen.found) == 2, "two children")
        assert [f.child_id for f in screen.found] == ["c2", "c4"]
        await pilot.press("escape")
        assert app.screen is app.main


async def test_a_catastrophic_regex_leaves_the_app_responsive_and_says_why(
    engine_factory: EngineFactory,
) -> None:
    # Found by an audit: `(a|aa)+b` over a line of 40 `a`s ran in `re` for a minute or more
    # per line, holding the GIL: the search's thread froze the whole screen. Now the search
    # lets the app run and stops at the per-line budget, saying why where the pattern is typed.
    engine = engine_factory([f"Look at {'a' * 40} now"], pool=1)
    assert engine.wait(HANG_S)
    app = app_for(engine)
    async with app.run_test(size=SIZE) as pilot:
        await pilot.press("F")
        await until(pilot, lambda: on_screen(app, SearchScreen), "the search screen")
        screen = app.screen
        assert isinstance(screen, SearchScreen)
        await pilot.press("ctrl+r", *"(a|aa)+b")
        box = screen.query_one("#search-pattern", Input)
        status = screen.query_one("#search-status", Label)
        # The app takes keys while the search runs (a second or two): each at once, not after
        # a frozen minute.
        began = time.monotonic()
        await pilot.press("enter")
        typed, slowest = 0, time.monotonic() - began
        while str(status.render()).startswith("searching for"):
            began = time.monotonic()
            await pilot.press("x")
            typed, slowest = typed + 1, max(slowest, time.monotonic() - began)
        assert slowest < 5, f"the app froze for {slowest:.0f} s"
        assert typed and box.value == "(a|aa)+b" + "x" * typed
        await until(pilot, lambda: "backtracks catastrophically" in str(status.render()), "why")
        assert str(status.render()) == (
            "the pattern took longer than 1 s on one line of c1's transcript: it backtracks "
            "catastrophically; simplify it"
        )
        assert not screen.found and not app._notifications  # said once, in the search's status
        await pilot.press("escape")
        assert app.screen is app.main


def drawn(options: OptionList) -> list[str]:
    """The lines an option list draws, as plain text."""
    return [options.render_line(y).text.rstrip() for y in range(options.size.height)]


def folded(options: OptionList, width: int) -> bool:
    """Every line drawn fits `width`, and each line's rest (what starts with a space)
    continues under its text column, as the transcript pane folds it."""
    lines = [line for line in drawn(options) if line]
    column = lines[0].index("│")
    rest = [line[: column + 1] for line in lines if line.startswith(" ")]
    return (
        len(rest) >= 3
        and set(rest) == {" " * column + "│"}
        and all(len(line) <= width for line in lines)
    )


async def test_results_and_a_hit_fold_long_lines_under_their_text_as_the_transcript_pane_does(
    engine_factory: EngineFactory,
) -> None:
    # Found by an audit: the option lists wrapped a long line themselves, its rest at column 0.
    goal = "Check the zanzibar config " + " ".join(f"word{i}" for i in range(40))
    engine = engine_factory([goal], pool=1)
    assert engine.wait(HANG_S)
    app = app_for(engine)
    async with app.run_test(size=(100, 30)) as pilot:
        await pilot.press("F")
        await until(pilot, lambda: on_screen(app, SearchScreen), "the search screen")
        screen = app.screen
        assert isinstance(screen, SearchScreen)
        await pilot.press(*"zanzibar", "enter")
        await until(pilot, lambda: bool(screen.found), "results")
        results = screen.query_one("#search-results", OptionList)
        await until(pilot, lambda: folded(results, 96), "the result folded")
        await pilot.press("enter")
        await until(pilot, lambda: on_screen(app, HitScreen), "the transcript")
        hit = app.screen
        assert isinstance(hit, HitScreen)
        await until(pilot, lambda: hit.at is not None, "its lines read")
        assert hit.line is not None and hit.line.endswith(goal)  # the line as written
        shown = hit.query_one("#hit-lines", OptionList)
        await until(pilot, lambda: folded(shown, 96), "folded under the text column")
        await pilot.resize_terminal(70, 30)  # folded again to the new width
        await until(
            pilot,
            lambda: folded(shown, 66) and "word39" in "".join(drawn(shown)),
            "folded again",
        )
        await pilot.press("escape")
        await until(pilot, lambda: folded(results, 66), "the result folded again")


@pytest.mark.slow
async def test_f_in_a_view_attached_to_a_running_owner_finds_what_its_children_wrote(
    tmp_path: Path,
) -> None:
    # A real owner whose children are held running: the attached TUI reads the index the
    # owner's writer keeps and the lines it has not reached yet.
    owner = Owner(tmp_path, 3, goal="Review item")
    try:
        view = owner.view()
        wait_for(
            lambda: sum(r.status is ChildStatus.RUNNING for r in view.snapshot().children) == 3,
            30,
            what="three running",
        )
        app = FlightdeckApp(view, OPTIONS)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: len(app.main.table.rows_by_id) == 3, "rows")
            await pilot.press("F")
            await until(pilot, lambda: on_screen(app, SearchScreen), "the search screen")
            screen = app.screen
            assert isinstance(screen, SearchScreen)
            await pilot.press(*"item 2", "enter")
            await until(pilot, lambda: bool(screen.found), "results")
            assert [(f.child_id, f.role, f.text) for f in screen.found] == [
                ("c2", "user", "Review item 2")
            ]
            await pilot.press("enter")
            await until(pilot, lambda: on_screen(app, HitScreen), "the transcript")
            hit = app.screen
            assert isinstance(hit, HitScreen)
            await until(pilot, lambda: hit.at is not None, "its lines read")
            assert hit.line is not None and hit.line.endswith("user      │ Review item 2")
        view.close()
    finally:
        owner.hold.release()
        owner.close()
