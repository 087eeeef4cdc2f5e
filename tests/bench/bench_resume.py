"""Resume: from `Engine.resume` to the first re-run child starting, on an abandoned batch of
10,000 children (64 running when their owner was killed), against a fresh start of the same
batch (`Engine(...)` + `start()` to its first child starting), side by side.

The abandoned batch is made by a real owner: `flightdeck run --headless` on slow sim children,
killed with SIGKILL once 64 run. Each timed resume works on its own copy of that state folder.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import statistics
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from flightdeck.engine.api import Engine
from flightdeck.engine.inputs.settings import load_settings
from flightdeck.engine.inputs.tasks import load_batch
from flightdeck.engine.model import ChildStarted, EngineEvent
from owner import start_owner

N = int(os.environ.get("BENCH_CHILDREN", "10000"))
POOL = 64
RUNS = int(os.environ.get("BENCH_RUNS", "3"))
CONFIG = f"""[engine]
max_concurrent = {POOL}
max_tasks = {max(N, 10_000)}
state_dir = "state"

[routes.sim]
provider = "sim"
model = "sim-1"
latency_ms = 600000   # children that stay running until they are killed
tool_turns = 0
"""


def abandoned_batch(folder: Path) -> str:
    """A real owner killed with 64 children running: the batch id."""
    owner = start_owner(folder, CONFIG, N)
    db = folder / "state" / "flightdeck.db"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            if db.is_file():
                try:
                    conn = sqlite3.connect(db)
                    running = conn.execute(
                        "SELECT count(*) FROM children WHERE status = 'running'"
                    ).fetchone()[0]
                    batch = conn.execute("SELECT id FROM batches").fetchone()
                    conn.close()
                except sqlite3.Error:
                    running, batch = 0, None
                if running >= POOL and batch is not None:
                    return str(batch[0])
            time.sleep(0.05)
        raise RuntimeError("the owner never had 64 children running")
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()


Subscriber = Callable[[EngineEvent], None]


def first_start(make: Callable[[Subscriber], Engine]) -> float:
    """Seconds from calling `make` (which builds and starts an engine) to a child starting."""
    started = threading.Event()

    def on_event(event: EngineEvent) -> None:
        if isinstance(event, ChildStarted):
            started.set()

    t0 = time.perf_counter()
    engine: Engine = make(on_event)
    started.wait(60)
    elapsed = time.perf_counter() - t0
    engine.close()
    return elapsed


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        source = root / "abandoned"
        source.mkdir()
        batch_id = abandoned_batch(source)
        resume_s, fresh_s = [], []
        for i in range(RUNS):
            copy = root / f"copy{i}"
            shutil.copytree(source, copy)

            def resumed(on_event: Subscriber, copy: Path = copy) -> Engine:
                engine = Engine.resume(copy / "state", batch_id)
                engine.subscribe(on_event)
                engine.start()
                return engine

            resume_s.append(first_start(resumed))
            fresh = root / f"fresh{i}"
            fresh.mkdir()

            def started(on_event: Subscriber, fresh: Path = fresh) -> Engine:
                settings = load_settings(source / "flightdeck.toml")
                batch = load_batch(source / "tasks.jsonl")
                engine = Engine(batch, settings, state_dir=fresh / "state")
                engine.subscribe(on_event)
                engine.start()
                return engine

            fresh_s.append(first_start(started))
    resume_med, fresh_med = statistics.median(resume_s), statistics.median(fresh_s)
    print(
        json.dumps(
            {
                "bench": "resume",
                "children": N,
                "running_at_kill": POOL,
                "resume_to_first_start_s_median": round(resume_med, 3),
                "resume_to_first_start_s_max": round(max(resume_s), 3),
                "fresh_start_to_first_start_s_median": round(fresh_med, 3),
                "fresh_over_resume": round(fresh_med / resume_med, 2),
                "runs": RUNS,
            }
        )
    )


if __name__ == "__main__":
    main()
