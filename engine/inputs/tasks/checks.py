"""Task field checks: each says why a value is invalid (None: it is valid)."""

from __future__ import annotations

import math
from collections.abc import Collection

from flightdeck.engine.errors import SpecError
from flightdeck.engine.inputs.bounds import MAX_SECONDS
from flightdeck.engine.inputs.messages import expected, suggest
from flightdeck.engine.inputs.tasks.values import (
    ID_PATTERN,
    ID_RULE,
    MAX_TURNS_LIMIT,
    RESERVED_IDS,
    Batch,
    Task,
    located,
)
from flightdeck.engine.inputs.text import blank, unicode_problem


def check_field(name: object, value: object) -> str | None:
    """Why `value` is not valid for entry field `name` (None: it is)."""
    if name in ("id", "goal", "context", "group", "route"):
        if not isinstance(value, str):
            return expected("a string", value)
        if name in ("goal", "route", "group") and blank(value):
            return "must not be empty" + (" (leave it out for no group)" if name == "group" else "")
        return unicode_problem(value)
    elif name == "max_turns":
        if not isinstance(value, int) or isinstance(value, bool):
            return expected("an integer", value)
        if not 1 <= value <= MAX_TURNS_LIMIT:
            return f"must be between 1 and {MAX_TURNS_LIMIT}, got {value}"
    elif name == "timeout_s":
        if not isinstance(value, int | float) or isinstance(value, bool):
            return expected("a number of seconds", value)
        if not math.isfinite(value):  # JSON, TOML and YAML all have inf and nan
            return f"must be a finite number, got {value}"
        if value <= 0:
            return f"must be a positive number of seconds, got {value}"
        if value > MAX_SECONDS:
            return f"must be at most {MAX_SECONDS:,.0f} seconds, got {value}"
    elif name == "for_each":
        if not isinstance(value, list):
            return expected("an array of items", value)
        if not value:
            return "no items: the list is empty"
    elif name == "for_each_file":
        if not isinstance(value, str) or not value.strip():
            return expected("a file path string", value)
        return unicode_problem(value)
    return None


def check_routes(batch: Batch, route_names: Collection[str], default: str) -> None:
    """Raise SpecError at the first task (or schedule template) whose route (or the default)
    is not configured."""
    for task in (*batch.tasks, *(t for s in batch.schedules for t in s.tasks)):
        name = task.route or default
        if name in route_names:
            continue
        where, _, line = task.source.rpartition(":")
        if not (where and line.isdigit()):  # no line known: source is just the path
            where, line = task.source, ""
        field = "route"
        if task.route is not None and task.route_source:  # the line of the route setting
            where, line, field = task.route_source.rsplit(":", 2)
        known = ", ".join(sorted(route_names)) or "none"
        if task.route is None:
            message = f"no route given and the default route {name!r} is not configured"
        else:
            message = f"unknown route {name!r}{suggest(name, route_names)}"
        line_number = int(line) if line else None
        raise SpecError(where or None, line_number, field, f"{message} (configured: {known})")


def check_tasks(batch: Batch) -> None:
    """SpecError at the first task a task file would refuse: an id that is not a plain name (it
    names the child's files: "../x" would be written outside the batch folder), reserved or
    taken, or a field check_field refuses; a schedule's template tasks alike. A task file is
    checked as it loads; a Batch built in Python is checked here; one with no tasks and no
    schedules is refused as a file is."""
    if not batch.tasks and not batch.schedules:  # it ran and completed, empty
        raise SpecError(batch.source, None, "tasks", "the batch has no tasks")
    seen: set[str] = set()
    for n, task in enumerate(batch.tasks, 1):
        _check_task(task, seen, f"task {n}")
    # A schedule's template too: its id names each wave's files (`<id>-w<n>`), and two
    # schedules' templates of one id would share their waves' ids.
    templates: set[str] = set()
    for s in batch.schedules:
        for n, task in enumerate(s.tasks, 1):
            _check_task(task, templates, f"schedule {s.id!r} task {n}")


def _check_task(task: Task, seen: set[str], label: str) -> None:
    """SpecError if `_task_problem` refuses `task`; else its id is `seen`."""
    field, problem = _task_problem(task, seen)
    if problem is not None:
        path, line = located(task.source)
        label = "" if line else f"{label}: "  # built in Python: no line to name it by
        raise SpecError(path, line, field, label + problem)
    seen.add(task.id)


def _task_problem(task: Task, seen: Collection[str]) -> tuple[str, str | None]:
    """The field at fault in `task` and why (None: it is valid)."""
    if not isinstance(task.id, str) or not ID_PATTERN.fullmatch(task.id):
        return "id", f"{task.id!r} is not a valid id: it names a file, so use {ID_RULE}"
    if task.id.lower() in RESERVED_IDS:
        return "id", f"{task.id!r} is reserved: the batch folder's {task.id}.log is the owner's"
    if task.id in seen:
        return "id", f"duplicate id {task.id!r}"
    for field in ("goal", "context", "group", "route", "timeout_s"):
        value = getattr(task, field)
        if value is not None or field == "goal":
            problem = check_field(field, value)
            if problem is not None:
                return field, problem
    # No upper bound here: a file's 200 keeps a typo from running for ever, a script may mean it.
    turns = task.max_turns
    if not isinstance(turns, int) or isinstance(turns, bool) or turns < 1:
        return "max_turns", f"must be a whole number, 1 or more, got {turns!r}"
    return "id", None
