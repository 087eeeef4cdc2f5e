"""The `delegate` tool, the child's side: a model hands sub-tasks to the engine and waits.

The sub-tasks run as the child's own children in the same engine (same queue, slots, caps and
budgets); the coordinator decides when they start. While it waits, the parent holds no slot,
so a full pool of waiting parents cannot starve their delegates. Errors in a call (too many
sub-tasks, nesting too deep, a bad argument) come back to the model as the tool's error.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from flightdeck.engine.errors import ToolError
from flightdeck.engine.model import DELEGATE_TOOL, ChildRow
from flightdeck.engine.providers.base import ToolSpec

RESULT_CHARS = 4000  # of each sub-task's answer, in the tool's result

DELEGATE_SPEC = ToolSpec(
    name=DELEGATE_TOOL,
    description=(
        "Hand independent sub-tasks to other agents, who run them in parallel with the same "
        "tools. Waits until every sub-task has ended and returns each one's result. Use it for "
        "work that splits into parts which need no conversation with you."
    ),
    parameters={
        "type": "object",
        "properties": {
            "tasks": {
                "type": "array",
                "description": "The sub-tasks, each with a goal and optional context.",
                "items": {
                    "type": "object",
                    "properties": {"goal": {"type": "string"}, "context": {"type": "string"}},
                    "required": ["goal"],
                },
            }
        },
        "required": ["tasks"],
    },
)


@dataclass(frozen=True, slots=True)
class Delegation:
    """What one child may delegate: how many sub-tasks per call, and how long each may be."""

    max_delegates: int
    max_chars: int


@dataclass(frozen=True, slots=True)
class SubTask:
    goal: str
    context: str | None = None


@dataclass(eq=False)
class DelegateCall:
    """One `delegate` call in flight: the coordinator settles it, the parent's thread waits."""

    parent_id: str
    tasks: tuple[SubTask, ...]
    done: threading.Event = field(default_factory=threading.Event)
    results: tuple[ChildRow, ...] = ()
    refused: str | None = None

    def finish(self, results: tuple[ChildRow, ...]) -> None:
        self.results = results
        self.done.set()

    def refuse(self, reason: str) -> None:
        self.refused = reason
        self.done.set()


def parse_call(arguments: Mapping[str, Any], rules: Delegation) -> tuple[SubTask, ...]:
    """The sub-tasks a call asks for; ToolError (for the model to read) if it is malformed."""
    tasks = arguments.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise ToolError("'tasks' must be a non-empty list of {goal, context} objects")
    if len(tasks) > rules.max_delegates:
        raise ToolError(
            f"{len(tasks)} sub-tasks asked for; at most {rules.max_delegates} per call "
            "(max_delegates)"
        )
    out = []
    for n, item in enumerate(tasks, 1):
        goal = item.get("goal") if isinstance(item, dict) else None
        context = item.get("context") if isinstance(item, dict) else None
        if not isinstance(goal, str) or not goal.strip():
            raise ToolError(f"sub-task {n}: 'goal' must be a non-empty string")
        if context is not None and not isinstance(context, str):
            raise ToolError(f"sub-task {n}: 'context' must be a string")
        for name, text in (("goal", goal), ("context", context or "")):
            if len(text) > rules.max_chars:
                raise ToolError(
                    f"sub-task {n}: its {name} has {len(text):,} characters; at most "
                    f"{rules.max_chars:,} (max_task_chars)"
                )
        out.append(SubTask(goal, context))
    return tuple(out)


def result_text(results: tuple[ChildRow, ...]) -> str:
    """The tool's result: each sub-task's id, status and answer (or error), in order."""
    parts = []
    for row in results:
        head = f"[{row.id}] {row.status.value}"
        if row.error:
            head += f": {row.error}"
        body = row.result or ""
        if len(body) > RESULT_CHARS:
            body = body[:RESULT_CHARS] + f"\n… ({len(body) - RESULT_CHARS} more characters)"
        parts.append(head + ("\n" + body if body else ""))
    return "\n\n".join(parts)
