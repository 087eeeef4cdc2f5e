"""`ReadOnlyView` (`serve --read-only`): the batch shown in full, every command refused by the
view itself, whatever reaches it (a key, a dialog, a direct call)."""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.attached.view import StoreView
from flightdeck.engine.commands import (
    Continue,
    Pause,
    PauseAdmission,
    SetLimits,
    Steer,
    Stop,
    StopAll,
)
from flightdeck.engine.model import BatchStatus, ChildStatus, Snapshot
from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.readonly import READ_ONLY, ReadOnlyView
from flightdeck.tui.screens.main import MainScreen, UiOptions
from flightdeck.tui.screens.needs import NeedsScreen
from textual.pilot import Pilot
from textual.widgets import Footer
from textual.widgets._footer import FooterKey
from tui_fakes import StaticView, frozen_clock
from tui_support import (
    SIZE,
    EngineFactory,
    notices_of,
    on_screen,
    until,
    until_exited,
    until_running,
)

pytestmark = pytest.mark.anyio

# Children waiting ten minutes for their first token: running until the engine closes.
HELD = {"time_scale": 1.0, "latency_ms": 600_000.0}


@pytest.fixture
def engine(engine_factory: EngineFactory) -> Engine:
    return engine_factory(["Review a", "Review b"], sim=HELD)


@pytest.fixture
def view(engine: Engine) -> Iterator[StoreView]:
    """The batch as an attached client sees it, through the store."""
    assert engine.flush(30)  # the batch's row is queued to the store's writer: committed first
    store = StoreView(engine.state_dir / "flightdeck.db", engine.batch_id, poll_s=0.05)
    try:
        yield store
    finally:
        store.close()


def recorded(view: StoreView) -> list[str]:
    """The kinds of the commands recorded for the batch's owner."""
    with sqlite3.connect(view.db) as conn:
        rows = conn.execute(
            "SELECT kind FROM requests WHERE batch_id = ? ORDER BY id", (view.batch_id,)
        )
        return [str(kind) for (kind,) in rows]


def send_everything(view: StoreView | ReadOnlyView) -> None:
    view.send(Steer(("c1",), "look again"))
    view.send(Stop(("c1",)))
    view.send(Pause(("c2",)))
    view.send(Continue(("c2",)))
    view.send(PauseAdmission())
    view.send(SetLimits({"pool_size": 2}))
    view.send(StopAll())


@pytest.mark.parametrize("read_only", [False, True], ids=["store-view", "read-only"])
def test_every_command_through_a_read_only_view_sends_nothing(
    view: StoreView, read_only: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="flightdeck.tui.readonly")
    send_everything(ReadOnlyView(view) if read_only else view)
    if read_only:
        assert recorded(view) == []
        said = [r.getMessage() for r in caplog.records]
        assert len(said) == 7 and all(s.endswith(f"not sent: {READ_ONLY}") for s in said)
    else:  # the same calls on the view it wraps reach the owner: the test can fail
        assert recorded(view) == [
            "steer",
            "stop",
            "pause",
            "continue",
            "pause_admission",
            "limits",
            "stop_all",
        ]


def read_only_app(view: StoreView) -> tuple[FlightdeckApp, list[str]]:
    """The app over `view` read-only, and every notice it posts."""
    options = UiOptions(poll_s=0.05, transcript_poll_s=0.05, cursor_blink=False)
    app = FlightdeckApp(ReadOnlyView(view), options)
    return app, notices_of(app)


async def test_every_acting_key_says_read_only_and_opens_nothing(view: StoreView) -> None:
    app, notices = read_only_app(view)
    async with app.run_test(size=SIZE) as pilot:
        await until_running(pilot, app, 2)
        for key in ("s", "x", "X", "p", "P", "L"):
            await pilot.press(key)
            await pilot.pause()
            assert isinstance(app.screen, MainScreen), key  # no dialog to send from
        assert notices.count(READ_ONLY) == 6, notices
        # The figures are the view's own.
        assert app.main.snapshot is not None
        assert app.main.snapshot.batch_id == view.batch_id
        # nothing this view can stop: quit leaves at once
        await until_exited(pilot, "the app to quit, no question asked", by=pilot.press("q"))
    assert recorded(view) == []


def apps_built(monkeypatch: pytest.MonkeyPatch) -> list[FlightdeckApp]:
    """Every app `attach` builds from now on, recorded and closed at once (never run)."""
    built: list[FlightdeckApp] = []

    class Recorded(FlightdeckApp):
        def run(self, *args: object, **kwargs: object) -> bool | None:  # type: ignore[override]
            built.append(self)
            return None

    monkeypatch.setattr("flightdeck.tui.app.FlightdeckApp", Recorded)
    return built


