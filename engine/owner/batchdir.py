"""The batch's own folder under the state folder: its id, the folder, and its manifest. A folder
that cannot be used (a file in the way, read-only, a full disk) is one ConfigError naming the
state folder."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from flightdeck.engine.errors import ConfigError, InputError
from flightdeck.engine.inputs.settings import Route, Settings, state_dir_error
from flightdeck.engine.inputs.tasks import Batch
from flightdeck.engine.model import BatchStatus
from flightdeck.engine.private import private_dir
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.transcripts import MANIFEST, write_manifest


def new_batch_id(clock: Callable[[], float] = time.time) -> str:
    """Sortable and readable: 20261129-081500-a3f2."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(clock()))
    return f"{stamp}-{secrets.token_hex(2)}"


def check_not_taken(batch_id: str, state_dir: Path) -> None:
    """A new batch's given id is none this state folder has recorded: its rows would be
    written over (`Engine.resume` runs an abandoned batch on)."""
    db = state_dir / "flightdeck.db"
    if db.is_file():
        with StoreReader(db) as reader:
            taken = reader.batch(batch_id) is not None
        if taken:
            raise InputError(
                db, None, "batch_id", f"batch {batch_id} is already recorded here: resume it"
            )


def folder(path: Path, state_dir: Path, settings: Settings, *, private: bool = True) -> Path:
    """`path`, made if it is not there yet; `private` (in the state folder): the user's alone,
    else (a workspace the user named) made as the user's umask says."""
    try:
        if private:
            private_dir(path)
        else:
            path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise unusable(exc, state_dir, settings) from exc
    return path


def unusable(exc: OSError, state_dir: Path, settings: Settings) -> ConfigError:
    """The state folder cannot be used, and why (at its line of the config, if from there)."""
    reason = exc.strerror or str(exc)
    if isinstance(exc, FileExistsError):  # mkdir(exist_ok=True) met something else there
        reason = f"{exc.filename} exists and is not a folder"
    return state_dir_error(state_dir, settings, reason)


@dataclass
class Claimed:
    """What the start of a new batch has made of its folder so far. A start that fails before
    the batch's row is recorded (Ray refused the owner, a node shares no folder) undoes it
    (`forget`): a batch that never started leaves nothing behind, as one refused before its
    folder was made."""

    folder: Path
    made: bool  # the folder itself: the one `run` claimed for an owner it starts is run's
    workspace: Path | None = None  # the batch's own, in the folder, once made
    manifest: bool = False  # written (or being written)

    def forget(self) -> None:
        """Remove what this start made. Folders go only if empty (no child ran, and nothing
        else is taken with them)."""
        try:
            if self.manifest:
                (self.folder / MANIFEST).unlink(missing_ok=True)
            if self.workspace is not None:
                self.workspace.rmdir()
            if self.made:
                self.folder.rmdir()
        except OSError:  # not empty, say: kept, and so the folder it is in
            pass


def claim(
    batch_dir: Path,
    *,
    id_given: bool,
    clock: Callable[[], float],
    state_dir: Path,
    settings: Settings,
) -> Claimed:
    """Make this batch's folder; a generated id already taken (two runs started in the same
    second drew the same one) is drawn again, so two batches never share rows or files.
    A given id's folder may be there already (the one `run` claimed for the owner it starts)."""
    folder(batch_dir.parent, state_dir, settings)
    while True:
        try:
            there = id_given and batch_dir.is_dir()
            private_dir(batch_dir, exist_ok=id_given)
            return Claimed(batch_dir, made=not there)
        except FileExistsError:
            batch_dir = batch_dir.parent / new_batch_id(clock)
        except OSError as exc:
            raise unusable(exc, state_dir, settings) from exc


def manifest(
    batch_dir: Path,
    batch: Batch,
    status: BatchStatus,
    *,
    workspace: Path,
    pool_size: int,
    routes: Mapping[str, Route],
    children_json: str,
) -> None:
    """Write the batch's manifest (OSError if it cannot be)."""
    write_manifest(
        batch_dir,
        {
            "batch_id": batch_dir.name,
            "name": batch.name,
            "status": status.value,
            "source": str(batch.source) if batch.source else None,
            "workspace": str(workspace),
            "pool_size": pool_size,
            "routes": {n: {"provider": r.provider, "model": r.model} for n, r in routes.items()},
        },
        {"children": children_json},
    )
