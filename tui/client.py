"""The client commands: steer, stop, pause, continue, wait and limits, each a request through
the store to a batch's owner process (another process), waited on until it is applied."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from flightdeck.engine.sanitize import one_line
from flightdeck.tui.commands import UsageError, checked_db
from flightdeck.tui.console import console_for
from flightdeck.tui.exitcodes import ExitCode
from flightdeck.tui.fmt import fmt_cost
from rich.text import Text

if TYPE_CHECKING:  # imported when a command needs them: `--help` stays fast
    from flightdeck.engine.model import Limits
    from flightdeck.engine.query import RowFilter

POLL_S = 0.1  # how often steer/stop/wait look at the store


def _request_db(args: argparse.Namespace) -> Path:
    db = checked_db(args.state_dir)
    from flightdeck.engine.records.reader import StoreReader, no_batch

    with StoreReader(db) as reader:
        info = reader.batch(args.batch_id)
    if info is None:
        raise UsageError(None, None, "batch_id", no_batch(args.batch_id, db.parent))
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


def _where_filter(args: argparse.Namespace) -> RowFilter | None:
    """`--where`'s query parsed (before anything is read), or None without one; names or
    --all with it are a usage error, as a query that does not parse is."""
    from flightdeck.engine.query import QueryError, parse_filter

    if args.where is None:
        return None
    if args.child_ids or getattr(args, "all", False):
        raise UsageError(None, None, "--where", "name children or give --where (not both)")
    try:
        return parse_filter(args.where, tags=False)
    except QueryError as exc:
        raise UsageError(None, None, "--where", str(exc)) from None


def _matching(db: Path, batch_id: str, row_filter: RowFilter, verb: str) -> list[str]:
    """The ids of the batch's children `row_filter` keeps that have not ended, in batch order;
    how many it keeps (and how many of those had ended) is printed."""
    import time

    from flightdeck.engine.outliers import batch_medians
    from flightdeck.engine.records.reader import StoreReader

    with StoreReader(db) as reader:
        rows = reader.children(batch_id, results=False)
    now = time.time()
    # is:outlier against the whole batch's medians, whatever else the query says.
    medians = batch_medians(rows, now) if row_filter.outliers_only else None
    kept = [r for r in rows if row_filter.matches(r, False, now, medians)]
    live = [r.id for r in kept if r.status.live]
    ended = len(kept) - len(live)
    noun = "child matches" if len(kept) == 1 else "children match"
    line = f"{len(kept)} {noun} `{one_line(row_filter.query, 200)}`"
    line += f", {ended} had already ended" if ended else ""
    console_for().print(Text(line + ("" if live else f": nothing to {verb}")))
    return live


def cmd_steer(args: argparse.Namespace) -> ExitCode:
    """`flightdeck steer`: a message for children of a running batch; each receipt printed
    as it settles (delivered, or missed and why)."""
    import time

    from flightdeck.engine.records.requests import request, submit_steer

    row_filter = _where_filter(args)
    if row_filter is None and not args.child_ids:
        raise UsageError(None, None, None, "name the children to steer, or --where QUERY")
    db = _request_db(args)
    ids = args.child_ids
    if row_filter is not None:
        ids = _matching(db, args.batch_id, row_filter, "steer")
        if not ids:
            return ExitCode.OK
    rid = _submitted(lambda: submit_steer(db, args.batch_id, ids, args.message, now=args.now))
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
    from flightdeck.engine.records.requests import submit_stop, submit_stop_all

    row_filter = _where_filter(args)
    if row_filter is None and args.all == bool(args.child_ids):
        raise UsageError(
            None, None, None, "name the children to stop, --all or --where QUERY (one of them)"
        )
    db = _request_db(args)
    ids = args.child_ids
    if row_filter is not None:
        ids = _matching(db, args.batch_id, row_filter, "stop")
        if not ids:
            return ExitCode.OK
    if args.all:
        rid = _submitted(lambda: submit_stop_all(db, args.batch_id))
    else:
        rid = _submitted(lambda: submit_stop(db, args.batch_id, ids))
    if row_filter is not None:  # thousands, maybe: a count, not every name
        what = f"{len(ids)} {'child' if len(ids) == 1 else 'children'}"
    elif args.all:
        what = "every child"
    else:
        what = ", ".join(one_line(i, 60) for i in ids)
    return _until_applied(db, args.batch_id, rid, f"stop applied: {what}")


def cmd_pause(args: argparse.Namespace) -> ExitCode:
    """`flightdeck pause` and `continue`: of children of a running batch, or (none named) of
    its admission; returns once the owner has applied it."""

    from flightdeck.engine.records.requests import RequestKind, submit

    resume = args.command == "continue"
    verb = "continue" if resume else "pause"
    row_filter = _where_filter(args)
    db = _request_db(args)
    ids = args.child_ids
    if row_filter is not None:
        ids = _matching(db, args.batch_id, row_filter, verb)
        if not ids:
            return ExitCode.OK
    if ids:
        kind = RequestKind.CONTINUE if resume else RequestKind.PAUSE
        n = len(ids)
        what = (
            f"{n} {'child' if n == 1 else 'children'}"
            if row_filter is not None  # thousands, maybe: a count, not every name
            else ", ".join(one_line(i, 60) for i in ids)
        )
    else:
        kind = RequestKind.CONTINUE_ADMISSION if resume else RequestKind.PAUSE_ADMISSION
        what = f"admission of batch {one_line(args.batch_id, 60)}"
    rid = _submitted(lambda: submit(db, args.batch_id, kind, ids))
    return _until_applied(db, args.batch_id, rid, f"{verb} applied: {what}")


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


# The command line's name for each field of a change (engine/limits.py), for its errors.
_LIMIT_ARGS = {
    "pool_size": "--pool",
    "route": "--route",
    "max_concurrent": "--max-concurrent",
    "rpm": "--rpm",
    "tpm": "--tpm",
    "soft_cost_usd": "--soft-cost",
}


def cmd_limits(args: argparse.Namespace) -> ExitCode:
    """`flightdeck limits`: a running batch's live limits printed, or changed (the owner
    applies the change at once; a bad one is a usage error naming the argument)."""

    from flightdeck.engine.limits import LimitError, changed, describe
    from flightdeck.engine.records.requests import RequestKind, submit

    db = _request_db(args)
    current = _stored_limits(db, args.batch_id)
    try:
        change = _limit_change(args, current)
        if not change:
            _print_limits(current, _stored_held(db, args.batch_id))
            return ExitCode.OK
        changed(current, change)
    except LimitError as exc:
        raise UsageError(None, None, _LIMIT_ARGS.get(exc.field, exc.field), exc.message) from None
    rid = _submitted(lambda: submit(db, args.batch_id, RequestKind.LIMITS, payload=change))
    return _until_applied(db, args.batch_id, rid, f"limits applied: {one_line(describe(change))}")


def _stored_limits(db: Path, batch_id: str) -> Limits:
    """The live limits the batch's owner recorded, else those its settings began with."""
    from flightdeck.engine.inputs.settings.stored import settings_from_json
    from flightdeck.engine.limits import limits_from_json, limits_of
    from flightdeck.engine.model import Limits
    from flightdeck.engine.records.reader import StoreReader

    with StoreReader(db) as reader:
        info = reader.batch(batch_id)
        assert info is not None  # _request_db found it
        if info.limits_json:
            return limits_from_json(info.limits_json)
        routes = dict.fromkeys(sorted({r.route for r in reader.children(batch_id, results=False)}))
    if info.settings_json is None:  # a batch of an older flightdeck: only its pool size known
        return Limits(info.pool_size, max_cost_usd=info.max_cost_usd)
    return limits_of(settings_from_json(info.settings_json), routes, info.pool_size)


