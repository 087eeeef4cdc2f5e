"""Command children: what supervising a process costs the owner, side by side with xargs.

- 1,000 `/bin/true` children on 32 slots: children per second, against `xargs -P32` running
  the same 1,000 processes; and the owner's CPU per child (this process: spawning, tracking,
  reaping, reading, records).
- One child printing 100,000 plain lines, and one printing 20,000 Claude Code stream-json
  `assistant` events: the owner's CPU per line, beyond a child that prints nothing.
- 128 children that each `sleep 3`, on 128 slots: the makespan against the ideal (3 s).

Run on a checkout's own venv, it measures that checkout (the engine API it uses is the same
before and after the runner split), so before/after figures come from one machine and load.

Knobs: BENCH_CHILDREN, BENCH_LINES, BENCH_SLEEPERS, BENCH_SLEEP_S, BENCH_DIR (where the state
goes: /dev/shm keeps the disk out of it), and BENCH_TUNED: 1 (the default) runs the interpreter
as `flightdeck run` and `resume` set it, the owner users run (`tune_interpreter`: a longer GIL
switch interval, fewer collections), 0 as a program that embeds an `Engine` leaves it. The
children's threads spend much of their CPU handing the GIL to each other, so the two differ;
figures are comparable only at the same setting (before 2026-12-07 they were all at 0).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from flightdeck.engine.api import Engine
from flightdeck.engine.inputs.settings import load_settings
from flightdeck.engine.inputs.tasks import Batch, Task
from flightdeck.engine.model import Usage
from flightdeck.engine.records.meter import genai_cost

TRUE_N = int(os.environ.get("BENCH_CHILDREN", "1000"))
LINES = int(os.environ.get("BENCH_LINES", "100000"))
JSON_LINES = LINES // 5
SLEEPERS = int(os.environ.get("BENCH_SLEEPERS", "128"))
SLEEP_S = float(os.environ.get("BENCH_SLEEP_S", "3"))
TUNED = os.environ.get("BENCH_TUNED", "1") == "1"
ENV = {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp")}
ASSISTANT = json.dumps(
    {
        "type": "assistant",
        "message": {
            "id": "msg_01",
            "model": "claude-x",
            "role": "assistant",
            "content": [{"type": "text", "text": "Looking at the files in the workspace now."}],
            "usage": {"input_tokens": 1200, "output_tokens": 1, "cache_read_input_tokens": 0},
        },
        "session_id": "s",
    }
)


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run(
    folder: Path, argv: list[str], n: int, slots: int, fmt: str = "plain"
) -> tuple[float, float]:
    """`n` children of `argv` on `slots`: (wall seconds, this process's CPU seconds)."""
    folder.mkdir(parents=True)
    argv_toml = json.dumps(argv)
    (folder / "flightdeck.toml").write_text(
        f'[engine]\nmax_concurrent = {slots}\ndefault_route = "cmd"\n\n'
        f'[routes.cmd]\nprovider = "command"\nargv = {argv_toml}\nformat = "{fmt}"\n'
    )
    settings = load_settings(folder / "flightdeck.toml")
    tasks = tuple(Task(id=f"c{i:05d}", goal=f"task {i}", seq=i) for i in range(n))
    engine = Engine(Batch("bench", tasks), settings, state_dir=folder / "state", env=ENV)
    c0, t0 = cpu(), time.perf_counter()
    engine.start()
    assert engine.wait(600), "the batch did not end"
    wall, used = time.perf_counter() - t0, cpu() - c0
    snap = engine.snapshot()
    engine.close()
    assert snap.totals.completed == n, snap.totals
    return wall, used


def xargs_rate(n: int) -> float:
    t0 = time.perf_counter()
    subprocess.run(f"seq {n} | xargs -P32 -n1 /bin/true", shell=True, check=True, env=ENV)
    return n / (time.perf_counter() - t0)


def main() -> None:
    if TUNED:
        from flightdeck.engine.control.pool import tune_interpreter

        tune_interpreter()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        xargs = xargs_rate(TRUE_N)
        wall, used = run(root / "true", ["/bin/true"], TRUE_N, 32)
        quiet = run(root / "quiet", ["/bin/true"], 1, 1)[1]
        plain = run(root / "plain", ["seq", str(LINES)], 1, 1)[1]
        makespan = run(root / "sleep", ["sleep", str(SLEEP_S)], SLEEPERS, SLEEPERS)[0]
        emitter = root / "emit.py"
        emitter.write_text(
            f"import sys\nline = {ASSISTANT!r} + '\\n'\nsys.stdout.write(line * {JSON_LINES})\n"
        )
        # One-time costs are not per-line costs: the price tables that price a Claude Code
        # child's live usage load now. (A plain command's batch never loads them.)
        genai_cost(Usage(1, 1), "anthropic", "claude-sonnet-4-5")
        stream = run(root / "json", [sys.executable, str(emitter)], 1, 1, "claude-stream-json")[1]
    rate = TRUE_N / wall
    print(
        json.dumps(
            {
                "bench": "commands",
                "children": TRUE_N,
                "children_per_s": round(rate, 1),
                "xargs_p32_per_s": round(xargs, 1),
                "ratio_of_xargs": round(rate / xargs, 3),
                "owner_cpu_ms_per_child": round(used / TRUE_N * 1000, 3),
                "plain_cpu_us_per_line": round((plain - quiet) / LINES * 1e6, 2),
                "json_cpu_us_per_line": round((stream - quiet) / JSON_LINES * 1e6, 2),
                "sleepers": SLEEPERS,
                "makespan_s": round(makespan, 3),
                "makespan_over_ideal": round(makespan / SLEEP_S, 3),
                "tuned": TUNED,
                "cpus": os.cpu_count(),
                "load": os.getloadavg()[0],
            }
        )
    )


if __name__ == "__main__":
    main()
