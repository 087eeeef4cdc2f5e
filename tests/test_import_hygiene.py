"""The engine is headless: importing all of it pulls in no UI library."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import flightdeck.engine
import pytest


@pytest.mark.slow
def test_engine_imports_no_textual_rich_or_tui() -> None:
    modules = [
        m.name for m in pkgutil.walk_packages(flightdeck.engine.__path__, "flightdeck.engine.")
    ]
    assert {"flightdeck.engine.control.coordinator", "flightdeck.engine.providers.sim"} <= set(
        modules
    )
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


def test_the_transcript_writer_process_starts_on_a_few_stdlib_modules() -> None:
    # It starts with every batch, beside the engine: what it imports is start-up time. `typing`
    # alone was a fifth of it.
    from flightdeck.engine.records import writerproc

    done = subprocess.run(
        [sys.executable, "-X", "importtime", *writerproc.command(8)[1:]],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=True,
    )
    imported = {line.rsplit("|", 1)[1].strip() for line in done.stderr.splitlines() if "|" in line}
    assert "flightdeck.engine.records.lines" in imported  # the listing is what it seems
    mine = sorted(m for m in imported if m.startswith("flightdeck"))
    assert mine == [
        "flightdeck",
        "flightdeck.engine",
        "flightdeck.engine.private",
        "flightdeck.engine.records",
        "flightdeck.engine.records.events",
        "flightdeck.engine.records.lines",
        "flightdeck.engine.sanitize",
    ]
    assert not imported & {"typing", "json", "logging", "threading", "subprocess"}
