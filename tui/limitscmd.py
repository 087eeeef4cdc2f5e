"""`flightdeck limits`: a batch's live limits printed (or those it ended with), or changed
through its owner."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from flightdeck.engine.sanitize import one_line
from flightdeck.tui.client import batch_client, sent, until_applied
from flightdeck.tui.console import console_for
from flightdeck.tui.exitcodes import ExitCode
from flightdeck.tui.fmt import fmt_cost, limits_ended
from flightdeck.tui.usage import UsageError
from rich.text import Text

if TYPE_CHECKING:  # imported when the command runs: `--help` stays fast
    from flightdeck.engine.attached.client import Client
    from flightdeck.engine.model import Limits, RouteHeadroom


# The command line's name for each field of a change (engine/model/livelimits.py), for its errors.
_LIMIT_ARGS = {
    "pool_size": "--pool",
    "route": "--route",
    "max_concurrent": "--max-concurrent",
    "rpm": "--rpm",
    "tpm": "--tpm",
    "soft_cost_usd": "--soft-cost",
}


def cmd_limits(args: argparse.Namespace) -> ExitCode:
    """`flightdeck limits`: a batch's live limits printed (and the limits learned from the
    provider's headers; of a batch not running, after a line saying so), or changed (the owner
    applies the change at once; a bad one, or one for a batch that has ended, is a usage error
    naming why)."""
    from flightdeck.engine.commands import LimitError, SetLimits, changed, describe

    with batch_client(args) as client:
        current = client.limits()
        info = client.info()
        status = info.status.value if info is not None else "running"
        ended = status not in ("running", "abandoned")  # nothing left to apply a change
        try:
            change = _limit_change(args, current)
            if not change:
                if info is not None and status != "running":
                    _say_not_running(client, status, info.owner_pid)
                # An ended batch holds nothing any more; an abandoned one's hold outlives resume.
                held = info.held if info is not None and not ended else None
                _print_limits(current, held, client.routes())
                return ExitCode.OK
            changed(current, change)
        except LimitError as exc:
            field = _LIMIT_ARGS.get(exc.field, exc.field)
            raise UsageError(None, None, field, exc.message) from None
        if ended:
            raise UsageError(None, None, None, one_line(limits_ended(client.batch_id, status)))
        rid = sent(client, SetLimits(change))
        code = until_applied(client, rid, f"limits applied: {one_line(describe(change))}")
        after = client.info() if code is ExitCode.OK else None
        if after is not None and after.held:  # a soft budget under what is spent holds at once
            console_for().print(Text(f"held: {one_line(after.held)}"))
        return code


def _say_not_running(client: Client, status: str, pid: int) -> None:
    """On stderr (stdout keeps the limits' lines, for scripts): these are not a running
    batch's limits, and why."""
    from flightdeck.tui.client import abandoned, say_error

    if status == "abandoned":
        say_error(abandoned(client, pid) + "; its limits when the owner died:")
    else:
        say_error(f"batch {client.batch_id} has ended ({status}); its limits when it ended:")


def _limit_change(args: argparse.Namespace, current: Limits) -> dict[str, object]:
    """The change the arguments ask for ({} for none); LimitError naming a bad one."""
    from flightdeck.engine.commands import LimitError, parse_count, parse_money

    change: dict[str, object] = {}
    if args.pool is not None:
        change["pool_size"] = parse_count("pool_size", args.pool)
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


def _print_limits(limits: Limits, held: str | None, gauges: tuple[RouteHeadroom, ...]) -> None:
    console = console_for()
    console.print(Text(f"pool {limits.pool_size}"))
    learned = {hr.route: hr for hr in gauges}
    for r in limits.routes:
        caps = ", ".join(f"{name} {_cap(getattr(r, name))}" for name in r.fields)
        line = f"route {one_line(r.route, 60)}: {caps}"
        hr = learned.get(r.route)
        # What the provider's headers taught the route (lower than any configured limit).
        taught = (("rpm", hr.rpm), ("tpm", hr.tpm)) if hr is not None else ()
        found = [
            f"{name} {limit.per_minute}"
            for name, limit in taught
            if limit is not None and limit.source == "learned"
        ]
        if found:
            line += f" (learned from the provider: {', '.join(found)})"
        console.print(Text(line))
    soft = "off" if limits.soft_cost_usd is None else fmt_cost(limits.soft_cost_usd)
    hard = "none" if limits.max_cost_usd is None else fmt_cost(limits.max_cost_usd)
    console.print(Text(f"soft budget {soft} (hard budget {hard})"))
    if held:
        console.print(Text(f"held: {one_line(held)}"))
