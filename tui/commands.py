"""The `flightdeck` commands: run (an owner in the background, or headless), report, ls."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from flightdeck.engine.errors import InputError
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.console import console_for
from flightdeck.tui.exitcodes import ExitCode
from flightdeck.tui.fmt import fmt_spent
from flightdeck.tui.headless import run_headless
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # imported when a command needs them: `--help` stays fast
    from flightdeck.engine.records.reader import StoreReader


class UsageError(InputError):
    """A bad command-line argument."""


def cmd_run(args: argparse.Namespace) -> ExitCode:
    """`flightdeck run`: the TUI on a terminal, the headless runner otherwise."""
    from flightdeck.engine.api import Engine, tune_interpreter
    from flightdeck.engine.inputs.settings import load_settings, state_dir_from
    from flightdeck.engine.inputs.tasks import load_batch

    # Everything is validated before anything is written.
    settings = load_settings(args.config)
    batch = load_batch(args.batch_file, max_chars=settings.engine.max_task_chars)
    engine = Engine(
        batch,
        settings,
        state_dir=state_dir_from(args.state_dir, settings),
        max_concurrent=args.max_concurrent,
        batch_id=args.owner_of,  # an owner started by `run` below: its folder is claimed
    )
    if args.detach or (not args.headless and args.owner_of is None and sys.stdout.isatty()):
        # The batch runs in an owner process of its own; this one only checked the input.
        engine.close()
        from flightdeck.tui.attached import run_in_background

        return run_in_background(args, engine.state_dir)
    tune_interpreter()
    return run_headless(engine, console_for())


def state_db(state_dir: Path | None) -> Path:
    """The database of the state folder a reading command (report, ls, attach, logs) names."""
    from flightdeck.engine.inputs.settings import Settings, load_settings, state_dir_from

    # flightdeck.toml only matters when it names the state folder: a broken one in the current
    # folder must not stop a report on a state folder given by --state-dir or FLIGHTDECK_HOME.
    given = state_dir is not None or bool(os.environ.get("FLIGHTDECK_HOME"))
    folder = state_dir_from(state_dir, Settings() if given else load_settings(None))
    db = folder / "flightdeck.db"
    if not db.exists():
        raise UsageError(db, None, None, "no flightdeck state here (run a batch first)")
    if not db.is_file():
        raise UsageError(db, None, None, "not a flightdeck database (not a file)")
    return db


def _reader(state_dir: Path | None) -> StoreReader:
    from flightdeck.engine.records.reader import StoreReader

    return StoreReader(state_db(state_dir))


def cmd_report(args: argparse.Namespace) -> ExitCode:
    """`flightdeck report`: one batch's metrics report, as Markdown or JSON."""
    from flightdeck.engine.records.report import build_report, render_json, render_markdown

    reader = _reader(args.state_dir)
    try:
        report = build_report(reader, args.batch_id)
    except LookupError as exc:
        raise UsageError(None, None, "batch_id", str(exc).strip("'\"")) from None
    finally:
        reader.close()
    text = render_json(report) if args.format == "json" else render_markdown(report)
    try:
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        console_for().on_broken_pipe()
    return ExitCode.OK


def cmd_ls(args: argparse.Namespace) -> ExitCode:
    """`flightdeck ls`: every batch in the state folder."""
    import time

    reader = _reader(args.state_dir)
    try:
        batches = reader.batches()
    finally:
        reader.close()
    table = Table()
    table.add_column("batch", no_wrap=True)
    for col in ("name", "status", "children", "completed", "failed", "stopped", "cost", "created"):
        table.add_column(col)
    for b in batches:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(b.created_ts))
        # Compact: "$0.25+?" when some prices are unknown, "$?" when only those spent.
        cost = fmt_spent(b.cost_usd, b.cost_unknown)[0] + (
            "+?" if b.cost_unknown and b.cost_usd else ""
        )
        table.add_row(
            Text(b.id),
            Text(one_line(b.name, 30)),
            Text(b.status.value),
            str(b.children),
            str(b.completed),
            str(b.failed),
            str(b.stopped),
            cost,
            created,
        )
    console_for().print(table)
    return ExitCode.OK
