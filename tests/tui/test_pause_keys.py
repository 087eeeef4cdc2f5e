"""Pilot tests of `p` (pause or continue children) and `P` (pause or continue admission),
against a real engine on the sim in this process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.model import ChildStatus
from flightdeck.tui.screens.dialogs import ConfirmPauseDialog
from flightdeck.tui.widgets.status import StatusBar
from textual.widgets import Label
from tui_support import (
    SIZE,
    EngineFactory,
    app_for,
    filter_rows,
    held,
    make_tasks,
    on_screen,
    until,
)

from helpers import Hold

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


def pausing(engine: Engine, child_id: str) -> bool:
    row = engine.snapshot().child(child_id)
    return row is not None and row.activity.text.startswith("pausing")


def status_of(engine: Engine, child_id: str) -> ChildStatus:
    row = engine.snapshot().child(child_id)
    assert row is not None
    return row.status


def bar_text(app: Any) -> str:
    return str(app.main.query_one("#status", StatusBar).render())


async def test_p_pauses_a_child_frees_its_slot_and_p_again_continues_it(
    engine_factory: EngineFactory, hold: Hold
) -> None:
    engine = engine_factory(make_tasks(["first", "second", "third"]), pool=2, sim=held(hold))
    app = app_for(engine)
    async with app.run_test(size=SIZE) as pilot:
        table = app.main.table
        await until(pilot, lambda: status_of(engine, "c1") is ChildStatus.RUNNING, "c1 runs")
        await until(pilot, lambda: "c1" in table.rows_by_id, "c1's row")
        table.select("c1")
        await pilot.press("p")
        await until(pilot, lambda: on_screen(app, ConfirmPauseDialog), "the dialog")
        assert str(app.screen.query(Label).first().render()) == "Pause 1 child?"
        await pilot.press("p")  # p again confirms
        await until(pilot, lambda: pausing(engine, "c1"), "c1 pausing at its turn's end")
        hold.release("c1", 0)  # its first turn ends: the pause is taken there
        await until(pilot, lambda: status_of(engine, "c1") is ChildStatus.PAUSED, "c1 paused")
        # Its slot went to the queued child.
        await until(pilot, lambda: status_of(engine, "c3") is ChildStatus.RUNNING, "c3 runs")
        await until(pilot, lambda: table.displayed("c1", "mark").endswith("‖"), "the glyph")
        await until(pilot, lambda: "1 paused" in bar_text(app), "the status bar's count")

        await pilot.press("P")
        await until(pilot, lambda: engine.snapshot().held == "paused by the operator", "held")
        await until(pilot, lambda: "admission held" in bar_text(app), "said in the status bar")
        await pilot.press("P")
        await until(pilot, lambda: engine.snapshot().held is None, "released")
        await until(pilot, lambda: "admission held" not in bar_text(app), "no longer said")

        engine.stop(["c3"])  # a slot for c1 to take again
        table.select("c1")
        await pilot.press("p")
        await until(pilot, lambda: on_screen(app, ConfirmPauseDialog), "the dialog")
        assert str(app.screen.query(Label).first().render()) == "Continue 1 child?"
        await pilot.press("y")
        await until(pilot, lambda: status_of(engine, "c1") is ChildStatus.RUNNING, "continued")
        # The writer process appends the lines a moment after the engine records them.
        path = Path(engine.snapshot().child("c1").transcript)  # type: ignore[union-attr]
        await until(pilot, lambda: "continue requested" in path.read_text(), "the transcript")
    assert "pause requested" in path.read_text()


async def test_p_over_a_filter_pauses_every_child_it_keeps_with_one_summary(
    engine_factory: EngineFactory, monkeypatch: pytest.MonkeyPatch, hold: Hold
) -> None:
    engine = engine_factory(["a", "b", "c"], pool=3, sim=held(hold))
    app = app_for(engine)
    async with app.run_test(size=SIZE) as pilot:
        screen, table = app.main, app.main.table
        notices: list[str] = []
        notify = screen.notify
        monkeypatch.setattr(
            screen, "notify", lambda text, **kw: notices.append(text) or notify(text, **kw)
        )
        await until(
            pilot,
            lambda: all(r.status is ChildStatus.RUNNING for r in engine.snapshot().children),
            "all three running",
        )
        await filter_rows(pilot, "status:running")
        await until(pilot, lambda: len(table.shown) == 3, "the three kept")
        await pilot.press("p")
        await until(pilot, lambda: on_screen(app, ConfirmPauseDialog), "the dialog")
        assert str(app.screen.query(Label).first().render()) == (
            "Pause 3 children matching `status:running`?"
        )
        await pilot.press("p")
        ids = ("c1", "c2", "c3")
        await until(pilot, lambda: all(pausing(engine, i) for i in ids), "all three pausing")
        assert not any("paused" in n for n in notices)  # none has paused yet: no summary
        hold.release()  # their first turns end: each pause is taken there
        await until(pilot, lambda: "3 paused" in notices, "one summary once all have paused")
        assert engine.snapshot().totals.paused == 3
