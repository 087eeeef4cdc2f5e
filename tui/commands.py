"""The `flightdeck` commands that run or read batches: run (an owner in the background, or
headless), report, ls, resume. The client commands (steer, stop, ...) are in client.py."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from flightdeck.engine.errors import InputError
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.console import console_for
from flightdeck.tui.exitcodes import ExitCode
from flightdeck.tui.fmt import fmt_cost, fmt_spent_compact
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
    if args.executor is not None:  # --executor: where children's work runs, over the config
        engine_settings = dataclasses.replace(
            settings.engine, executor=args.executor, executor_line=None
        )
        settings = dataclasses.replace(settings, engine=engine_settings)
    batch = load_batch(args.batch_file, max_chars=settings.engine.max_task_chars)
    state_dir = state_dir_from(args.state_dir, settings)
    if args.owner_of is not None:
        _check_claimed(state_dir, args.owner_of)
        # The first line of its owner.log (this process's output): which process to look for.
        print(f"owner pid {os.getpid()} of batch {args.owner_of}", flush=True)
    engine = Engine(
        batch,
        settings,
        state_dir=state_dir,
        max_concurrent=args.max_concurrent,
        batch_id=args.owner_of,  # an owner started by `run` below: its folder is claimed
    )
    if args.detach or (not args.headless and args.owner_of is None and sys.stdout.isatty()):
        # The batch runs in an owner process of its own; this one only checked the input.
        engine.close()
        from flightdeck.tui.attached import run_in_background

        return run_in_background(args, engine.state_dir, settings.tui)
    tune_interpreter()
    return run_headless(engine, console_for())


def _check_claimed(state_dir: Path, batch_id: str) -> None:
    """`--owner-of` (how `run` starts a batch's owner) names a folder `run` claimed for it and
    no owner has started in: never another batch's id, whose rows it would overwrite."""
    from flightdeck.tui.spawn import OWNER_LOG

    folder = state_dir / "batches" / batch_id
    if not (folder / OWNER_LOG).is_file() or (folder / "manifest.json").exists():
        raise UsageError(
            None, None, "--owner-of", f"{one_line(batch_id)} is not a batch folder run claimed"
        )


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

    from flightdeck.engine.model import BatchStatus
    from flightdeck.engine.records.processes import still_running

    reader = _reader(args.state_dir)
    try:
        batches = reader.batches()
    finally:
        reader.close()
    table = Table()
    table.add_column("batch", no_wrap=True)
    columns = ["name", "status", "children", "completed", "failed", "stopped", "cost", "created"]
    for col in columns + (["owner pid"] if args.long else []):
        table.add_column(col)
    for b in batches:
        created = time.strftime("%Y-%m-%d %H:%M", time.localtime(b.created_ts))
        status = b.status.value
        if b.status is BatchStatus.ABANDONED and (left := still_running(reader.path, b.id)):
            status += f" ({left} still running)"  # processes that outlived their owner
        cost = fmt_spent_compact(b.cost_usd, b.cost_unknown)
        table.add_row(
            Text(b.id),
            Text(one_line(b.name, 30)),
            Text(status),
            str(b.children),
            str(b.completed),
            str(b.failed),
            str(b.stopped),
            cost,
            created,
            *([str(b.owner_pid)] if args.long else []),
        )
    console_for().print(table)
    return ExitCode.OK


# -- a batch's owner taken over (resume) -------------------------------------------------------


def checked_db(state_dir: Path | None) -> Path:
    """The state folder's database, as `_reader` finds it (one clear error if none)."""
    reader = _reader(state_dir)
    reader.close()
    return reader.path


def cmd_resume(args: argparse.Namespace) -> ExitCode:
    """`flightdeck resume`: become the owner of an abandoned batch and run it to the end."""
    from flightdeck.engine.api import Engine, tune_interpreter
    from flightdeck.engine.records.liveness import OwnerAlive
    from flightdeck.engine.resume import NothingToResume

    db = checked_db(args.state_dir)
    console, err = console_for(), console_for(stderr=True)
    try:
        engine = Engine.resume(db.parent, args.batch_id, rerun=not args.no_rerun)
    except NothingToResume as exc:
        console.print(Text(one_line(str(exc))))
        return ExitCode.OK
    tune_interpreter()
    try:
        code = run_headless(engine, console)
    except OwnerAlive as exc:
        err.print(Text(f"flightdeck: {one_line(str(exc))}; nothing changed"))
        return ExitCode.USAGE
    except NothingToResume as exc:  # it finished between the look and the claim
        console.print(Text(one_line(str(exc))))
        return ExitCode.OK
    found = engine.resumed
    if found is not None:
        line = f"resumed: {found.rerun} re-run, {found.lost} left unknown"
        if found.rerun or found.lost:
            line += f"; their lost attempts cost {fmt_cost(found.lost_cost_usd)}"
        console.print(Text(line))
        for ids, what in (
            (found.adopted, "adopted (their processes still ran; watched to the end)"),
            (found.ended, "ended, whole process trees, before their tasks ran again"),
        ):
            if ids:
                console.print(Text(f"{len(ids)} {what}: {one_line(', '.join(ids), 200)}"))
    return code
