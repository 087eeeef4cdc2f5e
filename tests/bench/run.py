"""`make bench`: run every tests/bench/bench_*.py in its own process, print a table, keep JSON.

Each benchmark prints one JSON object (or a list of them) as its last stdout line. A fresh
process per benchmark keeps peak-RSS figures honest and stops one from warming another's caches.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

HERE = Path(__file__).parent
RESULTS = HERE / "results"

Row = tuple[str, str, str, float | None]  # benchmark, figure, baseline, ratio


def _rows(r: dict[str, Any], frozen_ms: float | None) -> Iterator[Row]:
    """The table's rows for one benchmark result (its JSON object)."""
    match r.get("bench"):
        case "engine":
            engine = r["engine_children_per_s_median"]
            yield (
                f"engine: {r['children']:,} sim children",
                f"{engine:,} children/s",
                f"I/O floor {r['floor_children_per_s_median']:,}/s",
                r["ratio_of_floor_median"],
            )
            yield (
                "headless CLI, the same batch",
                f"{r['headless_cli_children_per_s_median']:,} children/s",
                f"engine {engine:,}/s",
                r["headless_cli_ratio_of_engine"],
            )
        case "ratelimit":
            yield (
                f"rate limit {r['limit']}, {r['mode']}",
                f"{r['requests']:,} requests, {r['share_429']:.1%} 429s",
                "the limit",
                r["ratio_of_limit"],
            )
        case "tui_refresh":
            yield (
                f"TUI refresh, {r['children']:,} children",
                f"{r['refresh_ms_median']} ms median",
                f"full rebuild {r['rebuild_ms_median']} ms",
                r["rebuild_over_refresh"],
            )
            if "filter_clear_ms_median" in r:
                yield (
                    f"TUI filter cleared, {r['children']:,} children",
                    f"{r['filter_clear_ms_median']} ms median, {r['filter_clear_ms_max']} max",
                    "",
                    None,
                )
        case "tui_key_latency":
            median = r["key_to_frame_ms_median"]
            frozen = r.get("scenario") == "frozen table"
            yield (
                f"key to frame, {r.get('scenario', '')}",
                f"{median} ms median, {r['key_to_frame_ms_p95']} p95"
                + (f", {r['key_to_frame_ms_p99']} p99" if "key_to_frame_ms_p99" in r else ""),
                "" if frozen or frozen_ms is None else f"frozen table {frozen_ms} ms",
                None if frozen or frozen_ms is None or not median else round(frozen_ms / median, 2),
            )
        case "tui_throughput":
            yield (
                f"TUI attached, {r['children']:,} instant children",
                f"{r['with_tui_children_per_s']:,} children/s",
                f"engine alone {r['engine_alone_children_per_s']:,}/s",
                r["with_tui_over_alone"],
            )
        case "cache_gate":
            yield (
                f"cache gate, {r['children']} siblings",
                f"{r['cached_share_on']:.0%} of the prefix cached, +{r['added_latency_s']}s",
                f"gate off: {r['cached_share_off']:.0%}, ${r['cost_usd_off']}",
                r["cost_off_over_on"],
            )
        case "tui_cpu":
            yield (
                f"TUI attached, {r['children']:,} paced children (CPU)",
                f"{r['with_tui_cpu_s']} s CPU",
                f"engine alone {r['engine_alone_cpu_s']} s",
                round(r["engine_alone_cpu_s"] / r["with_tui_cpu_s"], 2),
            )
        case "attach_latency":
            view, screen = r["view"], r["screen"]
            yield (
                f"attach latency, {r['children']:,} children, {r['running_peak']} running",
                f"screen {screen.get('p50_ms')} ms p50, {screen.get('p99_ms')} p99",
                f"store view {view.get('p50_ms')} ms p50, {view.get('p99_ms')} p99",
                None,
            )
        case "attach_throughput":
            yield (
                f"owner, {r['children']:,} instant children, 2 clients attached",
                f"{r['two_clients_children_per_s']:,} children/s",
                f"alone {r['alone_children_per_s']:,}/s",
                r["two_clients_over_alone"],
            )
        case "resume":
            yield (
                f"resume to first re-run start, {r['children']:,} children",
                f"{r['resume_to_first_start_s_median']} s median",
                f"fresh start {r['fresh_start_to_first_start_s_median']} s",
                r["fresh_over_resume"],
            )
        case "commands":
            supervision = (r.get("thread_us_per_child") or {}).get("supervision")
            yield (
                f"command children, {r['children']:,} /bin/true on 32 slots",
                f"{r['children_per_s']:,} children/s, "
                f"owner {r['owner_cpu_ms_per_child']} ms CPU each"
                + ("" if supervision is None else f" (supervision {supervision / 1000:.2f})"),
                f"xargs -P32 {r['xargs_p32_per_s']:,}/s",
                r["ratio_of_xargs"],
            )
            yield (
                f"command children, {r['sleepers']} sleeping, one slot each",
                f"makespan {r['makespan_s']} s; {r['plain_cpu_us_per_line']} µs CPU per line",
                "the ideal (one sleep)",
                r["makespan_over_ideal"],
            )
        case "screen_cpu":
            yield (
                f"attached TUI process, {r['children']:,} paced children (CPU)",
                f"owner + TUI {r['owner_with_tui_cpu_s'] + r['tui_cpu_s']:.2f} s "
                f"(TUI {r['tui_cpu_s']} s, start-up {r['tui_startup_cpu_s']} s)",
                f"owner alone {r['owner_alone_cpu_s']} s",
                round(1 / r["tui_plus_owner_over_alone"], 2),
            )
            yield (
                "owner with two attached TUIs (CPU)",
                f"{r['owner_two_tuis_cpu_s']} s",
                f"alone {r['owner_alone_cpu_s']} s",
                round(1 / r["owner_two_tuis_over_alone"], 2),
            )
        case "memory":
            for size in r["sizes"]:
                yield (
                    f"memory and time, {size['children']:,} instant children",
                    f"{size['kb_per_child']} KB, {size['us_per_child']} µs each; "
                    f"end {size['tail_s']} s after the last",
                    "",
                    None,
                )
        case "keys_tmux":
            keys, echo = r["key_to_screen"], r["tmux_echo"]
            yield (
                f"key to screen in tmux, {r['children']:,} children, {r['running']:,} running",
                f"{keys['p50_ms']} ms p50, {keys['p99_ms']} p99",
                f"tmux echo {echo['p50_ms']} ms p50",
                None,
            )
        case "attach_tail":
            yield (
                "transcript pane in tmux, a bursty child",
                f"lag {r['lag_s_p50']} s p50, {r['lag_s_p90']} p90, {r['lag_s_max']} max",
                "",
                None,
            )
        case "stop":
            yield (
                f"stop all, {r['children']:,} children, {r['all_running']:,} running",
                f"{r['all_ms']} ms (one: {r['one_ms_p50']} p50; {r['subset']}: {r['subset_ms']})",
                f"target {r['target_ms']:,.0f} ms",
                round(r["target_ms"] / r["all_ms"], 2),
            )
            yield (
                f"steer --now, {r['all_running']:,} running children",
                f"{r['steer_all_ms']} ms to the last delivered",
                f"target {r['target_ms']:,.0f} ms",
                round(r["target_ms"] / r["steer_all_ms"], 2),
            )
        case "ray_throughput":
            yield (
                f"Ray executor: {r['children']:,} one-call sim children",
                f"{r['ray_children_per_s']:,} children/s",
                f"threads {r['threads_children_per_s']:,}/s",
                r["ray_over_threads"],
            )
        case "ray_latency_bound":
            yield (
                f"Ray executor: {r['children']} × 3 calls × 200 ms, 50 slots",
                f"makespan {r['ray_makespan_s']} s (threads {r['threads_makespan_s']} s)",
                f"the ideal {r['ideal_s']} s",
                r["ray_ideal_over_makespan"],
            )
        case "ray_stop_latency":
            yield (
                f"Ray executor: stop, {r['children']} children in a call",
                f"{r['stop_ms_p50']} ms p50, {r['stop_ms_max']} max",
                "",
                None,
            )
        case "ray_fleet_rpm":
            yield (
                f"Ray executor: rpm {r['limit_rpm']} across {r['nodes']} nodes",
                f"held at {r['held_rpm']:,} rpm over {r['calls']} calls",
                "the limit",
                r["ratio_of_limit"],
            )
        case other:
            yield (str(other), "(see the JSON)", "", None)


