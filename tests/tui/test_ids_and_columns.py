"""Ids that stay distinct when the id column cuts them, and an id column as wide as the ids
need when the screen has the room (not a blank "doing" column beside cut ids)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from flightdeck.engine.model import ChildStatus
from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.screens.main import UiOptions
from flightdeck.tui.widgets.rows import SortOrder
from tui_fakes import StaticView, child, frozen_clock
from tui_support import until

pytestmark = pytest.mark.anyio

PARENT = "summarize-the-readme-file"


def delegates(folder: Path) -> tuple:  # type: ignore[type-arg]
    parent = child(1, "summarize the readme", ChildStatus.RUNNING, folder=folder, tool="delegate")
    rows = [dataclasses.replace(parent, id=PARENT)]
    for n in range(1, 4):
        row = child(1 + n, f"part {n}", ChildStatus.RUNNING, folder=folder, text="streaming")
        rows.append(dataclasses.replace(row, id=f"{PARENT}.{n}", parent=PARENT, depth=1))
    return tuple(rows)


def test_a_cut_id_keeps_its_distinguishing_tail() -> None:
    from flightdeck.tui.widgets.columns import fit_name

    cut = [fit_name(f"{PARENT}.{n}", 16) for n in (1, 2, 12)]
    assert len(set(cut)) == 3
    assert all(c.endswith(f"file.{n}") and "…" in c for c, n in zip(cut, (1, 2, 12), strict=True))
    assert fit_name(f"  └ {PARENT}.2", 16).startswith("  └ ")  # the tree's indent kept
    assert fit_name("c1", 8) == "c1      "


async def rendered(view: StaticView, width: int, order: SortOrder) -> list[str]:
    """The table's rows as the screen draws them, at `width` columns in `order`."""
    app = FlightdeckApp(view, UiOptions(clock=frozen_clock, cursor_blink=False))
    async with app.run_test(size=(width, 24)) as pilot:
        table = app.main.table
        await until(pilot, lambda: len(table.shown) == 4, "the rows")
        table.set_order(order)
        await pilot.pause()
        return [table.render_line(y).text for y in range(1, 5)]


@pytest.mark.parametrize("order", [SortOrder.ATTENTION, SortOrder.TREE])
async def test_delegates_of_one_parent_read_apart_in_the_table(
    tmp_path: Path, order: SortOrder
) -> None:
    view = StaticView(tmp_path, delegates(tmp_path))
    for width, whole in ((80, False), (160, True)):
        lines = await rendered(view, width, order)
        for n in range(1, 4):
            [line] = [ln for ln in lines if f"file.{n} " in ln]  # its tail on show
            assert (f"{PARENT}.{n} " in line) is whole, line  # whole where there is room
        assert len({ln.split("part")[0] for ln in lines}) == 4  # four rows, four names


async def test_the_last_column_is_whole_once_the_rows_need_a_scrollbar(tmp_path: Path) -> None:
    """A batch whose rows just fit the table, then grows past it (delegates with longer ids, as
    the demo's): the scrollbar that appears takes a cell of the width with no resize, and the
    columns must be fitted again, or the last one loses its last cell (`✓ delivere`)."""
    from flightdeck.engine.model import SteerReceipt, SteerState
    from tui_fakes import T0

    receipt = SteerReceipt(1, "review-01", "wrap up", False, SteerState.DELIVERED, T0 + 90)
    first = child(1, "steered", ChildStatus.RUNNING, folder=tmp_path, steers=(receipt,))
    rows = (first, *(child(n, f"g{n}", ChildStatus.QUEUED, folder=tmp_path) for n in range(2, 9)))
    view = StaticView(tmp_path, rows)
    app = FlightdeckApp(view, UiOptions(clock=frozen_clock, cursor_blink=False))
    async with app.run_test(size=(200, 24)) as pilot:
        table = app.main.table
        await until(pilot, lambda: len(table.shown) == len(rows), "the rows")
        assert not table.show_vertical_scrollbar  # they fit: no scrollbar yet
        parts = tuple(
            dataclasses.replace(
                child(20 + n, "part", ChildStatus.RUNNING, folder=tmp_path),
                id=f"review-01-delegated-part.{n}",
                parent="review-01",
                depth=1,
            )
            for n in range(1, 6)
        )
        view.rows = rows + parts
        await until(pilot, lambda: len(table.shown) == len(view.rows), "the delegates")
        await until(pilot, lambda: table.show_vertical_scrollbar, "the scrollbar")
        await pilot.pause()
        width = table.scrollable_content_region.width
        assert sum(w for _, _, w in table.columns) + len(table.columns) - 1 == width
        row = table.shown.index("review-01") + 1
        assert "✓ delivered" in table.render_line(row).text


async def test_a_child_steered_twice_shows_the_receipt_and_the_count_whole(
    tmp_path: Path,
) -> None:
    """`✓ delivered (2)` is 15 cells: a column of 11 read `✓ delivere…`, the count lost."""
    from flightdeck.engine.model import SteerReceipt, SteerState
    from tui_fakes import T0

    receipts = tuple(
        SteerReceipt(n, "steered", "wrap up", False, SteerState.DELIVERED, T0 + 90 + n)
        for n in (1, 2)
    )
    rows = (child(1, "steered", ChildStatus.RUNNING, folder=tmp_path, steers=receipts),)
    app = FlightdeckApp(StaticView(tmp_path, rows), UiOptions(clock=frozen_clock))
    async with app.run_test(size=(200, 24)) as pilot:
        table = app.main.table
        await until(pilot, lambda: len(table.shown) == 1, "the row")
        await pilot.pause()
        assert "✓ delivered (2)" in table.render_line(1).text