def test_attach_read_only_shows_the_wrapped_view_and_keeps_no_mark(
    view: StoreView, monkeypatch: pytest.MonkeyPatch
) -> None:
    from flightdeck.tui import attached

    built = apps_built(monkeypatch)
    for read_only in (False, True):
        attached.attach_tui(StoreView(view.db, view.batch_id, watch=False), read_only=read_only)
    plain, watching = built
    assert not isinstance(plain.view, ReadOnlyView)
    assert plain.options is not None and plain.options.looked is not None
    # A watcher is not the operator: "since you last looked" stays the operator's.
    assert isinstance(watching.view, ReadOnlyView)
    assert watching.options is not None and watching.options.looked is None


async def test_retry_merge_and_discard_say_read_only_and_open_nothing(
    engine: Engine, view: StoreView
) -> None:
    # Found by an audit: R over a stopped child opened the retry dialog in a read-only view,
    # and only once fresh or continue was chosen said that nothing was sent (M and delete
    # said "nothing here to merge" rather than why nothing would be).
    engine.send(Stop(("c1",)))
    app, notices = read_only_app(view)
    async with app.run_test(size=SIZE) as pilot:
        table = app.main.table
        await until(
            pilot,
            lambda: (
                "c1" in table.rows_by_id and table.rows_by_id["c1"].status is ChildStatus.STOPPED
            ),
            "c1 stopped",
        )
        table.set_tagged(["c1"], True)  # what R, M and delete act on
        for key in ("R", "M", "delete", "backspace"):
            await pilot.press(key)
            await pilot.pause()
            assert isinstance(app.screen, MainScreen), key  # no dialog to send from
        assert notices.count(READ_ONLY) == 4, notices
        await until_exited(pilot, "the app to quit", by=pilot.press("q"))
    assert "retry" not in recorded(view)


