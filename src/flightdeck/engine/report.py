"""JSON and Markdown reports of a batch, built from the store."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from flightdeck.engine.model import ChildStatus
from flightdeck.engine.sanitize import one_line
from flightdeck.engine.store import StoreReader

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
        raise LookupError(f"no batch {batch_id!r} in {reader.path}")
    children = reader.children(batch_id)

    end = info.finished_ts if info.finished_ts is not None else time.time() if now is None else now
    known = [c.cost_usd for c in children if c.cost_usd is not None]
    statuses = [c.status for c in children]
    return {
        "batch_id": info.id,
        "name": info.name,
        "source": info.source,
        "status": info.status.value,
        "created": _iso(info.created_ts),
        "finished": None if info.finished_ts is None else _iso(info.finished_ts),
        "elapsed_s": round(max(0.0, end - info.created_ts), 3),
        "pool_size": info.pool_size,
        "max_cost_usd": _money(info.max_cost_usd),
        "totals": {
            "children": len(children),
            "completed": statuses.count(ChildStatus.COMPLETED),
            "failed": sum(1 for s in statuses if s.terminal and s is not ChildStatus.COMPLETED),
            # Gated children hold a slot (admitted, waiting on the cache gate): count as running.
            "running": sum(1 for s in statuses if s in (ChildStatus.RUNNING, ChildStatus.GATED)),
            "queued": statuses.count(ChildStatus.QUEUED),
            "tokens_in": sum(c.usage.input_tokens for c in children),
            "tokens_out": sum(c.usage.output_tokens for c in children),
            "cache_read_tokens": sum(c.usage.cache_read_tokens for c in children),
            "cache_write_tokens": sum(c.usage.cache_write_tokens for c in children),
            "cost_usd": _money(sum(known, Decimal(0))),  # the known part only
            "cost_unknown_children": len(children) - len(known),
        },
        "children": [
            {
                "id": c.id,
                "status": c.status.value,
                "goal": c.goal,
                "route": c.route,
                "model": c.model,
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
            }
            for c in children
        ],
    }


def render_json(report: Mapping[str, Any]) -> str:
    """The report as indented JSON (ASCII-escaped, so it is safe to print to a terminal)."""
    return json.dumps(report, indent=2) + "\n"


def render_markdown(report: Mapping[str, Any]) -> str:
    """The report as Markdown: a heading, a totals table and a children table."""
    totals = report["totals"]
    cost = _usd(totals["cost_usd"])
    if unknown := totals["cost_unknown_children"]:
        cost += f" + unknown for {unknown} {'child' if unknown == 1 else 'children'}"
    budget = report.get("max_cost_usd")
    lines = [
        f"# flightdeck batch {_text(report['name'])}",
        "",
        f"- id: `{_text(report['batch_id'])}`",
        f"- status: **{_text(report['status'])}**",
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
        f"| running | {totals['running']} |",
        f"| queued | {totals['queued']} |",
        f"| input tokens | {totals['tokens_in']:,} |",
        f"| output tokens | {totals['tokens_out']:,} |",
        f"| cache read tokens | {totals['cache_read_tokens']:,} |",
        f"| cache write tokens | {totals['cache_write_tokens']:,} |",
        f"| cost | {_cell(cost)} |",
    ]
    if budget is not None:
        lines.append(f"| budget | {_usd(budget)} |")
    lines += [
        "",
        "## Children",
        "",
        "| id | status | route | model | calls | tools | retries | tokens in | tokens out "
        "| cache read | cost | duration | goal | error |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for c in report["children"]:
        cells = [
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
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds")


def _money(value: Decimal | None) -> float | None:
    # Not rounded: costs have more decimals than micro-dollars (a cached token costs $1e-7),
    # and children rounded one by one stopped adding up to the total (5,000 of them: $4.0795
    # against $4.0791). A float holds these few significant digits exactly as written.
    return None if value is None else float(value)


def _usd(value: float) -> str:
    return f"${value:,.4f}" if value < 100 else f"${value:,.2f}"


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
