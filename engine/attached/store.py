"""The state folder read from outside its owners: `ls`, `report`, `logs` and `attach`'s list;
and a batch's folder for what a client keeps there (the TUI's last-looked mark)."""

from __future__ import annotations

import dataclasses
import os
import sqlite3
from pathlib import Path

from flightdeck.engine.errors import FlightdeckError
from flightdeck.engine.inputs.settings import (
    Settings,
    load_settings,
    state_dir_error,
    state_dir_from,
)
from flightdeck.engine.model import Snapshot
from flightdeck.engine.private import private_dir
from flightdeck.engine.records.faults import disk_full
from flightdeck.engine.records.live import unreported
from flightdeck.engine.records.markdown import render_markdown
from flightdeck.engine.records.meter import totals_of
from flightdeck.engine.records.processes import still_running
from flightdeck.engine.records.reader import StoreReader, no_batch
from flightdeck.engine.records.report import build_report, render_json
from flightdeck.engine.records.rows import BatchInfo
from flightdeck.engine.records.schema import StoreNotFoundError

__all__ = [
    "BatchInfo",
    "StoreNotFoundError",
    "StoreReader",
    "as_stored",
    "batch_folder",
    "build_report",
    "disk_full",
    "no_batch",
    "pending_turns",
    "render_json",
    "render_markdown",
    "state_folder",
    "still_running",
]


def state_folder(state_dir: Path | None, config: Path | None = None) -> Path:
    """The state folder a client names: `state_dir` (--state-dir), else FLIGHTDECK_HOME, else
    the `[engine] state_dir` of `config` (--config) or ./flightdeck.toml, else ./.flightdeck;
    ConfigError if it is there but no folder (at the config's line, if the config named it)."""
    # flightdeck.toml only matters when it names the state folder: a broken one in the current
    # folder must not stop a report on a state folder given by --state-dir or FLIGHTDECK_HOME.
    given = state_dir is not None or bool(os.environ.get("FLIGHTDECK_HOME"))
    settings = Settings() if given else load_settings(config)
    folder = state_dir_from(state_dir, settings)
    if folder.exists() and not folder.is_dir():  # said as `run` says it, not "no state here"
        where = folder.absolute()
        raise state_dir_error(folder, settings, f"{where} exists and is not a folder")
    return folder


def batch_folder(state_dir: Path, batch_id: str) -> Path:
    """`batch_id`'s folder in the state folder, made the user's alone (0700) if it is not there;
    OSError as mkdir raises it."""
    folder = state_dir / "batches" / batch_id
    private_dir(folder)
    return folder


def as_stored(db: Path, snap: Snapshot) -> Snapshot:
    """`snap` with the children and totals the store has: after a store failure (a full disk)
    some that ended were never recorded, and a summary must not count them. `snap` itself if
    the store cannot even be read (the run's error line says what was lost)."""
    try:
        with StoreReader(db) as reader:
            rows = reader.children(snap.batch_id, results=False)
    except (OSError, sqlite3.Error, FlightdeckError):
        return snap
    return dataclasses.replace(snap, children=tuple(rows), totals=totals_of(rows))


def pending_turns(db: Path, batch_id: str) -> int:
    """The agent CLI turns under way in a running batch that have reported no usage yet, as its
    owner last published them (the stored rows do not keep it)."""
    with StoreReader(db) as reader:
        return len(unreported(reader.live(batch_id)))
