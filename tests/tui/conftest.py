"""Fixtures for the TUI tests: real engines on the sim provider, run under anyio."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.inputs.settings import Settings, default_sim_route
from flightdeck.engine.inputs.tasks import Batch, Task
from tui_support import FAST, EngineFactory, make_tasks


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Textual runs on asyncio


@pytest.fixture
def engine_factory(tmp_path: Path) -> Iterator[EngineFactory]:
    """Build and start engines on `sim`; each is closed (children stopped) after the test."""
    engines: list[Engine] = []

    def make(
        tasks: Sequence[Task] | Sequence[str],
        *,
        pool: int = 4,
        sim: dict[str, Any] | None = None,
    ) -> Engine:
        if tasks and isinstance(tasks[0], str):
            tasks = make_tasks(tasks)  # type: ignore[arg-type]
        route = default_sim_route(**(sim or FAST))
        settings = Settings(routes=MappingProxyType({"sim": route}))
        batch = Batch("tui-test", tuple(tasks))  # type: ignore[arg-type]
        state = tmp_path / f"state{len(engines)}"
        engine = Engine(batch, settings, state_dir=state, max_concurrent=pool)
        engines.append(engine)
        engine.start()
        return engine

    yield make
    for engine in engines:
        engine.close()
