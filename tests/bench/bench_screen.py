"""The attached screen's cost: CPU of the real `flightdeck attach` process and of its owner.

What users run: `flightdeck run` on a terminal starts a headless owner and attaches the TUI to
it in a process of its own. Here a real owner (`flightdeck run --headless`, a child process of
this one) runs a paced batch (BENCH_SCREEN_CHILDREN, 2,000 by default, 200 at a time, each a
few turns of about a second), and N real `flightdeck attach` processes (0, 1 or 2) are started
on it as soon as its batch is recorded, each under a pseudo-terminal of 160x50 whose output a
thread here drains (as a terminal would). A pty, not the app headless in a separate process:
the attached process then pays for what a user's does (Textual's driver, the frames written to
a terminal), and nothing of the benchmark runs inside it.

CPU, per round: the owner's from `wait4` (its own and its reaped children's: the transcript
writer), each attached process's from /proc (psutil) the moment the owner has exited (the
start-up, Textual's imports and first paint, reported apart). Rounds alternate the modes'
order. Reported: (owner + TUI) over the owner alone, and the owner with two TUIs over alone
(medians of the rounds' ratios, each against the alone round of its own round).

Knobs: BENCH_SCREEN_CHILDREN, BENCH_SCREEN_POOL, BENCH_SCREEN_ROUNDS, BENCH_DIR. It starts the
CLI through `python -m flightdeck.tui.cli`, so with PYTHONPATH naming another checkout's
`flightdeck` it measures that checkout.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import pty
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

CHILDREN = int(os.environ.get("BENCH_SCREEN_CHILDREN", "2000"))
POOL = int(os.environ.get("BENCH_SCREEN_POOL", "200"))
ROUNDS = int(os.environ.get("BENCH_SCREEN_ROUNDS", "2"))
SIZE = (50, 160)  # rows, columns
# bench_tui.py's paced batch: a few turns of about a second each.
PACED = "[routes.sim]\nlatency_ms = 150\ntokens_per_s = 400\ntool_turns = 2\n"
CLI = (sys.executable, "-m", "flightdeck.tui.cli")
OWNER = (*CLI, "run", "tasks.jsonl", "--headless")


def _project(folder: Path) -> None:
    (folder / "flightdeck.toml").write_text(PACED, encoding="utf-8")
    (folder / "tasks.jsonl").write_text(
        "".join(f'{{"id": "p{i:05d}", "goal": "Review change {i}"}}\n' for i in range(CHILDREN)),
        encoding="utf-8",
    )


def _cpu(p: psutil.Process) -> float:
    t = p.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


@dataclass
class Attached:
    """A real `flightdeck attach` under a pseudo-terminal, its output drained."""

    process: subprocess.Popen[bytes]
    master: int
    started_cpu_s: float | None = None  # CPU at its first full frame (imports, first paint)
    output: int = 0
    head: bytes = b""  # the first bytes written, to say why a TUI never painted
    reader: threading.Thread = field(init=False)

    def __post_init__(self) -> None:
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.reader.start()

    def _drain(self) -> None:
        proc = psutil.Process(self.process.pid)
        while True:
            try:
                chunk = os.read(self.master, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            self.output += len(chunk)
            if len(self.head) < 2000:
                self.head += chunk[:2000]
            # The first frame paints the whole screen: by then start-up is over.
            if self.started_cpu_s is None and self.output > SIZE[0] * SIZE[1]:
                with contextlib.suppress(psutil.Error):
                    self.started_cpu_s = _cpu(proc)

    def cpu_s(self) -> float:
        return _cpu(psutil.Process(self.process.pid))

    def close(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self.master)
        self.reader.join(5)


def _attach(folder: Path, batch_id: str) -> Attached:
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", *SIZE, 0, 0))
    process = subprocess.Popen(
        [*CLI, "attach", batch_id, "--state-dir", str(folder / "state")],
        cwd=folder,
        stdin=slave,
        stdout=slave,
        stderr=slave,
        start_new_session=True,
        env={**os.environ, "TERM": "xterm-256color", "COLUMNS": "", "LINES": ""},
    )
    os.close(slave)
    return Attached(process, master)


def _recorded(db: Path, batch_id: str) -> None:
    """Wait until the owner has recorded its batch (as `flightdeck run` waits before attaching)."""
    while True:
        with contextlib.suppress(sqlite3.Error), contextlib.closing(sqlite3.connect(db)) as conn:
            if conn.execute("SELECT 1 FROM batches WHERE id = ?", (batch_id,)).fetchone():
                return
        time.sleep(0.005)


def _round(folder: Path, clients: int) -> dict[str, Any]:
    """One paced batch with `clients` attached TUIs: the owner's CPU and each TUI's."""
    _project(folder)
    out = folder / "owner.out"
    with out.open("wb") as fh:
        owner = subprocess.Popen(
            [*OWNER, "--state-dir", str(folder / "state"), "--max-concurrent", str(POOL)],
            cwd=folder,
            stdout=fh,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "NO_COLOR": "1"},
        )
    while not (first := out.read_text(encoding="utf-8").partition("\n"))[1]:
        assert owner.poll() is None, "the owner exited before its batch started"
        time.sleep(0.005)
    batch_id = first[0].split()[1]
    _recorded(folder / "state" / "flightdeck.db", batch_id)
    tuis = [_attach(folder, batch_id) for _ in range(clients)]
    try:
        t0 = time.monotonic()
        _, status, usage = os.wait4(owner.pid, 0)
        owner.returncode = os.waitstatus_to_exitcode(status)
        wall = time.monotonic() - t0
        tui_cpu = [t.cpu_s() for t in tuis]
        started = [t.started_cpu_s for t in tuis]
        exited = [(t.process.poll(), t.head[-400:]) for t in tuis if t.process.poll() is not None]
    finally:
        for t in tuis:
            t.close()
    assert owner.returncode == 0, f"the owner exited {owner.returncode}"
    assert not exited, f"an attached TUI exited before its batch ended: {exited}"
    return {
        "owner_cpu_s": usage.ru_utime + usage.ru_stime,
        "tui_cpu_s": tui_cpu,
        "tui_startup_cpu_s": started,
        "wall_s": wall,
    }


def main() -> dict[str, Any]:
    rounds: list[dict[int, dict[str, Any]]] = []
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        for i in range(ROUNDS):
            modes = (0, 1, 2) if i % 2 == 0 else (2, 1, 0)
            got = {}
            for clients in modes:
                folder = Path(tmp) / f"r{i}-{clients}"
                folder.mkdir()
                got[clients] = _round(folder, clients)
                load.append(os.getloadavg()[0])
            rounds.append(got)
    alone = [r[0]["owner_cpu_s"] for r in rounds]
    with_tui = [r[1]["owner_cpu_s"] + r[1]["tui_cpu_s"][0] for r in rounds]
    tui = [r[1]["tui_cpu_s"][0] for r in rounds]
    startup = [r[1]["tui_startup_cpu_s"][0] or 0.0 for r in rounds]
    two = [r[2]["owner_cpu_s"] for r in rounds]
    med = statistics.median
    return {
        "bench": "screen_cpu",
        "children": CHILDREN,
        "pool": POOL,
        "rounds": ROUNDS,
        "load_avg_1m": [round(x, 1) for x in load],
        "owner_alone_cpu_s": round(med(alone), 2),
        "owner_with_tui_cpu_s": round(med(r[1]["owner_cpu_s"] for r in rounds), 2),
        "tui_cpu_s": round(med(tui), 2),
        "tui_startup_cpu_s": round(med(startup), 2),
        "owner_two_tuis_cpu_s": round(med(two), 2),
        "tui_plus_owner_over_alone": round(
            med(w / a for w, a in zip(with_tui, alone, strict=True)), 3
        ),
        "tui_after_startup_plus_owner_over_alone": round(
            med((w - s) / a for w, s, a in zip(with_tui, startup, alone, strict=True)), 3
        ),
        "owner_two_tuis_over_alone": round(med(t / a for t, a in zip(two, alone, strict=True)), 3),
        "batch_wall_s_alone": round(med(r[0]["wall_s"] for r in rounds), 1),
        "per_round": rounds,
    }


if __name__ == "__main__":
    r = main()
    print(
        f"{r['children']:,} paced children, {r['pool']} at a time, {r['rounds']} rounds, "
        f"load {r['load_avg_1m']}:\n"
        f"  owner alone {r['owner_alone_cpu_s']} s CPU; with a TUI attached: owner "
        f"{r['owner_with_tui_cpu_s']} s + TUI {r['tui_cpu_s']} s (start-up "
        f"{r['tui_startup_cpu_s']} s) = {r['tui_plus_owner_over_alone']}x alone\n"
        f"  owner with two TUIs attached {r['owner_two_tuis_cpu_s']} s = "
        f"{r['owner_two_tuis_over_alone']}x alone"
    )
    print(json.dumps(r))
