"""The executor a batch's settings name, opened: the owner's threads, or a Ray cluster's
workers (imported only then)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path

from flightdeck.engine.child.facts import Report
from flightdeck.engine.control.pool import auto_pool_size, worker_pool
from flightdeck.engine.control.throttle import RouteThrottle
from flightdeck.engine.executors.base import Executor
from flightdeck.engine.executors.threads import ThreadExecutor
from flightdeck.engine.inputs.settings import Route, Settings
from flightdeck.engine.records.meter import Meter


def open_executor(
    settings: Settings,
    *,
    pool_size: int,
    auto: bool,
    report: Report,
    meter: Meter,
    routes: Mapping[str, Route],
    throttles: Mapping[str, RouteThrottle],
    clock: Callable[[], float],
    batch_id: str,
    batch_dir: Path,
    workspace: Path,
    delegate: bool,
    private: bool,
) -> tuple[Executor, int]:
    """The executor the settings name, started, and the pool size (`auto`: the formula of
    control/pool.py, over the cluster's CPUs on Ray)."""
    if settings.engine.executor != "ray":
        return ThreadExecutor(worker_pool(pool_size), report), pool_size
    from flightdeck.engine.executors.cluster.executor import RayExecutor, probe_files
    from flightdeck.engine.executors.cluster.wire import Setup

    commands = any(r.command is not None for r in routes.values())
    shared = [workspace.absolute()] + ([batch_dir.absolute()] if commands else [])
    probes = probe_files(shared)
    setup = Setup(
        # The routes the batch uses, as the owner builds them: a worker refuses its node for a
        # key or program missing there, which a route no task names must not need.
        settings=dataclasses.replace(settings, routes=dict(routes)),
        batch_id=batch_id,
        batch_dir=batch_dir.absolute(),
        workspace=workspace.absolute(),
        delegate=delegate,
        owner_now=clock(),
        private=private,
        probes=probes,
    )
    try:
        executor = RayExecutor(
            settings.ray,
            setup,
            report=report,
            meter=meter,
            routes=routes,
            throttles=throttles,
            clock=clock,
            permit_threads=pool_size,
            source=settings.source,
        )
    finally:
        for path, _ in probes:
            path.unlink(missing_ok=True)
    if auto:
        pool_size = auto_pool_size(routes.values(), executor.cpus)
    return executor, pool_size
