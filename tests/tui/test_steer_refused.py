"""A steer the engine refuses (too long, not valid text) is said on screen; the app goes on."""

from __future__ import annotations

import pytest
from flightdeck.engine.model import ChildStatus
from flightdeck.tui.screens.dialogs import SteerDialog, SteerRequest
from flightdeck.tui.screens.main import MainScreen
from tui_support import SIZE, EngineFactory, app_for, held, on_screen, until

from helpers import Hold

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    "message", ["\ud800 lone surrogate", "x" * 1_000_001], ids=["surrogate", "too-long"]
)
async def test_a_refused_steer_is_an_error_notice_not_a_crash(
    engine_factory: EngineFactory, monkeypatch: pytest.MonkeyPatch, message: str, hold: Hold
) -> None:
    engine = engine_factory(["steer me"], pool=1, sim=held(hold))
    app = app_for(engine)
    async with app.run_test(size=SIZE) as pilot:
        screen = app.main
        shown: list[tuple[str, str]] = []
        notify = screen.notify
        monkeypatch.setattr(
            screen,
            "notify",
            lambda text, **kw: shown.append((text, kw.get("severity", ""))) or notify(text, **kw),
        )
        await until(
            pilot, lambda: engine.snapshot().children[0].status is ChildStatus.RUNNING, "running"
        )
        await pilot.press("s")
        await until(pilot, lambda: on_screen(app, SteerDialog), "steer dialog")
        app.screen.dismiss(SteerRequest(message, False))
        await until(pilot, lambda: on_screen(app, MainScreen), "dialog closed")
        await until(pilot, lambda: bool(shown), "a notice")
        assert shown[0][0].startswith("steer not sent: ") and shown[0][1] == "error"
        assert engine.receipts() == []  # nothing was queued
        assert app.is_running
