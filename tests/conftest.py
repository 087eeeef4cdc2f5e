"""Fixtures shared by every test module: a clean environment, the providers' loopback server."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import textual.app
import textual.pilot
from flightdeck.engine.agents import tree

from helpers import Hold
from loopback import KEY_ENV, Loopback

# The real agent CLIs (tests/agents/) run only from `make test-agents`, which installs them and
# names their folder: `make test` needs no npm and no network.
collect_ignore = [] if os.environ.get("FLIGHTDECK_AGENTS_BIN") else ["agents"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests marked slow first: xdist hands tests out in this order, so a 30 s test
    collected last no longer runs alone on one worker after the others have finished."""
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


SETTLE_S = 0.02  # the shortest sleep Textual's own wait takes


async def _settled(min_sleep: float = SETTLE_S, max_sleep: float = 1.0) -> None:
    """Textual's pilot waits, after each key, until this *process* looks idle (its CPU time
    still for 20 ms), for up to 1 s. With an engine running in the process it seldom is, so a
    typed word took seconds. What it waits on an idle process instead: one 20 ms sleep. The
    tests wait on the conditions they check (tui_support.until), not on this."""
    await asyncio.sleep(max(min_sleep, SETTLE_S))


textual.app.wait_for_idle = _settled  # type: ignore[attr-defined]
textual.pilot.wait_for_idle = _settled  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def no_flightdeck_home(monkeypatch: pytest.MonkeyPatch) -> None:
    """A developer's FLIGHTDECK_HOME would move every state folder the tests (and the `flightdeck`
    subprocesses, which inherit the environment) read and write: into their real one."""
    monkeypatch.delenv("FLIGHTDECK_HOME", raising=False)


@pytest.fixture(autouse=True)
def no_subreaper() -> Iterator[None]:
    """An engine makes this process the subreaper of its command children until its batch
    closes (agents/tree.py). A test that leaves one open would keep it so, and a later test's
    orphans would come here, where nothing reaps them, instead of to init: a Ray cluster whose
    owner was killed lived on (its workers saw their raylet's zombie alive)."""
    yield
    reaper = tree._subreaper
    while reaper._made:  # a batch left open: released as its close would
        reaper.closed()


@pytest.fixture
def server() -> Iterator[Loopback]:
    """A loopback server speaking the OpenAI and Anthropic wire formats, for one test."""
    with Loopback() as s:
        yield s


@pytest.fixture
def hold(tmp_path: Path) -> Hold:
    """A hold folder for sim children (helpers.Hold): nothing released yet."""
    return Hold(tmp_path / "hold")


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """The session's Ray cluster (tests/raycluster.py), started when a Ray test first needs it:
    Ray is imported only then."""
    from raycluster import shared_cluster

    with shared_cluster() as nodes:
        yield nodes


@pytest.fixture
def ray_nodes(ray_cluster: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The session's cluster with both its nodes, for one test; the routes' key in this
    process's environment too (the owner checks it), for this test only."""
    from raycluster import KEY, two_nodes

    monkeypatch.setenv(KEY_ENV, KEY)
    return two_nodes(ray_cluster)
