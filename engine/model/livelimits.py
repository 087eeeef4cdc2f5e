"""Live limits: a change to the pool size, a route's caps or the soft budget while a batch runs.

A change is a JSON-able mapping (what a client's request carries as its payload): only the keys
it names change; a route field or the soft budget set to None is removed ("off").

    {"pool_size": 8,
     "routes": {"claude": {"max_concurrent": 4, "rpm": 120, "tpm": None}},
     "soft_cost_usd": "10.00"}

`changed` checks one against the limits in force and returns the limits it makes, or raises
LimitError naming the field, so the dialog, the command line and the owner say the same thing.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Mapping
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from flightdeck.engine.errors import CommandError
from flightdeck.engine.inputs.bounds import MAX_CONCURRENT, MAX_COUNT, MAX_MONEY
from flightdeck.engine.inputs.messages import expected
from flightdeck.engine.model import Limits, RouteCaps
from flightdeck.engine.model.routes import ROUTE_FIELDS
from flightdeck.engine.money import fmt_usd
from flightdeck.engine.sanitize import one_line

if TYPE_CHECKING:
    from flightdeck.engine.inputs.settings import Route, Settings

# The settings are imported where they are used: a client command (`flightdeck stop`) checks
# its command here, and starts faster without them.

__all__ = [
    "ROUTE_FIELDS",
    "LimitError",
    "changed",
    "describe",
    "limits_from_json",
    "limits_json",
    "limits_of",
    "parse_count",
    "parse_money",
    "with_limits",
]

OFF = ("off", "none")  # what a field typed as text takes to mean "no limit"
# The largest value of each count, the config's own (settings/load.py); the pool has no "off".
_HIGHEST = {
    "pool_size": MAX_CONCURRENT,
    "max_concurrent": MAX_CONCURRENT,
    "rpm": MAX_COUNT,
    "tpm": MAX_COUNT,
}


class LimitError(CommandError):
    """A change that cannot be made; `field` names what is wrong (pool_size, route,
    max_concurrent, rpm, tpm, soft_cost_usd)."""

    field: str

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}", field)
        self.message = message


def limits_of(
    settings: Settings,
    routes: Mapping[str, object],
    pool_size: int,
    spend_known: Callable[[Route], bool],  # records/meter.py's: priced, or its CLI says its cost
) -> Limits:
    """The limits a batch starts with: its pool size, its routes' caps, its budgets."""
    caps = tuple(
        RouteCaps(name, r.max_concurrent, r.rpm, r.tpm, command=r.command is not None)
        for name in routes
        if (r := settings.routes.get(name)) is not None
    )
    budget = settings.budget
    unpriced = next(
        (n for n in routes if (r := settings.routes.get(n)) is not None and not spend_known(r)),
        None,
    )
    return Limits(
        pool_size, caps, budget.soft_cost_usd, budget.max_cost_usd, unpriced_route=unpriced
    )


def changed(limits: Limits, change: Mapping[str, Any]) -> Limits:
    """The limits `change` makes of `limits`; LimitError (nothing changed) for a bad value, an
    unknown route or key, a soft budget below 0 or above the hard budget, or no change."""
    if not isinstance(change, Mapping):  # None failed as "'NoneType' object is not iterable"
        raise LimitError("limits", expected("a table such as {'pool_size': 4}", change))
    unknown = sorted(set(change) - {"pool_size", "routes", "soft_cost_usd"})
    if unknown:
        raise LimitError(unknown[0], "not a limit that can be changed")
    if not change:
        raise LimitError("limits", "nothing to change")
    out = limits
    if "pool_size" in change:
        size = change["pool_size"]
        if not _count_ok("pool_size", size):
            raise _bad_count("pool_size", size)
        out = dataclasses.replace(out, pool_size=size)
    routes = change.get("routes", {})
    if not isinstance(routes, Mapping):
        raise LimitError("routes", "expected a table of routes")
    caps = {r.route: r for r in out.routes}
    for name, fields in routes.items():
        if name not in caps:
            known = ", ".join(caps) or "none"
            raise LimitError("route", f"the batch has no route {name!r} (its routes: {known})")
        if not isinstance(fields, Mapping) or not fields:
            raise LimitError("route", f"route {name!r}: name a limit to change")
        for key, value in fields.items():
            if key not in ROUTE_FIELDS:
                raise LimitError(key, "not a route limit that can be changed")
            if key not in caps[name].fields:  # accepted, it was listed and paced nothing
                raise LimitError(
                    key, f"route {name!r} runs a command, whose CLI paces its own calls"
                )
            if value is not None and not _count_ok(key, value):
                raise _bad_count(key, value)
        caps[name] = dataclasses.replace(caps[name], **dict(fields))
    out = dataclasses.replace(out, routes=tuple(caps.values()))
    if "soft_cost_usd" in change:
        soft = _money(change["soft_cost_usd"])
        if soft is not None and out.unpriced_route is not None:
            raise LimitError(
                "soft_cost_usd",
                f"cannot be enforced: no price is known for route {out.unpriced_route!r}",
            )
        hard = out.max_cost_usd
        if soft is not None and hard is not None and soft > hard:
            raise LimitError(
                "soft_cost_usd", f"must be at most the hard budget, max_cost_usd {fmt_usd(hard)}"
            )
        out = dataclasses.replace(out, soft_cost_usd=soft)
    return out


