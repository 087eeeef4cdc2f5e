"""Memory and time per child: 10,000 and 50,000 instant sim children, each size in a fresh process.

Per size: the peak resident set of the process beyond what it held just before building the
Engine (imports, the task list), divided by the children; the wall time from `Engine(...)` to
`wait` returning, per child; and the tail: from the last child's recorded end to `wait`
returning (the batch's end must not wait on the writer's file work). Linear means the two
sizes' per-child figures agree. It also says where the CPU went, by thread (children,
coordinator, store, the main thread building the children) and in the transcript writer's
process. Store and transcripts on, in BENCH_DIR (default: the system
temp folder; /dev/shm takes the disk out). `BENCH_MEMORY_SIZES` sets the sizes,
`BENCH_MEMORY_TOOL_TURNS` the tool turns each child takes first (0).

It uses only the engine's API, so run with PYTHONPATH naming another checkout's `flightdeck`
it measures that checkout (docs/performance.md), the layout before the restructuring included
(`git archive 4748663 src`, then PYTHONPATH=that src).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import MappingProxyType
from typing import Any

SIZES = tuple(int(n) for n in os.environ.get("BENCH_MEMORY_SIZES", "10000,50000").split(","))
POOL = int(os.environ.get("BENCH_POOL", "64"))
# Tool turns a child takes before it answers (0: it answers at once; `sim`'s default is 1-3).
TOOL_TURNS = int(os.environ.get("BENCH_MEMORY_TOOL_TURNS", "0"))


def _rss_kb() -> int:
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS in /proc/self/status")


class ThreadCPU:
    """CPU seconds by kind of thread (its name without the number), read from
    /proc/self/task/*/schedstat every `every` seconds: where an instant child's time goes.
    A thread that ends between two reads loses at most its last `every` seconds; the engine's
    threads (its pool's included) live until the batch is closed, after the last read. A read
    of 70 threads costs 1-2 ms of this process's CPU, which the children wait for (the GIL):
    read every 20 ms, it added about 5 % to the time a child was measured to take."""

    def __init__(self, every: float = 0.5) -> None:
        self._every = every
        self._seen: dict[int, tuple[str, float]] = {}  # native id: (kind, CPU seconds)
        self._final: dict[int, tuple[str, float]] = {}
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)

    def __enter__(self) -> ThreadCPU:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self.sample()  # now, not after the sampler's last wait
        self._final = dict(self._seen)
        self._thread.join()

    def _run(self) -> None:
        while not self._done.wait(self._every):
            self.sample()

    def sample(self) -> None:
        for thread in threading.enumerate():
            tid = thread.native_id
            try:  # nanoseconds on a CPU (stat's utime and stime count 10 ms ticks)
                with open(f"/proc/self/task/{tid}/schedstat", encoding="ascii") as fh:
                    cpu = int(fh.read().split()[0]) / 1e9
            except OSError:  # it ended
                continue
            kind = thread.name.rstrip("0123456789").rstrip("_-")
            self._seen[tid or 0] = (kind, cpu)

    def by_kind(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for kind, cpu in self._final.values():
            out[kind] = out.get(kind, 0.0) + cpu
        return out


def one(n: int, folder: Path) -> dict[str, Any]:
    """Run `n` instant children in this process: what they cost in memory and time."""
    from flightdeck.engine.api import Engine

    try:
        from flightdeck.engine.control.pool import tune_interpreter
        from flightdeck.engine.inputs.settings import EngineSettings, Settings, default_sim_route
        from flightdeck.engine.inputs.tasks import Batch, Task
    except ImportError:  # the layout before the restructuring (4748663's src/): side by side
        from flightdeck.engine.limits import tune_interpreter  # type: ignore[no-redef]
        from flightdeck.engine.settings import (  # type: ignore[no-redef]
            EngineSettings,
            Settings,
            default_sim_route,
        )
        from flightdeck.engine.spec import Batch, Task  # type: ignore[no-redef]

    tune_interpreter()  # as `flightdeck run` does
    route = default_sim_route(time_scale=1.0, latency_ms=0, tokens_per_s=1e9, tool_turns=TOOL_TURNS)
    settings = Settings(
        engine=EngineSettings(max_concurrent=POOL), routes=MappingProxyType({"sim": route})
    )
    tasks = tuple(Task(id=f"c{i:06d}", goal=f"Answer question {i}", seq=i) for i in range(n))
    # One-time, not a child's: the store's reader imports psutil at its first look at a live
    # owner (since 2026-12-07; before, at the engine's import). About 1 MB.
    import psutil  # noqa: F401

    before_kb = _rss_kb()
    main_cpu = time.thread_time()
    with ThreadCPU() as threads:
        t0, c0 = time.perf_counter(), time.process_time()
        engine = Engine(Batch("bench", tasks), settings, state_dir=folder)
        engine.start()
        assert engine.wait(3600)
        ended = time.time()
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    main_cpu = time.thread_time() - main_cpu
    snap = engine.snapshot()
    engine.close()
    # The transcript writer (and its search indexer) is a process of its own, on another core.
    writer = resource.getrusage(resource.RUSAGE_CHILDREN)
    by_thread = threads.by_kind()
    by_thread.pop("bench-sampler", None)
    by_thread["MainThread"] = main_cpu  # building the children at start
    # Threads not started through `threading` (the pool before the restructuring used
    # `_thread`) are in no /proc read above: what the process used beyond the threads seen.
    unseen = cpu - sum(by_thread.values())
    if unseen > 0.05 * cpu:
        by_thread["unseen"] = unseen
    assert snap.totals.completed == n, snap.totals
    last = max(row.finished_ts or 0.0 for row in snap.children)
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return {
        "children": n,
        "kb_per_child": round((peak_kb - before_kb) / n, 2),
        "us_per_child": round(elapsed / n * 1e6, 1),
        "cpu_us_per_child": round(cpu / n * 1e6, 1),  # this process's threads (not the writer)
        "cpu_us_by_thread": {k: round(v / n * 1e6, 1) for k, v in sorted(by_thread.items())},
        "writer_cpu_us_per_child": round((writer.ru_utime + writer.ru_stime) / n * 1e6, 1),
        "tail_s": round(ended - last, 3),
        "peak_rss_mb": round(peak_kb / 1024, 1),
        "before_mb": round(before_kb / 1024, 1),
    }


def main() -> dict[str, Any]:
    sizes = []
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        for n in SIZES:
            proc = subprocess.run(
                [sys.executable, __file__, str(n), str(Path(tmp) / f"n{n}")],
                capture_output=True,
                text=True,
                check=True,
            )
            sizes.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    return {
        "bench": "memory",
        "load_avg_1m": round(os.getloadavg()[0], 1),
        "sizes": sizes,
        "targets": {"kb_per_child": 6, "us_per_child": 150, "tail_s": 0.5},
    }


if __name__ == "__main__":
    if len(sys.argv) == 3:
        print(json.dumps(one(int(sys.argv[1]), Path(sys.argv[2]))))
    else:
        r = main()
        for s in r["sizes"]:
            print(
                f"{s['children']:,} instant children: {s['kb_per_child']} KB and "
                f"{s['us_per_child']} µs each ({s['cpu_us_per_child']} µs CPU), "
                f"batch end {s['tail_s']} s after the last child "
                f"(peak RSS {s['peak_rss_mb']} MB; load {r['load_avg_1m']})"
            )
            threads = ", ".join(f"{k} {v}" for k, v in s["cpu_us_by_thread"].items())
            print(
                f"  CPU µs a child by thread: {threads}; "
                f"writer process {s['writer_cpu_us_per_child']}"
            )
        print(json.dumps(r))
