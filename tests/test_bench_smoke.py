"""`make bench` is not part of `make test`; this keeps every benchmark runnable, and checks the
table its runner prints from recorded results.

The engine benchmark's I/O floor reuses the store's statements and parameter builders, and the
TUI benchmark drives the real app and engine (and some of the app's internals), so a change
there could break them without any other test noticing. Tiny sizes: this checks that they run
and report, not how fast.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from rich.console import Console

BENCH = Path(__file__).parent / "bench" / "bench_engine.py"
# A benchmark is a process of its own, started at tiny sizes; on a loaded machine one can take
# minutes. run_bench's own timeout (280 s) comes first and shows what it had printed.
pytestmark = [pytest.mark.timeout(300), pytest.mark.bench]  # `make test-bench`

# Results as the benchmarks emit them (trimmed to the keys the summary reads), one of each kind.
RECORDED: list[dict[str, Any]] = [
    {
        "bench": "engine",
        "children": 2000,
        "engine_children_per_s_median": 1313.0,
        "floor_children_per_s_median": 1382.1,
        "ratio_of_floor_median": 0.95,
        "headless_cli_children_per_s_median": 1100.5,
        "headless_cli_ratio_of_engine": 0.838,
    },
    {
        "bench": "ratelimit",
        "limit": "60/min",
        "mode": "buckets + retries",
        "requests": 118,
        "ratio_of_limit": 0.98,
        "share_429": 0.0,
    },
    {
        "bench": "tui_refresh",
        "children": 5000,
        "refresh_ms_median": 150.2,
        "rebuild_ms_median": 901.0,
        "rebuild_over_refresh": 6.0,
    },
    {
        "bench": "tui_key_latency",
        "scenario": "live, 200 of 1,000 running",
        "key_to_frame_ms_median": 20.0,
        "key_to_frame_ms_p95": 60.0,
    },
    {
        "bench": "tui_key_latency",
        "scenario": "frozen table",
        "key_to_frame_ms_median": 10.0,
        "key_to_frame_ms_p95": 30.0,
    },
    {
        "bench": "tui_throughput",
        "children": 2000,
        "engine_alone_children_per_s": 3000,
        "with_tui_children_per_s": 1110,
        "with_tui_over_alone": 0.37,
    },
    {
        "bench": "cache_gate",
        "children": 64,
        "cached_share_on": 0.984,
        "cached_share_off": 0.0,
        "added_latency_s": 0.092,
        "cost_usd_off": 0.050412,
        "cost_off_over_on": 1.57,
    },
    {
        "bench": "attach_latency",
        "children": 1000,
        "running_peak": 200,
        "view": {"samples": 900, "p50_ms": 60.0, "p99_ms": 300.0},
        "screen": {"samples": 900, "p50_ms": 200.0, "p99_ms": 500.0},
    },
    {
        "bench": "attach_tail",
        "samples": 60,
        "unmatched": 0,
        "lag_s_p50": 0.0,
        "lag_s_p90": 0.2,
        "lag_s_max": 0.6,
        "within_1s_share": 1.0,
    },
    {
        "bench": "attach_throughput",
        "children": 2000,
        "alone_children_per_s": 500.0,
        "two_clients_children_per_s": 480.0,
        "two_clients_over_alone": 0.96,
    },
]


def load_runner() -> ModuleType:
    """tests/bench/run.py as a module (tests/bench is not a package)."""
    spec = importlib.util.spec_from_file_location("bench_run", BENCH.parent / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_command_benchmark_runs_and_reports() -> None:
    code = "import bench_commands; bench_commands.main()"
    scale = {"BENCH_CHILDREN": "8", "BENCH_LINES": "500", "BENCH_SLEEPERS": "4"}
    _, result = run_bench(code, {**scale, "BENCH_SLEEP_S": "0.2"})
    assert result["bench"] == "commands" and result["children"] == 8
    assert result["ratio_of_xargs"] > 0 and result["makespan_over_ideal"] >= 1
    phases = result["thread_us_per_child"]  # each timed on the children's own threads
    assert None not in phases.values() and 0 < phases["supervision"] < phases["thread"]
    assert 0 < result["sleepers_last_go_s"] < result["sleepers_last_seen_s"] <= result["makespan_s"]
    assert "(supervision " in load_runner().summary_rows([result])[0][1]


@pytest.mark.slow
def test_the_attached_screen_benchmark_runs_and_reports() -> None:
    # Real owners and real `flightdeck attach` processes under ptys; 40 children a batch.
    scale = {"BENCH_SCREEN_CHILDREN": "40", "BENCH_SCREEN_POOL": "20", "BENCH_SCREEN_ROUNDS": "1"}
    _, result = run_bench("import json, bench_screen as b; print(json.dumps(b.main()))", scale)
    assert result["bench"] == "screen_cpu" and result["children"] == 40
    assert result["owner_alone_cpu_s"] > 0 and result["tui_cpu_s"] > 0
    assert result["tui_plus_owner_over_alone"] > 1  # a TUI process's CPU is counted
    assert len(result["per_round"][0]["2"]["tui_cpu_s"]) == 2
    rows = load_runner().summary_rows([result])
    assert [row[0] for row in rows] == [
        "attached TUI process, 40 paced children (CPU)",
        "owner with two attached TUIs (CPU)",
    ]


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_tmux_key_benchmark_runs_and_reports() -> None:
    scale = {"BENCH_KEYS_CHILDREN": "60", "BENCH_KEYS_RUNNING": "20", "BENCH_KEYS": "4"}
    scale |= {"BENCH_KEYS_READY_S": "120", "BENCH_KEYS_HOLD": "1"}  # none ends early
    _, result = run_bench("import json, bench_keys as b; print(json.dumps(b.main()))", scale)
    assert result["bench"] == "keys_tmux" and result["running"] >= 18
    assert 0 < result["key_to_screen"]["p50_ms"] <= result["key_to_screen"]["max_ms"]
    assert result["tmux_echo"]["p50_ms"] > 0


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_the_tmux_transcript_pane_benchmark_runs_and_reports(tmp_path: Path) -> None:
    scale = {"BENCH_TAIL_S": "3", "BENCH_DIR": str(tmp_path)}
    _, result = run_bench("import json, bench_tail as b; print(json.dumps(b.main()))", scale)
    assert result["bench"] == "attach_tail" and result["samples"] > 0
    assert 0 <= result["lag_s_p50"] <= result["lag_s_max"]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_the_memory_benchmark_runs_and_reports() -> None:
    _, result = run_bench(
        "import json, bench_memory as b; print(json.dumps(b.main()))",
        {"BENCH_MEMORY_SIZES": "30,60"},
    )
    assert [s["children"] for s in result["sizes"]] == [30, 60]
    for size in result["sizes"]:
        assert size["kb_per_child"] > 0 and size["us_per_child"] > 0 and size["tail_s"] >= 0
        threads = size["cpu_us_by_thread"]
        assert threads["flightdeck-child"] > 0 and threads["flightdeck-coordinator"] > 0
        assert sum(threads.values()) <= size["cpu_us_per_child"] * 1.25  # parts of the whole


def test_the_stop_benchmark_runs_and_reports(tmp_path: Path) -> None:
    # A real owner, its children held until stopped: 12 running of 30.
    scale = {"BENCH_STOP_CHILDREN": "30", "BENCH_STOP_RUNNING": "12", "BENCH_STOP_SUBSET": "2"}
    code = "import json, bench_stop as b; print(json.dumps(b.main()))"
    _, result = run_bench(code, {**scale, "BENCH_DIR": str(tmp_path)})
    assert result["bench"] == "stop" and result["children"] == 30 and result["subset"] == 2
    assert 0 < result["all_running"] <= 12  # the stopped ones' slots are taken again
    assert 0 < result["one_ms_p50"] <= result["one_ms_max"] and result["all_ms"] > 0
    assert result["steer_all_ms"] > 0
    rows = load_runner().summary_rows([result])
    assert [row[0] for row in rows] == [
        f"stop all, 30 children, {result['all_running']} running",
        f"steer --now, {result['all_running']} running children",
    ]


def test_the_summary_gives_benchmark_figure_baseline_and_ratio() -> None:
    rows = load_runner().summary_rows(RECORDED)
    assert rows == [
        ("engine: 2,000 sim children", "1,313.0 children/s", "I/O floor 1,382.1/s", 0.95),
        ("headless CLI, the same batch", "1,100.5 children/s", "engine 1,313.0/s", 0.838),
        (
            "rate limit 60/min, buckets + retries",
            "118 requests, 0.0% 429s",
            "the limit",
            0.98,
        ),
        ("TUI refresh, 5,000 children", "150.2 ms median", "full rebuild 901.0 ms", 6.0),
        (
            "key to frame, live, 200 of 1,000 running",
            "20.0 ms median, 60.0 p95",
            "frozen table 10.0 ms",
            0.5,
        ),
        ("key to frame, frozen table", "10.0 ms median, 30.0 p95", "", None),
        ("TUI attached, 2,000 instant children", "1,110 children/s", "engine alone 3,000/s", 0.37),
        (
            "cache gate, 64 siblings",
            "98% of the prefix cached, +0.092s",
            "gate off: 0%, $0.050412",
            1.57,
        ),
        (
            "attach latency, 1,000 children, 200 running",
            "screen 200.0 ms p50, 500.0 p99",
            "store view 60.0 ms p50, 300.0 p99",
            None,
        ),
        ("transcript pane in tmux, a bursty child", "lag 0.0 s p50, 0.2 p90, 0.6 max", "", None),
        (
            "owner, 2,000 instant children, 2 clients attached",
            "480.0 children/s",
            "alone 500.0/s",
            0.96,
        ),
    ]


def test_make_bench_prints_the_table_after_the_runs_and_keeps_the_json(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A stand-in benchmark replays the recorded results: the real ones take minutes.
    (tmp_path / "bench_recorded.py").write_text(
        f"print('its own table')\nprint({json.dumps(RECORDED)!r})\n"
    )
    runner = load_runner()
    monkeypatch.setattr(runner, "HERE", tmp_path)
    monkeypatch.setattr(runner, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(runner, "Console", lambda: Console(width=140, force_terminal=False))
    assert runner.main([]) == 0
    out = capsys.readouterr().out
    header = next(line for line in out.splitlines() if "benchmark" in line and "ratio" in line)
    assert [cell.strip() for cell in header.split("┃")[1:5]] == [
        "benchmark",
        "figure",
        "baseline",
        "ratio",
    ]
    assert any("engine: 2,000 sim children" in ln and "0.95" in ln for ln in out.splitlines())
    (saved,) = (tmp_path / "results").glob("bench-*.json")
    assert [r["bench"] for r in json.loads(saved.read_text())] == [r["bench"] for r in RECORDED]
    assert out.index("┃ benchmark") < out.index(f"results: {saved}")


def run_bench(code: str, scale: dict[str, str]) -> tuple[list[str], Any]:
    """Run `code` (which prints a table, then JSON) in a fresh interpreter with tests/bench on
    its path and `scale` in its environment; return the table's lines and the parsed JSON."""
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                f"import sys; sys.path.insert(0, sys.argv[1]); {code}",
                str(BENCH.parent),
            ],
            capture_output=True,
            text=True,
            env={**os.environ, **scale},
            timeout=280,
        )
    except subprocess.TimeoutExpired as e:  # say what it had printed
        pytest.fail(f"the benchmark ran over {e.timeout} s:\n{e.stdout!r}\n{e.stderr!r}")
    assert proc.returncode == 0, proc.stderr
    *table, last = proc.stdout.splitlines()
    return table, json.loads(last)


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


