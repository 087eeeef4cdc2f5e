"""What the "needs you" queue left in the events table (control/questions.py, controls.py):
questions asked and answered, tool calls an agent CLI's permissions denied, entries the operator
cleared; the report's list of them and its Operator table's rows."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from flightdeck.engine.model import Denial, Question

NEED_EVENTS = ("ask", "answer", "denied", "dismiss")
_ACTIONS = {"ask": "asks", "answer": "answer", "denied": "denied a tool", "dismiss": "cleared"}


class Needs:
    """What each child needs of the operator, from its events fed oldest first: its question
    unanswered, its last denied call, when its entry was cleared (engine/triage/needs.py)."""

    def __init__(self) -> None:
        self._questions: dict[str, Question] = {}
        self._denials: dict[str, Denial] = {}
        self._dismissed: dict[str, float] = {}

    def add(self, child_id: str, kind: str, detail: str, ts: float) -> None:
        """A question asked or answered, a call denied, an entry cleared."""
        if kind == "ask":
            self._questions[child_id] = Question(str(_field(detail, "question")), ts)
        elif kind == "answer":
            self._questions.pop(child_id, None)
        elif kind == "denied":
            tool, given = _field(detail, "tool"), _field(detail, "input")
            self._denials[child_id] = Denial(str(tool), str(given), ts)
        elif kind == "dismiss":
            self._dismissed[child_id] = ts

    def fields(self, cid: str, started: float | None) -> dict[str, Any]:
        """What its events say of a child's row (nothing: none of them). Its question only if
        asked in this run (`started`: the row's): one an earlier owner's run (or attempt)
        asked went with it."""
        if cid not in self._questions and cid not in self._denials and cid not in self._dismissed:
            return {}
        question = self._questions.get(cid)
        if question is not None and (started is not None and question.ts < started):
            question = None
        return {
            "question": question,
            "denial": self._denials.get(cid),
            "dismissed_ts": self._dismissed.get(cid),
        }


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


def _field(detail: str, name: str) -> object:
    """A field of an event's JSON detail ("" if it has none: a hand-written or older event)."""
    try:
        data = json.loads(detail)
    except ValueError:
        return ""
    return data.get(name, "") if isinstance(data, dict) else ""


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
