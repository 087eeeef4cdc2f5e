"""What the "needs you" queue left in the events table (control/questions.py, controls.py):
questions asked and answered, tool calls an agent CLI's permissions denied, entries the operator
cleared; the report's list of them and its Operator table's rows."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

NEED_EVENTS = ("ask", "answer", "denied", "dismiss")
_ACTIONS = {"ask": "asks", "answer": "answer", "denied": "denied a tool", "dismiss": "cleared"}


def need_records(
    events: Iterable[tuple[float, str | None, str, str]], iso: Callable[[float], str]
) -> list[dict[str, Any]]:
    """Each one, oldest first: `child_id`, `at` (ISO), `action` and `text` (the question, the
    answer, the denied call; empty for a clearing)."""
    out = []
    for ts, child, kind, detail in events:
        if kind in NEED_EVENTS and child is not None:
            out.append({"child_id": child, "at": iso(ts), "action": kind, "text": _text(detail)})
    return out


def need_rows(
    records: Iterable[dict[str, Any]], cell: Callable[[object], str]
) -> list[tuple[str, list[str]]]:
    """The Operator table's rows for them: (time, [time, child, action, text, receipt])."""
    return [
        (r["at"], [r["at"], cell(r["child_id"]), _ACTIONS[r["action"]], cell(r["text"]), ""])
        for r in records
    ]


def _text(detail: str) -> str:
    """What an event says, from its JSON detail ("" for none, or an unreadable one)."""
    try:
        data = json.loads(detail) if detail else {}
    except ValueError:
        return ""
    if not isinstance(data, dict):
        return ""
    if "tool" in data:
        return f"{data.get('tool', '')} {data.get('input', '')}".strip()
    return str(data.get("question", data.get("answer", "")))
