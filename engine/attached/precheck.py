"""What `flightdeck run` uses before it starts a batch's owner (spawn.py): the task loader and
the engine's checks, the same ones `Engine` runs as it is made (owner/checks.py). Bad input
fails here, exit 2, with nothing written; and this process loads none of the machinery (the
coordinator, the children, a provider's SDK) that the owner it starts loads anyway."""

from __future__ import annotations

from flightdeck.engine.executors import ray_missing
from flightdeck.engine.inputs.tasks import load_batch
from flightdeck.engine.owner.checks import check_batch

__all__ = ["check_batch", "load_batch", "ray_missing"]
