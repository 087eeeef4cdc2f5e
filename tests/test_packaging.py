"""The install's package list matches the source tree (the wheel itself: scripts/wheel_check.sh)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_every_source_package_is_listed_for_the_install() -> None:
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping = tool["package-dir"]
    found = set()
    for name, folder in mapping.items():
        for init in (ROOT / folder).rglob("__init__.py"):
            parts = init.parent.relative_to(ROOT / folder).parts
            found.add(".".join((name, *parts)))
    assert found == set(tool["packages"])
    assert not (ROOT / "flightdeck").exists()  # the namespace has no folder of its own


def test_every_stylesheet_is_package_data() -> None:
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    patterns = tool["package-data"]["flightdeck.tui"]
    sheets = {p.relative_to(ROOT / "tui") for p in (ROOT / "tui").rglob("*.tcss")}
    assert sheets
    assert all(any(sheet.match(pattern) for pattern in patterns) for sheet in sheets)
