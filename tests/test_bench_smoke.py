"""`make bench` is not part of `make test`; this keeps the benchmarks that drive an engine runnable.

The engine benchmark's I/O floor reuses the store's statements and parameter builders, and the
TUI throughput run drives the real app and engine, so a change there could break them without
any other test noticing. Tiny sizes: this checks that they run and report, not how fast.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).parent / "bench" / "bench_engine.py"


def test_the_engine_benchmark_runs_and_reports(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "BENCH_CHILDREN": "30",
        "BENCH_ROUNDS": "1",
        "BENCH_DIR": str(tmp_path),
    }
    proc = subprocess.run(
        [sys.executable, str(BENCH)], capture_output=True, text=True, env=env, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["children"] == 30 and result["rounds"] == 1
    assert result["transcript_lines_per_child"] == 5  # system, user, answer (2 lines), status
    for key in (
        "engine_children_per_s_median",
        "floor_children_per_s_median",
        "headless_cli_children_per_s_median",
        "peak_rss_mb",
    ):
        assert result[key] > 0, key
    assert len(result["ratios_per_round"]) == 1 and result["ratio_of_floor_median"] > 0
    assert list(tmp_path.iterdir()) == []  # its temporary folder is gone


def test_the_tui_throughput_benchmark_runs_and_reports(tmp_path: Path) -> None:
    # Its refresh and latency parts need a minute; this runs the part that drives an engine.
    code = (
        "import asyncio, json, sys, pathlib; sys.path.insert(0, sys.argv[1]); import bench_tui; "
        "print(json.dumps(asyncio.run(bench_tui.throughput_under_tui(pathlib.Path(sys.argv[2])))))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(BENCH.parent), str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "BENCH_TUI_CHILDREN": "20"},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["bench"] == "tui_throughput" and result["children"] == 20
    assert result["with_tui_children_per_s"] > 0 and result["engine_alone_children_per_s"] > 0
