"""The digest on the screen: on attach again, after idle, on `d`; dismissed with one key. The
alerts: a burst of failures is one bell with a count; the desktop notification is opt-in."""

from __future__ import annotations

import dataclasses
import json
import time
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.commands import Stop
from flightdeck.engine.inputs.settings import TuiSettings
from flightdeck.engine.model import BatchStatus, ChildRow, ChildStatus, Snapshot
from flightdeck.tui import alerts
from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.digest import Mark
from flightdeck.tui.lastlooked import LastLooked
from flightdeck.tui.screens.main import UiOptions
from flightdeck.tui.widgets.digest import DigestPanel
from tui_fakes import NOW, T0, StaticView, child
from tui_support import SIZE

from helpers import HANG_S

pytestmark = pytest.mark.anyio
S = ChildStatus
BATCH = "20270115-080000-demo"


class Clock:
    """The screen's clock, moved by the test."""

    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> float:
        return self.now


class MovingView(StaticView):
    """A StaticView whose rows and time the test changes."""

    def __init__(self, folder: Path, rows: tuple[ChildRow, ...], clock: Clock) -> None:
        super().__init__(folder, rows)
        self.clock = clock

    def snapshot(self) -> Snapshot:
        return dataclasses.replace(super().snapshot(), now=self.clock.now)


def panel_text(app: FlightdeckApp) -> str | None:
    panel = app.main.query_one("#digest", DigestPanel)
    return str(panel.render()) if panel.shown else None


def running(folder: Path, n: int) -> tuple[ChildRow, ...]:
    return tuple(
        child(i, f"goal {i}", S.RUNNING, folder=folder, started=1, last=130)
        for i in range(1, n + 1)
    )


async def test_attaching_again_shows_what_happened_since_and_one_key_dismisses_it(
    tmp_path: Path,
) -> None:
    looked = LastLooked(tmp_path / "state", BATCH)
    looked.write(Mark(BATCH, T0 + 50, Decimal("0.01")))  # the last look, before these ended:
    view = StaticView(tmp_path / "b")  # review-01 completed at 60, review-09 stalled at 110
    app = FlightdeckApp(view, UiOptions(clock=Clock(), cursor_blink=False, looked=looked))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = panel_text(app)
        assert text is not None and "Since you last looked (1m25s ago)" in text, text
        assert "1 finished · 0 failed · 1 stalled · 0 stopped · 0 looped" in text
        assert "spent $0.0245" in text  # 0.0345 now, 0.01 then
        await pilot.press("d")
        assert panel_text(app) is None
        # dismissed: seen up to now, kept for the next attach
        assert looked.read() == Mark(BATCH, NOW, view.snapshot().totals.cost_usd)
        await pilot.press("d")  # on demand, from the dismissal: nothing since
        assert "nothing new" in (panel_text(app) or "")
        await pilot.press("escape")
        assert panel_text(app) is None


async def test_a_first_attach_shows_no_digest_and_quitting_keeps_the_last_look(
    tmp_path: Path,
) -> None:
    looked = LastLooked(tmp_path / "state", BATCH)
    view = StaticView(tmp_path / "b", running(tmp_path / "b", 2))
    clock = Clock()
    app = FlightdeckApp(view, UiOptions(clock=clock, cursor_blink=False, looked=looked))
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        assert panel_text(app) is None
        assert looked.read() is None
    assert looked.read() == Mark(BATCH, NOW, Decimal(0))  # written as the screen went


async def test_the_digest_shows_after_idle_and_alerts_ring_once_per_burst(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "b"
    clock = Clock()
    view = MovingView(folder, running(folder, 5), clock)
    tui = TuiSettings(digest_idle_s=60, desktop="osc9", notify_every_s=30)
    options = UiOptions(clock=clock, poll_s=3600, cursor_blink=False, tui=tui)
    app = FlightdeckApp(view, options)
    rings: list[None] = []
    written: list[str] = []
    monkeypatch.setattr(alerts, "write_to_terminal", lambda _app, seq: written.append(seq))
    async with app.run_test(size=SIZE) as pilot:
        monkeypatch.setattr(app, "bell", lambda: rings.append(None))
        screen = app.main
        await pilot.pause()
        await pilot.press("j")  # the operator looks at NOW
        clock.now = NOW + 59
        screen.poll()
        assert panel_text(app) is None  # not idle long enough, and nothing happened

        # three children fail at once while nobody looks
        rows = list(view.rows)
        for i in (0, 1, 2):
            rows[i] = dataclasses.replace(
                rows[i], status=S.FAILED, finished_ts=NOW + 59, error=f"boom on req_{i}9f"
            )
        view.rows = tuple(rows)
        clock.now = NOW + 59.5
        screen.poll()
        assert panel_text(app) is None  # 59.5 s without a key: not yet
        assert not rings  # the burst is gathering
        clock.now = NOW + 61
        screen.poll()
        text = panel_text(app)
        assert text is not None and "0 finished · 3 failed" in text, text
        assert "3× boom on <id>" in text
        assert len(rings) == 1 and written == [f"\x1b]9;flightdeck {BATCH}: 3 failed\x07"]

        # one more fails a moment later: counted in the panel, its alert waits notify_every_s
        rows[3] = dataclasses.replace(rows[3], status=S.FAILED, finished_ts=NOW + 62)
        view.rows = tuple(rows)
        clock.now = NOW + 65
        screen.poll()
        assert "4 failed" in (panel_text(app) or "")
        assert len(rings) == 1
        clock.now = NOW + 91
        screen.poll()
        assert len(rings) == 2 and written[-1].endswith(": 1 failed\x07")

        await pilot.press("escape")  # one key dismisses it
        assert panel_text(app) is None
        clock.now = NOW + 200
        screen.poll()
        assert panel_text(app) is None  # idle again, but nothing new since the dismissal


@pytest.mark.parametrize(("tui", "bells"), [(TuiSettings(), 1), (TuiSettings(bell=False), 0)])
async def test_the_bell_can_be_turned_off_and_no_desktop_notification_by_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tui: TuiSettings, bells: int
) -> None:
    folder = tmp_path / "b"
    clock = Clock()
    view = MovingView(folder, running(folder, 2), clock)
    app = FlightdeckApp(view, UiOptions(clock=clock, poll_s=3600, tui=tui))
    rings: list[None] = []
    written: list[str] = []
    monkeypatch.setattr(alerts, "write_to_terminal", lambda _app, seq: written.append(seq))
    async with app.run_test(size=SIZE) as pilot:
        monkeypatch.setattr(app, "bell", lambda: rings.append(None))
        await pilot.pause()
        view.rows = (dataclasses.replace(view.rows[0], status=S.FAILED), view.rows[1])
        app.main.poll()
        clock.now += 5
        app.main.poll()
    assert (len(rings), written) == (bells, [])


