"""`L` (the limits dialog) and the soft budget's question, on a real engine in this process and
on a real owner process attached through the store."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.commands import SetLimits
from flightdeck.engine.inputs.settings import Budget, Settings, default_sim_route
from flightdeck.engine.inputs.tasks import Batch
from flightdeck.engine.model import BatchStatus, ChildStatus
from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.screens.limits import LimitsDialog, SoftBudgetDialog
from flightdeck.tui.screens.main import MainScreen, UiOptions
from textual.widgets import Footer, Input, Label
from textual.widgets._footer import FooterKey
from tui_support import (
    FAST,
    SIZE,
    EngineFactory,
    app_for,
    held,
    make_tasks,
    notices_of,
    on_screen,
    until,
    view_when_ready,
)

from helpers import HANG_S, Hold

pytestmark = [pytest.mark.anyio, pytest.mark.slow]  # each takes a second or more


def error_text(app: FlightdeckApp, selector: str) -> str:
    return str(app.screen.query_one(selector, Label).render())


async def test_l_changes_the_pool_and_a_bad_value_says_why_in_the_dialog(
    engine_factory: EngineFactory, hold: Hold
) -> None:
    engine = engine_factory(["a", "b", "c", "d", "e"], pool=2, sim=held(hold))
    app = app_for(engine)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: engine.snapshot().totals.running == 2, "two running")
        await pilot.press("L")
        await until(pilot, lambda: on_screen(app, LimitsDialog), "limits dialog")
        pool = app.screen.query_one("#limit-pool", Input)
        assert pool.value == "2"
        assert app.screen.query_one("#limit-r0-max-concurrent", Input).value == "off"
        pool.value = "0"
        await pilot.press("enter")
        await until(pilot, lambda: "pool size: must be" in error_text(app, "#limit-error"), "why")
        assert isinstance(app.screen, LimitsDialog) and engine.limits().pool_size == 2
        app.screen.query_one("#limit-soft", Input).value = "abc"
        pool.value = "4"
        await pilot.press("enter")
        await until(
            pilot, lambda: "soft budget: expected dollars" in error_text(app, "#limit-error"), "why"
        )
        app.screen.query_one("#limit-soft", Input).value = "off"
        app.screen.query_one("#limit-r0-rpm", Input).value = "600"
        await pilot.press("enter")
        await until(pilot, lambda: on_screen(app, MainScreen), "dialog closed")
        await until(pilot, lambda: engine.snapshot().totals.running == 4, "four running")
        caps = engine.limits().route("sim")
        assert caps is not None and caps.rpm == 600
        meter = str(app.main.query_one("#meter").render())
        await until(pilot, lambda: "pool 4" in str(app.main.query_one("#meter").render()), meter)


async def test_in_process_l_p_x_s_and_x_on_an_ended_batch_say_so_as_attached(
    engine_factory: EngineFactory,
) -> None:
    # Found by a walk-through: in-process, an ended batch's `L` opened the dialog and took a
    # change ("limits changed: pool 3", for a batch with nothing left to admit), and `P` and
    # `X` did nothing at all; attached, each says the batch has ended. Its footer kept `s Steer`
    # and `x Stop` (dimmed), which attached it hides.
    engine = engine_factory(["a", "b"])
    app = app_for(engine)
    notices = notices_of(app)
    async with app.run_test(size=SIZE) as pilot:
        # The screen's own snapshot, which the keys read: a batch that ended before the app
        # subscribed posts no "batch finished" notice.
        def ended_shown() -> bool:
            snap = app.main.snapshot
            return snap is not None and snap.status is BatchStatus.COMPLETED

        await until(pilot, ended_shown, "the batch's end")
        footer = app.main.query_one(Footer)
        await until(
            pilot,
            lambda: not {"steer", "stop"} & {k.action for k in footer.query(FooterKey)},
            "steer and stop hidden",
        )

        # The batch's own end notice may come late: only what the keys said is counted.
        def said() -> list[str]:
            return [n for n in notices if "batch finished" not in n]

        first = len(said())
        for key in ("L", "P", "X", "s", "x"):
            before = len(said())
            await pilot.press(key)
            await until(pilot, lambda n=before: len(said()) > n, f"{key} said why")
        assert isinstance(app.screen, MainScreen)  # no dialog
    ended = f"batch {engine.batch_id} has ended (completed)"
    assert said()[first:] == [
        f"{ended}: its limits can no longer change",
        *[f"{ended}: nothing left to steer or stop"] * 4,
    ]


async def test_in_process_a_limits_dialog_open_as_the_batch_ends_takes_no_change(
    engine_factory: EngineFactory, hold: Hold
) -> None:
    # Attached, a change sent after the batch ended is refused in the dialog; in-process the
    # engine took it ("limits changed: pool 3", with nothing left to admit).
    engine = engine_factory(["a"], sim=held(hold))
    app = app_for(engine)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: engine.snapshot().totals.running == 1, "running")
        await pilot.press("L")
        await until(pilot, lambda: on_screen(app, LimitsDialog), "limits dialog")
        hold.release()
        await until(pilot, lambda: engine.status is BatchStatus.COMPLETED, "the batch's end")
        app.screen.query_one("#limit-pool", Input).value = "3"
        await pilot.press("enter")
        ended = f"batch {engine.batch_id} has ended (completed): its limits can no longer change"
        await until(pilot, lambda: ended in error_text(app, "#limit-error"), "why, in the dialog")
        assert isinstance(app.screen, LimitsDialog)
    assert engine.limits().pool_size == 4


def _soft_engine(tmp_path: Path, soft: str, n: int = 4) -> Engine:
    route = default_sim_route(**FAST)
    settings = Settings(
        routes=MappingProxyType({"sim": route}), budget=Budget(soft_cost_usd=Decimal(soft))
    )
    batch = Batch("tui-soft", make_tasks([f"task {i}" for i in range(n)]))
    engine = Engine(batch, settings, state_dir=tmp_path / "state", max_concurrent=2)
    engine.start()
    return engine


async def test_the_soft_budget_asks_and_raising_it_lets_the_batch_finish(tmp_path: Path) -> None:
    engine = _soft_engine(tmp_path, "0")  # spent $0 >= $0: holds before anything starts
    try:
        app = app_for(engine)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: on_screen(app, SoftBudgetDialog), "the question")
            assert "soft budget $0.00 reached: spent $0.00" in str(app.screen.held)
            banner = str(app.main.query_one("#banner").render())
            assert "admission held: soft budget $0.00 reached" in banner
            app.screen.query_one("#soft-raise", Input).value = "-3"
            await pilot.press("enter")
            await until(pilot, lambda: "must be 0 or more" in error_text(app, "#soft-error"), "why")
            app.screen.query_one("#soft-raise", Input).value = "1000"
            await pilot.press("enter")
            await until(pilot, lambda: on_screen(app, MainScreen), "dialog closed")
            await until(pilot, lambda: engine.snapshot().status is BatchStatus.COMPLETED, "done")
        assert engine.limits().soft_cost_usd == Decimal("1000")
    finally:
        engine.close()


async def test_stop_all_from_the_soft_budgets_question(tmp_path: Path) -> None:
    engine = _soft_engine(tmp_path, "0")
    try:
        app = app_for(engine)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: on_screen(app, SoftBudgetDialog), "the question")
            await pilot.click("#stop")
            await until(pilot, lambda: engine.snapshot().status is BatchStatus.STOPPED, "stopped")
        assert engine.snapshot().totals.stopped == 4
    finally:
        engine.close()


async def test_the_question_closes_once_its_hold_is_lifted_elsewhere(tmp_path: Path) -> None:
    # Left open, its Continue would drop the budget another terminal had just raised.
    engine = _soft_engine(tmp_path, "0")
    try:
        app = app_for(engine)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: on_screen(app, SoftBudgetDialog), "the question")
            engine.send(SetLimits({"soft_cost_usd": "1000"}))  # `flightdeck limits`, say
            await until(pilot, lambda: on_screen(app, MainScreen), "the question closed")
            await until(pilot, lambda: engine.snapshot().status is BatchStatus.COMPLETED, "done")
        assert engine.limits().soft_cost_usd == Decimal("1000")
    finally:
        engine.close()


# --- attached to an owner in another process --------------------------------------------------

OPTIONS = UiOptions(poll_s=0.05, transcript_poll_s=0.05, cursor_blink=False)
CONFIG = """
[engine]
max_concurrent = 2

