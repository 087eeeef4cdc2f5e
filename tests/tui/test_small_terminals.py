"""The screen on small terminals (under the 80 columns it is laid out for, and 80x24 itself):
each one-line part stays one line, cut with an ellipsis rather than wrapped over the next."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.model import ChildStatus, LoopEvidence, Snapshot
from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.digest import Digest
from flightdeck.tui.screens.main import UiOptions
from textual.widget import Widget
from tui_fakes import T0, StaticView, child, demo_rows, frozen_clock
from tui_support import until

pytestmark = pytest.mark.anyio

LONG_ERROR = "RateLimitError: " + "the provider said no, " * 12


def lines(widget: Widget) -> list[str]:
    """What `widget` shows, a string per screen row."""
    return [widget.render_line(y).text.rstrip() for y in range(widget.size.height)]


def rows_with_a_long_error(folder: Path) -> tuple:  # type: ignore[type-arg]
    rows = demo_rows(folder)
    retrying = child(
        1, "Review PR #101: a goal long enough to need the whole width and more, " * 3,
        ChildStatus.RUNNING, folder=folder, text="streaming", calls=3, retries=4,
        tokens=(2100, 300), cost="0.0033", started=10, last=131, error=LONG_ERROR,
    )  # fmt: skip
    return (dataclasses.replace(retrying, id="review-00"), *rows)


@pytest.mark.parametrize("size", [(80, 24), (60, 20), (40, 12)])
async def test_the_meter_and_detail_keep_both_their_lines(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    """The meter's second line (tokens, spent) and the detail's (the goal) stay on screen: the
    first line of either, too long for the width, is cut, not wrapped over the second."""
    view = StaticView(tmp_path, rows_with_a_long_error(tmp_path))
    app = FlightdeckApp(view, UiOptions(clock=frozen_clock, cursor_blink=False))
    async with app.run_test(size=size) as pilot:
        screen = app.main
        table = screen.table
        await until(pilot, lambda: len(table.shown) == 11, "the rows")
        while table.selected_id != "review-00":  # attention order: it is not the first
            await pilot.press("j")
        meter = screen.query_one("#meter")
        detail = screen.query_one("#detail")
        await until(pilot, lambda: "in" in lines(meter)[1], "the meter's tokens line")
        first, second = lines(meter)
        assert "done" in first and "$" in second, (first, second)
        await until(pilot, lambda: "review-00" in lines(detail)[0], "the detail line")
        first, second = lines(detail)[:2]
        assert second.startswith("goal "), (first, second)
        assert first.endswith("…"), first  # cut, and says so


def looping_rows(folder: Path) -> tuple:  # type: ignore[type-arg]
    """The demo's rows and a child flagged looping: its detail is nine lines (the evidence)."""
    calls = tuple('list_dir {"path": "."}' for _ in range(6))
    loop = LoopEvidence("repeat", 'list_dir {"path": "."} called 6 times', calls, T0 + 100)
    row = child(
        1, "Find every TODO", ChildStatus.RUNNING, folder=folder, text="streaming", calls=6,
        tokens=(900, 100), cost="0.0020", started=10, last=131,
    )  # fmt: skip
    return (dataclasses.replace(row, id="looper", loop=loop), *demo_rows(folder))


DIGEST = Digest(
    since=T0, until=T0 + 100, completed=18, failed=3, stalled=1, looped=1,
    spent_usd=Decimal("0.4210"), steers_delivered=2, steers_missed=1,
    signatures=(("timeout after <n>s", 2), ("FatalError: sim", 1)), other_failures=1,
)  # fmt: skip


