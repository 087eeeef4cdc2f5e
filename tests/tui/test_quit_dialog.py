"""The quit dialog: its keys on its buttons and working (d detach, s stop all and quit, Escape
stay); Enter never stops a batch, nor stays by surprise."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from flightdeck.engine.model import ChildStatus
from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.screens.dialogs import QuitDialog
from flightdeck.tui.screens.main import MainScreen, UiOptions
from textual.widgets import Button, Label
from tui_fakes import StaticView, frozen_clock
from tui_support import SIZE, on_screen, until, until_exited

pytestmark = pytest.mark.anyio


def app_on(view: StaticView) -> FlightdeckApp:
    return FlightdeckApp(view, UiOptions(clock=frozen_clock, cursor_blink=False))


async def open_dialog(app: FlightdeckApp, pilot: object) -> QuitDialog:
    await until(pilot, lambda: len(app.main.table.shown) > 0, "rows")  # type: ignore[arg-type]
    await pilot.press("q")  # type: ignore[attr-defined]
    await until(pilot, lambda: on_screen(app, QuitDialog), "the quit dialog")  # type: ignore[arg-type]
    assert isinstance(app.screen, QuitDialog)
    return app.screen


async def test_in_process_enter_does_nothing_escape_stays_and_s_stops_all(tmp_path: Path) -> None:
    view = StaticView(tmp_path)
    app = app_on(view)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_dialog(app, pilot)
        labels = [str(b.label) for b in dialog.query(Button)]
        assert labels == ["Stop all and quit  s", "Cancel  Esc"]  # no owner elsewhere: no detach
        await pilot.press("enter", "d")  # neither a button's nor this dialog's key here
        await pilot.pause()
        assert app.screen is dialog and view.stopped_all == 0
        await pilot.press("escape")
        await until(pilot, lambda: on_screen(app, MainScreen), "back to the table")
        await open_dialog(app, pilot)
        await until_exited(pilot, by=pilot.press("s"))
    assert app.return_value is True and view.stopped_all == 1


@pytest.mark.parametrize("key", ["enter", "d"])
async def test_attached_enter_or_d_detaches_and_stops_nothing(tmp_path: Path, key: str) -> None:
    view = StaticView(tmp_path)
    view.can_detach = True
    app = app_on(view)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_dialog(app, pilot)
        labels = [str(b.label) for b in dialog.query(Button)]
        assert labels == ["Detach  d", "Stop all and quit  s", "Cancel  Esc"]
        await until_exited(pilot, by=pilot.press(key))
    assert app.return_value is False and view.stopped_all == 0


async def test_the_question_follows_the_batch_ended_and_reopened_while_it_shows(
    tmp_path: Path,
) -> None:
    # Said ended, then reopened by a retry from another terminal while the question shows:
    # it must not go on saying "Quitting stops nothing" over an s that stops all again.
    from textual.widgets import Label

    app = app_on(StaticView(tmp_path))
    why: list[str | None] = [None]
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(app.main.table.shown) > 0, "rows")
        dialog = QuitDialog(3, detach=True, moot=lambda: why[0])
        app.push_screen(dialog)
        await until(pilot, lambda: on_screen(app, QuitDialog), "the quit dialog")

        def said() -> str:
            labels = [str(label.render()) for label in dialog.query(Label)]
            return " ".join([*labels, str(dialog.query_one("#stop-quit", Button).label)])

        assert "3 children are still running" in said()
        why[0] = "the batch has ended (stopped): nothing left to stop"
        await until(
            pilot, lambda: "nothing left to stop" in said() and "Quit  s" in said(), "ended"
        )
        why[0] = None
        await until(
            pilot,
            lambda: "3 children are still running" in said() and "Stop all and quit" in said(),
            "running again",
        )
        await pilot.press("escape")


@pytest.mark.parametrize("web", [False, True])
async def test_detach_says_how_to_come_back_in_a_terminal_and_in_a_browser_tab(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, web: bool
) -> None:
    # Found by a walk-through: a browser tab's quit dialog said "attach again with `flightdeck
    # attach`", a terminal's command, where the page has its own Restart.
    monkeypatch.setattr(FlightdeckApp, "is_web", property(lambda self: web))
    view = StaticView(tmp_path)
    view.can_detach = True
    app = app_on(view)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_dialog(app, pilot)
        said = " ".join(str(label.render()) for label in dialog.query(Label))
        again = "the page's Restart opens it again" if web else "attach again with `flightdeck"
        assert again in said, said
        assert ("flightdeck attach" in said) is not web, said


async def test_the_count_of_live_children_stays_current_while_the_question_shows(
    tmp_path: Path,
) -> None:
    # Found by a walk-through: "3 children are still running or queued" was counted as the
    # dialog opened and went on saying so as children ended under it.
    view = StaticView(tmp_path)
    app = app_on(view)
    async with app.run_test(size=SIZE) as pilot:
        dialog = await open_dialog(app, pilot)
        live = [i for i, row in enumerate(view.rows) if row.status.live]
        assert len(live) >= 2, view.rows

        def heading() -> str:
            return str(dialog.query_one("#quit-heading", Label).render())

        assert heading() == f"{len(live)} children are still running or queued."
        rows = list(view.rows)
        for i in live[1:]:  # all but one end while it shows
            rows[i] = dataclasses.replace(rows[i], status=ChildStatus.COMPLETED)
        view.rows = tuple(rows)
        await until(
            pilot, lambda: heading() == "1 child is still running or queued.", "the count follows"
        )
        await pilot.press("escape")


class EndsBetweenLooks:
    """A batch's live count and moot as the quit dialog reads them: once `armed`, the batch
    ends right after the next read, whichever of the two it is."""

    ENDED = "the batch has ended (completed): nothing left to stop"

    def __init__(self) -> None:
        self.armed = False
        self.ended = False

    def _read(self) -> bool:
        ended = self.ended
        self.ended = self.ended or self.armed
        return ended

    def count(self) -> int:
        return 0 if self._read() else 3

    def moot(self) -> str | None:
        return self.ENDED if self._read() else None


async def test_a_batch_that_ends_between_the_dialogs_two_reads_is_said_ended(
    tmp_path: Path,
) -> None:
    # The dialog reads the live count and whether stopping is moot one after the other, and
    # the batch may end in between. Moot read first (before e672235), it saw the batch running
    # and then no child live: the heading of a scheduled batch between two waves ("the batch
    # goes on") for a batch that had ended. The count read first, the later moot says the end.
    app = app_on(StaticView(tmp_path))
    batch = EndsBetweenLooks()
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(app.main.table.shown) > 0, "rows")
        dialog = QuitDialog(3, detach=True, moot=batch.moot, count=batch.count)
        app.push_screen(dialog)
        await until(pilot, lambda: on_screen(app, QuitDialog), "the quit dialog")
        heading = dialog.query_one("#quit-heading", Label)
        assert str(heading.render()) == "3 children are still running or queued."
        # One look, run here rather than by the dialog's timer, so that the end falls between
        # its two reads: nothing else runs until it returns.
        batch.armed = True
        dialog._look()
        assert batch.ended
        assert str(heading.render()) == EndsBetweenLooks.ENDED
        assert str(dialog.query_one("#stop-quit", Button).label) == "Quit  s"
        await pilot.press("escape")