[routes.sim]
time_scale = 0.01
tool_turns = 6
{hold}
[budget]
soft_cost_usd = 0
"""


def _owner(folder: Path, children: int) -> tuple[subprocess.Popen[str], Path, str]:
    """An owner whose children are held running (nothing releases them)."""
    hold = Hold(folder / "hold")
    (folder / "flightdeck.toml").write_text(CONFIG.format(hold=hold.toml()), encoding="utf-8")
    (folder / "tasks.jsonl").write_text(
        "".join(f'{{"id": "c{i}", "goal": "Review item {i}"}}\n' for i in range(children)),
        encoding="utf-8",
    )
    state = folder / "state"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "flightdeck.tui.cli",
            "run",
            "tasks.jsonl",
            "--headless",
            "--state-dir",
            str(state),
        ],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert process.stdout is not None
    first = process.stdout.readline()
    assert first.startswith("batch "), first
    return process, state / "flightdeck.db", first.split()[1]


async def test_attached_the_question_and_l_reach_the_owner(tmp_path: Path) -> None:
    process, db, batch_id = _owner(tmp_path, 5)
    view = view_when_ready(db, batch_id)
    try:
        app = FlightdeckApp(view, OPTIONS)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: on_screen(app, SoftBudgetDialog), "the question")
            # Drop the soft budget: the owner admits again.
            # A click lands once the dialog is laid out and nothing covers the button (in a
            # loaded run the first click hit another widget; a click on a toast dismisses it).
            deadline = time.monotonic() + 60
            while not await pilot.click("#continue"):
                assert time.monotonic() < deadline, "every click landed on another widget"
                await pilot.pause(0.05)
            try:
                await until(pilot, lambda: on_screen(app, MainScreen), "dialog closed")
            except AssertionError:  # say what the dialog said (it failed once under load)
                said = [str(w.render()) for w in app.screen.query("#soft-error")]
                raise AssertionError(f"the dialog stayed, saying {said}: {app.screen}") from None
            await until(pilot, lambda: view.snapshot().totals.running == 2, "two running")
            assert view.snapshot().held is None
            await pilot.press("L")
            await until(pilot, lambda: on_screen(app, LimitsDialog), "limits dialog")
            app.screen.query_one("#limit-pool", Input).value = "4"
            app.screen.query_one("#limit-r0-max-concurrent", Input).value = "3"
            await pilot.press("enter")
            await until(pilot, lambda: on_screen(app, MainScreen), "dialog closed")
            await until(pilot, lambda: view.snapshot().pool_size == 4, "the owner's new pool")
            await until(pilot, lambda: view.snapshot().totals.running == 3, "the route's cap")
            limits = view.snapshot().limits
            assert limits is not None and limits.soft_cost_usd is None
            caps = limits.route("sim")
            assert caps is not None and caps.max_concurrent == 3
            assert all(r.status is not ChildStatus.STOPPED for r in view.snapshot().children)
            await pilot.press("r")  # the route gauges: the cap the owner recorded
            gauges = app.main.query_one("#routes")
            await until(
                pilot, lambda: "in flight 3/3 max_concurrent" in str(gauges.render()), "cap"
            )
    finally:
        view.close()
        process.send_signal(signal.SIGTERM)
        process.wait(HANG_S)
        assert process.stdout is not None
        process.stdout.close()
