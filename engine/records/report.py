"""A batch's report built from the store, and as JSON (markdown.py renders it as Markdown)."""

from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from collections.abc import Container, Iterable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, NamedTuple

from flightdeck.engine.inputs.settings.stored import settings_from_json
from flightdeck.engine.model import (
    BatchStatus,
    ChildRow,
    ChildStatus,
    GroupFinished,
    RouteTotals,
    Totals,
    Usage,
)
from flightdeck.engine.model.units import unit_rows
from flightdeck.engine.records.attempts import report_entries
from flightdeck.engine.records.faults import disk_full
from flightdeck.engine.records.forecast import forecast, lost_attempts
from flightdeck.engine.records.live import unreported
from flightdeck.engine.records.loops import loop_records
from flightdeck.engine.records.meter import cache_saving, route_totals, totals_of
from flightdeck.engine.records.needlog import need_records
from flightdeck.engine.records.reader import SCHEDULES_END, StoreReader, no_batch
from flightdeck.engine.records.rows import own_tasks
from flightdeck.engine.sanitize import each_string, valid_text

GOAL_WIDTH = 80
ERROR_WIDTH = 120


def build_report(
    reader: StoreReader, batch_id: str | None = None, *, now: float | None = None
) -> dict[str, Any]:
    """A JSON-ready report of one batch (the latest when `batch_id` is None)."""
    if batch_id is None:
        batch_id = reader.latest_batch_id()
        if batch_id is None:
            raise LookupError(f"no batches in {reader.path}")
    info = reader.batch(batch_id)
    if info is None:
        raise LookupError(no_batch(batch_id, reader.path.parent))
    children = reader.children(batch_id, results=False)  # the report shows no answer
    if info.status is BatchStatus.RUNNING:
        children = _with_pending(children, reader.live(batch_id))
    steers = reader.controls(batch_id, kind="steer")
    events = reader.events(batch_id)  # read once: every part of the report below reads them
    # A delegate's parent is kept as its "delegate" event.
    parents = {c: d for _, c, kind, d in events if kind == "delegate" and c}
    stops = reader.stops(batch_id)
    # What ended the schedules, a budget or a cron's last date (a stop-all's is among `stops`).
    waves_end = [d for _, c, kind, d in events if kind == SCHEDULES_END and not c]
    flags, policy = loop_records(events)
    # A loop policy's steers are its own, listed with its steps, not among the operator's.
    by_policy = {r.id: r for r in steers if r.id in {p.get("receipt") for p in policy}}
    steers = [r for r in steers if r.id not in by_policy]
    pauses = [
        {"child_id": c, "at": _iso(ts), "action": kind, "detail": detail}
        for ts, c, kind, detail in events
        if kind in PAUSE_EVENTS
    ]

    end = info.finished_ts if info.finished_ts is not None else time.time() if now is None else now
    # The disk is full now: the store may have given up there, its last records kept out (no
    # row can say so, none could be written): its elapsed time is then a lower bound.
    full = info.status is BatchStatus.ABANDONED and disk_full(reader.path.parent)
    totals = totals_of(children)
    per_route = route_totals(children)
    # Children whose tokens nobody counted (a command whose CLI reports no usage), by route.
    uncounted = Counter(c.route for c in children if c.tokens_unknown)
    saved = _cache_saved(info.settings_json, per_route, uncounted)
    recovery = _recovery(events)
    return {
        "batch_id": info.id,
        "name": info.name,
        "source": info.source,
        "status": info.status.value,
        "owner_pid": info.owner_pid,  # the process that ran it last (a resume's, after one)
        "created": _iso(info.created_ts),
        "finished": None if info.finished_ts is None else _iso(info.finished_ts),
        "elapsed_s": round(max(0.0, end - info.created_ts), 3),
        "disk_full": full,
        "pool_size": info.pool_size,
        "max_cost_usd": _money(info.max_cost_usd),
        "schedules_end": waves_end[0] if waves_end else None,
        "totals": {
            "children": totals.children,
            "completed": totals.completed,
            "failed": totals.failed,
            "stopped": totals.stopped,
            # delegates of their parents' earlier attempts: history, in no outcome above
            "superseded": totals.superseded,
            "paused": totals.paused,
            "running": totals.running,
            "queued": totals.queued,
            **_usage(totals, sum(uncounted.values())),
            # what cache reads saved against the uncached input price (null: a part unknown)
            **_saved(saved.values()),
        },
        "routes": [
            {
                "route": r.route,
                "model": r.model,
                "children": r.totals.children,
                "completed": r.totals.completed,
                "failed": r.totals.failed,
                "stopped": r.totals.stopped,
                "superseded": r.totals.superseded,
                "paused": r.totals.paused,
                "running": r.totals.running,
                "queued": r.totals.queued,
                **_usage(r.totals, uncounted[r.route]),
                **_saved([saved[r.route]]),
            }
            for r in per_route
        ],
        "children": [
            {
                "id": c.id,
                "status": c.status.value,
                "group": c.group,
                "parent": parents.get(c.id),
                "goal": c.goal,
                "route": c.route,
                "model": c.model,
                "node": c.node,
                "api_calls": c.activity.api_calls,
                "tool_calls": c.activity.tool_calls,
                "retries": c.activity.retries,
                # null, never 0, when nobody counted them
                **{k: None if c.tokens_unknown else v for k, v in _tokens(c.usage).items()},
                "cost_usd": _money(c.cost_usd),
                # what is known of it: all of it, or, where `cost_usd` is null, the part known
                # (its agent CLI's turns reported before a stop cut one short)
                "cost_known_usd": _money(c.cost_known_usd),
                # its agent CLI's turn under way has reported no usage yet: more to come
                "cost_pending": c.cost_pending,
                "duration_s": None if c.duration_s is None else round(c.duration_s, 3),
                "error": c.error,
                "transcript": c.transcript,
                "attempt": c.attempt,
                "superseded": c.superseded,
            }
            for c in children
        ],
        **report_entries(events, children),
        "groups": _groups(children, own_tasks(info.spec_json)),
        "steers": [
            {
                "id": r.id,
                "child_id": r.child_id,
                "message": r.message,
                "mode": "now" if r.now else "next_turn",
                "receipt": r.state.value,
                "sent": _iso(r.created_ts),
                "settled": None if r.settled_ts is None else _iso(r.settled_ts),
            }
            for r in steers
        ],
        "stops": [
            {"child_id": s.child_id, "requested": _iso(s.ts), "reason": s.reason} for s in stops
        ],
        # The operator's pauses and continues, of children and (child null) of admission.
        "pauses": pauses,
        "forecast": _forecast(children, recovery),
        "recovery": recovery,
        "loops": [
            {
                "child_id": f["child_id"],
                "flagged": _iso(f["flagged_ts"]),
                "kind": f["kind"],
                "summary": f["summary"],
                "cleared": None if f["cleared_ts"] is None else _iso(f["cleared_ts"]),
            }
            for f in flags
        ],
        "loop_policy": [
            {
                "child_id": p["child_id"],
                "at": _iso(p["ts"]),
                "step": p.get("step"),
                "message": p.get("message"),
                "reason": p.get("reason"),
                "receipt": by_policy[p["receipt"]].state.value
                if p.get("receipt") in by_policy
                else None,
            }
            for p in policy
        ],
        # The operator's changes to the live limits, and the soft budget's holds, in order.
        "limits": _limit_actions(events),
        # Questions asked and answered, tools denied, entries cleared (the "needs you" queue).
        "needs": need_records(events, _iso),
    }