def parse_count(field: str, text: str) -> int | None:
    """A count typed as text (a dialog field, a command-line argument): None for "off" (a
    route's limit; the pool always has a size)."""
    text = text.strip()
    if text.lower() in OFF and field != "pool_size":
        return None
    try:
        value = int(text)
    except ValueError:
        raise _bad_count(field, text) from None
    if not _count_ok(field, value):
        raise _bad_count(field, value)
    return value


def _count_ok(field: str, value: object) -> bool:
    if not isinstance(value, int) or isinstance(value, bool):
        return False
    return 1 <= value <= _HIGHEST[field]


def _bad_count(field: str, got: object) -> LimitError:
    """A bad value of a count, whatever is wrong with it, said one way: its whole rule."""
    high = _HIGHEST[field]
    bound = f"{high:,}" if high == MAX_COUNT else str(high)  # as the config's checks say it
    off = "" if field == "pool_size" else " (or off)"
    shown = one_line(repr(got), 40)  # typed text: a terminal's, and maybe long
    return LimitError(field, f"must be a whole number between 1 and {bound}{off}, got {shown}")


def parse_money(field: str, text: str) -> str | None:
    """Dollars typed as text, as the change carries them (a string): None for "off"."""
    text = text.strip().removeprefix("$")
    if text.lower() in OFF:
        return None
    try:
        value = Decimal(text)
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite():  # inf and nan parse, but are no amount (inf is not "under 0")
        raise LimitError(field, f"expected dollars (such as 10 or 12.50) or off, got {text!r}")
    if value < 0:
        raise LimitError(field, f"must be 0 or more, got {text}")
    if value > MAX_MONEY:
        raise LimitError(field, f"must be at most ${MAX_MONEY:,}, got {text}")
    return str(value)


def describe(change: Mapping[str, Any]) -> str:
    """A change in words, for the report and the command line: "pool 8; route sim rpm 120,
    tpm off; soft budget off"."""
    parts = []
    if "pool_size" in change:
        parts.append(f"pool {change['pool_size']}")
    for name, fields in (change.get("routes") or {}).items():
        shown = ", ".join(f"{k} {'off' if v is None else v}" for k, v in fields.items())
        parts.append(f"route {name} {shown}")
    if "soft_cost_usd" in change:
        soft = _money(change["soft_cost_usd"])
        parts.append("soft budget " + ("off" if soft is None else fmt_usd(soft)))
    return "; ".join(parts)


def limits_json(limits: Limits) -> str:
    """The live limits as the batch's row keeps them (`Store.set_limits`)."""
    return json.dumps(
        {
            "pool_size": limits.pool_size,
            "routes": {r.route: _caps_json(r) for r in limits.routes},
            "soft_cost_usd": None if limits.soft_cost_usd is None else str(limits.soft_cost_usd),
            "max_cost_usd": None if limits.max_cost_usd is None else str(limits.max_cost_usd),
            "soft_held": limits.soft_held,
            "unpriced_route": limits.unpriced_route,
        }
    )


def limits_from_json(text: str) -> Limits:
    """The inverse of `limits_json`."""
    data = json.loads(text)
    return Limits(
        pool_size=int(data["pool_size"]),
        routes=tuple(
            RouteCaps(
                name,
                caps.get("max_concurrent"),
                caps.get("rpm"),
                caps.get("tpm"),
                command=bool(caps.get("command", False)),
            )
            for name, caps in data["routes"].items()
        ),
        soft_cost_usd=_money(data.get("soft_cost_usd")),
        max_cost_usd=_money(data.get("max_cost_usd")),
        soft_held=data.get("soft_held"),
        unpriced_route=data.get("unpriced_route"),
    )


def _caps_json(caps: RouteCaps) -> dict[str, Any]:
    out: dict[str, Any] = {f: getattr(caps, f) for f in ROUTE_FIELDS}
    if caps.command:  # said only when true: a row an older version wrote reads the same
        out["command"] = True
    return out


def with_limits(settings: Settings, limits: Limits) -> Settings:
    """`settings` with the routes' caps and the soft budget of `limits` (a resumed batch keeps
    what the operator changed)."""
    routes = dict(settings.routes)
    for caps in limits.routes:
        if caps.route in routes:
            routes[caps.route] = dataclasses.replace(
                routes[caps.route], max_concurrent=caps.max_concurrent, rpm=caps.rpm, tpm=caps.tpm
            )
    budget = dataclasses.replace(settings.budget, soft_cost_usd=limits.soft_cost_usd)
    return dataclasses.replace(settings, routes=routes, budget=budget)


def _money(value: object) -> Decimal | None:
    if value is None:
        return None
    try:
        out = Decimal(str(value))
    except InvalidOperation:
        raise LimitError("soft_cost_usd", f"expected dollars or off, got {value!r}") from None
    if not out.is_finite() or out < 0:
        raise LimitError("soft_cost_usd", f"must be 0 or more, got {value}")
    if out > MAX_MONEY:
        raise LimitError("soft_cost_usd", f"must be at most ${MAX_MONEY:,}, got {value}")
    return out