@pytest.mark.slow
def test_every_part_of_the_tui_benchmark_runs_and_reports(tmp_path: Path) -> None:
    # At full scale it takes minutes: every part runs here at 20 children and 3 key presses.
    code = (
        "import asyncio, json, bench_tui; results = asyncio.run(bench_tui.run()); "
        "print(bench_tui.table(results)); print(json.dumps(results))"
    )
    scale = {
        "BENCH_TUI_SIZES": "20",
        "BENCH_TUI_LIVE": "20",
        "BENCH_TUI_KEYS": "3",
        "BENCH_TUI_CHILDREN": "20",
        "BENCH_DIR": str(tmp_path),
    }
    table, rows = run_bench(code, scale)
    results = {(r["bench"], r.get("scenario")): r for r in rows}
    assert set(results) == {
        ("tui_refresh", None),
        ("tui_refresh", "group order, 50 groups"),
        ("tui_refresh", "route gauges shown"),
        ("tui_refresh", "grouped by status, query on"),
        ("tui_key_latency", "live, 4 of 20 running"),
        ("tui_key_latency", "frozen table"),
        ("tui_key_latency", "real sim engine, 4 of 20 running"),
        ("tui_throughput", None),
        ("tui_cpu", None),
    }
    refresh = results["tui_refresh", None]
    assert refresh["children"] == 20 and refresh["refresh_ms_median"] > 0
    assert refresh["filter_clear_ms_median"] > 0
    assert results["tui_cpu", None]["with_tui_cpu_over_alone"] > 0
    for key in [k for k in results if k[0] == "tui_key_latency"]:
        assert 0 < results[key]["key_to_frame_ms_median"] <= results[key]["key_to_frame_ms_max"]
    throughput = results["tui_throughput", None]
    assert throughput["children"] == 20 and throughput["with_tui_children_per_s"] > 0
    assert throughput["engine_alone_children_per_s"] > 0
    assert table[0].startswith("refresh (apply by difference + render)")
    assert any(line.startswith("20 instant children: ") for line in table)


