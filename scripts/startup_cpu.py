"""The CPU (user + system) a `flightdeck` process spends to start and do one small thing, this
checkout against another, alternating: each figure the median of N runs of each.

    .venv/bin/python scripts/startup_cpu.py --base /tmp/base [--pairs 7] [--no-attach]

`--base` names a folder whose `flightdeck/` holds the other checkout's `engine/` and `tui/`
(`git archive REV engine tui | tar -x -C /tmp/base/flightdeck`), put on `PYTHONPATH` for its
runs; compile both (`python -m compileall -q`). The commands: `ls --help`; `ls`, `report B` and
`steer B t0000 -m hi` (refused: B has ended) on a state folder of three ended sim batches; an
owner's imports (`flightdeck.tui.headless` and `flightdeck.engine.api`); `run --headless` of one
sim child (the whole owner, its transcript writer included); `run --detach` of one sim child
and of one child on an OpenAI route (a loopback address nothing answers: its one call fails at
once), the starting process alone; and under a 160x50 pseudo-terminal up to its first full
frame, as tests/bench/bench_screen.py takes the TUI's start-up, `attach B` and `run` of one sim
child and of one OpenAI child (the time the operator waits for a screen, too). Prints the
1-minute load before and after.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import pty
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time
from pathlib import Path

import psutil

ENTRY = "import sys; from flightdeck.tui.entry import main; sys.exit(main())"  # as the script
OWNER_IMPORTS = "import flightdeck.tui.headless, flightdeck.engine.api"
CONFIG = '[engine]\nmax_concurrent = 4\n\n[routes.sim]\nprovider = "sim"\ntime_scale = 0.001\n'
OPENAI = """[engine]
default_route = "openai"
[routes.openai]
provider = "openai"
model = "gpt-4o-mini"
base_url = "http://127.0.0.1:9/v1"
retry = { attempts = 1 }
"""
SIZE = (50, 160)


def env_for(base: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["NO_COLOR"] = "1"
    if base is not None:
        env["PYTHONPATH"] = str(base)
    return env


def cpu_of(argv: list[str], cwd: Path, base: Path | None) -> float:
    """One run's CPU, its reaped children's included (an owner's transcript writer)."""
    process = subprocess.Popen(
        argv, cwd=cwd, env=env_for(base), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _, _, usage = os.wait4(process.pid, 0)
    process.returncode = 0  # reaped here
    return usage.ru_utime + usage.ru_stime


def first_frame(argv: list[str], folder: Path, base: Path | None) -> tuple[float, float]:
    """The wall time to the first full frame `argv` writes, and its process's CPU by then."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", *SIZE, 0, 0))
    env = {**env_for(base), "TERM": "xterm-256color", "COLUMNS": "", "LINES": ""}
    env.pop("NO_COLOR")
    started = time.monotonic()
    process = subprocess.Popen(
        argv,
        cwd=folder,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        env=env,
    )
    os.close(slave)
    written, used, waited = 0, float("nan"), float("nan")
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            try:
                chunk = os.read(master, 1 << 16)
            except OSError:  # the terminal's other end closed: it exited
                chunk = b""
            written += len(chunk)
            if not chunk or written > SIZE[0] * SIZE[1]:  # the first frame paints every cell
                waited = time.monotonic() - started
                times = psutil.Process(process.pid).cpu_times()
                used = times.user + times.system
                break
    finally:
        process.terminate()
        with contextlib.suppress(OSError):  # drained, or a full terminal holds its exit
            while os.read(master, 1 << 16):
                pass
        process.wait(30)
        os.close(master)
    return waited, used


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, required=True)
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--no-attach", action="store_true")
    args = parser.parse_args()
    root = Path(os.environ.get("BENCH_DIR") or tempfile.gettempdir())
    module = [sys.executable, "-m", "flightdeck.tui.cli"]
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        folder = Path(tmp)
        (folder / "flightdeck.toml").write_text(CONFIG)
        tasks = "".join(f'{{"id": "t{i:04d}", "goal": "task {i}"}}\n' for i in range(12))
        (folder / "tasks.jsonl").write_text(tasks)
        (folder / "one.jsonl").write_text('{"id": "t0000", "goal": "g"}\n')
        (folder / "openai.toml").write_text(OPENAI)
        for _ in range(3):
            subprocess.run(
                [*module, "run", "tasks.jsonl", "--headless", "--state-dir", "st"],
                cwd=folder,
                check=True,
                capture_output=True,
                env=env_for(None),
            )
        done = subprocess.run(
            [*module, "ls", "--state-dir", "st"],
            cwd=folder,
            check=True,
            capture_output=True,
            text=True,
            env=env_for(None),
        )
        batch_id = next(w for w in done.stdout.split() if w[:2] == "20")  # the newest first
        cli = [sys.executable, "-c", ENTRY]
        cases = {
            "ls --help": [*cli, "ls", "--help"],
            "ls": [*cli, "ls", "--state-dir", "st"],
            "report B": [*cli, "report", batch_id, "--state-dir", "st"],
            "steer B t0000 -m hi": [
                *cli,
                "steer",
                batch_id,
                "t0000",
                "-m",
                "hi",
                "--state-dir",
                "st",
            ],
            "an owner's imports": [sys.executable, "-c", OWNER_IMPORTS],
            "run --headless, 1 sim child": [
                *cli,
                "run",
                "one.jsonl",
                "--headless",
                "--state-dir",
                "runs",
            ],
            "run --detach, 1 sim child": [
                *cli,
                "run",
                "one.jsonl",
                "--detach",
                "--state-dir",
                "runs",
            ],
            "run --detach, 1 OpenAI child": [
                *cli,
                "run",
                "one.jsonl",
                "--detach",
                "--config",
                "openai.toml",
                "--state-dir",
                "runs",
            ],
        }
        print(f"1-minute load {os.getloadavg()[0]:.2f}")
        for name, argv in cases.items():
            pairs = [
                (cpu_of(argv, folder, args.base), cpu_of(argv, folder, None))
                for _ in range(args.pairs)
            ]
            report(name, pairs)
        if not args.no_attach:
            screens = {
                "attach B": [*module, "attach", batch_id, "--state-dir", "st"],
                "run, 1 sim child": [*module, "run", "one.jsonl", "--state-dir", "runs"],
                "run, 1 OpenAI child": [
                    *module,
                    *("run", "one.jsonl", "--config", "openai.toml", "--state-dir", "runs"),
                ],
            }
            for name, argv in screens.items():
                frames = [
                    (first_frame(argv, folder, args.base), first_frame(argv, folder, None))
                    for _ in range(args.pairs)
                ]
                report(f"{name}, to its first frame", [(b[1], m[1]) for b, m in frames])
                report(f"{name}, its first frame's wait", [(b[0], m[0]) for b, m in frames])
        print(f"1-minute load {os.getloadavg()[0]:.2f}")


def report(name: str, pairs: list[tuple[float, float]]) -> None:
    base = statistics.median(b for b, _ in pairs)
    mine = statistics.median(m for _, m in pairs)
    print(
        f"{name:30} base {base:.3f} s  this {mine:.3f} s  ({mine / base - 1:+.0%})  "
        f"base {[round(b, 3) for b, _ in pairs]}  this {[round(m, 3) for _, m in pairs]}"
    )


if __name__ == "__main__":
    main()
