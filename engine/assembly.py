"""Assembling a batch's parts before it starts: its id, pool size, children and records."""

from __future__ import annotations

import json
import os
import secrets
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Literal

from flightdeck.engine.child.facts import Report
from flightdeck.engine.child.loop import Child
from flightdeck.engine.child.tools import Toolbox
from flightdeck.engine.control.pool import auto_pool_size
from flightdeck.engine.control.retry import RetryPolicy
from flightdeck.engine.control.throttle import RouteThrottle
from flightdeck.engine.errors import ConfigError
from flightdeck.engine.inputs.settings import MAX_CONCURRENT, Route, Settings
from flightdeck.engine.inputs.tasks import Batch, Task
from flightdeck.engine.providers.base import Provider
from flightdeck.engine.records.meter import Meter, price_known
from flightdeck.engine.records.rows import QueuedChild
from flightdeck.engine.records.sink import TranscriptSink


def steady_clock() -> Callable[[], float]:
    """Wall-clock seconds that advance only as `time.monotonic` does.

    The engine's stamps are also its durations: stall and timeout checks, a child's elapsed
    time. A step of the system clock (NTP, a laptop waking) must not make every running child
    look stalled, so the wall clock is read once, here, and never again."""
    offset = time.time() - time.monotonic()
    return lambda: offset + time.monotonic()


def new_batch_id(clock: Callable[[], float] = time.time) -> str:
    """Sortable and readable: 20261129-081500-a3f2."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(clock()))
    return f"{stamp}-{secrets.token_hex(2)}"


def transcript_name(task: Task) -> str:
    """A child's transcript file name inside the batch folder."""
    return f"{task.id}.log"


def task_json(task: Task) -> dict[str, object]:
    """A task as stored in the batch row: the fields it was given, None ones left out."""
    out: dict[str, object] = {"id": task.id, "goal": task.goal, "seq": task.seq}
    if task.context is not None:
        out["context"] = task.context
    if task.group is not None:
        out["group"] = task.group
    if task.route is not None:
        out["route"] = task.route
    if task.timeout_s is not None:
        out["timeout_s"] = task.timeout_s
    out["source"] = task.source
    out["max_turns"] = task.max_turns
    return out


def pool_size(
    override: int | Literal["auto"] | None, settings: Settings, routes: Iterable[Route]
) -> int:
    """The number of slots: given, configured, or `auto` from the CPUs and the routes."""
    if isinstance(override, int):
        if not 1 <= override <= MAX_CONCURRENT:
            raise ValueError(f"max_concurrent must be between 1 and {MAX_CONCURRENT}")
        return override
    configured = override or settings.engine.max_concurrent
    if configured != "auto":
        return configured
    return auto_pool_size(routes, os.cpu_count())


def check_budget(settings: Settings, routes: Iterable[Route]) -> None:
    """A cost cap needs every route priced: spend at an unknown price is never counted,
    so the cap would silently never be reached."""
    budget = settings.budget
    if budget.max_cost_usd is None:
        return
    for route in routes:
        if not price_known(route):
            raise ConfigError(
                settings.source,
                budget.cost_line,
                "budget.max_cost_usd",
                f"cannot be enforced: no price is known for route {route.name!r} "
                f"(model {route.model!r}); give [routes.{route.name}] a price",
            )


def build_children(
    batch: Batch,
    settings: Settings,
    *,
    providers: Mapping[str, Provider],
    throttles: Mapping[str, RouteThrottle],
    toolbox: Toolbox,
    batch_dir: Path,
    meter: Meter,
    clock: Callable[[], float],
    report: Report,
    queued_ts: float,
    sink: TranscriptSink,
) -> list[Child]:
    """One queued child per task, in the batch's order."""
    children = []
    for task in batch.tasks:
        route = settings.route(task.route)
        # Jitter seeded per task: reruns of a batch back off alike (a sim run replays
        # exactly), while children of one batch still spread out.
        retry = RetryPolicy(
            route.retry,
            scale=route.time_scale,
            throttle=throttles[route.name],
            route=route,
            seed=f"{route.options.get('seed', 0)}:{task.id}",
        )
        children.append(
            Child(
                task,
                route,
                providers[route.name],
                retry,
                toolbox,
                str(batch_dir / transcript_name(task)),
                meter,
                clock,
                report,
                queued_ts,
                sink,
            )
        )
    return children


def manifest_children(children: Iterable[Child]) -> str:
    """The children part of the manifest, as JSON.

    ASCII: untrusted names (a C1 byte, a bidi override) stay escaped for `cat`, and a file name
    that is not UTF-8 cannot fail the write."""
    listed = [
        {"id": c.task.id, "route": c.route.name, "transcript": transcript_name(c.task)}
        for c in children
    ]
    return json.dumps(listed)


def queued_rows(children: Iterable[Child]) -> list[QueuedChild]:
    """The store's first row for each child, written before any runs."""
    return [
        QueuedChild(
            c.task.id,
            c.task.seq,
            c.task.goal,
            c.task.group,
            c.route.name,
            c.route.model,
            c.queued_ts,
            c.transcript_path,
        )
        for c in children
    ]
