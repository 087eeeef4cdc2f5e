"""`[[schedules]]` in a task file: when each fires, and the template its waves are made from.

[[schedules]]
id = "log-scan"          # optional: schedule-1, schedule-2, ...
every = "15m"            # s, m, h or d; or cron = "*/15 * * * *" (croniter)
at_start = false         # fire once as the batch starts
[schedules.task]         # a task (for_each allowed); `{wave}` is the wave's number
goal = "Scan today's logs for new errors (wave {wave})"
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable

from flightdeck.engine.inputs.bounds import MAX_SECONDS
from flightdeck.engine.inputs.messages import expected, key_name, suggest
from flightdeck.engine.inputs.tasks.expand import Draft, Room, expand
from flightdeck.engine.inputs.tasks.readers import Source
from flightdeck.engine.inputs.tasks.values import ID_PATTERN, Batch, Schedule
from flightdeck.engine.inputs.tomlpos import Key

_KEYS = ("id", "every", "cron", "at_start", "task")
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_EVERY = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*")

Finish = Callable[[list[Draft]], Batch]


def load_schedules(
    src: Source, value: object, defaults: dict[str, object], finish: Finish, max_tasks: int
) -> tuple[Schedule, ...]:
    """Every schedule of a file, checked; `finish` turns a template's drafts into tasks (a
    wave may hold up to `max_tasks`)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise src.error(("schedules",), "schedules", expected("an array ([[schedules]])", value))
    out: list[Schedule] = []
    for i, raw in enumerate(value):
        key = ("schedules", i)
        if not isinstance(raw, dict):
            raise src.error(key, "schedules", expected("a schedule table", raw))
        for name in map(key_name, raw):
            if name not in _KEYS:
                raise src.error(
                    (*key, name), f"schedules.{name}", f"unknown key{suggest(name, _KEYS)}"
                )
        schedule_id = raw.get("id", f"schedule-{i + 1}")
        if not isinstance(schedule_id, str) or not ID_PATTERN.fullmatch(schedule_id):
            raise src.error(
                (*key, "id"), "schedules.id", "use 1-64 letters, digits, '.', '_' or '-'"
            )
        if any(s.id == schedule_id for s in out):
            raise src.error((*key, "id"), "schedules.id", f"duplicate schedule id {schedule_id!r}")
        every, cron = raw.get("every"), raw.get("cron")
        if (every is None) == (cron is None):
            raise src.error(
                key, "schedules.every", 'give every = "15m" or cron = "...", one of them'
            )
        every_s = None if every is None else _every(src, (*key, "every"), every)
        if cron is not None and (problem := _cron_problem(cron)) is not None:
            raise src.error((*key, "cron"), "schedules.cron", problem)
        at_start = raw.get("at_start", False)
        if not isinstance(at_start, bool):
            raise src.error(
                (*key, "at_start"), "schedules.at_start", expected("true or false", at_start)
            )
        template = raw.get("task")
        if template is None:
            raise src.error(
                key, "schedules.task", "a schedule needs a task template ([schedules.task])"
            )
        if isinstance(template, dict) and "id" not in template and "for_each" not in template:
            template = {**template, "id": schedule_id}
        # A template is one wave's tasks, counted on its own (a wave is a task file's worth).
        drafts = expand(template, src, (*key, "task"), defaults, Room(max_tasks), wave=True)
        tasks = finish(drafts).tasks
        for task in tasks:
            if task.group is not None and "{wave}" in task.group:
                # Left as it was, `{wave}` and all: a wave fills its goal and context alone.
                message = (
                    "{wave} is filled in goal and context only: a wave's group is its template's"
                )
                raise src.error((*key, "task", "group"), "schedules.task.group", message)
            # Two schedules whose templates share a task id would make waves of one id (`x-w1`
            # twice): the same child twice in the batch, which then never ended.
            if other := next((s for s in out if any(t.id == task.id for t in s.tasks)), None):
                message = (
                    f"schedule {other.id!r} has a task {task.id!r} too: their waves would"
                    f" share ids ({task.id}-w1); give this template another id"
                )
                raise src.error((*key, "task", "id"), "schedules.task.id", message)
        out.append(
            Schedule(
                id=schedule_id,
                tasks=tasks,
                every_s=every_s,
                cron=cron,
                at_start=at_start,
                source=f"{src.path}:{src.line(key) or ''}",
            )
        )
    return tuple(out)


def _every(src: Source, key: Key, value: object) -> float:
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str) and (m := _EVERY.fullmatch(value)):
        unit = m.group(2) or "s"
        if unit not in _UNITS:
            raise src.error(key, "schedules.every", f"unknown unit {unit!r} (use s, m, h or d)")
        seconds = float(m.group(1)) * _UNITS[unit]
    else:
        raise src.error(key, "schedules.every", expected('a duration such as "15m"', value))
    if not math.isfinite(seconds) or seconds <= 0:  # TOML has nan and inf
        raise src.error(key, "schedules.every", f"must be more than 0 and finite, got {value!r}")
    if seconds > MAX_SECONDS:
        message = f"must be at most {MAX_SECONDS:,.0f} seconds, got {value!r}"
        raise src.error(key, "schedules.every", message)
    return seconds


def _cron_problem(cron: object) -> str | None:
    """What is wrong with a cron expression, if anything. One croniter reads but that names no
    date from now on (February 30, a year gone by) failed the batch as it started, with a
    traceback, its folder made."""
    # Here: imported with the module, croniter costs every command 20 ms.
    from croniter import CroniterBadDateError, croniter

    if not isinstance(cron, str) or not croniter.is_valid(cron):
        return f"not a cron expression croniter accepts: {cron!r}"
    try:
        croniter(cron).get_next(float)
    except CroniterBadDateError:
        return f"{cron!r} never fires: croniter finds no date for it from now on"
    return None