@pytest.mark.slow
def test_the_rate_limit_benchmark_runs_and_reports() -> None:
    # Half a second a measurement and 8 children, against the same loopback server.
    code = (
        "import json, bench_ratelimit as b; rows = b.main(); print(b.table(rows)); "
        "print(json.dumps(rows))"
    )
    # The unknown-limit scenario: 8 children, the bucket's time 60 times as fast.
    small = {"BENCH_RATELIMIT_BUCKET_CHILDREN": "8", "BENCH_RATELIMIT_BUCKET_SCALE": "60"}
    table, rows = run_bench(
        code, {"BENCH_RATELIMIT_S": "0.5", "BENCH_RATELIMIT_CHILDREN": "8", **small}
    )
    assert [(r["limit"], r["mode"]) for r in rows] == [
        ("60/min", "buckets + retries"),
        ("60/min", "retries only"),
        ("4 in flight", "max_concurrent + retries"),
        ("4 in flight", "retries only"),
        ("240 rpm bucket x60", "unknown, openai headers"),
        ("240 rpm bucket x60", "unknown, anthropic headers"),
        ("31680 tpm bucket x60", "unknown, openai headers"),
        ("240 rpm bucket x60", "unknown, no headers"),
    ]
    for row in rows:
        assert row["requests"] > 0 and row["ratio_of_limit"] > 0 and 0 <= row["share_429"] <= 1
    assert all(r["children_failed"] == 0 for r in rows[2:])
    assert all(r["makespan_s"] > 0 and r["bound_s"] > 0 for r in rows[4:])
    assert table[0].split() == [
        "limit",
        "mode",
        "provider",
        "requests",
        "ratio",
        "429s",
        "failed",
        "makespan",
    ]


