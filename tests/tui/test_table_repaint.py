"""The children table repaints every line whose child changed places, not only the lines whose
child's figures changed: under a filter, a child leaving it moves the rows below it up."""

from __future__ import annotations

from pathlib import Path

import pytest
from flightdeck.engine.model import ChildStatus
from flightdeck.engine.triage.query import parse_filter
from flightdeck.tui.widgets.children import ChildrenTable
from flightdeck.tui.widgets.rows import SortOrder
from textual.app import App, ComposeResult
from tui_fakes import NOW, child

pytestmark = pytest.mark.anyio


class _Table(App[None]):
    def compose(self) -> ComposeResult:
        yield ChildrenTable()


def _drawn(app: App[None]) -> list[str]:
    """The screen as it is composed now (each widget's cached lines, as a terminal gets them)."""
    return [strip.text for strip in app.screen._compositor.render_strips()]


async def test_a_child_leaving_the_filter_moves_the_rows_below_it_on_screen(
    tmp_path: Path,
) -> None:
    """`status:running` with a full pool: one child ends and a queued one starts in the same
    poll, so as many rows are kept as before and they stay sorted. Every row below the one
    that left moved up a line, though none of their figures changed; each must be drawn at
    its new place, not left on screen twice (seen in a 200-child sweep: rows doubled)."""

    def rows(ended: bool) -> tuple:
        return tuple(
            child(
                seq,
                f"goal {seq}",
                ChildStatus.COMPLETED
                if ended and seq == 2
                else ChildStatus.RUNNING
                if seq <= 5 or ended
                else ChildStatus.QUEUED,
                folder=tmp_path,
                started=1.0,
                last=2.0,
            )
            for seq in range(1, 7)
        )

    app = _Table()
    async with app.run_test(size=(120, 12)) as pilot:
        table = app.query_one(ChildrenTable)
        table.model.set_order(SortOrder.BATCH)
        table.row_filter = parse_filter("status:running")
        table.apply(rows(False), NOW, None)
        table.rebuild()
        await pilot.pause()
        assert table.shown == [f"review-0{n}" for n in (1, 2, 3, 4, 5)]
        table.apply(rows(True), NOW, None)
        await pilot.pause()
        assert table.shown == [f"review-0{n}" for n in (1, 3, 4, 5, 6)]
        drawn = [line.split()[1] for line in _drawn(app)[1:] if "review-" in line]
        assert drawn == list(table.shown)