@pytest.mark.parametrize("size", [(80, 24), (60, 20), (40, 12)])
async def test_the_screen_never_scrolls_its_meter_or_status_bar_away(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    """A looping child's evidence (the detail's nine lines) and the digest (attach again) on
    a 24-row screen, or a 12-row one with neither: the table's and the pane's minimum heights
    came to more than the screen had, and the screen scrolled, the meter off its top (or the
    status bar off its bottom) and the table stretched over everything."""
    view = StaticView(tmp_path, looping_rows(tmp_path))
    app = FlightdeckApp(view, UiOptions(clock=frozen_clock, cursor_blink=False))
    async with app.run_test(size=size) as pilot:
        screen = app.main
        table = screen.table
        await until(pilot, lambda: len(table.shown) == 11, "the rows")
        while table.selected_id != "looper":
            await pilot.press("j")
        if size[1] >= 20:
            screen.digest.show(DIGEST)
        detail = screen.query_one("#detail")
        await until(pilot, lambda: "looper" in lines(detail)[0], "the looping child's detail")
        await until(pilot, lambda: str(detail.styles.height) == "9", "room for the evidence")
        await pilot.pause()
        await pilot.pause()  # laid out for it
        meter, status = screen.query_one("#meter"), screen.query_one("#status")
        assert screen.max_scroll_y == 0
        assert meter.region.y >= 0 and status.region.bottom <= size[1] - 1, (
            meter.region,
            status.region,
        )
        assert 2 <= table.region.height <= size[1] // 2, table.region  # a header and a row
        assert screen.query_one("#transcript").region.height >= 1  # its title at least


PROBLEM = (
    "cannot write to the store (database or disk is full): no new child starts until it can; "
    "/var/lib/flightdeck/state/flightdeck.db"
)


class TroubledView(StaticView):
    """The demo batch with a problem to show in the banner."""

    def snapshot(self) -> Snapshot:
        return dataclasses.replace(super().snapshot(), problem=PROBLEM)


@pytest.mark.parametrize("size", [(60, 20), (40, 12)])
async def test_the_banner_wraps_to_say_the_whole_problem(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    """The banner says a failure the operator must act on (a full disk, a dead owner and the
    command that resumes it): on a narrow screen it wraps rather than lose its end."""
    options = UiOptions(clock=frozen_clock, cursor_blink=False, poll_s=3600.0)
    app = FlightdeckApp(TroubledView(tmp_path), options)
    async with app.run_test(size=size) as pilot:
        banner = app.main.query_one("#banner")
        await until(pilot, lambda: banner.display and banner.size.height > 1, "the banner")
        await pilot.pause()
        said = "".join("".join(lines(banner)).split())  # a long path is folded mid-word
        assert said == "".join(f"⚠ {PROBLEM}".split()), lines(banner)


@pytest.mark.parametrize("size", [(60, 20), (40, 12)])
async def test_the_digest_s_lines_are_cut_not_wrapped(
    tmp_path: Path, size: tuple[int, int]
) -> None:
    """Each line of the digest, too long for a narrow screen, wrapped onto the next, pushing
    the rest down (in a panel of at most 30% of the screen, its spend and failures out of
    sight): each is one line, cut with an ellipsis."""
    options = UiOptions(clock=frozen_clock, cursor_blink=False, poll_s=3600.0)
    app = FlightdeckApp(StaticView(tmp_path), options)
    async with app.run_test(size=size) as pilot:
        screen = app.main
        await until(pilot, lambda: screen.snapshot is not None, "the first snapshot")
        screen.digest.show(DIGEST)
        await until(pilot, lambda: screen.digest.size.height > 1, "the digest")
        await pilot.pause()
        title, counts, *_ = lines(screen.digest)
        assert title.startswith("Since you last looked"), title
        if size[0] < 60:  # the title fits 60 columns
            assert title.endswith("…"), title
        assert counts.startswith("  18 finished · 3 failed") and counts.endswith("…"), counts


async def test_the_banner_and_the_digest_keep_their_whole_text_where_it_fits(
    tmp_path: Path,
) -> None:
    options = UiOptions(clock=frozen_clock, cursor_blink=False, poll_s=3600.0)
    app = FlightdeckApp(TroubledView(tmp_path), options)
    async with app.run_test(size=(200, 40)) as pilot:
        screen = app.main
        banner = screen.query_one("#banner")
        await until(pilot, lambda: banner.display and banner.size.height > 0, "the banner")
        screen.digest.show(DIGEST)
        await until(pilot, lambda: screen.digest.size.height > 0, "the digest")
        await pilot.pause()
        assert lines(banner) == [f"⚠ {PROBLEM}"]
        shown = lines(screen.digest)
        assert shown[0] == "Since you last looked (1m40s ago)   d or esc: dismiss", shown
        assert "…" not in "".join(shown), shown