def test_the_cache_gate_benchmark_runs_and_reports() -> None:
    code = "import bench_gate; bench_gate.main()"
    _, result = run_bench(code, {"BENCH_GATE_CHILDREN": "4", "BENCH_GATE_RUNS": "1"})
    assert result["bench"] == "cache_gate" and result["children"] == 4
    # Gate off, the four first calls usually all miss the cache; one that a loaded machine
    # started late may read what an earlier one wrote, so only "fewer than with the gate".
    assert result["cached_share_off"] < result["cached_share_on"]
    assert result["cached_share_on"] >= 0.75
    assert result["cost_off_over_on"] > 1


@pytest.mark.slow
def test_the_attach_benchmark_runs_and_reports(tmp_path: Path) -> None:
    # A real owner process and two client processes, at a few children: it runs, it reports.
    code = "import json, bench_attach; print('-'); print(json.dumps(bench_attach.main()))"
    scale = {
        "BENCH_ATTACH_CHILDREN": "12",
        "BENCH_ATTACH_POOL": "4",
        "BENCH_ATTACH_WINDOW_S": "5",  # long enough to see children move, loaded or not
        "BENCH_ATTACH_TIME_SCALE": "0.05",
        "BENCH_ATTACH_TP_CHILDREN": "20",
        "BENCH_ATTACH_ROUNDS": "1",
        "BENCH_DIR": str(tmp_path),
    }
    _, (latency, throughput) = run_bench(code, scale)
    assert latency["bench"] == "attach_latency" and latency["view"]["samples"] > 0
    assert throughput["two_clients_over_alone"] > 0
    assert list(tmp_path.iterdir()) == []


