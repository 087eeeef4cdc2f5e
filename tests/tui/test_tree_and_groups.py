"""The tree order (delegates under their parent, subtree cost) and a group tagged at once."""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.inputs.settings import Settings, default_sim_route
from flightdeck.engine.inputs.tasks import Batch, Task
from flightdeck.engine.model import ChildRow, ChildStatus
from flightdeck.tui.fmt import Cell, fmt_cost
from flightdeck.tui.screens import targets
from flightdeck.tui.widgets.rows import GroupBy, SortOrder, subtree_costs, tree_cells, tree_key
from tui_fakes import child
from tui_support import FAST, SIZE, app_for, until

pytestmark = pytest.mark.anyio


def test_the_tree_key_puts_each_delegate_under_its_parent(tmp_path: Path) -> None:
    def row(seq: int, parent: str | None = None, cost: str | None = "0.01") -> ChildRow:
        base = child(seq, "g", ChildStatus.COMPLETED, folder=tmp_path, cost=cost)
        depth = 0 if parent is None else parent.count(".") + 1
        name = base.id if parent is None else f"{parent}.{seq}"
        return dataclasses.replace(base, id=name, parent=parent, depth=depth)

    # made in this order: two parents, then the first's delegates, then one of theirs
    rows = [row(1), row(2), row(3, "review-01"), row(4, "review-01"), row(5, "review-01.3")]
    by_id = {r.id: r for r in rows}
    order = sorted(by_id, key=lambda i: tree_key(by_id[i], by_id))
    assert order == ["review-01", "review-01.3", "review-01.3.5", "review-01.4", "review-02"]
    costs = subtree_costs(by_id)
    assert costs == {
        "review-01": (Decimal("0.04"), False, False),
        "review-01.3": (Decimal("0.02"), False, False),
    }
    by_id["review-01.4"] = row(4, "review-01", cost=None)  # the rest is known: $0.03+?
    assert subtree_costs(by_id)["review-01"] == (Decimal("0.03"), True, False)
    blank: tuple[Cell, ...] = ((" ✓", ""), ("review-01.3.5", ""), *[("", "")] * 9)
    cells = tree_cells(blank, by_id["review-01.3.5"], None)
    assert cells[1][0] == "  └ review-01.3.5" and cells[8] == ("", "")
    cells = tree_cells(cells, by_id["review-01"], (Decimal("0.04"), False, False))
    assert cells[8] == ("Σ" + fmt_cost(Decimal("0.04")), "bold")


async def test_the_tree_order_shows_delegates_indented_with_the_subtree_cost(
    tmp_path: Path,
) -> None:
    route = dataclasses.replace(
        default_sim_route(**{**FAST, "tool_turns": 0, "delegate_rate": 1.0, "delegates": 2}),
        delegate=True,
    )
    settings = Settings(routes=MappingProxyType({"sim": route}))
    settings = dataclasses.replace(
        settings, budget=dataclasses.replace(settings.budget, max_depth=1)
    )
    tasks = (Task(id="a", goal="split me", seq=0), Task(id="b", goal="split me too", seq=1))
    engine = Engine(Batch("tree", tasks), settings, state_dir=tmp_path, max_concurrent=4)
    app = app_for(engine)
    try:
        async with app.run_test(size=SIZE) as pilot:
            engine.start()
            table = app.main.table
            await until(pilot, lambda: engine.wait(0), "the batch's end")
            app.main.poll()
            table.set_order(SortOrder.TREE)
            await pilot.pause()
            assert list(table.shown) == ["a", "a.1", "a.2", "b", "b.1", "b.2"]
            assert table.displayed("a.1", "id") == "└ a.1"
            snap = engine.snapshot()
            total = sum(
                (c.cost_usd for c in snap.children if c.id.startswith("a") and c.cost_usd),
                Decimal(0),
            )
            assert table.displayed("a", "cost").startswith("Σ$")
            assert table.displayed("a", "cost") == "Σ" + fmt_cost(total)
            table.set_order(SortOrder.BATCH)  # other orders show plain ids and own costs
            await pilot.pause()
            assert table.displayed("a.1", "id") == "a.1"
            assert not table.displayed("a", "cost").startswith("Σ")
    finally:
        engine.close()


async def test_g_tags_the_selected_childs_whole_group(tmp_path: Path) -> None:
    tasks = (
        Task(id="r1", goal="x", seq=0, group="security"),
        Task(id="solo", goal="x", seq=1),
        Task(id="r2", goal="x", seq=2, group="security"),
        Task(id="d1", goal="x", seq=3, group="docs"),
    )
    route = default_sim_route(**FAST)
    engine = Engine(
        Batch("groups", tasks),
        Settings(routes=MappingProxyType({"sim": route})),
        state_dir=tmp_path,
        max_concurrent=4,
    )
    app = app_for(engine)
    try:
        async with app.run_test(size=SIZE) as pilot:
            engine.start()
            table = app.main.table
            await until(pilot, lambda: len(table.shown) == 4, "rows")
            table.set_order(SortOrder.BATCH)
            table.set_grouping(GroupBy.GROUP)
            await pilot.pause()
            assert list(table.shown) == ["d1", "r1", "r2", "solo"]  # by group, ungrouped last
            table.select("r2")
            await pilot.press("g")
            assert table.tagged == {"r1", "r2"}
            assert targets.targets(app.main.table) == [
                "r1",
                "r2",
            ]  # steer and stop act on the group
            await pilot.press("g")
            assert table.tagged == set()
    finally:
        engine.close()
