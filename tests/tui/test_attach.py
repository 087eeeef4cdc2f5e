"""The TUI attached to an owner in another process: a real `flightdeck run --headless`
subprocess on sim, read through the store (StoreView), commanded through its requests table."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from flightdeck.engine.attached.view import StoreView
from flightdeck.engine.commands import Steer
from flightdeck.engine.model import BatchStatus, ChildStatus, SteerState
from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.screens.dialogs import (
    ConfirmPauseDialog,
    ConfirmStopDialog,
    QuitDialog,
    SteerDialog,
)
from flightdeck.tui.screens.main import MainScreen, UiOptions
from flightdeck.tui.widgets.routes import NOT_STORED
from tui_support import (
    SIZE,
    filter_rows,
    notices_of,
    on_screen,
    type_text,
    until,
    until_exited,
    until_running,
    view_when_ready,
)

from helpers import HANG_S, Hold

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

# A child that writes for seconds (seven turns of about a second each): for tests that watch
# its output stream, never for one that must act while it still runs (that one holds it).
SLOW_CONFIG = """
[routes.sim]
time_scale = 1.0
latency_ms = 300
tokens_per_s = 30
tool_turns = 6
"""
OPTIONS = UiOptions(poll_s=0.05, transcript_poll_s=0.05, cursor_blink=False)


RUN = (sys.executable, "-m", "flightdeck.tui.cli", "run", "tasks.jsonl", "--headless")


class Owner:
    """A real owner process, and the batch it runs. Its sim children are held before every
    call's first token until the test releases the call (`self.hold`), so they are running
    while keys are pressed however loaded the machine is, and reach a turn boundary when told;
    a `config` given whole replaces that (children that stream, to watch their output)."""

    def __init__(
        self,
        folder: Path,
        children: int,
        *,
        sim: str = "tool_turns = 6\n",
        extra: str = "",
        config: str | None = None,
        goal: str = "Review item",
        max_turns: int = 8,
    ) -> None:
        self.hold = Hold(folder / "hold")
        if config is None:
            config = "[routes.sim]\ntime_scale = 0.01\n" + self.hold.toml() + sim + extra
        (folder / "flightdeck.toml").write_text(config, encoding="utf-8")
        (folder / "tasks.jsonl").write_text(
            "".join(
                f'{{"id": "c{i}", "goal": "{goal} {i}", "max_turns": {max_turns}}}\n'
                for i in range(1, 1 + children)
            ),
            encoding="utf-8",
        )
        self.state = folder / "state"
        self.db = self.state / "flightdeck.db"
        self.process = subprocess.Popen(
            [*RUN, "--state-dir", str(self.state)],
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "NO_COLOR": "1"},
        )
        assert self.process.stdout is not None
        first = self.process.stdout.readline()  # "batch <id>", printed once it has started
        assert first.startswith("batch "), first
        self.batch_id = first.split()[1]

    def view(self) -> StoreView:
        return view_when_ready(self.db, self.batch_id)

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        assert self.process.stdout is not None
        self.process.stdout.close()


@pytest.fixture
def owner(tmp_path: Path) -> Iterator[Owner]:
    running = Owner(tmp_path, children=3)
    try:
        yield running
    finally:
        running.close()


def status(view: StoreView, child_id: str) -> ChildStatus | None:
    row = view.snapshot().child(child_id)
    return None if row is None else row.status


def transcript(view: StoreView, child_id: str) -> str:
    row = view.snapshot().child(child_id)
    path = None if row is None else Path(row.transcript)
    return path.read_text(encoding="utf-8") if path is not None and path.exists() else ""


def steers(view: StoreView, child_id: str) -> list[SteerState]:
    row = view.snapshot().child(child_id)
    return [] if row is None else [r.state for r in row.steers]


async def test_attached_tui_steers_stops_detaches_and_attaches_again(owner: Owner) -> None:
    view = owner.view()
    app = FlightdeckApp(view, OPTIONS)
    async with app.run_test(size=SIZE) as pilot:
        table = app.main.table
        await until(pilot, lambda: len(table.shown) == 3, "three rows from the store")
        await until_running(pilot, app, 3)
        calls = table.rows_by_id["c1"].activity.api_calls
        owner.hold.release("c1", 0)  # its first call ends, the second is held
        await until(pilot, lambda: table.rows_by_id["c1"].activity.api_calls > calls, "rows update")

        table.select("c1")
        await pilot.press("s")
        await until(pilot, lambda: on_screen(app, SteerDialog), "steer dialog")
        await type_text(pilot, "add tests")
        await pilot.press("enter")
        await until(pilot, lambda: on_screen(app, MainScreen), "dialog closed")
        await until(pilot, lambda: steers(view, "c1") == [SteerState.QUEUED], "the steer queued")
        owner.hold.release("c1", 1)  # its second call ends: the steer goes in at that boundary
        await until(pilot, lambda: table.displayed("c1", "steer") == "✓ delivered", "delivered")
        [receipt] = view.snapshot().child("c1").steers  # type: ignore[union-attr]
        assert (receipt.message, receipt.state) == ("add tests", SteerState.DELIVERED)
        await until(
            pilot,
            lambda: any("operator" in ln and "add tests" in ln for ln in app.main.transcript.lines),
            "the operator's message in the transcript pane",
        )

        table.select("c2")
        await pilot.press("x")
        await until(pilot, lambda: on_screen(app, ConfirmStopDialog), "confirm dialog")
        await pilot.press("x")
        await until(pilot, lambda: table.displayed("c2", "doing").startswith("stopped"), "stopped")
        second = owner.view()  # another terminal attached at the same time sees the same
        try:
            assert status(second, "c2") is ChildStatus.STOPPED
            [seen] = second.snapshot().child("c1").steers  # type: ignore[union-attr]
            assert seen.state is SteerState.DELIVERED
        finally:
            second.close()

        await pilot.press("q")
        await until(pilot, lambda: on_screen(app, QuitDialog), "quit dialog")
        await until_exited(pilot, by=pilot.click("#detach"))
    assert app.return_value is False  # detached: nothing stopped
    view.close()

    assert owner.process.poll() is None, "detaching leaves the owner running"
    again = owner.view()
    assert status(again, "c1") is ChildStatus.RUNNING
    assert status(again, "c2") is ChildStatus.STOPPED
    app = FlightdeckApp(again, OPTIONS)
    async with app.run_test(size=SIZE) as pilot:
        table = app.main.table
        await until(pilot, lambda: len(table.shown) == 3, "the same three rows")
        assert table.displayed("c1", "steer") == "✓ delivered"
        assert table.displayed("c2", "doing").startswith("stopped")
        await pilot.press("r")  # the route gauges: the owner publishes them live
        gauges = app.main.query_one("#routes")
        await until(pilot, lambda: "sim sim-1  in flight" in str(gauges.render()), "the gauges")
        assert NOT_STORED not in str(gauges.render())
        line = str(gauges.render()).splitlines()[1]
        assert re.match(r"sim sim-1  in flight [0-2]", line), line
        await pilot.press("q")
        await until(pilot, lambda: on_screen(app, QuitDialog), "quit dialog again")
        await until_exited(pilot, by=pilot.click("#stop-quit"))
    assert app.return_value is True
    assert owner.process.wait(HANG_S) == 1  # stopped children: the batch did not complete
    again.refresh()
    assert again.snapshot().status is BatchStatus.STOPPED
    again.close()


async def test_attached_tui_stops_everything_a_filter_keeps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    owner = Owner(tmp_path, children=12)
    try:
        view = owner.view()
        app = FlightdeckApp(view, OPTIONS)
        async with app.run_test(size=SIZE) as pilot:
            screen, table = app.main, app.main.table
            notices: list[str] = []
            notify = screen.notify
            monkeypatch.setattr(
                screen, "notify", lambda text, **kw: notices.append(text) or notify(text, **kw)
            )
            await until(pilot, lambda: len(table.shown) == 12, "twelve rows from the store")
            await filter_rows(pilot, '"item 1"')  # c1, c10, c11, c12 (queued or running)
            await until(pilot, lambda: sorted(table.shown) == ["c1", "c10", "c11", "c12"], "kept")
            await pilot.press("x")
            await until(pilot, lambda: on_screen(app, ConfirmStopDialog), "dialog")
            assert str(app.screen.query("Label").first().render()) == (
                'Stop 4 children matching `"item 1"`?'
            )
            await pilot.press("x")
            await until(pilot, lambda: "4 stopped" in notices, "one summary of the stops")
            for child_id in ("c1", "c10", "c11", "c12"):
                assert status(view, child_id) is ChildStatus.STOPPED
            assert status(view, "c2") in (ChildStatus.RUNNING, ChildStatus.QUEUED)
        view.close()
    finally:
        owner.close()


async def test_a_filtered_steer_pending_hides_no_other_operators_receipt(owner: Owner) -> None:
    """Two operators attached to one batch: this one's steer of everything a filter keeps is
    summed up once settled, and a steer the other one sent the same child meanwhile is still
    said on its own (it was taken for this one's, and never said)."""
    view = owner.view()
    other = owner.view()  # the second operator's `flightdeck attach`
    app = FlightdeckApp(view, OPTIONS)
    try:
        async with app.run_test(size=SIZE) as pilot:
            notices = notices_of(app)
            await until_running(pilot, app, 3)
            await filter_rows(pilot, '"item 1"')
            await until(pilot, lambda: app.main.table.shown == ["c1"], "c1 alone kept")
            await pilot.press("s")
            await until(pilot, lambda: on_screen(app, SteerDialog), "steer dialog")
            await type_text(pilot, "go on")
            await pilot.press("enter")
            await until(pilot, lambda: steers(view, "c1") == [SteerState.QUEUED], "queued")
            other.send(Steer(("c1",), "from the other operator"))
            queued = [SteerState.QUEUED] * 2
            await until(pilot, lambda: steers(view, "c1") == queued, "both queued")
            owner.hold.release("c1", 0)  # both go in at the end of its first call
            summary = "steer: 1 delivered, 0 missed"
            await until(pilot, lambda: summary in notices, "this operator's summary")
            await until(pilot, lambda: "steer delivered: c1" in notices, "the other's receipt")
            assert notices.count("steer delivered: c1") == 1  # the other's; this one's summed
            assert notices.count(summary) == 1
    finally:
        other.close()
        view.close()


async def test_attached_tui_pauses_and_continues_a_child_and_admission(owner: Owner) -> None:
    view = owner.view()
    app = FlightdeckApp(view, OPTIONS)
    async with app.run_test(size=SIZE) as pilot:
        table = app.main.table
        bar = app.main.query_one("#status")
        await until(pilot, lambda: status(view, "c1") is ChildStatus.RUNNING, "c1 running")
        await until(pilot, lambda: "c1" in table.rows_by_id, "c1's row")
        table.select("c1")
        await pilot.press("p")
        await until(pilot, lambda: on_screen(app, ConfirmPauseDialog), "pause dialog")
        await pilot.press("p")
        await until(pilot, lambda: "pause requested" in transcript(view, "c1"), "pause applied")
        owner.hold.release("c1", 0)  # at the end of its first call the owner pauses it
        await until(pilot, lambda: status(view, "c1") is ChildStatus.PAUSED, "c1 paused")
        await until(pilot, lambda: table.displayed("c1", "mark").endswith("‖"), "the glyph")

        await pilot.press("P")
        await until(pilot, lambda: view.snapshot().held == "paused by the operator", "held")
        await until(pilot, lambda: "admission held" in str(bar.render()), "the status bar")
        await pilot.press("P")
        await until(pilot, lambda: view.snapshot().held is None, "released")

        table.select("c1")
        await pilot.press("p")
        await until(pilot, lambda: on_screen(app, ConfirmPauseDialog), "continue dialog")
        assert str(app.screen.query("Label").first().render()) == "Continue 1 child?"
        await pilot.press("p")
        await until(pilot, lambda: status(view, "c1") is ChildStatus.RUNNING, "c1 continued")
        await until(
            pilot,
            lambda: any("operator" in ln and "continue" in ln for ln in app.main.transcript.lines),
            "the operator's continue in the transcript pane",
        )
        await pilot.press("q")
        await until(pilot, lambda: on_screen(app, QuitDialog), "quit dialog")
        await until_exited(pilot, by=pilot.click("#stop-quit"))
    view.close()


async def test_the_quit_question_says_when_another_operator_ended_the_batch_meanwhile(
    owner: Owner,
) -> None:
    # Found in tmux: q asked "3 children are still running or queued" and, once another
    # terminal had stopped them all, went on asking it; "Stop all and quit" then said "stop
    # all not sent: batch … has ended (stopped)" and did not quit.
    from flightdeck.engine.commands import StopAll
    from textual.widgets import Label

    view = owner.view()
    other = owner.view()  # a second operator, attached at the same time
    app = FlightdeckApp(view, OPTIONS)
    try:
        async with app.run_test(size=SIZE) as pilot:
            await until_running(pilot, app, 3)
            await pilot.press("q")
            await until(pilot, lambda: on_screen(app, QuitDialog), "the quit question")
            dialog = app.screen
            assert isinstance(dialog, QuitDialog)
            other.send(StopAll())
            ended = "the batch has ended (stopped): nothing left to stop"
            await until(
                pilot,
                lambda: any(ended in str(label.render()) for label in dialog.query(Label)),
                "the question says the batch ended",
            )
            await until_exited(pilot, "s quits: nothing is left to stop", by=pilot.press("s"))
        assert app.return_value is False  # nothing this view stopped
        assert [n for n in app._notifications if "not sent" in str(n.message)] == []
    finally:
        other.close()
        view.close()
