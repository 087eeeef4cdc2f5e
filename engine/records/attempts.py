"""What the events table keeps of a child beside its row: its attempts (each retry's "retry"
event, with the attempt before it as it ended), whether one of them (retried, or lost with its
owner: "lost_attempt") cost an unknown sum, whether it is a delegate of an earlier attempt of
its parent ("superseded") and its changes (the "changes" found at its end, then "accept" or
"discard" as the operator decided), read back for views and the report."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import Any

from flightdeck.engine.model import ChildRow
from flightdeck.engine.money import fmt_usd
from flightdeck.engine.review.values import Changes, changes_from_json

# A delegate whose parent (or an ancestor) runs again, as a new attempt: the event's detail
# names that one. Recorded before the new attempt is, so a store holding that attempt holds it.
SUPERSEDED = "superseded"
# The event kinds read back into a child's row.
KEPT_KINDS = ("changes", "accept", "discard", "retry", "lost_attempt", SUPERSEDED)


def delegates_of(parents: Iterable[tuple[str, str | None]]) -> dict[str, list[str]]:
    """Each parent's delegates, from (child, its parent) pairs."""
    kids: dict[str, list[str]] = {}
    for kid, parent in parents:
        if parent is not None:
            kids.setdefault(parent, []).append(kid)
    return kids


def earlier_delegates(child_id: str, kids: Mapping[str, Iterable[str]]) -> list[str]:
    """The delegates `child_id`'s attempts made so far, and theirs, down the tree (`kids`:
    each parent's delegates): when it runs again, they belong to an earlier attempt."""
    out: dict[str, None] = {}
    todo = list(kids.get(child_id, ()))
    while todo:
        kid = todo.pop()
        if kid not in out and kid != child_id:  # bad data may loop: each once
            out[kid] = None
            todo.extend(kids.get(kid, ()))
    return list(out)


class Kept:
    """Each child's attempt number and changes, from its events, fed oldest first."""

    def __init__(self) -> None:
        self.attempts: dict[str, int] = {}
        self.changes: dict[str, Changes] = {}
        self.superseded: set[str] = set()
        self.carried_unknown: set[str] = set()

    def add(self, child_id: str, kind: str, detail: str) -> bool:
        """One event; True if it says something of the child's row."""
        if kind in ("retry", "lost_attempt") and _unknown_cost(kind, detail):
            self.carried_unknown.add(child_id)  # once unknown, every later attempt's sum is
            if kind == "lost_attempt":
                return True
        if kind == "retry":
            try:
                attempt = json.loads(detail).get("attempt")
            except (ValueError, AttributeError):
                return False
            if not isinstance(attempt, int):
                return False
            self.attempts[child_id] = attempt
            if json.loads(detail).get("mode") == "fresh":
                self.changes.pop(child_id, None)  # a fresh attempt starts with none
            return True
        if kind == SUPERSEDED:
            self.superseded.add(child_id)
            return True
        if kind in ("changes", "accept", "discard"):
            changes = changes_from_json(detail)
            if changes is None:
                return False
            self.changes[child_id] = changes
            return True
        return False

    def fields(self, child_id: str) -> dict[str, Any]:
        """What its events say of a child's row (nothing: none of them)."""
        out: dict[str, Any] = {}
        if child_id in self.attempts:
            out["attempt"] = self.attempts[child_id]
        if child_id in self.changes:
            out["changes"] = self.changes[child_id]
        if child_id in self.superseded:
            out["superseded"] = True
        if child_id in self.carried_unknown:
            out["carried_unknown"] = True
        return out

    def rows(self, rows: list[ChildRow]) -> list[ChildRow]:
        """The rows with what the events say of them."""
        if not (self.attempts or self.changes or self.superseded or self.carried_unknown):
            return rows
        return [
            dataclasses.replace(r, **fields) if (fields := self.fields(r.id)) else r for r in rows
        ]


def _unknown_cost(kind: str, detail: str) -> bool:
    """Whether a "retry" (the attempt it ended) or "lost_attempt" event's cost is unknown."""
    try:
        found = json.loads(detail)
        return (found["before"] if kind == "retry" else found)["cost_usd"] is None
    except (ValueError, KeyError, TypeError):
        return False


def kept_of(events: Iterable[tuple[str | None, str, str]]) -> Kept:
    """`Kept` from (child id, kind, detail) events, oldest first."""
    kept = Kept()
    for child_id, kind, detail in events:
        if child_id is not None:
            kept.add(child_id, kind, detail)
    return kept


