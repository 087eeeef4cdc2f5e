"""`make bench` is not part of `make test`; this keeps the engine benchmark runnable.

The benchmark's I/O floor reuses the store's statements and parameter builders, so a change
there could break it without any other test noticing. Tiny sizes: this checks that it runs and
reports, not how fast.
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
