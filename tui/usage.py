"""What every `flightdeck` command shares: a bad argument's error, and the state folder's
database a command names (one clear error if there is none)."""

from __future__ import annotations

from pathlib import Path

from flightdeck.engine.errors import InputError


class UsageError(InputError):
    """A bad command-line argument."""


def state_db(state_dir: Path | None) -> Path:
    """The database of the state folder a reading command (report, ls, attach, logs) names."""
    from flightdeck.engine.attached.store import state_folder

    db = state_folder(state_dir) / "flightdeck.db"
    if not db.exists():
        raise UsageError(db, None, None, "no flightdeck state here (run a batch first)")
    if not db.is_file():
        raise UsageError(db, None, None, "not a flightdeck database (not a file)")
    return db


def unknown_batch(batch_id: str, db: Path) -> UsageError:
    """The error of an id that names no batch of `db`'s state folder, said as every command
    that takes a batch id says it."""
    from flightdeck.engine.attached.store import no_batch

    return UsageError(None, None, "batch_id", no_batch(batch_id, db.parent))
