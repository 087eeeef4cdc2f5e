"""A pause that reaches a parent waiting on its delegates is pending until they return: shown
and counted as pending, summed up with the rest, and lifted by a continue of the same
selection. No batch is left waiting on a paused child that no view shows."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.inputs.settings import Settings, default_sim_route
from flightdeck.engine.inputs.tasks import Batch, Task
from flightdeck.engine.model import ChildStatus
from flightdeck.engine.triage.query import parse_filter
from flightdeck.tui.screens.dialogs import ConfirmPauseDialog
from flightdeck.tui.widgets.routes import route_rows
from flightdeck.tui.widgets.status import StatusBar
from textual.widgets import Label
from tui_support import SIZE, app_for, filter_rows, on_screen, until

from helpers import HANG_S, Hold

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# Parents delegate two sub-tasks on their first call (released); the delegates' calls are held
# until the test releases them, so the parents wait on them while keys are pressed, however
# loaded the machine.
DELEGATING: dict[str, Any] = {
    "time_scale": 0.01,
    "tool_turns": 40,
    "delegate_rate": 1.0,
    "delegates": 2,
}
DELEGATES = ("a.1", "a.2", "b.1", "b.2")


def delegating_engine(tmp_path: Path, hold: Hold) -> Engine:
    hold.release("a", 0)
    hold.release("b", 0)
    sim = {**DELEGATING, **hold.options()}
    route = dataclasses.replace(default_sim_route(**sim), delegate=True)
    settings = Settings(routes=MappingProxyType({"sim": route}))
    settings = dataclasses.replace(
        settings, budget=dataclasses.replace(settings.budget, max_depth=1)
    )
    tasks = tuple(
        Task(id=name, goal=f"split {name}", seq=i, max_turns=50) for i, name in enumerate("ab")
    )
    return Engine(Batch("pauses", tasks), settings, state_dir=tmp_path, max_concurrent=6)


async def test_a_paused_parent_waiting_on_delegates_is_pending_counted_and_continued(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hold: Hold
) -> None:
    engine = delegating_engine(tmp_path, hold)
    app = app_for(engine)
    try:
        async with app.run_test(size=SIZE) as pilot:
            engine.start()
            screen, table = app.main, app.main.table
            notices: list[str] = []
            notify = screen.notify
            monkeypatch.setattr(
                screen, "notify", lambda text, **kw: notices.append(text) or notify(text, **kw)
            )

            def rows() -> dict[str, Any]:
                return {r.id: r for r in engine.snapshot().children}

            await until(
                pilot,
                lambda: (
                    len(rows()) == 6
                    and all(rows()[p].waits_on_delegates for p in "ab")
                    and all(r.status is ChildStatus.RUNNING for r in rows().values())
                ),
                "both parents waiting on their four running delegates",
            )
            # Waiting parents hold no slot: the route's gauge does not count them in flight,
            # from the engine's own count or from the rows (as an attached view counts).
            assert route_rows(rows().values())["sim"].running == 4
            assert [hr.alive for hr in engine.snapshot().routes] == [4]

            await filter_rows(pilot, "status:live")
            await until(pilot, lambda: len(table.shown) == 6, "the six kept")
            await pilot.press("p")
            await until(pilot, lambda: on_screen(app, ConfirmPauseDialog), "the dialog")
            await pilot.press("p")
            await until(
                pilot,
                lambda: all(rows()[d].activity.text.startswith("pausing") for d in DELEGATES),
                "the delegates' pauses asked for",
            )
            for delegate in DELEGATES:  # their calls end: each takes its pause there
                hold.release(delegate, 0)
            # The delegates pause at their next turn; the parents cannot until the delegates
            # return, and they are paused: the summary comes all the same, saying so.
            await until(
                pilot, lambda: "6 paused (2 once their delegates return)" in notices, "summary"
            )
            assert {r.id for r in rows().values() if r.pausing} == {"a", "b"}
            assert engine.snapshot().totals.paused == 4
            assert engine.snapshot().totals.pausing == 2
            await until(pilot, lambda: table.displayed("a", "doing").startswith("pausing"), "shown")
            bar = app.main.query_one("#status", StatusBar)
            await until(pilot, lambda: "4 paused · 2 pausing" in str(bar.render()), "counted")
            # `status:paused` (as on the command line's --where) picks them too.
            paused = parse_filter("status:paused")
            assert {r.id for r in rows().values() if paused.matches(r, False)} == set(rows())

            # p over the same selection continues them all, the pending pauses included.
            await pilot.press("p")
            await until(pilot, lambda: on_screen(app, ConfirmPauseDialog), "again")
            assert str(app.screen.query(Label).first().render()).startswith("Continue 6")
            await pilot.press("y")
            await until(pilot, lambda: "6 continued" in notices, "the continue's summary")
            await until(
                pilot,
                lambda: (
                    not any(r.pausing or r.status is ChildStatus.PAUSED for r in rows().values())
                ),
                "nothing paused or pausing",
            )
            assert engine.snapshot().totals.paused == engine.snapshot().totals.pausing == 0
    finally:
        engine.close()
    for parent in "ab":
        text = Path(rows()[parent].transcript).read_text()
        assert "pause requested" in text and "continue requested" in text
        assert "paused before turn" not in text  # the pending pause was lifted, never taken


async def test_an_attached_view_shows_and_counts_the_pending_pause(
    tmp_path: Path, hold: Hold
) -> None:
    # The store keeps the row's activity text: a view of it reads the pause as pending too.
    from flightdeck.engine.attached.view import StoreView

    engine = delegating_engine(tmp_path, hold)
    engine.start()
    try:

        def waiting() -> bool:  # the parents wait on their four delegates, all running
            rows = engine.snapshot().children
            return (
                len(rows) == 6
                and all(r.status is ChildStatus.RUNNING for r in rows)
                and all(r.waits_on_delegates for r in rows if r.id in "ab")
            )

        deadline = time.monotonic() + HANG_S
        while not waiting():
            assert time.monotonic() < deadline, "the parents never waited on four delegates"
            time.sleep(0.02)
        engine.pause(["a"])
        assert engine.flush(10)
        view = StoreView(tmp_path / "flightdeck.db", engine.batch_id)
        try:
            deadline = time.monotonic() + HANG_S
            while not (row := view.snapshot().child("a")) or not row.pausing:
                assert time.monotonic() < deadline, "the attached view never saw it pausing"
                time.sleep(0.02)
                view.refresh()
            snap = view.snapshot()
            assert snap.totals.pausing == 1 and snap.totals.paused == 0
            assert row.activity.text == "pausing once its delegates return"
            # Waiting parents hold no slot: the attached gauge counts the four delegates.
            assert route_rows(snap.children)["sim"].running == 4
        finally:
            view.close()
    finally:
        engine.close()
