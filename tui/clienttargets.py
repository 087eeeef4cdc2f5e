"""Which children a client command names: a `--where` query parsed, and what a stop, pause or
continue of named children can act on, decided from the batch's rows as read before it is
sent; the rest are said, so "applied" never names a child it left alone, nor leaves out the
delegates a parent's stop stops with it."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING

from flightdeck.engine.model import CONTINUED_WAITING, ChildRow, ChildStatus
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.console import console_for
from flightdeck.tui.usage import UsageError, check_children
from rich.text import Text

if TYPE_CHECKING:
    from flightdeck.engine.attached.client import RowFilter


def where_filter(args: argparse.Namespace) -> RowFilter | None:
    """`--where`'s query parsed (before anything is read), or None without one; names or
    --all with it are a usage error, as a query that does not parse is."""
    if args.where is None:
        return None
    from flightdeck.engine.attached.client import QueryError, parse_filter

    if args.child_ids:
        raise UsageError(None, None, "--where", "name children or give --where (not both)")
    if getattr(args, "all", False):
        raise UsageError(None, None, "--where", "give --all or --where (not both)")
    try:
        row_filter = parse_filter(args.where, tags=False)
    except QueryError as exc:
        raise UsageError(None, None, "--where", str(exc)) from None
    # An unset shell variable, most likely (`--where "$Q"`, or quoted, `"\"$Q\""`): no term
    # at all would keep them all.
    if not row_filter.active:
        every = " (--all for every child)" if hasattr(args, "all") else ""
        raise UsageError(None, None, "--where", f"the query is empty{every}")
    return row_filter


def able(
    rows: Sequence[ChildRow],
    ids: list[str],
    counted: bool,
    batch_id: str,
    *,
    paused_only: bool = False,
    pause: bool = False,
) -> list[str]:
    """Of these children, those the command can act on (`acted_on`); the rest are said, each
    named one, or how many of a query's (which kept none that had ended). A name no child has
    is a usage error first: one line, not a line of the others and then the error."""
    check_children(ids, {r.id for r in rows}, batch_id)
    kept, said = acted_on(rows, ids, paused_only=paused_only, pause=pause)
    if counted and said:
        state = "not paused" if paused_only else "already paused"
        said = [f"{len(said)} of them {'is' if len(said) == 1 else 'are'} {state}"]
    for line in said:
        console_for().print(Text(line))
    return kept


def acted_on(
    rows: Sequence[ChildRow], ids: list[str], *, paused_only: bool = False, pause: bool = False
) -> tuple[list[str], list[str]]:
    """The children of `ids` the command can act on (not ended; with `paused_only`, a
    continue's, paused or pausing too; with `pause`, a pause's, neither), and a line for each
    of the rest saying why not."""
    by_id = {r.id: r for r in rows}
    kept: list[str] = []
    said: list[str] = []
    for child_id in ids:
        row = by_id.get(child_id)
        if row is not None and not row.status.live:
            said.append(f"{one_line(child_id, 60)}: had already ended ({row.status.value})")
        elif row is not None and paused_only and not _paused(row):
            said.append(f"{one_line(child_id, 60)}: not paused ({row.status.value})")
        elif row is not None and pause and _paused(row):  # the owner would do nothing
            paused = row.status is ChildStatus.PAUSED
            how = "paused" if paused else f"pausing ({row.status.value})"
            said.append(f"{one_line(child_id, 60)}: already {how}")
        else:
            kept.append(child_id)
    return kept, said


def _paused(row: ChildRow) -> bool:
    """Paused, or its pause asked and not taken yet (a continue drops that pause)."""
    return row.status is ChildStatus.PAUSED or row.pausing


def delegates_said(rows: Sequence[ChildRow], ids: list[str]) -> str:
    """` (and its 2 delegates)`: the delegates of these children, at any depth, that have not
    ended and are not among them, which a stop of their parent stops too; "" if none."""
    named = set(ids)
    under: dict[str, list[ChildRow]] = {}
    for row in rows:
        if row.parent is not None:
            under.setdefault(row.parent, []).append(row)
    seen = set(named)
    todo = list(named)
    count = 0
    while todo:
        for row in under.get(todo.pop(), ()):
            if row.id not in seen:  # bad data could make a loop of parents
                seen.add(row.id)
                todo.append(row.id)
                count += row.status.live
    if not count:
        return ""
    whose = "its" if len(ids) == 1 else "their"
    return f" (and {whose} {count} {'delegate' if count == 1 else 'delegates'})"


def unknown_names(
    rows: Sequence[ChildRow], routes: frozenset[str] | None, groups: frozenset[str] | None
) -> str | None:
    """Why a query kept nothing, when a `route:` or `group:` value it gives (a typo, most
    likely) names no child's route or group in this batch; None when each names one."""
    for field, wanted, have, where in (
        ("route", routes, {r.route.lower() for r in rows}, "on that route"),
        ("group", groups, {(r.group or "").lower() for r in rows} - {""}, "in that group"),
    ):
        for name in sorted((wanted or frozenset()) - have):
            known = one_line(", ".join(sorted(have)[:10]) or "none", 200)
            term = f"'{field}:{one_line(name, 60)}'"
            return f"{term}: no child of this batch is {where} ({field}s: {known})"
    return None


def waiting_said(rows: Sequence[ChildRow], ids: list[str]) -> None:
    """Continued children that wait for a slot (the pool is full; they go first once one
    frees): said, as "applied" alone read as if they ran again, their processes suspended
    still."""
    named = set(ids)
    waiting = [
        r.id
        for r in rows
        if r.id in named and r.status is ChildStatus.PAUSED and r.activity.text == CONTINUED_WAITING
    ]
    if waiting:
        shown = ", ".join(one_line(i, 60) for i in waiting[:20])
        more = f" and {len(waiting) - 20} more" if len(waiting) > 20 else ""
        console_for().print(Text(f"waiting for a slot, ahead of new work: {shown}{more}"))
