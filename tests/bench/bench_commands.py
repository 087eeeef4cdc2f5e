"""Command children: what supervising a process costs the owner, side by side with xargs.

- 1,000 `/bin/true` children on 32 slots: children per second, against `xargs -P32` running
  the same 1,000 processes; and the owner's CPU per child (this process: spawning, tracking,
  reaping, reading, records), with the CPU of each phase on the child's own thread (`Phases`).
- One child printing 100,000 plain lines, and one printing 20,000 Claude Code stream-json
  `assistant` events: the owner's CPU per line, beyond a child that prints nothing.
- 128 children that each `sleep 3`, on 128 slots: the makespan against the ideal (3 s), and
  when the last was let run and the last seen ended.

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

import functools
import importlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

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


class Phases:
    """The CPU a command child's own thread spends in each phase of its run, timed with
    `time.thread_time_ns` around the engine's functions, wrapped here (the engine carries no
    timing of its own). A checkout without one of them reports that phase as None."""

    # (phase, module, class, function): each is called on the child's thread.
    HOOKS = (
        ("thread", "flightdeck.engine.executors.threads", "ThreadExecutor", "_run"),
        ("spawn", "flightdeck.engine.agents.process", "Process", "spawn"),
        ("commit_wait", "flightdeck.engine.agents.book", "StoreBook", "started"),
        ("go", "flightdeck.engine.agents.process", "Process", "go"),
        ("supervision", "flightdeck.engine.child.supervise", "Supervisor", "run"),
        ("release", "flightdeck.engine.agents.process", "Process", "release"),
        ("ended", "flightdeck.engine.agents.book", "StoreBook", "ended"),
    )

    def __init__(self) -> None:
        self.spans: list[tuple[str, int, float]] = []  # (phase, CPU ns, wall end): append is atomic
        self.hooked: set[str] = set()
        self._local = threading.local()
        for phase, module, cls_name, name in self.HOOKS:
            cls = getattr(importlib.import_module(module), cls_name, None)
            raw = None if cls is None else cls.__dict__.get(name)
            if raw is not None:
                setattr(cls, name, self._wrap(phase, raw))
                self.hooked.add(phase)

    def _wrap(self, phase: str, raw: Any) -> Any:
        is_class = isinstance(raw, classmethod)
        func = raw.__func__ if is_class else raw
        spans, thread_ns, local = self.spans, time.thread_time_ns, self._local

        @functools.wraps(func)
        def timed(*args: Any, **kwargs: Any) -> Any:
            # A phase inside another (`release` lets a held process go) is the outer one's.
            if phase != "thread" and getattr(local, "inside", False):
                return func(*args, **kwargs)
            local.inside = phase != "thread"
            t0 = thread_ns()
            try:
                return func(*args, **kwargs)
            finally:
                spans.append((phase, thread_ns() - t0, time.perf_counter()))
                local.inside = False

        return classmethod(timed) if is_class else timed

    def take(self) -> list[tuple[str, int, float]]:
        """The spans timed since the last take."""
        taken, self.spans[:] = self.spans[:], []
        return taken

    def per_child(self, spans: list[tuple[str, int, float]], n: int) -> dict[str, float | None]:
        """µs of the child's thread a child, by phase; `other`: the thread's time outside them."""
        total = dict.fromkeys(self.hooked, 0)
        for phase, ns, _ in spans:
            total[phase] += ns
        out: dict[str, float | None] = {p: None for p, *_ in self.HOOKS}
        out.update({p: round(ns / n / 1000, 1) for p, ns in total.items()})
        if "thread" in self.hooked:
            inside = sum(ns for p, ns in total.items() if p != "thread")
            out["other"] = round((total["thread"] - inside) / n / 1000, 1)
        return out


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Ran(NamedTuple):
    """One batch: wall and this process's CPU seconds from `start()` to `wait()`'s return,
    and those two moments (`time.perf_counter`)."""

    wall: float
    cpu: float
    start: float
    end: float


def timed_run(folder: Path, argv: list[str], n: int, slots: int, fmt: str = "plain") -> Ran:
    """`n` children of `argv` on `slots`."""
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
    t1 = time.perf_counter()
    used = cpu() - c0
    snap = engine.snapshot()
    engine.close()
    assert snap.totals.completed == n, snap.totals
    return Ran(t1 - t0, used, t0, t1)


def run(
    folder: Path, argv: list[str], n: int, slots: int, fmt: str = "plain"
) -> tuple[float, float]:
    """`n` children of `argv` on `slots`: (wall seconds, this process's CPU seconds)."""
    ran = timed_run(folder, argv, n, slots, fmt)
    return ran.wall, ran.cpu


def xargs_rate(n: int) -> float:
    t0 = time.perf_counter()
    subprocess.run(f"seq {n} | xargs -P32 -n1 /bin/true", shell=True, check=True, env=ENV)
    return n / (time.perf_counter() - t0)


def line_cost(phases: Phases, spans: list[tuple[str, int, float]], quiet: float) -> float | None:
    """µs of supervision a line: a child's `Supervisor.run`, beyond a quiet child's."""
    if "supervision" not in phases.hooked:
        return None
    return sum(ns for p, ns, _ in spans if p == "supervision") / 1000 - quiet


def main() -> None:
    if TUNED:
        from flightdeck.engine.control.pool import tune_interpreter

        tune_interpreter()
    phases = Phases()
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        root = Path(tmp)
        xargs = xargs_rate(TRUE_N)
        wall, used = run(root / "true", ["/bin/true"], TRUE_N, 32)
        by_phase = phases.per_child(phases.take(), TRUE_N)
        quiet = run(root / "quiet", ["/bin/true"], 1, 1)[1]
        quiet_supervision = phases.per_child(phases.take(), 1)["supervision"] or 0.0
        plain = run(root / "plain", ["seq", str(LINES)], 1, 1)[1]
        plain_supervision = line_cost(phases, phases.take(), quiet_supervision)
        phases.take()
        sleep = timed_run(root / "sleep", ["sleep", str(SLEEP_S)], SLEEPERS, SLEEPERS)
        sleep_spans = phases.take()
        emitter = root / "emit.py"
        emitter.write_text(
            f"import sys\nline = {ASSISTANT!r} + '\\n'\nsys.stdout.write(line * {JSON_LINES})\n"
        )
        # One-time costs are not per-line costs: the price tables that price a Claude Code
        # child's live usage load now. (A plain command's batch never loads them.)
        genai_cost(Usage(1, 1), "anthropic", "claude-sonnet-4-5")
        phases.take()
        stream = run(root / "json", [sys.executable, str(emitter)], 1, 1, "claude-stream-json")[1]
        json_supervision = line_cost(phases, phases.take(), quiet_supervision)
    rate = TRUE_N / wall

    def last(phase: str) -> float | None:
        ends = [end for p, _, end in sleep_spans if p == phase]
        return max(ends) if ends else None

    last_go, last_seen = last("go"), last("supervision")
    print(
        json.dumps(
            {
                "bench": "commands",
                "children": TRUE_N,
                "children_per_s": round(rate, 1),
                "xargs_p32_per_s": round(xargs, 1),
                "ratio_of_xargs": round(rate / xargs, 3),
                "owner_cpu_ms_per_child": round(used / TRUE_N * 1000, 3),
                # the child's own thread, by phase (µs a child): what the owner's whole CPU
                # above is made of besides the coordinator, the store and the main thread
                "thread_us_per_child": by_phase,
                "plain_cpu_us_per_line": round((plain - quiet) / LINES * 1e6, 2),
                "json_cpu_us_per_line": round((stream - quiet) / JSON_LINES * 1e6, 2),
                "plain_supervision_us_per_line": (
                    None if plain_supervision is None else round(plain_supervision / LINES, 2)
                ),
                "json_supervision_us_per_line": (
                    None if json_supervision is None else round(json_supervision / JSON_LINES, 2)
                ),
                "sleepers": SLEEPERS,
                "makespan_s": round(sleep.wall, 3),
                "makespan_over_ideal": round(sleep.wall / SLEEP_S, 3),
                # where the makespan beyond one sleep goes: from `start()` to the last
                # process let run, and from the last tree seen ended to `wait()`'s return
                "sleepers_last_go_s": None if last_go is None else round(last_go - sleep.start, 3),
                "sleepers_last_seen_s": (
                    None if last_seen is None else round(last_seen - sleep.start, 3)
                ),
                "sleepers_tail_s": None if last_seen is None else round(sleep.end - last_seen, 3),
                "tuned": TUNED,
                "cpus": os.cpu_count(),
                "load": os.getloadavg()[0],
            }
        )
    )


if __name__ == "__main__":
    main()