def attempt_records(
    events: Iterable[tuple[float, str | None, str, str]], rows: Iterable[ChildRow]
) -> list[dict[str, Any]]:
    """Every attempt of each child retried, oldest first: its number, how it began (fresh or
    continuing) and ended, and what it alone used and cost (a retry carries the spend before
    it: each attempt's own is the difference). The last attempt is the child's row."""
    by_child: dict[str, list[tuple[dict[str, Any], str | None]]] = {}
    for _, child_id, kind, detail in events:
        if child_id is None or kind != "retry":
            continue
        try:
            data = json.loads(detail)
            by_child.setdefault(child_id, []).append((dict(data["before"]), data.get("mode")))
        except (ValueError, KeyError, TypeError):
            continue
    out: list[dict[str, Any]] = []
    for row in rows:
        earlier = by_child.get(row.id)
        if not earlier:
            continue
        last = {
            "attempt": row.attempt,
            "status": row.status.value,
            "error": row.error,
            "usage": dataclasses.asdict(row.usage),
            "tokens_unknown": row.tokens_unknown,
            "cost_usd": None if row.cost_usd is None else str(row.cost_usd),
        }
        modes = [None, *(mode for _, mode in earlier)]  # how each attempt began
        tokens_before, cost_before = 0, Decimal(0)
        cost_known = True
        for item, began in zip([*(e for e, _ in earlier), last], modes, strict=True):
            tokens = sum(int(v) for v in (item.get("usage") or {}).values())
            cost = item.get("cost_usd")
            cost_known = cost_known and cost is not None
            # A number, as every other cost in the report (report.py's `_money`).
            own_cost = float(Decimal(cost) - cost_before) if cost_known and cost else None
            out.append(
                {
                    "child_id": row.id,
                    "attempt": item.get("attempt"),
                    "began": began or "first",
                    "status": item.get("status"),
                    "error": item.get("error"),
                    # null: nobody counted them (a CLI that reports no usage), never 0
                    "tokens": None if item.get("tokens_unknown") else tokens - tokens_before,
                    "cost_usd": own_cost,
                }
            )
            tokens_before = tokens
            if cost_known and cost:
                cost_before = Decimal(cost)
    return out


def report_entries(
    events: Iterable[tuple[float, str | None, str, str]], rows: list[ChildRow]
) -> dict[str, list[dict[str, Any]]]:
    """The report's "attempts" (each attempt of every child retried) and "changes" (what each
    child changed in its own workspace, and what the operator decided)."""
    changes = [
        {
            "child_id": r.id,
            "summary": r.changes.summary,
            "files": [f.path for f in r.changes.files],
            "state": r.changes.state,
            "workspace": r.changes.workspace,
            "branch": r.changes.branch,
            "into": r.changes.into,
            "commit": r.changes.commit,
        }
        for r in rows
        if r.changes is not None
    ]
    return {"attempts": attempt_records(events, rows), "changes": changes}


def markdown_lines(report: dict[str, Any], cell: Callable[[object], str]) -> list[str]:
    """The report's attempts and changes as Markdown tables (`cell`: a table cell's text)."""
    lines: list[str] = []
    if report.get("attempts"):
        lines += ["", "## Attempts", "", "| child | attempt | began | status | tokens | cost "
                  "| error |", "|---|---:|---|---|---:|---:|---|"]  # fmt: skip
        for a in report["attempts"]:
            cost = "unknown" if a["cost_usd"] is None else fmt_usd(Decimal(repr(a["cost_usd"])))
            lines.append(
                f"| {cell(a['child_id'])} | {a['attempt']} | {a['began']} | {cell(a['status'])} "
                f"| {'?' if a['tokens'] is None else format(a['tokens'], ',')} | {cost} "
                f"| {cell(a['error'] or '')} |"
            )
    if report.get("changes"):
        lines += ["", "## Changes", "", "| child | changes | state | branch | into |",
                  "|---|---|---|---|---|"]  # fmt: skip
        for c in report["changes"]:
            into = f"{cell(c['into'])} ({(c['commit'] or '')[:12]})" if c["into"] else ""
            lines.append(
                f"| {cell(c['child_id'])} | {cell(c['summary'])} | {c['state']} "
                f"| {cell(c['branch'] or '')} | {into} |"
            )
    return lines