def test_the_last_look_file_is_json_a_person_can_read(tmp_path: Path) -> None:
    looked = LastLooked(tmp_path, BATCH)
    looked.write(Mark(BATCH, 12.5, Decimal("0.5")))
    assert json.loads(looked.path.read_text()) == {"batch": BATCH, "ts": 12.5, "spent_usd": "0.5"}


@pytest.mark.slow
async def test_attached_again_to_an_owner_the_digest_tells_what_happened_meanwhile(
    tmp_path: Path,
) -> None:
    from flightdeck.tui.screens.dialogs import QuitDialog
    from test_attach import OPTIONS, Owner
    from tui_support import on_screen, until, until_exited

    owner = Owner(tmp_path, children=3)
    try:
        view = owner.view()
        looked = LastLooked(owner.state, owner.batch_id)
        options = dataclasses.replace(OPTIONS, looked=looked)
        app = FlightdeckApp(view, options)
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: len(app.main.table.shown) == 3, "three rows")
            assert panel_text(app) is None  # the first attach: nothing to tell
            await pilot.press("q")
            await until(pilot, lambda: on_screen(app, QuitDialog), "the quit dialog")
            await until_exited(pilot, by=pilot.click("#detach"))
        view.close()
        assert looked.read() is not None

        other = owner.view()  # meanwhile, another terminal stops c2
        try:
            other.send(Stop(("c2",)))
            deadline = time.monotonic() + HANG_S
            while other.snapshot().child("c2").status is not S.STOPPED:  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "c2 stopped by the other terminal"
                time.sleep(0.02)
                other.refresh()
        finally:
            other.close()

        again = owner.view()
        app = FlightdeckApp(again, dataclasses.replace(OPTIONS, looked=looked))
        async with app.run_test(size=SIZE) as pilot:
            await until(pilot, lambda: panel_text(app) is not None, "the digest on attach")
            assert "1 stopped" in (panel_text(app) or "")
            await pilot.press("d")
            assert panel_text(app) is None
            await pilot.press("q")
            await until(pilot, lambda: on_screen(app, QuitDialog), "the quit dialog")
            await until_exited(pilot, by=pilot.click("#detach"))
        again.close()
    finally:
        owner.close()


async def test_attached_to_a_batch_that_has_ended_the_digest_says_how_long_ago_by_the_clock(
    tmp_path: Path,
) -> None:
    # An ended batch's snapshot is dated at its end: the header said "(1m25s ago)" of a look
    # taken two hours before, measured up to the batch's end rather than to now.
    looked = LastLooked(tmp_path / "state", BATCH)
    looked.write(Mark(BATCH, T0 + 50, Decimal("0.01")))
    ended = T0 + 135

    class EndedView(StaticView):
        def snapshot(self) -> Snapshot:
            snap = super().snapshot()
            return dataclasses.replace(
                snap, status=BatchStatus.COMPLETED, finished_ts=ended, now=ended
            )

    clock = Clock()
    clock.now = T0 + 50 + 7200
    app = FlightdeckApp(
        EndedView(tmp_path / "b"), UiOptions(clock=clock, cursor_blink=False, looked=looked)
    )
    async with app.run_test(size=SIZE) as pilot:
        await pilot.pause()
        text = panel_text(app)
        assert text is not None and "Since you last looked (2h00m ago)" in text, text
        assert "1 finished · 0 failed · 1 stalled" in text
        await pilot.press("d")  # dismissed: seen now, not at the batch's end
        clock.now += 5
        await pilot.press("d")
        text = panel_text(app)
        assert text is not None and "Since you last looked (5s ago)" in text, text
        assert "nothing new" in text
