"""The screen on small terminals (under the 80 columns it is laid out for, and 80x24 itself):
each one-line part stays one line, cut with an ellipsis rather than wrapped over the next."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from flightdeck.engine.model import ChildStatus
from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.screens.main import UiOptions
from textual.widget import Widget
from tui_fakes import StaticView, child, demo_rows, frozen_clock
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
