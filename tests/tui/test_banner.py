"""The banner: shown while the store cannot commit, gone once it can; hidden otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.model import BatchStatus, ChildFinished, EngineEvent
from flightdeck.tui.widgets.banner import Banner
from tui_support import SIZE, app_for, until

from helpers import batch, settings, sim_route
from test_engine_faults import FaultyStores

pytestmark = pytest.mark.anyio


async def test_the_banner_says_the_store_cannot_commit_and_goes_when_it_can(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stores = FaultyStores(monkeypatch)
    s = settings(sim_route(time_scale=0.05, tool_turns=0), pool=2, store_retry_s=60)
    engine = Engine(batch(8), s, state_dir=tmp_path / "state")

    def fill_disk(event: EngineEvent) -> None:
        if isinstance(event, ChildFinished) and not stores.conn.refused:
            stores.conn.failing.set()

    engine.subscribe(fill_disk)
    app = app_for(engine)
    try:
        async with app.run_test(size=SIZE) as pilot:
            banner = app.main.query_one("#banner", Banner)
            assert not banner.display  # no room taken while all is well
            engine.start()
            await until(pilot, lambda: banner.problem is not None, "the banner")
            assert banner.display
            text = str(banner.render())
            assert "cannot write to the store (database or disk is full)" in text
            assert "no new child starts" in text
            stores.conn.failing.clear()  # room again
            await until(pilot, lambda: banner.problem is None, "the banner gone")
            assert not banner.display
            await until(pilot, lambda: engine.status is BatchStatus.COMPLETED, "the end")
    finally:
        engine.close()
