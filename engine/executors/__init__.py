"""Where children's work runs: threads of the owner process (threads.py, the default), or worker
actors on a Ray cluster (cluster/, the optional extra `flightdeck[ray]`). The owner decides and
records either way; only the waiting on models and processes moves."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path

from flightdeck.engine.child.facts import Report
from flightdeck.engine.control.pool import auto_pool_size, worker_pool
from flightdeck.engine.control.throttle import RouteThrottle
from flightdeck.engine.errors import ConfigError
from flightdeck.engine.executors.base import Executor
from flightdeck.engine.executors.threads import ThreadExecutor
from flightdeck.engine.inputs.settings import Route, Settings
from flightdeck.engine.records.meter import Meter

__all__ = ["Executor", "check", "open_executor", "ray_missing"]


def ray_missing(name: str) -> str | None:
    """Why `name` (how the operator asked for the Ray executor) cannot be used: Ray is not
    installed; None if it is."""
    try:
        import ray  # noqa: F401  # the optional extra
    except ImportError:
        return f'{name} needs Ray, which is not installed: pip install "flightdeck[ray]"'
    return None


def check(settings: Settings, *, providers_given: bool) -> None:
    """ConfigError, before anything is written, for an executor that cannot run this batch, or
    a cluster that cannot be joined."""
    if settings.engine.executor != "ray":
        return
    where = (settings.source, settings.engine.executor_line, "engine.executor")
    asked = 'executor = "ray"'
    if settings.source is not None and settings.engine.executor_line is None:
        # Not the file's: `run --executor ray`, kept with the batch's settings for `resume`.
        where, asked = (None, None, "engine.executor"), '"ray" (from run --executor)'
    missing = ray_missing(asked)
    if missing:
        raise ConfigError(*where, missing)
    if providers_given:
        raise ConfigError(
            *where,
            "model clients made in Python cannot run on a cluster: each worker makes its own",
        )
    import ray

    if settings.ray.address != "local" and not ray.is_initialized():
        from flightdeck.engine.executors.cluster.join import join_address

        join_address(settings.ray, settings.source)


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
