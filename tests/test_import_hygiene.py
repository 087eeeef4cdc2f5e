"""The engine is headless: importing all of it pulls in no UI library (STYLE.md 1)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import flightdeck.engine


def test_engine_imports_no_textual_rich_or_tui() -> None:
    modules = [
        m.name for m in pkgutil.walk_packages(flightdeck.engine.__path__, "flightdeck.engine.")
    ]
    assert {"flightdeck.engine.coordinator", "flightdeck.engine.providers.sim"} <= set(modules)
    code = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'rich')"
        " or m.startswith('flightdeck.tui'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "", f"engine imported UI modules: {out}"
