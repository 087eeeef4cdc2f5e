"""Stop at scale, on the path users take: a real owner (`flightdeck run --headless`, as `run`
starts one) of 5,000 `sim` children, 1,000 running, each held waiting for its model's first
token (only a stop ends the wait). Commands go through the store as the attached TUI's keys
send them (`Client.send`). Timed: from the send to every stopped child's row saying `stopped`
in the store, read by a separate connection every 5 ms:

- one running child, ten times (a different child each time; p50 and max);
- a subset of 100 running children (one command naming them, as a tagged subset's `x`);
- a steer `--now` to every running child (one command naming them all, as `s` on every child
  tagged), to the last receipt saying `delivered` (the turn interrupted, and begun again with
  the message);
- every child (`X`: stop all), 1,000 running and the rest queued, to the last row stopped.

The README says a stop "takes effect within a second": that is the target for each. Knobs:
`BENCH_STOP_CHILDREN`, `BENCH_STOP_RUNNING`, `BENCH_STOP_SUBSET`.
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from flightdeck.engine.attached.client import Client
from flightdeck.engine.commands import Command, Steer, Stop, StopAll
from owner import start_owner

N = int(os.environ.get("BENCH_STOP_CHILDREN", "5000"))
RUNNING = int(os.environ.get("BENCH_STOP_RUNNING", "1000"))
SUBSET = int(os.environ.get("BENCH_STOP_SUBSET", "100"))
SINGLES = 10
TARGET_S = 1.0
CONFIG = f"""[engine]
max_concurrent = {RUNNING}
state_dir = "state"

[routes.sim]
provider = "sim"
model = "sim-1"
max_concurrent = {RUNNING}
latency_ms = 600000   # waiting for a first token that never comes: only a stop ends it
tool_turns = 0
"""


def _count(db: Path, sql: str, *args: object) -> int:
    try:
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
        try:
            return int(conn.execute(sql, args).fetchone()[0])
        finally:
            conn.close()
    except sqlite3.Error:  # not made yet
        return -1


def _wait(condition: Callable[[], bool], what: str, timeout: float = 120.0) -> float:
    """Poll every 5 ms; the time it took."""
    t0 = time.perf_counter()
    while not condition():
        if time.perf_counter() - t0 > timeout:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.005)
    return time.perf_counter() - t0


def _stopped(db: Path, ids: list[str]) -> Callable[[], bool]:
    marks = ",".join("?" * len(ids))
    sql = f"SELECT count(*) FROM children WHERE status = 'stopped' AND id IN ({marks})"
    return lambda: _count(db, sql, *ids) == len(ids)


def _running(db: Path) -> list[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        rows = conn.execute("SELECT id FROM children WHERE status = 'running' ORDER BY id")
        return [r[0] for r in rows]
    finally:
        conn.close()


def _timed(client: Client, command: Command, done: Callable[[], bool], what: str) -> float:
    t0 = time.perf_counter()
    client.send(command)
    _wait(done, what)
    return time.perf_counter() - t0


def main() -> dict[str, object]:
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        folder = Path(tmp)
        owner = start_owner(folder, CONFIG, N)
        db = folder / "state" / "flightdeck.db"
        try:
            running_sql = "SELECT count(*) FROM children WHERE status = 'running'"
            _wait(lambda: _count(db, running_sql) >= RUNNING, f"{RUNNING} children running")
            batch_sql = "SELECT id FROM batches"
            conn = sqlite3.connect(db)
            batch_id = str(conn.execute(batch_sql).fetchone()[0])
            conn.close()
            running = _running(db)
            singles, subset = running[:SINGLES], running[SINGLES : SINGLES + SUBSET]
            with Client(db, batch_id) as client:
                one = [
                    _timed(client, Stop((c,)), _stopped(db, [c]), f"{c} stopped") for c in singles
                ]
                many = _timed(client, Stop(tuple(subset)), _stopped(db, subset), "the subset")
                left = _running(db)
                delivered = (
                    "SELECT count(*) FROM controls WHERE kind = 'steer' AND state = 'delivered'"
                )
                steer = Steer(tuple(left), "wrap up now", now=True)
                steered = _timed(
                    client, steer, lambda: _count(db, delivered) == len(left), "the steers"
                )
                ended = "SELECT count(*) FROM children WHERE status IN ('running', 'queued')"
                every = _timed(client, StopAll(), lambda: _count(db, ended) == 0, "stop all")
            owner.wait(120)
        finally:
            if owner.poll() is None:
                owner.kill()
                owner.wait()
    return {
        "bench": "stop",
        "load_avg_1m": round(os.getloadavg()[0], 1),
        "children": N,
        "running": RUNNING,
        "one_ms_p50": round(statistics.median(one) * 1000, 1),
        "one_ms_max": round(max(one) * 1000, 1),
        "subset": len(subset),
        "subset_ms": round(many * 1000, 1),
        "all_running": len(left),
        "steer_all_ms": round(steered * 1000, 1),
        "all_ms": round(every * 1000, 1),
        "target_ms": TARGET_S * 1000,
    }


if __name__ == "__main__":
    r = main()
    print(
        f"stop, {r['children']:,} children, {r['running']:,} running: one child "
        f"{r['one_ms_p50']} ms p50 ({r['one_ms_max']} max), {r['subset']} at once "
        f"{r['subset_ms']} ms, all ({r['all_running']:,} running) {r['all_ms']} ms; "
        f"steer --now to all {r['steer_all_ms']} ms "
        f"(target {r['target_ms']:.0f}; load {r['load_avg_1m']})"
    )
    print(json.dumps(r))
