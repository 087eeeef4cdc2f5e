"""The batch's keys: gathered from its clients, and redacted from the operator's own text
(goals and contexts here; steers and answers as they are sent, control/sending.py).

A key the operator types into a goal, a context, a steer or an answer is replaced by
`[REDACTED]` as the batch takes it, before it is stored, shown or sent: the model is sent the
same text the store keeps, so a resume sends what the first owner did. The model has no use for
its route's key (flightdeck sends it, as a header), and a CLI child reads a key from its
environment (`api_key_env`, `env_pass`): a goal names the variable, never its value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from flightdeck.engine.agents.launch import CommandRoute
from flightdeck.engine.errors import ConfigError, SpecError
from flightdeck.engine.inputs.keyshapes import KEY_IN_ARGV, looks_like_key
from flightdeck.engine.inputs.settings import Settings
from flightdeck.engine.inputs.tasks import Batch, Task, located
from flightdeck.engine.providers.base import Provider
from flightdeck.engine.sanitize import redact


def batch_secrets(
    providers: Mapping[str, Provider], commands: Mapping[str, CommandRoute]
) -> tuple[str, ...]:
    """Every key the batch's routes hold: providers' keys and header values, command routes'
    `api_key_env` and `env_pass` values."""
    secrets = tuple(s for provider in providers.values() for s in provider.secrets)
    return secrets + tuple(s for command in commands.values() for s in command.secrets)


NAMED_KEY = (
    "holds a value the batch redacts (an API key, a header's value, an env_pass variable's): "
    "a name is stored and shown as it is, so rename it"
)


def refuse_keys_in_names(batch: Batch, secrets: Iterable[str]) -> None:
    """SpecError when a task's id or group, a schedule's id or the batch's name holds what the
    batch redacts. Those name files, rows and lines on screen, and cannot be redacted (two tasks
    could end up one name, a resume would not find its children): the batch does not start."""
    secrets = tuple(secrets)
    if not secrets:
        return

    def check(value: str | None, where: tuple[str | None, int | None], field: str) -> None:
        if value is not None and redact(value, secrets) != value:
            raise SpecError(*where, field, NAMED_KEY)

    whole = (None if batch.source is None else str(batch.source), None)  # the file, no line
    check(batch.name, located(batch.name_source) if batch.name_source else whole, "batch.name")
    for schedule in batch.schedules:
        check(schedule.id, located(schedule.source) if schedule.source else whole, "id")
    templates = (t for schedule in batch.schedules for t in schedule.tasks)
    for task in (*batch.tasks, *templates):
        check(task.id, located(task.source), "id")
        check(task.group, located(task.source), "group")


def refuse_keys_in_argv(settings: Settings) -> None:
    """ConfigError when a command route's argv or resume_argv holds what looks like an API key,
    as flightdeck.toml is refused at load: settings built in Python are checked here. Every
    route counts, used or not: the batch stores them all."""
    for route in settings.routes.values():
        if route.command is None:
            continue
        for name in ("argv", "resume_argv"):
            for i, arg in enumerate(getattr(route.command, name)):
                if looks_like_key(arg):
                    line = route.command.lines.get(name)
                    field = f"routes.{route.name}.{name}.{i}"
                    raise ConfigError(settings.source, line, field, KEY_IN_ARGV)


def redacted_batch(batch: Batch, secrets: Iterable[str]) -> Batch:
    """`batch` with its keys redacted from each task's (and schedule template's) goal and
    context; `batch` itself when none holds one."""
    secrets = tuple(secrets)
    if not secrets:
        return batch

    def task(t: Task) -> Task:
        goal = redact(t.goal, secrets)
        context = None if t.context is None else redact(t.context, secrets)
        if goal == t.goal and context == t.context:
            return t
        return dataclasses.replace(t, goal=goal, context=context)

    tasks = tuple(task(t) for t in batch.tasks)
    schedules = tuple(
        dataclasses.replace(s, tasks=tuple(task(t) for t in s.tasks)) for s in batch.schedules
    )
    if tasks == batch.tasks and schedules == batch.schedules:
        return batch
    return dataclasses.replace(batch, tasks=tasks, schedules=schedules)
