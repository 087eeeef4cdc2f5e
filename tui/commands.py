"""The `flightdeck` commands that run or read batches: run (an owner in the background, or
headless), report, ls, resume. The client commands (steer, stop, ...) are in client.py."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

from flightdeck.engine.model import ChildStatus
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.console import console_for, draws_tui, write_whole
from flightdeck.tui.exitcodes import ExitCode
from flightdeck.tui.fmt import GLYPHS, fmt_cost, fmt_spent, fmt_spent_compact
from flightdeck.tui.usage import UsageError, state_db
from rich import box
from rich.cells import cell_len
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # imported when a command needs them: `--help` stays fast
    from flightdeck.engine.api import NothingToResume
    from flightdeck.engine.attached.served import Served
    from flightdeck.engine.attached.store import BatchInfo, StoreReader
    from rich.console import Console


def cmd_run(args: argparse.Namespace) -> ExitCode:
    """`flightdeck run`: the TUI on a terminal, the headless runner otherwise."""
    from flightdeck.engine.apilight import load_settings, state_dir_from
    from flightdeck.engine.attached.precheck import check_batch, load_batch, ray_missing

    # Everything is validated before anything is written.
    if args.executor == "ray" and (missing := ray_missing('"ray"')):
        raise UsageError(None, None, "argument --executor", missing)  # not the config's
    settings = load_settings(args.config)
    if args.executor is not None:  # --executor: where children's work runs, over the config
        engine_settings = dataclasses.replace(
            settings.engine, executor=args.executor, executor_line=None
        )
        settings = dataclasses.replace(settings, engine=engine_settings)
    batch = load_batch(
        args.batch_file,
        max_chars=settings.engine.max_task_chars,
        max_tasks=settings.engine.max_tasks,
    )
    state_dir = state_dir_from(args.state_dir, settings)
    if args.owner_of is not None:
        _check_claimed(state_dir, args.owner_of)
        # The first line of its owner.log (this process's output): which process to look for.
        print(f"owner pid {os.getpid()} of batch {args.owner_of}", flush=True)
    # A dumb terminal (TERM=dumb) cannot draw the TUI: the run prints its lines there instead.
    if args.detach or (not args.headless and args.owner_of is None and draws_tui()):
        # The batch runs in an owner process of its own; this one only checks the input, as
        # the engine does, without loading the engine.
        check_batch(batch, settings, max_concurrent=args.max_concurrent)
        from flightdeck.tui.attached import run_in_background

        return run_in_background(args, state_dir.absolute(), settings)
    from flightdeck.engine.api import Engine, tune_interpreter
    from flightdeck.tui.headless import run_headless

    engine = Engine(
        batch,
        settings,
        state_dir=state_dir,
        max_concurrent=args.max_concurrent,
        batch_id=args.owner_of,  # an owner started by `run` below: its folder is claimed
    )
    tune_interpreter()
    return run_headless(engine, console_for())


def _check_claimed(state_dir: Path, batch_id: str) -> None:
    """`--owner-of` (how `run` starts a batch's owner) names a folder `run` claimed for it and
    no owner has started in: never another batch's id, whose rows it would overwrite."""
    from flightdeck.engine.attached.spawn import OWNER_LOG

    folder = state_dir / "batches" / batch_id
    if not (folder / OWNER_LOG).is_file() or (folder / "manifest.json").exists():
        raise UsageError(
            None, None, "--owner-of", f"{one_line(batch_id)} is not a batch folder run claimed"
        )


def _reader(state_dir: Path | None) -> StoreReader:
    from flightdeck.engine.attached.store import StoreReader

    return StoreReader(state_db(state_dir))


def cmd_report(args: argparse.Namespace) -> ExitCode:
    """`flightdeck report`: one batch's metrics report, as Markdown or JSON."""
    from flightdeck.engine.attached.hints import command_line
    from flightdeck.engine.attached.store import build_report, render_json, render_markdown

    reader = _reader(args.state_dir)
    try:
        report = build_report(reader, args.batch_id)
    except LookupError as exc:
        raise UsageError(None, None, "batch_id", str(exc).strip("'\"")) from None
    finally:
        reader.close()
    if args.format == "json":
        text = render_json(report)
    else:
        # Pasted from any folder, the resume command must name this state folder.
        resume = command_line(reader.path.parent, "resume", report["batch_id"])
        text = render_markdown(report, resume)
    try:
        write_whole(text if text.endswith("\n") else text + "\n")
    except BrokenPipeError:
        console_for().on_broken_pipe()
    return ExitCode.OK


LS_COLUMNS = (
    *("batch", "name", "status", "children", "completed", "failed", "stopped", "cost", "created"),
)


def ls_cells(db: Path, b: BatchInfo) -> tuple[str, ...]:
    """One batch's cells under `LS_COLUMNS`, read from the store `db`: `ls`, and the page of
    batches `serve` shows. An abandoned batch counts its command children's processes that
    outlived its owner (what `resume` adopts)."""
    import time

    from flightdeck.engine.attached.store import disk_full, pending_turns, still_running
    from flightdeck.engine.model import BatchStatus

    left = still_running(db, b.id) if b.status is BatchStatus.ABANDONED else 0
    pending = pending_turns(db, b.id) if b.status is BatchStatus.RUNNING else 0
    created = time.strftime("%Y-%m-%d %H:%M", time.localtime(b.created_ts))
    notes = [f"{left} still running"] if left else []  # command children's, past their owner
    if b.status is BatchStatus.ABANDONED and disk_full(db.parent):  # the store gave up there
        notes.insert(0, "disk full")
    status = b.status.value + (f" ({'; '.join(notes)})" if notes else "")
    # a Codex turn under way: more to come, as the TUI's
    cost = fmt_spent_compact(b.cost_usd, b.cost_unknown, pending=bool(pending))
    counts = (b.children, b.completed, b.failed, b.stopped)
    return (b.id, one_line(b.name, 30), status, *map(str, counts), cost, created)


def cmd_ls(args: argparse.Namespace) -> ExitCode:
    """`flightdeck ls`: every batch in the state folder, and which a `serve` shows on a port."""
    from flightdeck.engine.attached import served

    reader = _reader(args.state_dir)
    try:
        batches = reader.batches()
    finally:
        reader.close()
    servers = served.live(reader.path.parent)
    extra = (("owner pid",) if args.long else ()) + (("served",) if servers else ())
    rows = []
    for b in batches:
        cells = ls_cells(reader.path, b) + ((str(b.owner_pid),) if args.long else ())
        on = [_port(s) for s in servers if s.serves(b.id)]
        rows.append(cells + ((" ".join(on),) if servers else ()))
    console = console_for()
    console.print(ls_table(LS_COLUMNS + extra, rows, console))
    for s in servers:
        if s.batch_id is None:
            console.print(Text(f"serving every batch of this folder on {_port(s)} (pid {s.pid})"))
    return ExitCode.OK


_NAME_LEAST = 4  # a name cut to fewer cells than this shows nothing: its column goes instead


def ls_table(columns: tuple[str, ...], rows: list[tuple[str, ...]], console: Console) -> Table:
    """`ls`'s table, one row a batch; on a terminal too narrow for it (80 columns), without
    its rules, the year or a column for each count (and then the date, then the name), so
    that a batch stays one line whose id, status and cost are read whole, not cut to `com…`
    and `$0.…`."""
    table = Table()
    for col in columns:
        table.add_column(col, no_wrap=col == "batch")
    for cells in rows:
        table.add_row(*map(Text, cells))
    unbounded = console.options.update_width(1 << 20)  # its natural width, not the console's
    if console.measure(table, options=unbounded).maximum <= console.width:
        return table
    counts = slice(columns.index("children"), columns.index("stopped") + 1)
    created = columns.index("created") - (counts.stop - counts.start - 1)  # once counts are one
    ok, bad, halted = (
        GLYPHS[s][0] for s in (ChildStatus.COMPLETED, ChildStatus.FAILED, ChildStatus.STOPPED)
    )
    compact = []
    for cells in rows:
        n, done, failed, stopped = cells[counts]
        merged = (
            *cells[: counts.start],
            f"{n} {done}{ok} {failed}{bad} {stopped}{halted}",  # the TUI's status glyphs
            *cells[counts.stop :],
        )
        compact.append(
            (*merged[:created], merged[created].partition("-")[2], *merged[created + 1 :])
        )
    names = [*columns[: counts.start], "children", *columns[counts.stop :]]
    # Each column as wide as its widest cell, but the name, cut to what is left of the line.
    widths = [max(len(col), *(cell_len(c[i]) for c in compact)) for i, col in enumerate(names)]
    # Still too wide (`-l`'s owner pid, a served column): the least essential columns go, the
    # date first (the batch id holds it), then the name. Between two columns: a space of
    # padding each side, and the (blank) rule between them.
    for dropped in ("created", "name"):
        others = sum(w for col, w in zip(names, widths, strict=True) if col != "name")
        if others + _NAME_LEAST + 3 * (len(names) - 1) <= console.width:
            break
        at = names.index(dropped)
        del names[at], widths[at]
        compact = [(*cells[:at], *cells[at + 1 :]) for cells in compact]
    room = console.width - 3 * (len(names) - 1)
    if "name" in names:
        at = names.index("name")
        widths[at] = max(_NAME_LEAST, room - (sum(widths) - widths[at]))
    status = names.index("status")  # then a long status (its notes) is cut, never the batch id
    widths[status] = max(9, widths[status] - max(0, sum(widths) - room))
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    for col, width in zip(names, widths, strict=True):
        table.add_column(col, width=width, no_wrap=True, overflow="ellipsis")
    for cells in compact:
        table.add_row(*map(Text, cells))
    return table


def _port(s: Served) -> str:
    return f":{s.port}" + (" read-only" if s.read_only else "")


# -- a batch's owner taken over (resume) -------------------------------------------------------


def _finished(exc: NothingToResume, console: Console) -> ExitCode:
    """A batch that had already ended: said, and its exit code as `run` and `wait` give it
    (`resume B && next` must not go on after a failed batch)."""
    console.print(Text(one_line(str(exc))))
    return ExitCode.OK if exc.status == "completed" else ExitCode.INCOMPLETE


def _left_running(db: Path, batch_id: str, err: Console) -> None:
    """Said before the batch starts: ending a dead owner's processes waits out their
    kill_grace_s (a CLI that ignores SIGTERM holds it that long), and nothing else is said
    until they have ended."""
    from flightdeck.engine.attached.store import StoreReader, still_running
    from flightdeck.engine.model import BatchStatus

    with StoreReader(db) as reader:
        info = reader.batch(batch_id)
    if info is None or info.status is not BatchStatus.ABANDONED:  # a live owner: refused
        return
    if left := still_running(db, batch_id):
        err.print(
            Text(
                f"batch {batch_id}: {left} process(es) its dead owner left still run: adopting "
                "them, or ending them first (each within its kill_grace_s)"
            )
        )


def cmd_resume(args: argparse.Namespace) -> ExitCode:
    """`flightdeck resume`: become the owner of an abandoned batch and run it to the end."""
    from flightdeck.engine.api import Engine, NothingToResume, OwnerAlive, tune_interpreter
    from flightdeck.tui.headless import run_headless

    db = state_db(args.state_dir)
    console, err = console_for(), console_for(stderr=True)
    try:
        engine = Engine.resume(
            db.parent, args.batch_id, rerun=not args.no_rerun, reopen=args.reopen
        )
    except NothingToResume as exc:
        return _finished(exc, console)
    tune_interpreter()
    _left_running(db, args.batch_id, err)

    def processes() -> None:
        # Said as the batch starts, not once it has ended (hours later, maybe): the operator
        # resuming wants to know at once what still runs and will not run twice.
        found = engine.resumed
        if found is None:
            return
        # With --no-rerun their tasks never run again: they are left unknown.
        after = "their tasks left unknown" if args.no_rerun else "before their tasks ran again"
        # A child stopped as its owner died runs no more, and one paused waits for `continue`:
        # the process of each is ended all the same. Told by what resuming found, not by the
        # rows now: a Ctrl+C while the trees were ended has stopped every child since.
        done = {r.id for r in found.carried if r.status is ChildStatus.STOPPED}
        paused = {c.task.id for c in found.live if c.pause_wanted}
        ended = [i for i in found.ended if i not in done]
        for ids, what in (
            (found.adopted, "adopted (their processes outlived the owner: watched to the end)"),
            ([i for i in ended if i not in paused], f"ended, whole process trees, {after}"),
            (
                [i for i in ended if i in paused],
                "ended, whole process trees, paused: their tasks run again once continued",
            ),
            ([i for i in found.ended if i in done], "ended, whole process trees, as stopped"),
        ):
            if ids:
                console.print(Text(f"{len(ids)} {what}: {one_line(', '.join(ids), 200)}"))

    try:
        code = run_headless(engine, console, started=processes)
    except OwnerAlive as exc:
        err.print(Text(f"flightdeck: {one_line(str(exc))}; nothing changed"))
        return ExitCode.USAGE
    except NothingToResume as exc:  # it finished between the look and the claim
        return _finished(exc, console)
    found = engine.resumed
    if found is not None:
        line = f"resumed: {found.rerun} re-run, {found.lost} left unknown"
        if found.rerun or found.lost:
            # Worded as the summary's `lost attempts` line: an attempt with no price makes the
            # cost unknown, never $0.00.
            cost, note = fmt_spent(found.lost_cost_usd, found.lost_cost_unknown)
            line += f"; their lost attempts cost {cost}{note}"
            # The summary's figure: every lost attempt's, a Ray worker's as well as an owner's.
            every = engine.snapshot().lost_cost_usd
            if every is not None and every != found.lost_cost_usd:
                line += f" ({fmt_cost(every)} over every lost attempt of the batch)"
        console.print(Text(line))
    return code