def summary_rows(results: list[dict[str, Any]]) -> list[Row]:
    """Benchmark, figure, baseline and ratio for each result, in the order they ran."""
    frozen_ms = next(
        (
            r["key_to_frame_ms_median"]
            for r in results
            if r.get("bench") == "tui_key_latency" and r.get("scenario") == "frozen table"
        ),
        None,
    )
    return [row for r in results for row in _rows(r, frozen_ms)]


def summary_table(results: list[dict[str, Any]]) -> Table:
    """The table `make bench` prints after its runs (docs/performance.md's promise)."""
    table = Table(
        title="benchmarks",
        title_justify="left",
        caption="ratio: against the baseline, above 1 is faster (a rate limit: the share used)",
        caption_justify="left",
    )
    table.add_column("benchmark")
    table.add_column("figure")
    table.add_column("baseline")
    # One sense for every ratio: a rate over the baseline's rate, or the baseline's time over
    # this time; above 1 is faster than the baseline.
    table.add_column("ratio", justify="right")
    for name, figure, baseline, ratio in summary_rows(results):
        shown = "" if ratio is None else f"{ratio:.2f}"
        table.add_row(Text(name), Text(figure), Text(baseline), Text(shown))
    return table


def main(names: list[str]) -> int:
    RESULTS.mkdir(exist_ok=True)
    scripts = sorted(HERE.glob("bench_*.py"))
    if names:
        scripts = [s for s in scripts if any(n in s.stem for n in names)]
    failed = 0
    collected: list[dict[str, Any]] = []
    for script in scripts:
        print(f"== {script.stem}", flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
        if proc.returncode != 0 or not proc.stdout.strip():
            failed += 1
            print(proc.stdout + proc.stderr)
            continue
        last = proc.stdout.strip().splitlines()[-1]
        data = json.loads(last)
        results = data if isinstance(data, list) else [data]
        for result in results:
            result["wall_s"] = round(time.perf_counter() - t0, 2)
            collected.append(result)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = RESULTS / f"bench-{stamp}.json"
    out.write_text(json.dumps(collected, indent=2) + "\n")
    Console().print(summary_table(collected))
    print(f"results: {out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