def _limit_change(args: argparse.Namespace, current: Limits) -> dict[str, object]:
    """The change the arguments ask for ({} for none); LimitError naming a bad one."""
    from flightdeck.engine.limits import LimitError, parse_count, parse_money

    change: dict[str, object] = {}
    if args.pool is not None:
        size = parse_count("pool_size", args.pool)
        if size is None:
            raise LimitError("pool_size", "the pool needs a size (a whole number from 1)")
        change["pool_size"] = size
    fields = {
        name: parse_count(name, text)
        for name in ("max_concurrent", "rpm", "tpm")
        if (text := getattr(args, name)) is not None
    }
    if fields:
        name = args.route
        if name is None:
            if len(current.routes) != 1:
                known = ", ".join(r.route for r in current.routes)
                raise LimitError("route", f"name the route to change (its routes: {known})")
            name = current.routes[0].route
        change["routes"] = {name: fields}
    elif args.route is not None:
        raise LimitError("route", "give --max-concurrent, --rpm or --tpm for it")
    if args.soft_cost is not None:
        change["soft_cost_usd"] = parse_money("soft_cost_usd", args.soft_cost)
    return change


def _cap(value: object) -> str:
    return "off" if value is None else str(value)


def _stored_held(db: Path, batch_id: str) -> str | None:
    """Why the batch's admission is held, every hold (the operator's pause, the soft budget's)."""
    from flightdeck.engine.records.reader import StoreReader

    with StoreReader(db) as reader:
        info = reader.batch(batch_id)
    return None if info is None else info.held


def _print_limits(limits: Limits, held: str | None) -> None:
    console = console_for()
    console.print(Text(f"pool {limits.pool_size}"))
    for r in limits.routes:
        console.print(
            Text(
                f"route {one_line(r.route, 60)}: max_concurrent {_cap(r.max_concurrent)}, "
                f"rpm {_cap(r.rpm)}, tpm {_cap(r.tpm)}"
            )
        )
    soft = "off" if limits.soft_cost_usd is None else fmt_cost(limits.soft_cost_usd)
    hard = "none" if limits.max_cost_usd is None else fmt_cost(limits.max_cost_usd)
    console.print(Text(f"soft budget {soft} (hard budget {hard})"))
    if held:
        console.print(Text(f"held: {one_line(held)}"))


def _until_applied(db: Path, batch_id: str, request_id: int, applied: str) -> ExitCode:
    """Wait for the owner to settle the request: print `applied` once it has applied it (0),
    or why it refused it, or that the owner is gone (1)."""
    import time

    from flightdeck.engine.records.requests import request

    while True:
        row = request(db, batch_id, request_id)
        assert row is not None
        if row.state.value == "applied":
            console_for().print(Text(applied))
            return ExitCode.OK
        if row.state.value == "refused":
            console_for(stderr=True).print(
                Text(f"flightdeck: refused: {one_line(row.reason or '')}")
            )
            return ExitCode.INCOMPLETE
        gone = _owner_gone(db, batch_id)
        if gone is not None:
            console_for(stderr=True).print(Text(f"flightdeck: {gone}"))
            return ExitCode.INCOMPLETE
        time.sleep(POLL_S)
