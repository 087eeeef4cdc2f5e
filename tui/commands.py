"""The `flightdeck` commands: run (TUI or headless), report, ls; resume, steer, stop, wait."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from flightdeck.engine.errors import InputError
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.console import console_for
from flightdeck.tui.exitcodes import ExitCode
from flightdeck.tui.fmt import fmt_cost, fmt_spent
from flightdeck.tui.headless import run_headless
from flightdeck.tui.output import failure_text, print_ending
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
    )
    tune_interpreter()
    if not args.headless and sys.stdout.isatty():
        from flightdeck.tui.app import run_app

        try:
            engine.start()
            code = run_app(engine)
        finally:
            engine.close()  # also after a failed start: its threads and writer process
        # Back on the shell's screen, the app's is gone: leave what headless leaves.
        console = console_for()
        console.print(Text(f"batch {engine.batch_id}", style="bold"))
        print_ending(console, engine, engine.snapshot())
        failure = failure_text(engine)
        if failure is not None:
            console_for(stderr=True).print(Text(f"flightdeck: error: {failure}", style="red"))
        return code
    return run_headless(engine, console_for())


def _reader(state_dir: Path | None) -> StoreReader:
    from flightdeck.engine.inputs.settings import Settings, load_settings, state_dir_from
    from flightdeck.engine.records.reader import StoreReader

    # flightdeck.toml only matters when it names the state folder: a broken one in the current
    # folder must not stop a report on a state folder given by --state-dir or FLIGHTDECK_HOME.
    given = state_dir is not None or bool(os.environ.get("FLIGHTDECK_HOME"))
    folder = state_dir_from(state_dir, Settings() if given else load_settings(None))
    db = folder / "flightdeck.db"
    if not db.exists():
        raise UsageError(db, None, None, "no flightdeck state here (run a batch first)")
    if not db.is_file():
        raise UsageError(db, None, None, "not a flightdeck database (not a file)")
    return StoreReader(db)


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


# -- a batch's owner taken over (resume), or sent commands from another process --------------

POLL_S = 0.1  # how often steer/stop/wait look at the store


def _state_db(state_dir: Path | None) -> Path:
    """The state folder's database, as `_reader` finds it (one clear error if none)."""
    reader = _reader(state_dir)
    reader.close()
    return reader.path


def cmd_resume(args: argparse.Namespace) -> ExitCode:
    """`flightdeck resume`: become the owner of an abandoned batch and run it to the end."""
    from flightdeck.engine.api import Engine, tune_interpreter
    from flightdeck.engine.records.liveness import OwnerAlive
    from flightdeck.engine.resume import NothingToResume

    db = _state_db(args.state_dir)
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
    return code


def _request_db(args: argparse.Namespace) -> Path:
    db = _state_db(args.state_dir)
    from flightdeck.engine.records.reader import StoreReader

    with StoreReader(db) as reader:
        info = reader.batch(args.batch_id)
    if info is None:
        raise UsageError(
            None,
            None,
            "batch_id",
            f"no batch {args.batch_id} in {db.parent} (another state folder: --state-dir)",
        )
    return db


def _submitted(submit: Callable[[], int]) -> int:
    """A request recorded, or the reason it was not as a usage error (nothing written)."""
    try:
        return submit()
    except (LookupError, ValueError) as exc:
        raise UsageError(None, None, None, str(exc).strip("'\"")) from None


def _owner_gone(db: Path, batch_id: str) -> str | None:
    """Why nobody will apply a request now (the owner is gone), or None while it lives."""
    from flightdeck.engine.records.reader import StoreReader

    with StoreReader(db) as reader:
        info = reader.batch(batch_id)
    if info is not None and info.status.value == "abandoned":
        return (
            f"batch {batch_id} has no live owner (pid {info.owner_pid} is gone): the request "
            f"stays pending; `flightdeck resume {batch_id}` applies it"
        )
    return None


def cmd_steer(args: argparse.Namespace) -> ExitCode:
    """`flightdeck steer`: a message for children of a running batch; each receipt printed
    as it settles (delivered, or missed and why)."""
    import time

    from flightdeck.engine.records.requests import request, submit_steer

    db = _request_db(args)
    rid = _submitted(
        lambda: submit_steer(db, args.batch_id, args.child_ids, args.message, now=args.now)
    )
    console = console_for()
    shown: dict[int, str] = {}
    missed = False
    while True:
        row = request(db, args.batch_id, rid)
        assert row is not None
        for receipt in row.receipts:
            if shown.get(receipt.id) != receipt.state.value:
                shown[receipt.id] = receipt.state.value
                missed = missed or receipt.state.value == "missed"
                console.print(Text(f"{one_line(receipt.child_id, 60)}: {receipt.state.value}"))
        if row.state.value == "refused":
            console_for(stderr=True).print(
                Text(f"flightdeck: refused: {one_line(row.reason or '')}")
            )
            return ExitCode.INCOMPLETE
        settled = row.state.value == "applied" and all(
            r.state.value != "queued" for r in row.receipts
        )
        if settled:
            return ExitCode.INCOMPLETE if missed else ExitCode.OK
        gone = _owner_gone(db, args.batch_id)
        if gone is not None and row.state.value == "pending":
            console_for(stderr=True).print(Text(f"flightdeck: {gone}"))
            return ExitCode.INCOMPLETE
        time.sleep(POLL_S)


def cmd_stop(args: argparse.Namespace) -> ExitCode:
    """`flightdeck stop`: stop children of a running batch (or all); returns once the owner
    has applied it."""
    import time

    from flightdeck.engine.records.requests import request, submit_stop, submit_stop_all

    if args.all == bool(args.child_ids):
        raise UsageError(None, None, None, "name the children to stop, or --all (not both)")
    db = _request_db(args)
    if args.all:
        rid = _submitted(lambda: submit_stop_all(db, args.batch_id))
    else:
        rid = _submitted(lambda: submit_stop(db, args.batch_id, args.child_ids))
    while True:
        row = request(db, args.batch_id, rid)
        assert row is not None
        if row.state.value == "applied":
            what = "every child" if args.all else ", ".join(one_line(i, 60) for i in row.child_ids)
            console_for().print(Text(f"stop applied: {what}"))
            return ExitCode.OK
        if row.state.value == "refused":
            console_for(stderr=True).print(
                Text(f"flightdeck: refused: {one_line(row.reason or '')}")
            )
            return ExitCode.INCOMPLETE
        gone = _owner_gone(db, args.batch_id)
        if gone is not None:
            console_for(stderr=True).print(Text(f"flightdeck: {gone}"))
            return ExitCode.INCOMPLETE
        time.sleep(POLL_S)


def cmd_wait(args: argparse.Namespace) -> ExitCode:
    """`flightdeck wait`: block until the batch ends; its exit code (0 every child completed,
    1 otherwise); an abandoned batch is said plainly, exit 1."""
    import time

    from flightdeck.engine.records.reader import StoreReader

    db = _request_db(args)
    with StoreReader(db) as reader:
        while True:
            info = reader.batch(args.batch_id)
            assert info is not None
            status = info.status.value
            if status == "abandoned":
                console_for(stderr=True).print(
                    Text(
                        f"flightdeck: batch {args.batch_id} was abandoned: its owner process "
                        f"(pid {info.owner_pid}) died; `flightdeck resume {args.batch_id}` "
                        "runs it to the end"
                    )
                )
                return ExitCode.INCOMPLETE
            if status != "running":
                console_for().print(Text(f"batch {args.batch_id} {status}"))
                return ExitCode.OK if status == "completed" else ExitCode.INCOMPLETE
            time.sleep(POLL_S * 2)
