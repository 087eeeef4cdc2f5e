"""Fixtures shared by the provider test modules."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from loopback import Loopback


@pytest.fixture
def server() -> Iterator[Loopback]:
    """A loopback server speaking the OpenAI and Anthropic wire formats, for one test."""
    with Loopback() as s:
        yield s
