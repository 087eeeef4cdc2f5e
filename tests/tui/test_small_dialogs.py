"""Every dialog on a small terminal: it fits the screen (narrower than its usual 72 columns,
it narrows; taller than the screen, it scrolls), and each of its buttons and fields, reached by
the keyboard (tab), is on screen whole."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from flightdeck.engine.model import Limits, RouteCaps
from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.screens.dialogs import (
    ConfirmPauseDialog,
    ConfirmStopDialog,
    QuitDialog,
    SteerDialog,
)
from flightdeck.tui.screens.limits import LimitsDialog, SoftBudgetDialog
from flightdeck.tui.screens.main import UiOptions
from flightdeck.tui.screens.review import AcceptDialog, DiscardDialog, RetryDialog
from textual.geometry import Region
from textual.screen import ModalScreen
from textual.widget import Widget
from tui_fakes import StaticView, frozen_clock
from tui_support import until

from helpers import HANG_S

pytestmark = pytest.mark.anyio

IDS = [f"review-{n:02d}-{'a-long-task-name' * 3}" for n in range(9)]
LIMITS = Limits(pool_size=8, routes=(RouteCaps("sim", 5), RouteCaps("claude", 8, 50, 40_000)))


def _apply(change: object) -> None:
    return None


DIALOGS: dict[str, Callable[[], ModalScreen[Any]]] = {
    "steer": lambda: SteerDialog(IDS, ended=2, query="cost>0.50 idle>5m", cursor_blink=False),
    "stop": lambda: ConfirmStopDialog(IDS, query="status:running route:sim"),
    "pause": lambda: ConfirmPauseDialog(IDS),
    "quit": lambda: QuitDialog(12, detach=True),
    "limits": lambda: LimitsDialog(LIMITS, _apply),
    "soft budget": lambda: SoftBudgetDialog(
        "soft budget $5.00 reached: projected $6.20", LIMITS, _apply, lambda: None
    ),
    "retry": lambda: RetryDialog(IDS, 3),
    "merge": lambda: AcceptDialog(IDS, "src/config.py, src/loader.py"),
    "discard": lambda: DiscardDialog(IDS),
}


def shown_whole(widget: Widget, screen: Region) -> bool:
    """`widget` is drawn whole, on screen: not clipped by a container, nor past the edge."""
    geometry = widget.screen.find_widget(widget)
    region = geometry.region
    return geometry.clip.contains_region(region) and screen.contains_region(region)


@pytest.mark.parametrize("size", [(80, 24), (60, 20), (40, 12)])
@pytest.mark.parametrize("name", list(DIALOGS))
async def test_a_dialog_fits_and_each_control_is_reached_on_screen(
    tmp_path: Path, name: str, size: tuple[int, int]
) -> None:
    app = FlightdeckApp(StaticView(tmp_path), UiOptions(clock=frozen_clock, cursor_blink=False))
    whole = Region(0, 0, *size)
    async with app.run_test(size=size) as pilot:
        await until(pilot, lambda: app.main.table.shown, "the rows")
        dialog = DIALOGS[name]()
        app.push_screen(dialog)
        await until(pilot, lambda: app.screen is dialog and dialog.is_mounted, "the dialog")
        await pilot.pause()
        box = dialog.query_one(".dialog")
        assert whole.contains_region(box.region), (name, box.region)  # its border whole too
        if size[0] > box.region.width:
            assert box.region.x > 0, (name, box.region)  # centred
        controls = [w for w in dialog.query("Button, Input, RadioSet") if w.focusable]
        reached: set[Widget] = set()
        for _ in range(2 * len(controls) + 2):
            focused = app.focused
            if focused in controls:  # scrolled to (a moment's animation) if it was out of view
                await until(
                    pilot, lambda w=focused: shown_whole(w, whole), f"{focused} in view", 10
                )
                reached.add(focused)
            if len(reached) == len(controls):
                break
            await pilot.press("tab")
        missed = [str(w) for w in controls if w not in reached]
        assert not missed, (name, missed)


async def test_the_focused_button_stays_in_view_when_the_terminal_shrinks(tmp_path: Path) -> None:
    """tmux resize-window under the quit dialog: Detach (focused: Enter detaches) still shows."""
    app = FlightdeckApp(StaticView(tmp_path), UiOptions(clock=frozen_clock, cursor_blink=False))
    async with app.run_test(size=(60, 20)) as pilot:
        await until(pilot, lambda: app.main.table.shown, "the rows")
        dialog = QuitDialog(12, detach=True)
        app.push_screen(dialog)
        await until(pilot, lambda: app.screen is dialog and dialog.is_mounted, "the dialog")
        detach = dialog.query_one("#detach")
        await until(pilot, lambda: app.focused is detach, "Detach focused")
        await pilot.resize_terminal(40, 12)
        whole = Region(0, 0, 40, 12)
        await until(pilot, lambda: shown_whole(detach, whole), "Detach in view", HANG_S)
