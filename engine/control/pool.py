"""How many children run at once, the worker threads they run on, and interpreter tuning."""

from __future__ import annotations

import gc
import math
import sys
from collections.abc import Iterable

from flightdeck.engine.control.workers import WorkerPool
from flightdeck.engine.inputs.settings import Route

TYPICAL_CALL_S = 10.0  # a streamed turn of a few hundred tokens; converts rpm into concurrency
SPARE_WORKERS = 4  # threads beyond the slots, for workers abandoned after a stall grace period


def route_concurrency(route: Route) -> int | None:
    """How many calls a route can usefully have in flight, or None when unbounded."""
    if route.max_concurrent is not None:
        return route.max_concurrent
    if route.rpm is not None:
        return max(1, math.ceil(route.rpm * TYPICAL_CALL_S / 60))
    return None


def auto_pool_size(routes: Iterable[Route], cpu_count: int | None) -> int:
    """`auto` pool size: min(64, 8 × CPUs), bounded by what the routes can use at once.

    Workers only wait on I/O, so several per core are cheap (CPython's own ThreadPoolExecutor
    default is cpu + 4); past 64 the GIL and the SQLite writer dominate. A route contributes its
    max_concurrent, else rpm × 10 s / 60; an unbounded route leaves the CPU bound in charge.
    """
    size = min(64, 8 * max(1, cpu_count or 1))
    limits = [route_concurrency(r) for r in routes]
    if limits and all(limit is not None for limit in limits):
        size = min(size, sum(limit for limit in limits if limit is not None))
    return max(1, size)


def worker_pool(pool_size: int) -> WorkerPool:
    """The threads a coordinator with `pool_size` slots runs its children on, one per child."""
    return WorkerPool(pool_size + SPARE_WORKERS)


# CPython's default is 5 ms. Every thread waiting for the GIL wakes once per interval to ask for
# it, so many runnable workers make many futile wake-ups; a longer interval cuts them, at the
# price of a thread back from a syscall waiting longer for the GIL. Children that wait seconds
# on the network see neither effect (tests/bench/bench_engine.py measures both settings).
GIL_SWITCH_INTERVAL_S = 0.02

# An engine allocates many short-lived containers (rows, messages, events) while it holds
# thousands of long-lived ones (children), which every older-generation pass walks again.
# Reference counting still frees garbage at once; only reference cycles wait longer.
GC_THRESHOLDS = (50_000, 20, 100)


def tune_interpreter() -> None:
    """Process-wide settings for running the engine; the `flightdeck` command calls this.

    A library embedding `Engine` decides for its own process, so `Engine` never calls it.
    """
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    gc.set_threshold(*GC_THRESHOLDS)
