"""SVG snapshots of the app on a controlled batch state with a frozen clock.

Update after a deliberate visual change with `pytest tests/tui --snapshot-update`, and look at
the new SVGs before committing them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.screens.main import UiOptions
from textual.pilot import Pilot
from tui_fakes import StaticView, frozen_clock
from tui_support import filter_rows, until

SIZE = (160, 40)


def app_on(folder: Path) -> FlightdeckApp:
    return FlightdeckApp(StaticView(folder), UiOptions(clock=frozen_clock, cursor_blink=False))


async def loaded(pilot: Pilot[Any]) -> None:
    """Wait for rows and the selected child's transcript, so the picture is complete."""
    app = pilot.app
    assert isinstance(app, FlightdeckApp)
    await until(pilot, lambda: len(app.main.table.shown) == 10, "rows")
    await until(pilot, lambda: len(app.main.transcript.lines) > 5, "transcript")


def test_main_screen(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(app_on(tmp_path), terminal_size=SIZE, run_before=loaded)


# Any width: the meter (compact under 150 columns), the columns by priority, the detail line and
# a status bar that drops whole parts rather than cut one.
def test_main_screen_80x24(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(app_on(tmp_path), terminal_size=(80, 24), run_before=loaded)


def test_main_screen_120x40(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(app_on(tmp_path), terminal_size=(120, 40), run_before=loaded)


def test_main_screen_200x50(snap_compare: Any, tmp_path: Path) -> None:
    assert snap_compare(app_on(tmp_path), terminal_size=(200, 50), run_before=loaded)


def test_tagged_and_filtered(snap_compare: Any, tmp_path: Path) -> None:
    async def setup(pilot: Pilot[Any]) -> None:
        await loaded(pilot)
        await filter_rows(pilot, "status:running,failed")
        await pilot.press("space", "space")

    assert snap_compare(app_on(tmp_path), terminal_size=SIZE, run_before=setup)


def test_steer_dialog(snap_compare: Any, tmp_path: Path) -> None:
    async def setup(pilot: Pilot[Any]) -> None:
        await loaded(pilot)
        await pilot.press("down", "down", "s")  # the third row is running: it can be steered
        await until(pilot, lambda: pilot.app.screen.query("#steer-message"), "the dialog")
        await pilot.press(*"focus on the failing test")

    assert snap_compare(app_on(tmp_path), terminal_size=SIZE, run_before=setup)


def test_help_screen(snap_compare: Any, tmp_path: Path) -> None:
    async def setup(pilot: Pilot[Any]) -> None:
        await loaded(pilot)
        await pilot.press("question_mark")

    assert snap_compare(app_on(tmp_path), terminal_size=SIZE, run_before=setup)
