"""The owner's live figures, for views attached from another process: what the in-process view
has that the durable rows do not keep.

Calls in flight (estimated tokens and cost until billed), retry notices, the route gauges (429s,
pauses, rpm/tpm paced to and learned, headroom), the engine's problem sentence and the routes
whose children take no steer. The owner replaces its batch's one row of the `live` table with
this JSON on its progress tick when it changed (control/liverows.py: LIVE_EVERY_S), in the
same writer transactions as the children's rows, so a reader gets both from one snapshot. It is
not a record: the children's rows and the events are what happened; this is only "now".
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from flightdeck.engine.model import Activity, ChildRow, RouteHeadroom, RouteLimit, Usage, record

__all__ = ["ChildLive", "Live", "child_live", "live_fields", "live_from_json", "live_json"]


@record
class ChildLive:
    """One alive child's figures that are not stored in its row."""

    in_flight: Usage
    in_flight_cost_usd: Decimal | None
    retry_reason: str | None = None
    retrying: bool = False
    last_turn: bool = False
    # The tokens its row had billed when this was published: `resume` bills the call in flight
    # only to a row still at that total (one billed since has the call in it already).
    billed_tokens: int | None = None
    unreported: bool = False  # its agent CLI's turn under way has reported no usage yet


@record
class Live:
    """A batch's live figures: its alive children's, its routes', its problem."""

    children: Mapping[str, ChildLive] = dataclasses.field(default_factory=dict)
    routes: tuple[RouteHeadroom, ...] = ()
    problem: str | None = None
    unsteerable: tuple[str, ...] = ()  # routes whose children take no steer


def child_live(row: ChildRow) -> ChildLive | None:
    """What `row` has beyond its stored columns; None when that is nothing."""
    a = row.activity
    if not (row.in_flight.total or a.retry_reason or a.retrying or a.last_turn or a.unreported):
        return None
    return ChildLive(
        row.in_flight,
        row.in_flight_cost_usd,
        a.retry_reason,
        a.retrying,
        a.last_turn,
        unreported=a.unreported,
    )


def live_fields(activity: Activity, live: ChildLive | None, steerable: bool) -> dict[str, Any]:
    """What a row read from the store (its stored `activity`) takes from the live figures
    (`live`: none in flight), as the fields to set (none when it has nothing the stored row
    lacks)."""
    fields: dict[str, Any] = {} if steerable else {"steerable": False}
    if live is not None:
        if live.retry_reason or live.retrying or live.last_turn or live.unreported:
            fields["activity"] = dataclasses.replace(  # (most calls only stream)
                activity,
                retry_reason=live.retry_reason,
                retrying=live.retrying,
                last_turn=live.last_turn,
                unreported=live.unreported,
            )
        fields["in_flight"] = live.in_flight
        fields["in_flight_cost_usd"] = live.in_flight_cost_usd
    return fields


def live_json(
    rows: Iterable[ChildRow],
    routes: tuple[RouteHeadroom, ...],
    problem: str | None,
    unsteerable: Iterable[str],
) -> str:
    """The live figures of these alive children, routes and problem, as the `live` row keeps
    them (compact: a child with nothing live is left out)."""
    children: dict[str, list[Any]] = {}
    for row in rows:
        live = child_live(row)
        if live is not None:
            u, cost = live.in_flight, live.in_flight_cost_usd
            children[row.id] = [
                u.input_tokens,
                u.output_tokens,
                u.cache_read_tokens,
                u.cache_write_tokens,
                None if cost is None else str(cost),
                live.retry_reason,
                live.retrying,
                live.last_turn,
                row.usage.total,
                live.unreported,
            ]
    body = {
        "children": children,
        "routes": [_plain(hr) for hr in routes],
        "problem": problem,
        "unsteerable": sorted(unsteerable),
    }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"))


def live_from_json(text: str) -> Live:
    """The inverse of `live_json`."""
    data = json.loads(text)
    children = {
        cid: ChildLive(
            Usage(int(v[0]), int(v[1]), int(v[2]), int(v[3])),
            None if v[4] is None else Decimal(v[4]),
            v[5],
            bool(v[6]),
            bool(v[7]),
            int(v[8]) if len(v) > 8 else None,  # an older owner's figures have none
            len(v) > 9 and bool(v[9]),
        )
        for cid, v in data.get("children", {}).items()
    }
    return Live(
        children=children,
        routes=tuple(_headroom(r) for r in data.get("routes", ())),
        problem=data.get("problem"),
        unsteerable=tuple(data.get("unsteerable", ())),
    )


def _plain(hr: RouteHeadroom) -> dict[str, Any]:
    out = {f.name: getattr(hr, f.name) for f in dataclasses.fields(hr)}
    for name in ("rpm", "tpm"):
        limit = out[name]
        out[name] = None if limit is None else [limit.per_minute, limit.source]
    return out


def _headroom(data: dict[str, Any]) -> RouteHeadroom:
    known = {f.name for f in dataclasses.fields(RouteHeadroom)}
    values = {k: v for k, v in data.items() if k in known}
    for name in ("rpm", "tpm"):
        if values.get(name) is not None:
            values[name] = RouteLimit(int(values[name][0]), values[name][1])
    return RouteHeadroom(**values)


def unreported(text: str | None) -> frozenset[str]:
    """The children whose agent CLI's turn under way has reported no usage yet, in the live
    figures `text` an owner published (None: none published); the stored rows do not keep it."""
    if text is None:
        return frozenset()
    return frozenset(cid for cid, c in live_from_json(text).children.items() if c.unreported)
