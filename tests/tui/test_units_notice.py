"""A completion unit's result reaches the operator as one notice, once its last member ends."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.inputs.settings import Settings, default_sim_route
from flightdeck.engine.inputs.tasks import Batch, Task
from tui_support import FAST, SIZE, app_for, until

pytestmark = pytest.mark.anyio


def told(screen: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str]]:
    """Every notice the screen shows from now on, with its severity (shown as before)."""
    notices: list[tuple[str, str]] = []
    notify = screen.notify
    monkeypatch.setattr(
        screen,
        "notify",
        lambda text, **kw: notices.append((text, kw["severity"])) or notify(text, **kw),
    )
    return notices


async def test_a_unit_that_ends_is_one_notice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = (
        Task(id="ok", goal="fine", seq=1, group="docs"),
        Task(id="bad", goal="doomed", seq=2, max_turns=1, group="docs"),  # max_turns used up
        Task(id="solo", goal="alone", seq=3),
    )
    route = default_sim_route(**{**FAST, "tool_turns": 1})
    settings = Settings(routes=MappingProxyType({"sim": route}))
    engine = Engine(Batch("units", tasks), settings, state_dir=tmp_path, max_concurrent=3)
    app = app_for(engine)
    try:
        async with app.run_test(size=SIZE) as pilot:
            notices = told(app.main, monkeypatch)
            engine.start()
            await until(pilot, lambda: any("batch finished" in t for t, _ in notices), "the end")
    finally:
        engine.close()
    units = [(t, s) for t, s in notices if t.startswith("▣ group")]
    assert len(units) == 1
    text, severity = units[0]
    assert text.startswith("▣ group docs  partial: 1/2 completed")
    assert text.endswith("✓ok ✗bad") and severity == "warning"


async def test_a_unit_stopped_whole_is_told_stopped_not_as_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by running the demo: Ctrl+C early told `▣ group review failed: 0/18 completed`, a
    # warning, for a batch that read stopped. A stop is nobody's failure.
    from helpers import Hold

    hold = Hold(tmp_path / "hold")
    tasks = tuple(Task(id=i, goal="held", seq=n, group="docs") for n, i in enumerate("ab"))
    route = default_sim_route(**{**FAST, **hold.options()})
    settings = Settings(routes=MappingProxyType({"sim": route}))
    engine = Engine(Batch("units", tasks), settings, state_dir=tmp_path, max_concurrent=2)
    app = app_for(engine)
    try:
        async with app.run_test(size=SIZE) as pilot:
            notices = told(app.main, monkeypatch)
            engine.start()
            await until(pilot, lambda: {"a@0", "b@0"} <= hold.held(), "both held")
            engine.stop_all()
            await until(pilot, lambda: any("batch finished" in t for t, _ in notices), "the end")
    finally:
        engine.close()
    units = [(t, s) for t, s in notices if t.startswith("▣ group")]
    assert len(units) == 1
    text, severity = units[0]
    assert text.startswith("▣ group docs  stopped: 0/2 completed")
    assert severity == "information"
