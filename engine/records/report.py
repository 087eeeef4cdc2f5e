"""JSON and Markdown reports of a batch, built from the store."""

from __future__ import annotations

import json
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from flightdeck.engine.inputs.settings.stored import settings_from_json
from flightdeck.engine.limits import describe
from flightdeck.engine.model import ChildRow, ChildStatus, GroupFinished, RouteTotals, Totals
from flightdeck.engine.money import fmt_usd
from flightdeck.engine.records.attempts import markdown_lines, report_entries
from flightdeck.engine.records.forecast import forecast
from flightdeck.engine.records.loops import loop_records
from flightdeck.engine.records.meter import cache_saving, route_totals, totals_of
from flightdeck.engine.records.reader import StoreReader, no_batch
from flightdeck.engine.sanitize import one_line

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
    steers = reader.controls(batch_id, kind="steer")
    # A delegate's parent is kept as its "delegate" event.
    parents = {c: d for _, c, kind, d in reader.events(batch_id) if kind == "delegate" and c}
    stops = reader.stops(batch_id)
    flags, policy = loop_records(reader.events(batch_id))
    # A loop policy's steers are its own, listed with its steps, not among the operator's.
    by_policy = {r.id: r for r in steers if r.id in {p.get("receipt") for p in policy}}
    steers = [r for r in steers if r.id not in by_policy]
    pauses = [
        {"child_id": c, "at": _iso(ts), "action": kind, "detail": detail}
        for ts, c, kind, detail in reader.events(batch_id)
        if kind in PAUSE_EVENTS
    ]

    end = info.finished_ts if info.finished_ts is not None else time.time() if now is None else now
    totals = totals_of(children)
    per_route = route_totals(children)
    saved = _cache_saved(info.settings_json, per_route)
    recovery = _recovery(reader.events(batch_id))
    return {
        "batch_id": info.id,
        "name": info.name,
        "source": info.source,
        "status": info.status.value,
        "owner_pid": info.owner_pid,  # the process that ran it last (a resume's, after one)
        "created": _iso(info.created_ts),
        "finished": None if info.finished_ts is None else _iso(info.finished_ts),
        "elapsed_s": round(max(0.0, end - info.created_ts), 3),
        "pool_size": info.pool_size,
        "max_cost_usd": _money(info.max_cost_usd),
        "totals": {
            "children": totals.children,
            "completed": totals.completed,
            "failed": totals.failed,
            "stopped": totals.stopped,
            "paused": totals.paused,
            "running": totals.running,
            "queued": totals.queued,
            **_usage(totals),
            # what cache reads saved against the uncached input price (null: a price unknown)
            "cache_saved_usd": _money(_sum_known(saved.values())),
        },
        "routes": [
            {
                "route": r.route,
                "model": r.model,
                "children": r.totals.children,
                "completed": r.totals.completed,
                "failed": r.totals.failed,
                "stopped": r.totals.stopped,
                "running": r.totals.running,
                "queued": r.totals.queued,
                **_usage(r.totals),
                "cache_saved_usd": _money(saved.get(r.route)),
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
                "tokens_in": c.usage.input_tokens,
                "tokens_out": c.usage.output_tokens,
                "cache_read_tokens": c.usage.cache_read_tokens,
                "cache_write_tokens": c.usage.cache_write_tokens,
                "cost_usd": _money(c.cost_usd),
                "duration_s": None if c.duration_s is None else round(c.duration_s, 3),
                "error": c.error,
                "transcript": c.transcript,
                "attempt": c.attempt,
            }
            for c in children
        ],
        **report_entries(reader.events(batch_id), children),
        "groups": _groups(children),
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
        "limits": _limit_actions(reader.events(batch_id)),
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


def _recovery(events: Iterable[tuple[float, str | None, str, str]]) -> dict[str, Any]:
    """What resuming after a lost owner cost: children re-run (or left unknown) and what
    their lost attempts were billed (already in the totals: spent is spent)."""
    resumes = rerun = unknown = 0
    cost = Decimal(0)
    cost_unknown = 0
    for _ts, _child, kind, detail in events:
        if kind == "resumed":
            resumes += 1
        elif kind == "lost_attempt":
            lost = json.loads(detail)
            if lost.get("rerun"):
                rerun += 1
            else:
                unknown += 1
            if lost.get("cost_usd") is None:
                cost_unknown += 1
            else:
                cost += Decimal(lost["cost_usd"])
    return {
        "resumes": resumes,
        "rerun": rerun,
        "left_unknown": unknown,
        "lost_cost_usd": _money(cost),
        "lost_cost_unknown": cost_unknown,
    }


def _groups(children: list[ChildRow]) -> list[dict[str, Any]]:
    """Each completion unit, in the order of its first member: `open` while a member has not
    ended, else the unit's result as the engine announced it."""
    members: dict[str, list[ChildRow]] = {}
    for c in children:
        if c.group is not None:
            members.setdefault(c.group, []).append(c)
    out = []
    for group, rows in members.items():
        unit = GroupFinished.of(group, rows)
        ended = all(r.status.terminal for r in rows)
        ends = [r.finished_ts for r in rows if r.finished_ts is not None]
        out.append(
            {
                "group": group,
                "status": unit.status.value if ended else "open",
                "children": len(rows),
                "completed": sum(r.status is ChildStatus.COMPLETED for r in rows),
                "members": [{"id": r.id, "status": r.status.value} for r in rows],
                "cost_usd": _money(unit.cost_usd),
                "duration_s": round(unit.duration_s, 3) if ended else None,
                "finished": _iso(max(ends)) if ended and ends else None,
            }
        )
    return out


def _cache_saved(
    settings_json: str | None, per_route: Iterable[RouteTotals]
) -> dict[str, Decimal | None]:
    """What each route's cache reads saved, at the prices the batch ran with (kept in its row);
    None for a route whose price is unknown, or a batch from before the row kept them."""
    if settings_json is None:
        return {}
    routes = settings_from_json(settings_json).routes
    return {
        r.route: cache_saving(r.totals.usage, routes[r.route]) if r.route in routes else None
        for r in per_route
    }


def _sum_known(values: Iterable[Decimal | None]) -> Decimal | None:
    """The sum, or None if there is nothing to sum or any part is unknown."""
    parts = list(values)
    if not parts or any(v is None for v in parts):
        return None
    return sum((v for v in parts if v is not None), Decimal(0))


def _usage(totals: Totals) -> dict[str, Any]:
    """Tokens and cost of a batch or a route; the cost is null if any child's price is unknown,
    never the known part passed off as the whole."""
    usage = totals.usage
    return {
        "tokens_in": usage.input_tokens,
        "tokens_out": usage.output_tokens,
        "cache_read_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "cost_usd": None if totals.cost_unknown else _money(totals.cost_usd),
        "cost_known_usd": _money(totals.cost_usd),
        "cost_unknown_children": totals.cost_unknown,
    }


def render_json(report: Mapping[str, Any]) -> str:
    """The report as indented JSON (ASCII-escaped, so it is safe to print to a terminal)."""
    return json.dumps(report, indent=2) + "\n"


def render_markdown(report: Mapping[str, Any]) -> str:
    """The report as Markdown: a heading, then tables of the totals, the routes, the children."""
    totals = report["totals"]
    budget = report.get("max_cost_usd")
    lines = [
        f"# flightdeck batch {_text(report['name'])}",
        "",
        f"- id: `{_text(report['batch_id'])}`",
        f"- status: **{_text(report['status'])}**",
        f"- owner: pid {report.get('owner_pid', '—')}",
        f"- created: {report['created']}",
        f"- finished: {report['finished'] or '—'}",
        f"- elapsed: {_seconds(report['elapsed_s'])}",
        "",
        "## Totals",
        "",
        "| | total |",
        "|---|---:|",
        f"| children | {totals['children']} |",
        f"| completed | {totals['completed']} |",
        f"| failed | {totals['failed']} |",
        f"| stopped | {totals['stopped']} |",
        f"| running | {totals['running']} |",
        f"| queued | {totals['queued']} |",
        f"| input tokens | {totals['tokens_in']:,} |",
        f"| output tokens | {totals['tokens_out']:,} |",
        f"| cache read tokens | {totals['cache_read_tokens']:,} |",
        f"| cache write tokens | {totals['cache_write_tokens']:,} |",
        f"| cost | {_spent(totals)} |",
    ]
    if totals.get("cache_saved_usd"):
        lines.append(f"| cache saved | {_usd(totals['cache_saved_usd'])} |")
    if budget is not None:
        lines.append(f"| budget | {_usd(budget)} |")
    lines += _table(
        "Routes",
        "| route | model | children | completed | failed | stopped | tokens in | tokens out "
        "| cache read | cache write | cost |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        (_route_cells(r) for r in report["routes"]),
    )
    lines += _table(
        "Children",
        "| id | status | route | model | calls | tools | retries | tokens in | tokens out "
        "| cache read | cost | duration | goal | error |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
        (_child_cells(c) for c in report["children"]),
    )
    if report["groups"]:
        lines += _table(
            "Groups",
            "| group | status | children | completed | cost | duration | members |",
            "|---|---|---:|---:|---:|---:|---|",
            (_group_cells(g) for g in report["groups"]),
        )
    lines += _forecast_lines(report.get("forecast") or {})
    lines += _operator(
        report["steers"], report["stops"], report.get("limits") or [], report.get("pauses") or []
    )
    lines += _loop_lines(report.get("loops") or [], report.get("loop_policy") or [])
    lines += markdown_lines(dict(report), _cell)
    recovery = report.get("recovery") or {}
    if recovery.get("resumes"):
        lost = _usd(recovery["lost_cost_usd"]) + (
            f" (+{recovery['lost_cost_unknown']} at an unknown price)"
            if recovery["lost_cost_unknown"]
            else ""
        )
        lines += [
            "",
            "## Recovery",
            "",
            f"- resumed after a lost owner: {recovery['resumes']} time(s)",
            f"- children re-run: {recovery['rerun']}; left unknown: {recovery['left_unknown']}",
            f"- their lost attempts cost: {lost} (counted in the totals)",
        ]
    return "\n".join(lines) + "\n"


def _forecast_lines(ahead: Mapping[str, Any]) -> list[str]:
    """While children remain, the projected cost at completion; any lost attempts' cost apart."""
    lines = []
    if ahead.get("remaining"):
        if ahead["unpriced_children"]:
            projected = f"unknown ({ahead['unpriced_children']} without a price)"
        elif ahead["projected_usd"] is None:
            projected = "— (no child has finished yet)"
        else:
            projected = (
                f"{_usd(ahead['projected_usd'])} (range {_usd(ahead['low_usd'])} to "
                f"{_usd(ahead['high_usd'])}: the finished costs' 25th to 75th percentile)"
            )
        lines.append(f"- projected cost at completion: {projected}")
        lines.append(f"- children not finished: {ahead['remaining']} of "
                     f"{ahead['remaining'] + ahead['finished']}")  # fmt: skip
    if ahead.get("lost_cost_usd") or ahead.get("lost_cost_unknown"):
        lost = _usd(ahead["lost_cost_usd"] or 0) + (
            f" (+{ahead['lost_cost_unknown']} at an unknown price)"
            if ahead["lost_cost_unknown"]
            else ""
        )
        lines.append(f"- lost attempts (re-runs after a lost owner): {lost}, in the spend")
    return ["", "## Forecast", "", *lines] if lines else []


def _table(title: str, header: str, align: str, rows: Iterable[list[str]]) -> list[str]:
    """A Markdown section: its heading, then a table of rows already made safe (`_cell`)."""
    return ["", f"## {title}", "", header, align, *("| " + " | ".join(r) + " |" for r in rows)]


def _operator(
    steers: list[dict[str, Any]],
    stops: list[dict[str, Any]],
    limits: list[dict[str, Any]],
    pauses: list[dict[str, Any]],
) -> list[str]:
    """The operator's steers (with their receipts), stops, pauses and continues, changes to the
    limits, and the soft budget's holds, in the order they happened."""
    if not steers and not stops and not limits and not pauses:
        return ["", "## Operator", "", "No steers or stops."]
    rows = [
        (
            s["sent"],
            [
                s["sent"],
                _cell(s["child_id"]),
                "steer (interrupt now)" if s["mode"] == "now" else "steer (at next turn)",
                _cell(s["message"], GOAL_WIDTH),
                s["receipt"] + (f" {s['settled']}" if s["settled"] else ""),
            ],
        )
        for s in steers
    ]
    rows += [
        (s["requested"], [s["requested"], _cell(s["child_id"]), "stop", _cell(s["reason"]), ""])
        for s in stops
    ]
    rows += [
        (
            a["time"],
            [a["time"], "—", "limits", _cell(describe(a["change"])), ""]
            if a["action"] == "limits"
            else [a["time"], "—", "soft budget hold", _cell(a["reason"]), ""],
        )
        for a in limits
    ]
    rows += [
        (
            p["at"],
            [
                p["at"],
                "(admission)" if p["child_id"] is None else _cell(p["child_id"]),
                PAUSE_EVENTS[p["action"]],
                "",
                "",
            ],
        )
        for p in pauses
    ]
    rows.sort(key=lambda r: r[0])  # ISO times of one zone sort as times; ties keep steers first
    return _table(
        "Operator",
        "| time | child | action | message or reason | receipt |",
        "|---|---|---|---|---|",
        (cells for _, cells in rows),
    )


def _loop_lines(flags: list[dict[str, Any]], steps: list[dict[str, Any]]) -> list[str]:
    """Children flagged as looping, and what a route's loop policy did about it."""
    lines: list[str] = []
    if flags:
        lines += _table(
            "Loops",
            "| flagged | child | kind | evidence | cleared |",
            "|---|---|---|---|---|",
            (
                [
                    f["flagged"],
                    _cell(f["child_id"]),
                    f["kind"],
                    _cell(f["summary"]),
                    f["cleared"] or "",
                ]
                for f in flags
            ),
        )
    if steps:
        lines += _table(
            "Loop policy",
            "| time | child | step | message or reason | receipt |",
            "|---|---|---|---|---|",
            (
                [
                    s["at"],
                    _cell(s["child_id"]),
                    _cell(s["step"]),
                    _cell(s["message"] or s["reason"] or "", GOAL_WIDTH),
                    s["receipt"] or "",
                ]
                for s in steps
            ),
        )
    return lines


def _group_cells(g: Mapping[str, Any]) -> list[str]:
    cost, duration = g["cost_usd"], g["duration_s"]
    return [
        _cell(g["group"]),
        g["status"],
        str(g["children"]),
        str(g["completed"]),
        "unknown" if cost is None else _usd(cost),
        "—" if duration is None else _seconds(duration),
        _cell(" ".join(f"{m['id']} ({m['status']})" for m in g["members"]), GOAL_WIDTH),
    ]


def _route_cells(r: Mapping[str, Any]) -> list[str]:
    return [
        _cell(r["route"]),
        _cell(r["model"]),
        str(r["children"]),
        str(r["completed"]),
        str(r["failed"]),
        str(r["stopped"]),
        f"{r['tokens_in']:,}",
        f"{r['tokens_out']:,}",
        f"{r['cache_read_tokens']:,}",
        f"{r['cache_write_tokens']:,}",
        _spent(r),
    ]


def _child_cells(c: Mapping[str, Any]) -> list[str]:
    return [
        _cell(c["id"]),
        _cell(c["status"]),
        _cell(c["route"]),
        _cell(c["model"]),
        str(c["api_calls"]),
        str(c["tool_calls"]),
        str(c["retries"]),
        f"{c['tokens_in']:,}",
        f"{c['tokens_out']:,}",
        f"{c['cache_read_tokens']:,}",
        "unknown" if c["cost_usd"] is None else _usd(c["cost_usd"]),
        "—" if c["duration_s"] is None else _seconds(c["duration_s"]),
        _cell(c["goal"], GOAL_WIDTH),
        "" if c["error"] is None else _cell(c["error"], ERROR_WIDTH),
    ]


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds")


def _money(value: Decimal | None) -> float | None:
    # Not rounded: costs have more decimals than micro-dollars (a cached token costs $1e-7),
    # and children rounded one by one stopped adding up to the total (5,000 of them: $4.0795
    # against $4.0791). A float holds these few significant digits exactly as written.
    return None if value is None else float(value)


def _spent(entry: Mapping[str, Any]) -> str:
    """A batch's or a route's cost: `unknown` when only children of unknown price spent
    anything, since a known $0 beside them is no total."""
    known, unknown = entry["cost_known_usd"], entry["cost_unknown_children"]
    if not unknown:
        return _usd(known)
    if not known:
        return "unknown"
    return f"{_usd(known)} + unknown for {unknown} {'child' if unknown == 1 else 'children'}"


def _usd(value: float) -> str:
    # The JSON report's float, back to the exact decimal it was written from (`_money`).
    return fmt_usd(Decimal(repr(value)))


def _seconds(value: float) -> str:
    if value < 60:
        return f"{value:.1f}s"
    minutes, seconds = divmod(int(value), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{seconds:02d}s" if hours else f"{minutes}m{seconds:02d}s"


def _text(value: object, width: int | None = None) -> str:
    """Untrusted text for Markdown prose: one sanitized line, no raw HTML, no link or image.

    Only what can make Markdown fetch or point somewhere is escaped (a bare URL is left as
    written: a renderer that autolinks links it anyway): emphasis and code spans in a goal are
    harmless, and the report is read raw in a terminal as often as rendered.
    """
    # Backslashes first, so a trailing `\` cannot escape what follows it.
    text = one_line(str(value), width).replace("\\", "\\\\")
    return text.replace("[", "\\[").replace("]", "\\]").replace("<", "&lt;")


def _cell(value: object, width: int | None = None) -> str:
    """Untrusted text for a table cell: one sanitized line that cannot break the table."""
    return _text(value, width).replace("|", "\\|") or " "