LIMIT_EVENTS = ("limits", "soft_budget_hold")


def _limit_actions(events: Iterable[tuple[float, str | None, str, str]]) -> list[dict[str, Any]]:
    out = []
    for ts, _child, kind, detail in events:
        if kind in LIMIT_EVENTS:
            data = json.loads(detail)
            if kind == "limits":
                out.append({"time": _iso(ts), "action": "limits", "change": data["change"]})
            else:
                out.append({"time": _iso(ts), "action": "soft_budget_hold", **data})
    return out


# The events an operator's pause or continue records, and how the report names each.
PAUSE_EVENTS = {
    "pause": "pause",
    "continue": "continue",
    "pause_admission": "pause admission",
    "continue_admission": "continue admission",
}


def _forecast(children: list[ChildRow], recovery: Mapping[str, Any]) -> dict[str, Any]:
    """The projected cost at completion (engine/records/forecast.py says how), and beside it
    what lost attempts cost (already in the spend: spent is spent)."""
    ahead = forecast(children)
    return {
        "finished": ahead.finished,
        "remaining": ahead.remaining,
        "unpriced_children": ahead.unpriced,
        "projected_usd": _money(ahead.projected_usd),
        "low_usd": _money(ahead.low_usd),
        "high_usd": _money(ahead.high_usd),
        "lost_cost_usd": recovery["lost_cost_usd"],
        "lost_cost_unknown": recovery["lost_cost_unknown"],
    }


def _with_pending(children: list[ChildRow], live: str | None) -> list[ChildRow]:
    """The rows with the owner's live word on which agent CLI turns have reported no usage
    yet (the stored rows do not keep it): a Codex child mid-turn is `$0.42+?`, never `$0.42`
    as if its turn were free, as the TUI shows it."""
    waiting = unreported(live)
    return [
        dataclasses.replace(c, activity=dataclasses.replace(c.activity, unreported=True))
        if c.status.live and c.id in waiting
        else c
        for c in children
    ]