def test_the_ray_benchmark_leaves_no_token_others_can_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its `ray.init(num_cpus=2)` starts a new local cluster, for which Ray writes
    # ~/.ray/auth_token with the umask's modes where none exists (0644 in a 0755 ~/.ray).
    for name in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.syspath_prepend(str(BENCH.parent))
    import bench_ray

    class Started(Exception):
        pass

    def init(**kwargs: Any) -> None:  # what Ray finds as it starts: no cluster is started
        token = tmp_path / ".ray" / "auth_token"
        assert token.exists(), "Ray would make it, with the umask's modes"
        assert oct(token.stat().st_mode & 0o777) == "0o600"
        assert oct(token.parent.stat().st_mode & 0o777) == "0o700"
        raise Started

    monkeypatch.setattr(bench_ray.ray, "init", init)
    with pytest.raises(Started):
        bench_ray.main()


def test_the_ray_benchmarks_rows() -> None:
    # bench_ray.py starts two Ray clusters: it runs in `make bench`, not here.
    recorded = [
        {
            "bench": "ray_throughput",
            "children": 2000,
            "ray_children_per_s": 700.0,
            "threads_children_per_s": 1400.0,
            "ray_over_threads": 0.5,
        },
        {
            "bench": "ray_latency_bound",
            "children": 500,
            "ideal_s": 6.0,
            "ray_makespan_s": 6.5,
            "threads_makespan_s": 6.4,
            "ray_ideal_over_makespan": 0.923,
        },
        {"bench": "ray_stop_latency", "children": 20, "stop_ms_p50": 12.0, "stop_ms_max": 20.0},
        {
            "bench": "ray_fleet_rpm",
            "limit_rpm": 1200,
            "calls": 300,
            "nodes": 2,
            "held_rpm": 1170.0,
            "ratio_of_limit": 0.975,
        },
    ]
    assert load_runner().summary_rows(recorded) == [
        (
            "Ray executor: 2,000 one-call sim children",
            "700.0 children/s",
            "threads 1,400.0/s",
            0.5,
        ),
        (
            "Ray executor: 500 × 3 calls × 200 ms, 50 slots",
            "makespan 6.5 s (threads 6.4 s)",
            "the ideal 6.0 s",
            0.923,
        ),
        ("Ray executor: stop, 20 children in a call", "12.0 ms p50, 20.0 max", "", None),
        (
            "Ray executor: rpm 1200 across 2 nodes",
            "held at 1,170.0 rpm over 300 calls",
            "the limit",
            0.975,
        ),
    ]
