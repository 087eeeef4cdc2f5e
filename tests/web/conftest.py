"""The browser suite (`make test-web`, not in `make test`): Debian's Chromium, driven by
Playwright. Without either, every test here skips, saying which is missing and how to get it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    reason = None
    if importlib.util.find_spec("playwright") is None:
        reason = "no Playwright: make test-web installs it (pip install -e '.[browser]')"
    elif not CHROMIUM.exists():
        reason = f"no {CHROMIUM}: make test-web installs it as root (apt-get install chromium)"
    if reason is not None:
        for item in items:
            item.add_marker(pytest.mark.skip(reason=reason))
