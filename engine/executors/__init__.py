"""Where children's work runs: threads of the owner process (threads.py, the default), or worker
actors on a Ray cluster (cluster/, the optional extra `flightdeck[ray]`). The owner decides and
records either way; only the waiting on models and processes moves.

Here, the checks that a batch's executor can be used (which a process that only checks a batch
imports); opening.py opens it, base.py is what the owner drives.
"""

from __future__ import annotations

from flightdeck.engine.errors import ConfigError
from flightdeck.engine.inputs.settings import Settings

__all__ = ["check", "ray_missing"]


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
