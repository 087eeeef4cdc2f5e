"""The real-CLI suite's figures, printed at the end of `make test-agents`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agentserver import AgentServer

FIGURES: list[dict[str, Any]] = []


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """One line per figure: the CLI and its version, what was measured."""
    if not FIGURES:
        return
    terminalreporter.section("agent CLIs: figures")
    for figure in FIGURES:
        terminalreporter.write_line("  ".join(f"{k}={v}" for k, v in figure.items()))


@pytest.fixture
def figures() -> list[dict[str, Any]]:
    """Where a test leaves what it measured."""
    return FIGURES


@pytest.fixture(scope="module")
def server() -> Iterator[AgentServer]:
    """The loopback server the CLIs of a test module talk to."""
    with AgentServer() as s:
        yield s
