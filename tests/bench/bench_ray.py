"""The Ray executor against the thread executor, in the same run on the same machine.

1. Throughput: 2,000 one-call sim children at zero latency (where Ray's per-call overhead shows
   most), on a local cluster (`ray.init(num_cpus=2)`) and on threads: the ratio of the rates.
2. Latency-bound: 500 children × 3 calls × 200 ms on 50 slots: the makespan against the ideal
   (500 / 50 × 3 × 0.2 s = 6 s), on Ray and on threads.
3. Stop latency on Ray: children held in a long call, stopped one at a time; from `stop()` to
   the owner's row saying `stopped`: p50 and max.
4. Fleet-wide rpm: a route limited to `BENCH_RPM` requests a minute, its children spread over
   two simulated nodes (`ray.cluster_utils.Cluster`): the rate it is held at, as a share of the
   limit.

`BENCH_CHILDREN`, `BENCH_SLOW_CHILDREN`, `BENCH_STOPS`, `BENCH_RPM` and `BENCH_RPM_CALLS` scale
it down (the smoke test does).
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import MappingProxyType
from typing import Any

import ray
from flightdeck.engine.api import Engine
from flightdeck.engine.executors.cluster.join import private_token
from flightdeck.engine.inputs.settings import EngineSettings, RaySettings, Settings
from flightdeck.engine.inputs.settings import default_sim_route as sim
from flightdeck.engine.inputs.tasks import Batch, Task
from flightdeck.engine.model import ChildStatus

N = int(os.environ.get("BENCH_CHILDREN", "2000"))
SLOW = int(os.environ.get("BENCH_SLOW_CHILDREN", "500"))
STOPS = int(os.environ.get("BENCH_STOPS", "20"))
RPM = int(os.environ.get("BENCH_RPM", "1200"))
RPM_CALLS = int(os.environ.get("BENCH_RPM_CALLS", "300"))
SLOTS = 50
CALL_S = 0.2


def settings(route: Any, pool: int, executor: str) -> Settings:
    return Settings(
        engine=EngineSettings(max_concurrent=pool, executor=executor),  # type: ignore[arg-type]
        routes=MappingProxyType({"sim": route}),
        ray=RaySettings(workers_per_node=int(os.environ.get("BENCH_WORKERS_PER_NODE", "2"))),
    )


def tasks(n: int) -> Batch:
    return Batch("bench", tuple(Task(id=f"c{i:05d}", goal=f"Answer {i}", seq=i) for i in range(n)))


def run(batch: Batch, s: Settings, state: Path) -> tuple[float, Engine]:
    """Seconds from the first child's start to the last one's end (on Ray, the workers start
    before that: a cost paid once per batch, not per child)."""
    engine = Engine(batch, s, state_dir=state)
    engine.start()
    assert engine.wait(900)
    engine.close()
    children = engine.snapshot().children
    first = min(c.started_ts for c in children if c.started_ts is not None)
    last = max(c.finished_ts for c in children if c.finished_ts is not None)
    return last - first, engine


def throughput(tmp: Path) -> dict[str, Any]:
    route = sim(time_scale=1.0, latency_ms=0, tokens_per_s=1e9, tool_turns=0, cache=False)
    out = {}
    for executor in ("threads", "ray"):
        seconds, engine = run(tasks(N), settings(route, 64, executor), tmp / f"tp-{executor}")
        assert engine.snapshot().totals.completed == N
        out[executor] = round(N / seconds, 1)
    return {
        "bench": "ray_throughput",
        "children": N,
        "ray_children_per_s": out["ray"],
        "threads_children_per_s": out["threads"],
        "ray_over_threads": round(out["ray"] / out["threads"], 3),
    }


def latency_bound(tmp: Path) -> dict[str, Any]:
    route = sim(time_scale=1.0, latency_ms=CALL_S * 1000, tokens_per_s=1e9, tool_turns=2)
    ideal = SLOW / SLOTS * 3 * CALL_S
    out = {}
    for executor in ("threads", "ray"):
        seconds, engine = run(tasks(SLOW), settings(route, SLOTS, executor), tmp / f"lb-{executor}")
        snap = engine.snapshot()
        assert snap.totals.completed == SLOW
        assert all(c.activity.api_calls == 3 for c in snap.children)
        out[executor] = round(seconds, 2)
    return {
        "bench": "ray_latency_bound",
        "children": SLOW,
        "ideal_s": round(ideal, 2),
        "ray_makespan_s": out["ray"],
        "threads_makespan_s": out["threads"],
        "ray_ideal_over_makespan": round(ideal / out["ray"], 3),
        "threads_ideal_over_makespan": round(ideal / out["threads"], 3),
    }


def stop_latency(tmp: Path) -> dict[str, Any]:
    route = sim(time_scale=1.0, latency_ms=600_000, tokens_per_s=10, tool_turns=0)
    engine = Engine(tasks(STOPS), settings(route, STOPS, "ray"), state_dir=tmp / "stops")
    engine.start()
    try:
        deadline = time.monotonic() + 120
        while engine.snapshot().totals.running < STOPS or any(
            c.activity.api_calls == 0 for c in engine.snapshot().children
        ):
            assert time.monotonic() < deadline, "children never all in their call"
            time.sleep(0.01)
        times = []
        for child in engine.snapshot().children:
            t0 = time.perf_counter()
            engine.stop([child.id])
            while engine.snapshot().child(child.id).status is not ChildStatus.STOPPED:  # type: ignore[union-attr]
                time.sleep(0.001)
            times.append(time.perf_counter() - t0)
    finally:
        engine.close()
    return {
        "bench": "ray_stop_latency",
        "children": STOPS,
        "stop_ms_p50": round(statistics.median(times) * 1000, 1),
        "stop_ms_max": round(max(times) * 1000, 1),
    }


def fleet_rpm(tmp: Path) -> dict[str, Any]:
    from ray.cluster_utils import Cluster

    node = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}
    cluster = Cluster(initialize_head=True, head_node_args=node)
    cluster.add_node(**node)
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, log_to_driver=False, configure_logging=False)
    try:
        route = dataclasses.replace(
            sim(time_scale=1.0, latency_ms=0, tokens_per_s=1e9, tool_turns=0, cache=False),
            rpm=RPM,
        )
        engine = Engine(tasks(RPM_CALLS), settings(route, 32, "ray"), state_dir=tmp / "rpm")
        engine.start()
        try:
            assert engine.wait(900)
            snap = engine.snapshot()
        finally:
            engine.close()
        nodes = sorted({c.node for c in snap.children if c.node})
        starts = sorted(c.started_ts for c in snap.children if c.started_ts is not None)
        ends = sorted(c.finished_ts for c in snap.children if c.finished_ts is not None)
        # The bucket's first second of burst is let through at once, as on one machine: the
        # rate is measured after it, from the call that follows the burst to the last.
        burst = max(1, RPM // 60)
        span = ends[-1] - starts[burst]
        rate = (len(ends) - burst) / span * 60
    finally:
        ray.shutdown()
        cluster.shutdown()
    return {
        "bench": "ray_fleet_rpm",
        "limit_rpm": RPM,
        "calls": RPM_CALLS,
        "nodes": len(nodes),
        "held_rpm": round(rate, 1),
        "ratio_of_limit": round(rate / RPM, 3),
    }


def main() -> None:
    results = []
    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        # A new local cluster: Ray would make ~/.ray/auth_token with the umask's modes (0644),
        # a token every later `ray start` cluster takes; made 0600 first, as a "local" batch does.
        private_token()
        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            object_store_memory=100 * 1024 * 1024,
        )
        try:
            results.append(throughput(tmp))
            results.append(latency_bound(tmp))
            results.append(stop_latency(tmp))
        finally:
            ray.shutdown()
        results.append(fleet_rpm(tmp))
    for result in results:
        print(json.dumps(result), file=sys.stderr)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
