"""A batch's report (report.py builds it from the store) as Markdown: tables, one line each."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

from flightdeck.engine.model.livelimits import describe
from flightdeck.engine.money import fmt_usd
from flightdeck.engine.records.attempts import markdown_lines
from flightdeck.engine.records.needlog import need_rows
from flightdeck.engine.records.report import ERROR_WIDTH, GOAL_WIDTH, PAUSE_EVENTS
from flightdeck.engine.sanitize import one_line


def render_markdown(report: Mapping[str, Any], resume: str | None = None) -> str:
    """The report as Markdown: a heading, then tables of the totals, the routes, the children.
    `resume`: the command that runs an abandoned batch on, naming its state folder (the caller
    knows it; the report does not), else `flightdeck resume BATCH_ID` alone."""
    totals = report["totals"]
    budget = report.get("max_cost_usd")
    # An owner that died left its running children's rows `running`: nothing runs them now.
    died = report["status"] == "abandoned"
    # Its owner died; or, its disk full now, the store may have given up first (no row says).
    full = bool(report.get("disk_full"))
    cause = "its owner ended" if full else "the owner died"
    lines = [
        f"# flightdeck batch {_text(report['name'])}",
        "",
        f"- id: `{_text(report['batch_id'])}`",
        f"- status: **{_text(report['status'])}**" + (_died(report, resume) if died else ""),
        f"- owner: pid {report.get('owner_pid', '—')}",
        f"- created: {report['created']}",
        # An abandoned batch never finished: its time is its owner's last heartbeat.
        f"- {'owner last heard from' if died else 'finished'}: {report['finished'] or '—'}",
        f"- elapsed: {_seconds(report['elapsed_s'])}{' at least' if full and died else ''}",
        *([f"- schedules ended: {_text(ended)}"] if (ended := report.get("schedules_end")) else []),
        "",
        "## Totals",
        "",
        "| | total |",
        "|---|---:|",
        f"| children | {totals['children']} |",
        f"| completed | {totals['completed']} |",
        f"| failed | {totals['failed']} |",
        f"| stopped | {totals['stopped']} |",
        f"| paused | {totals.get('paused', 0)} |",  # so the rows add up to the children
        *([f"| superseded | {n} |"] if (n := totals.get("superseded")) else []),
        f"| running{f' when {cause}' if died else ''} | {totals['running']} |",
        f"| queued | {totals['queued']} |",
        f"| input tokens | {_tokens(totals, 'tokens_in')} |",
        f"| output tokens | {_tokens(totals, 'tokens_out')} |",
        f"| cache read tokens | {_tokens(totals, 'cache_read_tokens')} |",
        f"| cache write tokens | {_tokens(totals, 'cache_write_tokens')} |",
        f"| cost | {_spent(totals)} |",
    ]
    saved, known = totals.get("cache_saved_usd"), totals.get("cache_saved_known_usd")
    if saved:
        lines.append(f"| cache saved | {_usd(saved)} |")
    elif saved is None and known:  # a report from before the known part was kept has none
        lines.append(f"| cache saved | {_usd(known)} + unknown |")
    elif saved is None and (totals["cache_read_tokens"] or totals.get("tokens_unknown_children")):
        lines.append("| cache saved | unknown |")  # read from the cache at a price not known
    if budget is not None:
        lines.append(f"| budget | {_usd(budget)} |")
    # Delegates of their parents' earlier attempts, in none of the three: only when there are.
    history = any(r.get("superseded") for r in report["routes"])
    lines += _table(
        "Routes",
        f"| route | model | children | completed | failed | stopped |{' superseded |' * history}"
        " tokens in | tokens out | cache read | cache write | cost |",
        f"|---|---|---:|---:|---:|---:|{'---:|' * history}---:|---:|---:|---:|---:|",
        (_route_cells(r, history) for r in report["routes"]),
    )
    # Who delegated whom, as the JSON's `parent` says; only when a child delegated.
    tree = any(c.get("parent") is not None for c in report["children"])
    lines += _table(
        "Children",
        f"| id |{' parent |' if tree else ''} status | route | model | calls | tools | retries "
        "| tokens in | tokens out | cache read | cache write | cost | duration | goal | error |",
        f"|---|{'---|' if tree else ''}---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:"
        "|---|---|",
        (_child_cells(c, tree, cause if died else None) for c in report["children"]),
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
        report["steers"],
        report["stops"],
        report.get("limits") or [],
        report.get("pauses") or [],
        report.get("needs") or [],
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
            f"- resumed after a lost owner: {_times(recovery['resumes'])}",
            f"- children re-run: {recovery['rerun']}; left unknown: {recovery['left_unknown']}",
            f"- their lost attempts cost: {lost} (counted in the totals)",
        ]
    return "\n".join(lines) + "\n"


def _times(n: int) -> str:
    return "once" if n == 1 else f"{n} times"


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
        lines.append(
            f"- lost attempts (re-runs after a lost owner or worker): {lost}, in the spend"
        )
    return ["", "## Forecast", "", *lines] if lines else []


def _table(title: str, header: str, align: str, rows: Iterable[list[str]]) -> list[str]:
    """A Markdown section: its heading, then a table of rows already made safe (`_cell`)."""
    return ["", f"## {title}", "", header, align, *("| " + " | ".join(r) + " |" for r in rows)]


def _operator(
    steers: list[dict[str, Any]],
    stops: list[dict[str, Any]],
    limits: list[dict[str, Any]],
    pauses: list[dict[str, Any]],
    needs: list[dict[str, Any]],
) -> list[str]:
    """The operator's steers (with their receipts), stops, pauses and continues, changes to the
    limits, the soft budget's holds, questions and answers, in the order they happened."""
    if not steers and not stops and not limits and not pauses and not needs:
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
        (
            s["requested"],
            [
                s["requested"],
                "(schedules)" if s["child_id"] is None else _cell(s["child_id"]),
                "stop",
                _cell(s["reason"]),
                "",
            ],
        )
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
    rows += need_rows(needs, lambda text: _cell(text, GOAL_WIDTH))
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
    duration = g["duration_s"]
    n = len(g["delegates"])  # their spend is in the cost
    made = f"; {n} delegate{'' if n == 1 else 's'}" if n else ""
    return [
        _cell(g["group"]),
        g["status"],
        str(g["children"]),
        str(g["completed"]),
        _cost(g),
        "—" if duration is None else _seconds(duration),
        _cell(" ".join(f"{m['id']} ({m['status']})" for m in g["members"]) + made, GOAL_WIDTH),
    ]


