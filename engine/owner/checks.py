"""The checks a batch passes before anything is written or started: its arguments, routes,
texts, pool, executor, budget, workspaces, each route's client (its key) or program, and the
keys it must not hold. `Engine` runs them as it is made; `flightdeck run`'s own process runs
them alone before it starts the owner that runs the batch (tui/commands.py), so this module
imports neither the coordinator nor a provider's SDK (openai's costs 1.3-1.6 s of CPU to
import): the owner imports those, once."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Literal

from flightdeck.engine.agents.launch import CommandRoute
from flightdeck.engine.agents.workspace import git_toplevel
from flightdeck.engine.control.pool import auto_pool_size
from flightdeck.engine.errors import ConfigError, InputError, SpecError
from flightdeck.engine.executors import check as check_executor
from flightdeck.engine.inputs.messages import kind
from flightdeck.engine.inputs.settings import MAX_CONCURRENT, Route, Settings
from flightdeck.engine.inputs.tasks import Batch, check_routes, check_tasks, located, too_long
from flightdeck.engine.inputs.tasks.values import ID_PATTERN, ID_RULE, TEXT_FIELDS
from flightdeck.engine.owner import keys
from flightdeck.engine.providers import make_provider
from flightdeck.engine.providers.base import Provider
from flightdeck.engine.records.meter import pricing_wanted, spend_known


@dataclasses.dataclass(frozen=True)
class Checked:
    """What the checks worked out, which the batch runs with."""

    routes: dict[str, Route]  # the routes its tasks use, by name, in order
    pool_size: int
    auto_pool: bool  # the size is "auto": it follows the routes' limits
    providers: dict[str, Provider]  # each model route's client
    commands: dict[str, CommandRoute]  # each command route made ready: its program found


def check_batch(
    batch: Batch,
    settings: Settings,
    *,
    max_concurrent: int | Literal["auto"] | None = None,
    batch_id: str | None = None,
    given: Mapping[str, Provider] | None = None,
    env: Mapping[str, str] | None = None,
    stored: bool = False,
) -> Checked:
    """Every check, in the order an operator fixes them: the first failure raises (TypeError,
    ValueError, or an InputError naming the file, line and field). `given`: model clients
    made in Python, by route; `stored`: the batch as the store kept it (`resume`)."""
    check_arguments(batch, settings, stored)
    check_routes(batch, settings.routes.keys(), settings.engine.default_route)
    check_task_text(batch, settings.engine.max_task_chars)
    if batch_id is not None:
        check_given_id(batch_id)
    templates = [t for s in batch.schedules for t in s.tasks]
    used = {settings.route(t.route).name for t in (*batch.tasks, *templates)}
    routes = {name: settings.routes[name] for name in sorted(used)}
    size = pool_size(max_concurrent, settings, routes.values())
    configured = max_concurrent or settings.engine.max_concurrent
    auto = not isinstance(max_concurrent, int) and configured == "auto"
    given = given or {}
    check_executor(settings, providers_given=bool(given))
    check_budget(settings, routes.values())
    check_commands(batch, routes.values(), settings.source)
    if not stored:  # a resumed batch's settings are on disk already, as it ran with them
        keys.refuse_keys_in_argv(settings)
    # Each route's client, made before anything is written: a missing key or program fails
    # here. (An SDK's client is itself made at its route's first turn: providers.FirstCall.)
    environ = os.environ if env is None else env
    providers = {
        name: given.get(name) or make_provider(route, environ, source=settings.source)
        for name, route in routes.items()
        if route.command is None
    }
    commands = {
        name: CommandRoute(route, environ, settings.source)
        for name, route in routes.items()
        if route.command is not None
    }
    if not stored:  # the store's names were recorded as they were
        keys.refuse_keys_in_names(batch, keys.batch_secrets(providers, commands))
    return Checked(routes, size, auto, providers, commands)


def check_given_id(batch_id: object) -> None:
    """A batch id given, not drawn: a plain name, as a task's id is (it names the batch's folder:
    "../x" would be outside the state folder)."""
    if not isinstance(batch_id, str) or not ID_PATTERN.fullmatch(batch_id):
        raise InputError(
            None,
            None,
            "batch_id",
            f"{batch_id!r} is not a valid batch id: it names a folder, so use {ID_RULE}",
        )


def pool_size(
    override: int | Literal["auto"] | None, settings: Settings, routes: Iterable[Route]
) -> int:
    """The number of slots: given, configured, or `auto` from the CPUs and the routes."""
    if override not in (None, "auto") and (type(override) is not int):  # not 2.5, "8", True
        raise ValueError(f'max_concurrent must be a whole number or "auto", got {override!r}')
    if isinstance(override, int):
        if not 1 <= override <= MAX_CONCURRENT:
            raise ValueError(f"max_concurrent must be between 1 and {MAX_CONCURRENT}")
        return override
    configured = override or settings.engine.max_concurrent
    if configured != "auto":
        return configured
    return auto_pool_size(routes, os.cpu_count())


def check_arguments(batch: object, settings: object, stored: bool) -> None:
    """TypeError for a batch or settings of the wrong type; SpecError for a task a file refuses."""
    if not isinstance(batch, Batch):
        raise TypeError(f"batch: expected a Batch (load_batch(path)), got {kind(batch)}")
    if not isinstance(settings, Settings):
        raise TypeError(f"settings: expected Settings (load_settings(path)), got {kind(settings)}")
    if not stored:  # the store's were checked as they were loaded
        check_tasks(batch)


def check_budget(settings: Settings, routes: Iterable[Route]) -> None:
    """A cost cap (hard or soft) needs every route priced: spend at an unknown price is never
    counted, so the cap would silently never be reached."""
    budget = settings.budget
    caps = [
        (line, name)
        for value, line, name in (
            (budget.max_cost_usd, budget.cost_line, "budget.max_cost_usd"),
            (budget.soft_cost_usd, budget.soft_cost_line, "budget.soft_cost_usd"),
        )
        if value is not None
    ]
    if not caps:
        return
    line, name = caps[0]
    for route in routes:
        if not spend_known(route):
            raise ConfigError(
                settings.source,
                line,
                name,
                f"cannot be enforced: no price is known for route {route.name!r} "
                f"(model {route.model!r}); {pricing_wanted(route)}",
            )


def check_task_text(batch: Batch, limit: int) -> None:
    """SpecError at the first task whose goal, context or group is over `limit` characters. A
    task file is checked as it loads; a Batch built in Python is checked here."""
    for task in batch.tasks:
        for name in TEXT_FIELDS:
            value = getattr(task, name)
            if isinstance(value, str) and len(value) > limit:
                path, line = located(task.source)
                raise SpecError(
                    path, line, name, f"task {task.id!r}: {too_long(len(value), limit)}"
                )


def check_commands(batch: Batch, routes: Iterable[Route], source: Path | None) -> None:
    """A route's workspace must be usable before anything starts: a worktree needs the batch
    workspace to be in a git repository."""
    for route in routes:
        if route.own_workspace != "worktree":
            continue
        line = route.command.lines.get("workspace") if route.command is not None else None
        where = (source, line, f"routes.{route.name}.workspace")
        if batch.workspace is None:
            raise ConfigError(
                *where,
                'workspace = "worktree" needs the batch\'s workspace to be a git checkout, '
                "and the batch names no workspace",
            )
        if git_toplevel(Path(batch.workspace)) is None:
            raise ConfigError(
                *where,
                f'workspace = "worktree": {batch.workspace} is not in a git repository '
                "(or git is not installed)",
            )
