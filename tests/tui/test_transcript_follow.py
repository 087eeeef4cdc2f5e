"""The transcript pane follows the end of the file whenever the operator has not scrolled up:
through bursts of wrapped lines, the pane shrinking under it, and the child's end; in-process
and attached to an owner in another process."""

from __future__ import annotations

from pathlib import Path
from unittest.mock import patch

import pytest
from flightdeck.engine.model import ChildStatus
from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.widgets.transcript import FOLLOWING_PAUSED, TranscriptView, wrap_line
from test_attach import OPTIONS, SLOW_CONFIG, Owner
from textual.app import App, ComposeResult
from textual.containers import Vertical
from textual.pilot import Pilot
from textual.widgets import Static
from tui_support import EngineFactory, app_for, until

pytestmark = pytest.mark.anyio

NARROW = (80, 24)  # the transcript pane is a few lines high, and long lines wrap
# Bursts: a reply streams a few words a second, then a tool turn writes several lines at once.
BURSTY = {"time_scale": 0.1, "latency_ms": 300.0, "tokens_per_s": 8.0, "tool_turns": 6}


def bottom_line(pane: TranscriptView) -> str:
    """The pane's lowest line on screen (blank when the lines end above it)."""
    log = pane.log_widget
    y = round(log.scroll_y) + log.scrollable_content_region.height - 1
    return log.lines[y] if 0 <= y < len(log.lines) else ""


