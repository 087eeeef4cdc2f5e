"""The prompt-cache warm-up gate, side by side with it off, on the same sim batch.

CHILDREN one-call children of one route, all admitted at once (pool = CHILDREN), against the
sim's prompt cache (an entry is readable once the response writing it streams). Off, every
first request misses and writes the prefix; on, one leader writes it and its siblings read it.
Reported: the share of prefix tokens read from the cache, the dollars spent and saved, and the
makespan (the gate's cost: one time to first token). Alternated runs, medians.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import tempfile
from decimal import Decimal
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: helpers

from flightdeck.engine.api import Engine

from helpers import batch, settings, sim_route

CHILDREN = int(os.environ.get("BENCH_GATE_CHILDREN", "64"))
RUNS = int(os.environ.get("BENCH_GATE_RUNS", "5"))
# 400 ms to the first token at time scale 0.25 (60-140 ms drawn), a short answer
ROUTE = {"tool_turns": 0, "time_scale": 0.25, "latency_ms": 400, "tokens_per_s": 4000}


def one_run(gate_s: float) -> dict[str, float]:
    route = dataclasses.replace(sim_route(**ROUTE), cache_gate_s=gate_s)
    with tempfile.TemporaryDirectory() as tmp:
        engine = Engine(batch(CHILDREN), settings(route, pool=CHILDREN), state_dir=Path(tmp))
        engine.start()
        try:
            assert engine.wait(60)
            snap = engine.snapshot()
        finally:
            engine.close()
    usage = snap.totals.usage
    prefix = usage.cache_read_tokens + usage.cache_write_tokens
    assert snap.finished_ts is not None
    return {
        "cached_share": usage.cache_read_tokens / prefix,
        "cost_usd": float(snap.totals.cost_usd),
        "saved_usd": float(snap.totals.cache_saved_usd),
        "makespan_s": snap.finished_ts - snap.started_ts,
    }


def main() -> None:
    runs: dict[str, list[dict[str, float]]] = {"off": [], "on": []}
    for _ in range(RUNS):  # alternated, so drift on a busy machine hits both alike
        runs["off"].append(one_run(0.0))
        runs["on"].append(one_run(10.0))
    med = {
        mode: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for mode, rs in runs.items()
    }
    off, on = med["off"], med["on"]
    print(
        json.dumps(
            {
                "bench": "cache_gate",
                "children": CHILDREN,
                "runs": RUNS,
                "cached_share_off": round(off["cached_share"], 3),
                "cached_share_on": round(on["cached_share"], 3),
                "cost_usd_off": round(off["cost_usd"], 6),
                "cost_usd_on": round(on["cost_usd"], 6),
                "saved_usd_on": round(on["saved_usd"], 6),
                "makespan_s_off": round(off["makespan_s"], 3),
                "makespan_s_on": round(on["makespan_s"], 3),
                "added_latency_s": round(on["makespan_s"] - off["makespan_s"], 3),
                # above 1: how many times cheaper the batch is with the gate
                "cost_off_over_on": round(
                    float(Decimal(str(off["cost_usd"])) / Decimal(str(on["cost_usd"]))), 3
                ),
            }
        )
    )


if __name__ == "__main__":
    main()
