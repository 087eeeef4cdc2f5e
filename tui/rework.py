"""The command line's verbs on children that ended: `retry` (the batch's owner started again
if it has ended), `diff` (a child's changes, coloured on a terminal, plain when piped),
`merge` (accept: commit and merge into a branch) and `discard`. The work is engine/attached's
rework.py; what they print is here."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from flightdeck.engine.sanitize import one_line, sanitize
from flightdeck.tui.client import (
    batch_client,
    children_said,
    say_error,
    say_held,
)
from flightdeck.tui.clienttargets import where_filter
from flightdeck.tui.console import console_for, write_whole
from flightdeck.tui.exitcodes import ExitCode
from flightdeck.tui.usage import (
    UsageError,
    known_children,
    no_child_id,
    no_children,
)
from rich.text import Text

if TYPE_CHECKING:
    from flightdeck.engine.attached.client import Client
    from flightdeck.engine.commands import Accept, Discard


def cmd_retry(args: argparse.Namespace) -> ExitCode:
    """`flightdeck retry`: the children run again (their batch reopened, its owner started
    again if it has gone); returns once the owner has queued them."""
    from flightdeck.engine.attached.client import OwnerGone
    from flightdeck.engine.attached.rework import Restarted, retry
    from flightdeck.engine.attached.spawn import OwnerFailed
    from flightdeck.engine.commands import CommandError, Retry

    row_filter = where_filter(args)
    with batch_client(args) as client:  # first: a batch id left out is said as that
        if row_filter is None and not args.child_ids:
            raise UsageError(None, None, None, "name the children to retry, or --where QUERY")
        if row_filter is None:
            ids, counted = list(args.child_ids), False
            _lost(client, ids)
        else:
            kept, ended = client.matching(row_filter, ended=True)
            counted = True
            line = f"{kept} {'child matches' if kept == 1 else 'children match'}"
            line += f" `{one_line(row_filter.query, 200)}`, {len(ended)} of them ended"
            ids, left = _retryable(client, ended)
            console_for().print(Text(line + left + ("" if ids else ": nothing to retry")))
            if not ids:
                return ExitCode.OK
    mode = "continue" if args.resume else "fresh"
    fresh = _fresh_folders(client, ids) if args.resume else []
    info = client.info()
    # An abandoned batch's new owner also runs on what the dead one left (as `resume` does).
    lost = info is not None and info.status.value == "abandoned"
    try:
        for step in retry(client.db, args.batch_id, Retry(tuple(ids), args.resume)):
            if isinstance(step, Restarted):
                if step.owner_pid is not None:  # said before the owner accepts or refuses
                    what = "'s owner had died" if lost else " had ended"
                    line = f"batch {one_line(args.batch_id, 60)}{what}: owner pid"
                    line += f" {step.owner_pid} started to take the retry"
                    line += " and run on what the dead owner left (as resume does)" if lost else ""
                    console_for(stderr=True).print(Text(line))
            elif step.state.value == "refused":
                say_error(f"refused: {step.reason or ''}")
                return ExitCode.INCOMPLETE
            elif step.state.value == "applied":
                console_for().print(Text(f"retry ({mode}) queued: {children_said(ids, counted)}"))
                for line in fresh:
                    console_for().print(Text(line))
                with client:  # they wait in the queue for as long as it holds
                    say_held(client)
                return ExitCode.OK
    except CommandError as exc:
        raise UsageError(None, None, None, str(exc)) from None
    except (OwnerGone, OwnerFailed) as exc:
        say_error(str(exc))
    return ExitCode.INCOMPLETE


def _lost(client: Client, ids: list[str]) -> None:
    """A usage error for a child an abandoned batch left running or queued: it has not ended,
    but nothing runs it either; `resume` does (the owner's check would call it running)."""
    from flightdeck.engine.attached.hints import command_line
    from flightdeck.engine.model import BatchStatus

    info = client.info()
    if info is None or info.status is not BatchStatus.ABANDONED:
        return
    rows = {r.id: r for r in client.rows()}
    for child_id in ids:
        row = rows.get(child_id)
        if row is not None and row.status.live:
            resume = command_line(client.db.parent, "resume", client.batch_id)
            raise UsageError(
                None,
                None,
                None,
                f"{one_line(child_id, 60)} was {row.status.value} when its batch's owner died: "
                f"`{resume}` runs it (retry takes children that ended)",
            )


def _fresh_folders(client: Client, ids: list[str]) -> list[str]:
    """A line for each child whose worktree (or copy) went when its changes were accepted or
    discarded: `--continue` cannot work on in it, so it starts in a fresh one, and says so."""
    rows = {r.id: r for r in client.rows()}
    lines = []
    for child_id in ids:
        changes = rows[child_id].changes if child_id in rows else None
        if changes is None or changes.pending:
            continue
        how = f"merged into {changes.into}" if changes.state == "accepted" else "discarded"
        lines.append(
            f"{one_line(child_id, 60)}: its {changes.mode} went when its changes were "
            f"{one_line(how, 120)}: it continues in a fresh {changes.mode}"
        )
    return lines


def _retryable(client: Client, ended: list[str]) -> tuple[list[str], str]:
    """Of the children a query kept that ended, those a retry takes, and what it says of the
    rest: a completed child has nothing to retry, a delegate runs again with its parent (named
    one by one, each is refused; picked by a query, they are left out)."""
    from flightdeck.engine.model import ChildStatus
    from flightdeck.engine.model.units import is_wave

    rows, own = {r.id: r for r in client.rows()}, client.own()
    done: list[str] = []
    delegates: list[str] = []
    waves: list[str] = []
    ids: list[str] = []
    for i in ended:  # one pass (a list looked up per child: 0.2 s at 5,000)
        if rows[i].status is ChildStatus.COMPLETED:
            done.append(i)
        elif rows[i].parent is not None:
            delegates.append(i)
        elif is_wave(rows[i], own):  # the owner would refuse the whole retry
            waves.append(i)
        else:
            ids.append(i)
    parts = []
    if done:
        parts.append(f"{len(done)} completed")
    if len(delegates) == 1:
        parts.append("1 delegate (it runs again with its parent)")
    elif delegates:
        parts.append(f"{len(delegates)} delegates (they run again with their parents)")
    if waves:
        parts.append(f"{len(waves)} schedule wave{'' if len(waves) == 1 else 's'} (not retried)")
    return ids, f"; left out: {', '.join(parts)}" if parts else ""


def cmd_diff(args: argparse.Namespace) -> ExitCode:
    """`flightdeck diff`: a child's changes as a unified diff; coloured on a terminal."""
    from flightdeck.engine.attached.rework import diff_of
    from flightdeck.engine.commands import CommandError

    if args.file == "":  # git would take it for every file
        raise UsageError(None, None, "--file", "name a file, or leave --file out for every file")
    if args.child_id is None:
        raise no_child_id(args)
    with batch_client(args) as client:
        db = client.db
    known_children(db, args.batch_id, (args.child_id,))
    try:
        text = sanitize(diff_of(db, args.batch_id, args.child_id, args.file))
    except CommandError as exc:
        say_error(str(exc))
        return ExitCode.INCOMPLETE
    console = console_for()
    if not console.is_terminal:
        try:
            write_whole(text)
        except BrokenPipeError:
            console.on_broken_pipe()
        return ExitCode.OK
    from rich.syntax import Syntax

    console.print(Syntax(text, "diff", theme="ansi_dark", background_color="default"))
    return ExitCode.OK


def cmd_merge(args: argparse.Namespace) -> ExitCode:
    """`flightdeck merge`: accept children's changes into a branch, all or (a conflict)
    none; files more than one of them changed are said first."""
    from flightdeck.engine.attached.rework import branch_name_problem, overlap_of
    from flightdeck.engine.commands import Accept

    ids = tuple(args.child_ids)
    with batch_client(args) as client:
        db = client.db
    if not ids:
        raise no_children(args)
    known_children(db, args.batch_id, ids)
    # A branch git would refuse: said before anything is sent (the owner would record it).
    if (problem := branch_name_problem(args.into)) is not None:
        raise UsageError(None, None, "--into", problem)
    command = Accept(ids, args.into)
    shared = overlap_of(db, args.batch_id, ids)
    if shared:
        console_for(stderr=True).print(
            Text(f"warning: changed by more than one of them: {one_line(shared)}")
        )
    return _review(args, db, command)


def cmd_discard(args: argparse.Namespace) -> ExitCode:
    """`flightdeck discard`: remove children's worktrees (or copies) and branches."""
    from flightdeck.engine.commands import Discard

    ids = tuple(args.child_ids)
    with batch_client(args) as client:
        db = client.db
    if not ids:
        raise no_children(args)
    known_children(db, args.batch_id, ids)
    return _review(args, db, Discard(ids))


def _review(args: argparse.Namespace, db: Path, command: Accept | Discard) -> ExitCode:
    from flightdeck.engine.attached.client import OwnerGone
    from flightdeck.engine.attached.rework import review
    from flightdeck.engine.commands import CommandError

    try:
        outcome = review(db, args.batch_id, command)
    except CommandError as exc:
        say_error(f"{command.title} refused, nothing applied: {exc}")
        return ExitCode.INCOMPLETE
    except OwnerGone as exc:
        say_error(str(exc))
        return ExitCode.INCOMPLETE
    console_for().print(Text(one_line(outcome.said)))
    return ExitCode.OK