def file_last_line(path: Path, width: int) -> str:
    """The file's last line as the pane folds it to `width`: its last piece."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return wrap_line(lines[-1], width)[-1] if lines else ""


def shows_the_end(pane: TranscriptView) -> bool:
    """The file's last line is the pane's lowest line on screen."""
    if pane.path is None or not pane.path.exists() or not pane.lines:
        return False
    width = pane.log_widget.scrollable_content_region.width
    return bottom_line(pane) == file_last_line(pane.path, width)


async def shrink_and_check(pilot: Pilot[None], pane: TranscriptView) -> None:
    """After the child's end (no more writes), the pane grows and shrinks again (the route
    panel hidden and shown): the end stays in view."""
    for _ in range(2):
        await pilot.press("r")
        await pilot.pause(0.1)
        await until(pilot, lambda: shows_the_end(pane), "the last line at the bottom, resized")
    assert pane.following


async def test_the_pane_follows_the_end_when_it_shrinks_under_a_bursty_child(
    engine_factory: EngineFactory,
) -> None:
    engine = engine_factory(["summarize the readme and list every section in it"], sim=BURSTY)
    app = app_for(engine)
    async with app.run_test(size=NARROW) as pilot:
        pane = app.main.transcript
        await until(pilot, lambda: len(pane.lines) > pane.log_widget.size.height, "a full pane")
        # The route panel takes rows from the pane, as the detail pane does when it shows a
        # loop's evidence: the end moves without a write. Textual's Log only scrolls on a write
        # when it was at the end already, so it stayed short of the end from here on.
        await pilot.press("r")
        await until(pilot, lambda: engine.snapshot().children[0].status.terminal, "the child's end")
        await until(pilot, lambda: shows_the_end(pane), "the file's last line at the bottom")
        await shrink_and_check(pilot, pane)
        assert FOLLOWING_PAUSED not in str(pane.query_one("#transcript-title", Static).content)


@pytest.mark.slow
async def test_the_attached_pane_follows_the_end_of_an_owner_process_child(
    tmp_path: Path,
) -> None:
    bursty = SLOW_CONFIG.replace("tokens_per_s = 30", "tokens_per_s = 8")
    owner = Owner(
        tmp_path, children=1, config=bursty.replace("time_scale = 1.0", "time_scale = 0.2")
    )
    try:
        app = FlightdeckApp(owner.view(), OPTIONS)
        async with app.run_test(size=NARROW) as pilot:
            pane = app.main.transcript
            await until(pilot, lambda: len(pane.lines) > pane.log_widget.size.height, "a full pane")
            await pilot.press("r")
            await until(
                pilot,
                lambda: app.main.table.rows_by_id["c1"].status is ChildStatus.COMPLETED,
                "the child's end",
                timeout=60,
            )
            await until(pilot, lambda: shows_the_end(pane), "the file's last line at the bottom")
            await shrink_and_check(pilot, pane)
    finally:
        owner.close()


class _Pane(App[None]):
    """The pane under a box whose height the test changes (a banner, the detail pane)."""

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Static("banner", id="banner")
            yield TranscriptView(id="transcript", poll_s=0.05)


async def test_scrolling_up_pauses_following_and_end_resumes_it(tmp_path: Path) -> None:
    path = tmp_path / "c1.log"
    stamp = "12:00:00.000  assistant │ "
    path.write_text("".join(f"{stamp}line {n} " + "word " * n + "\n" for n in range(40)))
    app = _Pane()
    async with app.run_test(size=(50, 16)) as pilot:
        pane = app.query_one(TranscriptView)
        log = pane.log_widget
        pane.show("c1", path)
        await until(pilot, lambda: shows_the_end(pane), "the end shown")
        app.query_one("#banner").styles.height = 6  # the pane shrinks under it
        await until(pilot, lambda: shows_the_end(pane), "the end shown again")

        log.focus()
        await pilot.press("up", "up")
        title = pane.query_one("#transcript-title", Static)
        await until(pilot, lambda: FOLLOWING_PAUSED in str(title.content), "the pause said")
        assert not pane.following
        # The scroll is animated: what the operator reads is where it comes to rest (read in
        # flight, it was 210.13 where it rested at 210). One line up still follows, so the
        # pause said means both keys are read: nothing else is left to move it.
        await until(pilot, lambda: log.scroll_y == log.scroll_target_y, "the scroll at rest")
        held = log.scroll_y
        with path.open("a") as fh:
            fh.write(f"{stamp}more\n" * 5)
        await until(pilot, lambda: log.lines[-1].endswith("more"), "the new lines read")
        await pilot.pause(0.2)
        assert log.scroll_y == held  # what the operator reads stays put
        assert not shows_the_end(pane)

        await pilot.press("end")
        await until(pilot, lambda: shows_the_end(pane), "following again")
        assert pane.following and FOLLOWING_PAUSED not in str(title.content)
        with path.open("a") as fh:
            fh.write(f"{stamp}last words\n")
        await until(pilot, lambda: bottom_line(pane).endswith("last words"), "followed")

        # Scrolling back down to the end follows again too.
        await pilot.press("pageup")
        await until(pilot, lambda: not pane.following, "paused by page up")
        await pilot.press("pagedown", "pagedown", "pagedown")
        await until(pilot, lambda: pane.following, "following at the end")


async def test_a_switch_waits_for_the_screen_and_only_the_last_of_several_is_read(
    tmp_path: Path,
) -> None:
    """A key that moves the cursor is drawn before the pane empties and fills: the pane keeps
    the lines it had until the frame is drawn; of several switches before it (a held key),
    only the last is shown."""
    stamp = "12:00:00.000  assistant │ "
    paths = {}
    for name in ("c1", "c2", "c3"):
        paths[name] = tmp_path / f"{name}.log"
        paths[name].write_text(f"{stamp}{name} says hello\n")
    app = _Pane()
    async with app.run_test(size=(50, 16)) as pilot:
        pane = app.query_one(TranscriptView)
        pane.show("c1", paths["c1"])
        await until(pilot, lambda: pane.lines[-1:] == [f"{stamp}c1 says hello"], "c1 shown")
        pane.show("c2", paths["c2"])
        pane.show("c3", paths["c3"])
        assert pane.child_id == "c3" and pane.lines == [f"{stamp}c1 says hello"]
        seen: set[str] = set()

        def c3_shown() -> bool:
            seen.update(pane.lines)
            return pane.lines == [f"{stamp}c3 says hello"]

        await until(pilot, c3_shown, "c3 shown")
        assert f"{stamp}c2 says hello" not in seen


async def test_new_lines_and_switches_lay_out_no_widget_and_keep_the_scrollbar_true(
    tmp_path: Path,
) -> None:
    """A write or a clear changes the pane's line count, never its box: nothing on the screen
    moves, so the screen is not laid out again (Textual's Log asks for a layout of the whole
    screen at each; about 18 ms of CPU a time in the attached TUI). The scrollbar still says
    how much there is, and the end stays in view."""
    stamp = "12:00:00.000  assistant │ "
    paths = {name: tmp_path / f"{name}.log" for name in ("c1", "c2")}
    for name, path in paths.items():
        path.write_text("".join(f"{stamp}{name} line {n}\n" for n in range(30)))
    app = _Pane()
    async with app.run_test(size=(50, 16)) as pilot:
        pane = app.query_one(TranscriptView)
        log = pane.log_widget
        pane.show("c1", paths["c1"])
        await until(pilot, lambda: shows_the_end(pane), "c1 shown")
        await pilot.pause()
        compositor = app.screen._compositor
        with patch.object(compositor, "reflow", wraps=compositor.reflow) as reflow:
            for n in range(3):
                with paths["c1"].open("a") as fh:
                    fh.write(f"{stamp}burst {n}\n" * 7)
                said = f"burst {n}"
                await until(pilot, lambda said=said: bottom_line(pane).endswith(said), "followed")
            for name in ("c2", "c1"):  # each a clear, then the other's lines
                pane.show(name, paths[name])
                first = f"{name} line 0"
                await until(
                    pilot,
                    lambda first=first: pane.lines[:1] == [f"{stamp}{first}"],
                    f"{name} shown",
                )
                await until(pilot, lambda: shows_the_end(pane), f"{name}'s end shown")
            await pilot.pause()
        assert reflow.call_count == 0
        assert log.vertical_scrollbar.window_virtual_size == len(log.lines) == 51
        assert log.scroll_y == log.max_scroll_y > 0