def test_attach_read_only_on_the_command_line_watches(
    engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `serve --read-only` had it; `flightdeck attach` on a terminal had no way to watch a
    # batch without the keys that stop it.
    from flightdeck.tui import attached
    from flightdeck.tui.cli import main

    assert engine.flush(30)
    built = apps_built(monkeypatch)
    monkeypatch.setattr(attached, "draws_tui", lambda: True)
    state = str(engine.state_dir)
    main(["attach", engine.batch_id, "--read-only", "--state-dir", state])
    main(["attach", engine.batch_id, "--state-dir", state])
    watching, plain = built
    assert isinstance(watching.view, ReadOnlyView) and watching.view.read_only == READ_ONLY
    assert not isinstance(plain.view, ReadOnlyView)


# Every key that sends a command: in a read-only view none is shown, or offered by the palette.
ACTING = ("steer", "stop", "nudge", "pause", "pause_admission", "stop_all", "limits")
REVIEWING = ("retry", "merge", "discard")


def footer_actions(app: FlightdeckApp) -> set[str]:
    """The actions of the keys the main screen's footer shows."""
    return {key.action for key in app.main.query_one(Footer).query(FooterKey)}


async def test_a_read_only_view_shows_no_key_that_would_only_refuse(view: StoreView) -> None:
    # The footer listed s, x and X, enabled, in a view where each only said `read-only: …`.
    app, notices = read_only_app(view)
    async with app.run_test(size=SIZE) as pilot:
        table = app.main.table
        await until(pilot, lambda: len(table.rows_by_id) == 2, "both children shown")
        await until(pilot, lambda: {"filter", "help", "quit"} <= footer_actions(app), "keys")
        assert not {"steer", "stop", "stop_all", "nudge"} & footer_actions(app)
        for action in (*ACTING, *REVIEWING):
            assert app.main.check_action(action, ()) is False, action  # hidden, not dimmed
        shown = {b.binding.action for b in app.main.active_bindings.values()}
        assert not shown & {*ACTING, *REVIEWING}
        assert "diff" in shown and "filter" in shown  # what only reads stays
        await pilot.press("s")  # hidden, it still says why it sends nothing
        await until(pilot, lambda: READ_ONLY in notices, "the reason said")
        assert isinstance(app.screen, MainScreen)
    assert recorded(view) == []


async def test_the_footer_drops_steer_and_stop_once_the_attached_batch_ends(
    engine: Engine, view: StoreView
) -> None:
    # An attached view of a batch that has ended (or whose owner is gone) showed s and x,
    # dimmed, though they only said that nothing is left to steer or stop.
    options = UiOptions(poll_s=0.05, transcript_poll_s=0.05, cursor_blink=False)
    app = FlightdeckApp(view, options)
    notices = notices_of(app)
    async with app.run_test(size=SIZE) as pilot:
        await until_running(pilot, app, 2)
        # Live and attached: steer and stop are there, enabled.
        await until(pilot, lambda: {"steer", "stop"} <= footer_actions(app), "s and x shown")
        assert app.main.check_action("steer", ()) and app.main.check_action("stop", ())
        engine.send(StopAll())
        await until(pilot, lambda: view.read_only is not None, "the batch ended")
        # The footer is composed again: empty for a moment, so wait for the new keys themselves.
        await until(
            pilot,
            lambda: (
                not {"steer", "stop"} & (shown := footer_actions(app))
                and {"filter", "help", "quit"} <= shown
            ),
            "s and x gone, the others shown",
        )
        for action in ACTING:
            assert app.main.check_action(action, ()) is False, action
        # A retry opens an ended batch again: R stays (it is not read-only).
        assert app.main.check_action("retry", ()) is True
        await pilot.press("x")  # hidden, it still says why it sends nothing
        reason = view.read_only
        await until(pilot, lambda: reason in notices, "the reason said")


def needs_footer(app: FlightdeckApp) -> set[str]:
    """The actions of the keys the needs-you screen's footer shows."""
    return {key.action for key in app.screen.query_one(Footer).query(FooterKey)}


async def needs_screen(pilot: Pilot[object], app: FlightdeckApp) -> NeedsScreen:
    """The needs-you screen (`!`), opened once an entry is in the queue."""
    await until(pilot, lambda: app.main.notices.queue, "an entry in the queue")
    await pilot.press("exclamation_mark")
    await until(pilot, lambda: on_screen(app, NeedsScreen), "the queue")
    screen = app.screen
    assert isinstance(screen, NeedsScreen)
    return screen


async def test_the_needs_you_screen_hides_answer_and_clear_in_a_read_only_view(
    tmp_path: Path,
) -> None:
    # Its footer listed a and c in a read-only view, where each only said `read-only: …`.
    options = UiOptions(clock=frozen_clock, poll_s=0.05, cursor_blink=False)
    app = FlightdeckApp(ReadOnlyView(StaticView(tmp_path)), options)
    notices = notices_of(app)
    async with app.run_test(size=SIZE) as pilot:
        screen = await needs_screen(pilot, app)
        await until(pilot, lambda: screen.entries, "its entries")
        await until(pilot, lambda: "close" in needs_footer(app), "the footer")
        assert not {"answer", "clear"} & needs_footer(app)
        assert screen.check_action("answer", ()) is False  # hidden, not dimmed
        assert screen.check_action("clear", ()) is False
        for key in ("a", "c"):  # hidden, each still says why it sends nothing
            await pilot.press(key)
            await pilot.pause()
        await until(pilot, lambda: notices.count(READ_ONLY) == 2, "the reason said twice")
        assert screen.answering is None and len(screen.entries) == len(app.main.notices.queue)


async def test_the_needs_you_screen_drops_answer_and_clear_once_the_batch_ends(
    tmp_path: Path,
) -> None:
    # An attached view of a batch that ended (or whose owner is gone) showed a and c.
    view = StaticView(tmp_path)
    options = UiOptions(clock=frozen_clock, poll_s=0.05, cursor_blink=False)
    app = FlightdeckApp(view, options)
    notices = notices_of(app)
    async with app.run_test(size=SIZE) as pilot:
        await needs_screen(pilot, app)
        await until(pilot, lambda: {"answer", "clear"} <= needs_footer(app), "a and c shown")
        await pilot.pause(0.3)  # the screen settled: only the batch's end changes the footer now
        ended = "the batch has ended: nothing is left to answer or clear"
        view.read_only = ended
        await until(
            pilot,
            lambda: "close" in needs_footer(app) and not {"answer", "clear"} & needs_footer(app),
            "a and c gone, close still there",
        )
        await pilot.press("c")  # hidden, it still says why it sends nothing
        await until(pilot, lambda: ended in notices, "the reason said")


async def test_l_on_an_ended_batch_says_its_limits_can_no_longer_change(tmp_path: Path) -> None:
    # Found by a walk-through: attached to an ended batch, `L` said "nothing left to steer or
    # stop" (the view's reason for every command), which reads oddly for limits.
    class Ended(StaticView):
        read_only = "batch 20270115-080000-demo has ended (stopped): nothing left to steer or stop"

        def snapshot(self) -> Snapshot:
            snap = super().snapshot()
            return dataclasses.replace(snap, status=BatchStatus.STOPPED, finished_ts=snap.now)

    app = FlightdeckApp(Ended(tmp_path), UiOptions(clock=frozen_clock, cursor_blink=False))
    notices = notices_of(app)
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(app.main.table.shown) > 0, "rows")
        before = len(notices)  # what the batch's end itself is said with
        await pilot.press("L")
        await until(pilot, lambda: len(notices) > before, "a notice")
        assert isinstance(app.screen, MainScreen)  # no dialog
    assert notices[before:] == [
        "batch 20270115-080000-demo has ended (stopped): its limits can no longer change"
    ]
