"""The state folder read from outside its owners: `ls`, `report`, `logs` and `attach`'s list."""

from __future__ import annotations

import os
from pathlib import Path

from flightdeck.engine.inputs.settings import Settings, load_settings, state_dir_from
from flightdeck.engine.records.processes import still_running
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.report import build_report, render_json, render_markdown
from flightdeck.engine.records.rows import BatchInfo
from flightdeck.engine.records.schema import StoreNotFoundError

__all__ = [
    "BatchInfo",
    "StoreNotFoundError",
    "StoreReader",
    "build_report",
    "render_json",
    "render_markdown",
    "state_folder",
    "still_running",
]


def state_folder(state_dir: Path | None) -> Path:
    """The state folder a client names: `state_dir` (--state-dir), else FLIGHTDECK_HOME, else
    ./flightdeck.toml's `[engine] state_dir`, else ./.flightdeck."""
    # flightdeck.toml only matters when it names the state folder: a broken one in the current
    # folder must not stop a report on a state folder given by --state-dir or FLIGHTDECK_HOME.
    given = state_dir is not None or bool(os.environ.get("FLIGHTDECK_HOME"))
    return state_dir_from(state_dir, Settings() if given else load_settings(None))
