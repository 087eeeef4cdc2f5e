"""Task and Batch: the validated values a batch file becomes."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from flightdeck.engine.inputs.bounds import DEFAULT_MAX_TASK_CHARS as DEFAULT_MAX_TASK_CHARS
from flightdeck.engine.inputs.bounds import DEFAULT_MAX_TASKS as DEFAULT_MAX_TASKS
from flightdeck.engine.inputs.bounds import MAX_TASKS_LIMIT as MAX_TASKS_LIMIT
from flightdeck.engine.inputs.bounds import MAX_TURNS_LIMIT as MAX_TURNS_LIMIT

DEFAULT_MAX_TURNS = 8
TEXT_FIELDS = ("goal", "context", "group")

ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
ID_RULE = "1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"  # ID_PATTERN
# A child's transcript is `<id>.log` in the batch folder, where the owner process writes
# `owner.log` (attached/spawn.py); compared lower-cased, for file systems that ignore case.
RESERVED_IDS = frozenset({"owner"})
TASK_FIELDS = ("id", "goal", "context", "group", "route", "max_turns", "timeout_s")


def located(source: str) -> tuple[str | None, int | None]:
    """The path and line of a `source` ("file:line", a path, or "" for a Batch built in
    Python), as a SpecError names them."""
    path, _, line = source.rpartition(":")
    if path and line.isdigit():
        return path, int(line)
    return source or None, None


@dataclass(frozen=True, slots=True)
class Task:
    """One unit of work for one child."""

    id: str
    goal: str
    seq: int  # position in the batch: FIFO order
    context: str | None = None
    group: str | None = None
    route: str | None = None  # None: the settings' default route
    max_turns: int = DEFAULT_MAX_TURNS
    timeout_s: float | None = None
    source: str = ""  # "file:line" where the task was defined, for messages
    route_source: str = ""  # "file:line:field" where its route was set ("" if not set)
    parent: str | None = None  # the child that delegated it (None: a task of the batch file)
    depth: int = 0  # 0 for the batch's own tasks, parent's + 1 for a delegate


@dataclass(frozen=True, slots=True)
class Schedule:
    """A `[[schedules]]` entry: every `every_s` seconds, or at each `cron` time, its template
    tasks become a new wave (see control/schedules.py)."""

    id: str
    tasks: tuple[Task, ...]  # the template: ids and goals before a wave fills them in
    every_s: float | None = None
    cron: str | None = None
    at_start: bool = False
    source: str = ""  # "file:line" of the entry


@dataclass(frozen=True, slots=True)
class Batch:
    """A validated batch: its tasks in order and where they came from."""

    name: str
    tasks: tuple[Task, ...]
    source: Path | None = None
    name_source: str = ""  # "file:line" of `[batch] name`, when the file gave one
    workspace: Path | None = None  # None: a fresh folder under the state dir
    delegate: bool = False  # offer every child the `delegate` tool (routes may, one by one)
    schedules: tuple[Schedule, ...] = ()  # a batch with schedules runs until it is stopped
