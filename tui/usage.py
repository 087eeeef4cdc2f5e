"""What every `flightdeck` command shares: a bad argument's error, and the state folder's
database a command names (one clear error if there is none)."""

from __future__ import annotations

import argparse
from collections.abc import Container, Iterable, Sequence
from pathlib import Path

from flightdeck.engine.errors import InputError


class UsageError(InputError):
    """A bad command-line argument."""


BATCH_ID_HELP = "batch id (flightdeck ls lists them)"


def state_dir_arg(text: str) -> Path:
    """`--state-dir`'s type. An empty one (an unset shell variable) is refused: Path("") is the
    current folder, which `run` filled with a database and made private (mode 0700)."""
    if not text.strip():
        raise argparse.ArgumentTypeError("must name a folder, got an empty string")
    return Path(text)


def state_db(state_dir: Path | None, config: Path | None = None) -> Path:
    """The database of the state folder a reading command (report, ls, attach, logs) names;
    `config`: the --config of one that takes it (attach, serve), as `run` reads it."""
    from flightdeck.engine.attached.store import state_folder

    db = state_folder(state_dir, config) / "flightdeck.db"
    if not db.exists():
        raise UsageError(db, None, None, "no flightdeck state here (run a batch first)")
    if not db.is_file():
        raise UsageError(db, None, None, "not a flightdeck database (not a file)")
    return db


def unknown_batch(
    batch_id: str, db: Path, verb: str | None = None, *, more: bool = True
) -> UsageError:
    """The error of an id that names no batch of `db`'s state folder, said as every command
    that takes a batch id says it. `verb`: a command taking BATCH_ID CHILD..., whose batch id
    left out makes its first child id the batch's: the command meant is said, when that id
    names a child of one batch (with `…` for the rest, if it takes `more`)."""
    from flightdeck.engine.attached.hints import command_line
    from flightdeck.engine.attached.store import StoreReader, no_batch
    from flightdeck.engine.sanitize import one_line

    instead = None
    if verb is not None:
        with StoreReader(db) as reader:
            found = reader.batches_of_child(batch_id)
        if len(found) == 1:
            meant = command_line(db.parent, verb, found[0], batch_id, *("…",) * more)
            instead = f"(a child of batch {one_line(found[0], 80)}: did you mean `{meant}`?)"
    return UsageError(None, None, "batch_id", no_batch(batch_id, db.parent, instead))


def no_child_id(args: argparse.Namespace) -> UsageError:
    """The error of `logs` or `diff` given one id, as argparse says a missing argument; when
    that id names no batch, said as `unknown_batch` says it, with the command meant when it
    names a child of one batch (the batch id left out)."""
    from flightdeck.engine.attached.store import StoreReader

    db = state_db(args.state_dir)
    with StoreReader(db) as reader:
        is_batch = reader.batch(args.batch_id) is not None
    if not is_batch:
        return unknown_batch(args.batch_id, db, args.command, more=False)
    missing = (
        f"the following arguments are required: child_id (see `flightdeck {args.command} --help`)"
    )
    return UsageError(None, None, None, missing)


def no_children(args: argparse.Namespace) -> UsageError:
    """The error of `answer`, `merge` or `discard` given no child once their batch id is known
    (their CHILD is optional to argparse, so that a batch id left out, its first child's id
    taken for it, is said as `unknown_batch` says it, with the command meant)."""
    missing = (
        f"the following arguments are required: CHILD (see `flightdeck {args.command} --help`)"
    )
    return UsageError(None, None, None, missing)


def unknown_children(unknown: Sequence[str], batch_id: str) -> UsageError:
    """The error of ids that name no child of the batch, said as every command that takes
    child ids says it (the owner's check's words: engine/errors.py's `no_child`)."""
    from flightdeck.engine.errors import no_child

    return UsageError(None, None, None, no_child(unknown, batch_id).message)


def known_children(db: Path, batch_id: str, ids: Iterable[str]) -> None:
    """A usage error if one of `ids` names no child of the batch in `db`."""
    from flightdeck.engine.attached.store import StoreReader

    with StoreReader(db) as reader:
        check_children(ids, reader.child_ids(batch_id), batch_id)


def check_children(ids: Iterable[str], known: Container[str], batch_id: str) -> None:
    """A usage error, in the owner's words (engine/errors.py's `check_known`), if one of `ids`
    is not in `known`."""
    from flightdeck.engine.errors import CommandError, check_known

    try:
        check_known(ids, known, batch_id)
    except CommandError as exc:
        raise UsageError(None, None, None, exc.message) from None