def _tokens(entry: Mapping[str, Any], key: str) -> str:
    """Tokens counted; `?` where nobody counted them (a command whose CLI reports no usage),
    `1,234+?` when some children's were and some were not."""
    n = entry[key]
    if n is None:
        return "?"
    if not entry.get("tokens_unknown_children"):
        return f"{n:,}"
    return f"{n:,}+?" if n else "?"


def _route_cells(r: Mapping[str, Any], history: bool) -> list[str]:
    return [
        _cell(r["route"]),
        _cell(r["model"]),
        str(r["children"]),
        str(r["completed"]),
        str(r["failed"]),
        str(r["stopped"]),
        *([str(r.get("superseded", 0))] if history else []),
        _tokens(r, "tokens_in"),
        _tokens(r, "tokens_out"),
        _tokens(r, "cache_read_tokens"),
        _tokens(r, "cache_write_tokens"),
        _spent(r),
    ]


def _died(report: Mapping[str, Any], command: str | None) -> str:
    """After an abandoned batch's status: what its owner left unfinished, and what to do."""
    totals = report["totals"]
    left = sum(totals.get(k, 0) for k in ("running", "paused", "queued"))
    command = command or f"flightdeck resume {_text(report['batch_id'])}"
    resume = f"`{command}` runs it to the end"
    before = f" before {left} of its children ended" if left else ""
    if report.get("disk_full"):
        return (
            f" (its owner ended{before}, and the disk holding its store is full now: the store"
            f" may have given up there, its last records kept out; free some space, then {resume})"
        )
    return f" (its owner died{before}; {resume})"


def _child_cells(c: Mapping[str, Any], tree: bool, ended: str | None) -> list[str]:
    """One child's cells; `ended`: what ended its abandoned batch, said of a `running` row."""
    parent = [_cell(c.get("parent") or "")] if tree else []
    status = _cell(c["status"]) + (" (superseded)" if c.get("superseded") else "")
    if ended and c["status"] == "running":
        status += f" when {ended}"
    return [
        _cell(c["id"]),
        *parent,
        status,
        _cell(c["route"]),
        _cell(c["model"]),
        str(c["api_calls"]),
        str(c["tool_calls"]),
        str(c["retries"]),
        _tokens(c, "tokens_in"),
        _tokens(c, "tokens_out"),
        _tokens(c, "cache_read_tokens"),
        _tokens(c, "cache_write_tokens"),  # so a row's tokens add up to its child's `tok`
        _cost(c),
        "—" if c["duration_s"] is None else _seconds(c["duration_s"]),
        _cell(c["goal"], GOAL_WIDTH),
        "" if c["error"] is None else _cell(c["error"], ERROR_WIDTH),
    ]


def _spent(entry: Mapping[str, Any]) -> str:
    """A batch's or a route's cost: `unknown` when only children of unknown price spent
    anything, since a known $0 beside them is no total."""
    known, unknown = entry["cost_known_usd"], entry["cost_unknown_children"]
    pending = entry.get("cost_pending_children", 0)  # (a report from before had none)
    more = f" (+{pending} pending)" if pending else ""
    if not unknown:
        return _usd(known) + more
    if not known:
        return "unknown"
    return f"{_usd(known)} + unknown for {unknown} {'child' if unknown == 1 else 'children'}{more}"


def _cost(entry: Mapping[str, Any]) -> str:
    """A child's or a group's cost; `+?` after what is known of it while a child's agent CLI's
    turn has reported no usage yet, or when the rest is unknown (a turn a stop cut short, a
    price unknown); `unknown` when none is known."""
    cost = entry["cost_usd"]
    if cost is not None:
        return _usd(cost) + ("+?" if entry.get("cost_pending") else "")
    known = entry.get("cost_known_usd")  # (a report from before had none)
    return _usd(known) + "+?" if known else "unknown"


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
    # A character reference would be decoded by the renderer (`&#x202e;`: a bidi override,
    # which sanitizing removed from the text itself): its `&` is spelled out.
    text = _REFERENCE.sub("&amp;", text)
    return text.replace("[", "\\[").replace("]", "\\]").replace("<", "&lt;")


# What CommonMark reads as a character reference: `&name;`, `&#123;`, `&#x1F;`.
_REFERENCE = re.compile(r"&(?=[A-Za-z][A-Za-z0-9]{0,31};|#[0-9]{1,7};|#[xX][0-9A-Fa-f]{1,6};)")


def _cell(value: object, width: int | None = None) -> str:
    """Untrusted text for a table cell: one sanitized line that cannot break the table."""
    return _text(value, width).replace("|", "\\|") or " "