def _recovery(events: Iterable[tuple[float, str | None, str, str]]) -> dict[str, Any]:
    """What resuming after a lost owner cost: children re-run (or left unknown) and what
    their lost attempts were billed (already in the totals: spent is spent)."""
    events = list(events)
    resumes = rerun = unknown = 0
    for _ts, _child, kind, detail in events:
        if kind == "resumed":
            resumes += not json.loads(detail).get("reopened")  # a retry's reopen lost nothing
        elif kind == "lost_attempt":
            if json.loads(detail).get("rerun"):
                rerun += 1
            else:
                unknown += 1
    lost = lost_attempts(events)  # each attempt's own cost, not what was carried into it
    return {
        "resumes": resumes,
        "rerun": rerun,
        "left_unknown": unknown,
        "lost_cost_usd": _money(lost.cost_usd),
        "lost_cost_unknown": lost.unknown,
    }


def _groups(children: list[ChildRow], own: Container[str]) -> list[dict[str, Any]]:
    """Each completion unit (model/units.py says who is in one, as for the engine's), in the
    order of its first member: `open` while a child of it (a member or a delegate of one) has
    not ended, else the unit's result as the engine announced it. `children` counts the
    members; their delegates' spend is in the unit's cost."""
    grouped = unit_rows(children, own)
    out = []
    for group, rows in grouped.items():
        unit = GroupFinished.of(group, rows)
        ended = all(r.status.terminal for r in rows)
        ends = [r.finished_ts for r in rows if r.finished_ts is not None]
        out.append(
            {
                "group": group,
                "status": unit.status.value if ended else "open",
                "children": len(unit.members),
                "completed": sum(r.status is ChildStatus.COMPLETED for r in unit.members),
                "members": [{"id": r.id, "status": r.status.value} for r in unit.members],
                "delegates": [{"id": r.id, "status": r.status.value} for r in unit.delegates],
                "cost_usd": _money(unit.cost_usd),
                "cost_known_usd": _money(unit.cost_known_usd),
                "duration_s": round(unit.duration_s, 3) if ended else None,
                "finished": _iso(max(ends)) if ended and ends else None,
            }
        )
    return out


class Saving(NamedTuple):
    """What a route's cache reads saved: the part known, and whether a part is unknown."""

    known: Decimal
    unknown: bool


def _cache_saved(
    settings_json: str | None, per_route: Iterable[RouteTotals], uncounted: Mapping[str, int]
) -> dict[str, Saving]:
    """What each route's cache reads saved, at the prices the batch ran with (kept in its row).
    A part is unknown for a route whose price is unknown or some of whose children's tokens
    went uncounted, and for every route of a batch from before the row kept its prices."""
    routes = {} if settings_json is None else settings_from_json(settings_json).routes
    out = {}
    for r in per_route:
        route = routes.get(r.route)
        saving = cache_saving(r.totals.usage, route) if route is not None else None
        # Uncounted children add no tokens: what the counted ones saved is still known.
        unknown = saving is None or bool(uncounted.get(r.route))
        out[r.route] = Saving(saving or Decimal(0), unknown)
    return out


def _saved(parts: Iterable[Saving]) -> dict[str, Any]:
    """`cache_saved_usd`, null if any part is unknown (never the known part passed off as the
    whole), and `cache_saved_known_usd`: as a cost's `cost_usd` and `cost_known_usd`."""
    parts = list(parts)
    known = sum((p.known for p in parts), Decimal(0))
    return {
        "cache_saved_usd": None if not parts or any(p.unknown for p in parts) else _money(known),
        "cache_saved_known_usd": _money(known),
    }


def _tokens(usage: Usage) -> dict[str, int]:
    return {
        "tokens_in": usage.input_tokens,
        "tokens_out": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
    }


def _usage(totals: Totals, uncounted: int) -> dict[str, Any]:
    """Tokens and cost of a batch or a route: the tokens counted, and how many children's went
    uncounted; the cost is null if any child's price is unknown, never the known part passed
    off as the whole."""
    return {
        **_tokens(totals.usage),
        "tokens_unknown_children": uncounted,
        "cost_usd": None if totals.cost_unknown else _money(totals.cost_usd),
        "cost_known_usd": _money(totals.cost_usd),
        "cost_unknown_children": totals.cost_unknown,
        "cost_pending_children": totals.pending,  # turns under way, not reported yet
    }


def render_json(report: Mapping[str, Any]) -> str:
    """The report as indented JSON (ASCII-escaped, so it is safe to print to a terminal). Every
    string is made valid Unicode first: a lone surrogate (a model's JSON escape, kept as such in
    an event's JSON detail) would be written `\\ud800`, which strict parsers (jq) refuse."""
    return json.dumps(each_string(report, valid_text), indent=2) + "\n"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds")


def _money(value: Decimal | None) -> float | None:
    # Not rounded: costs have more decimals than micro-dollars (a cached token costs $1e-7),
    # and children rounded one by one stopped adding up to the total (5,000 of them: $4.0795
    # against $4.0791). A float holds these few significant digits exactly as written.
    return None if value is None else float(value)
