"""Attach: how soon an attached TUI shows the owner's changes, and what clients cost the owner.

Latency: a real owner (`flightdeck run --headless`, another process) runs 1,000 sim children,
200 at a time, each for several seconds. This process attaches the real app (headless) through
a StoreView. Every change that carries the owner's own time stamp is a sample: a child starting
(started_ts), a tool starting (tool_started_ts), a child finishing (finished_ts). Its latency is
from that stamp to the moment the change is in the view's snapshot ("view") and to the moment
the main screen applies it to the table ("screen": the view plus the screen's poll interval).
The owner's stamps are wall-clock seconds read once at its start (a steady clock), this
process's are `time.time()`: on one machine the two agree to well under a millisecond.

Throughput: the same owner with instant children, alone and with two client processes
attached (each a StoreView, watching and reading the store as an attached TUI does; started
first, so their start-up is not counted), rounds alternating side by side (and which of the two
goes first); children per second from the batch's start to its end as the owner recorded them.
The ratio: with clients over alone, the median of the rounds' ratios.

Scale knobs (the smoke test shrinks them): BENCH_ATTACH_CHILDREN, BENCH_ATTACH_POOL,
BENCH_ATTACH_WINDOW_S, BENCH_ATTACH_TP_CHILDREN, BENCH_ATTACH_ROUNDS. BENCH_DIR: where the
state folders go.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from flightdeck.engine.attached.view import StoreView
from flightdeck.engine.model import ChildStatus, Snapshot
from flightdeck.engine.records.reader import StoreReader
from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.screens.main import UiOptions

CHILDREN = int(os.environ.get("BENCH_ATTACH_CHILDREN", "1000"))
POOL = int(os.environ.get("BENCH_ATTACH_POOL", "200"))
WINDOW_S = float(os.environ.get("BENCH_ATTACH_WINDOW_S", "15"))
TP_CHILDREN = int(os.environ.get("BENCH_ATTACH_TP_CHILDREN", "2000"))
ROUNDS = int(os.environ.get("BENCH_ATTACH_ROUNDS", "5"))
SCALE = float(os.environ.get("BENCH_ATTACH_TIME_SCALE", "1.0"))

# Several seconds a child, a tool every turn: starts, tools and finishes all through the window.
SLOW = f"[routes.sim]\ntime_scale = {SCALE}\nlatency_ms = 300\ntokens_per_s = 30\ntool_turns = 6\n"
INSTANT = "[routes.sim]\ntime_scale = 0.0001\nlatency_ms = 1\ntokens_per_s = 100000\n"

# A client: started (and its imports paid) before the owner, attached as soon as the batch is.
CLIENT = """
import sys, time
from pathlib import Path
from flightdeck.engine.model import BatchStatus
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.attached.view import StoreView
db = Path(sys.argv[1])
print("ready", flush=True)
while True:
    try:
        with StoreReader(db) as reader:
            batches = reader.batches()
        if batches:
            break
    except Exception:
        pass
    time.sleep(0.002)
view = StoreView(db, batches[0].id)
while view.snapshot().status is BatchStatus.RUNNING:
    time.sleep(0.3)  # an attached TUI's poll; the view reads on its own watcher thread
view.close()
"""


RUN = (sys.executable, "-m", "flightdeck.tui.cli", "run", "tasks.jsonl", "--headless")


def _project(folder: Path, config: str, children: int) -> None:
    (folder / "flightdeck.toml").write_text(config, encoding="utf-8")
    (folder / "tasks.jsonl").write_text(
        "".join(f'{{"id": "c{i:05d}", "goal": "Review item {i}"}}\n' for i in range(children)),
        encoding="utf-8",
    )


def _owner(folder: Path, pool: int) -> tuple[subprocess.Popen[bytes], str]:
    """A headless owner; its output goes to a file (a pipe nobody reads would block it)."""
    out = folder / "owner.out"
    with out.open("wb") as fh:
        process = subprocess.Popen(
            [*RUN, "--state-dir", str(folder / "state"), "--max-concurrent", str(pool)],
            cwd=folder,
            stdout=fh,
            stderr=subprocess.DEVNULL,
            env={**os.environ, "NO_COLOR": "1"},
        )
    while True:
        first = out.read_text(encoding="utf-8").partition("\n")
        if first[1]:
            assert first[0].startswith("batch "), first
            return process, first[0].split()[1]
        assert process.poll() is None, "the owner exited before its batch started"
        time.sleep(0.005)


def _view(db: Path, batch_id: str) -> StoreView:
    while True:
        try:
            return StoreView(db, batch_id)
        except LookupError:
            time.sleep(0.005)


class Samples:
    """Latencies (ms) of the stamped changes seen in successive snapshots."""

    def __init__(self) -> None:
        self.ms: list[float] = []
        self._seen: dict[str, tuple[ChildStatus, float | None]] = {}

    def add(self, snap: Snapshot, now: float) -> None:
        seen = self._seen
        for row in snap.children:
            before = seen.get(row.id)
            tool_ts = row.activity.tool_started_ts
            if before is not None:
                status, tool = before
                if status is not ChildStatus.RUNNING and row.status is ChildStatus.RUNNING:
                    self._sample(now, row.started_ts)
                if tool_ts is not None and tool_ts != tool:
                    self._sample(now, tool_ts)
                if status.live and row.status.terminal:
                    self._sample(now, row.finished_ts)
            seen[row.id] = (row.status, tool_ts)

    def _sample(self, now: float, stamp: float | None) -> None:
        if stamp is not None:
            self.ms.append((now - stamp) * 1000)

    def summary(self) -> dict[str, float | int]:
        ms = sorted(self.ms)
        if not ms:
            return {"samples": 0}
        return {
            "samples": len(ms),
            "p50_ms": round(statistics.median(ms), 1),
            "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 1),
        }


async def latency(folder: Path) -> dict[str, Any]:
    _project(folder, SLOW, CHILDREN)
    owner, batch_id = _owner(folder, POOL)
    try:
        view = _view(folder / "state" / "flightdeck.db", batch_id)
        app = FlightdeckApp(view, UiOptions(cursor_blink=False))  # the TUI's own poll interval
        at_view, at_screen = Samples(), Samples()
        running = 0
        async with app.run_test(size=(160, 50)) as pilot:
            screen = app.main
            apply = screen.apply

            def applied(snap: Snapshot) -> None:
                apply(snap)
                at_screen.add(snap, time.time())  # once the table has it

            screen.apply = applied  # type: ignore[method-assign]
            end = time.monotonic() + WINDOW_S
            version = -1
            while time.monotonic() < end:
                snap = view.snapshot()
                if snap.version != version:
                    version = snap.version
                    at_view.add(snap, time.time())
                    running = max(running, snap.totals.running)
                await pilot.pause(0.005)
            reads = view.reads
        view.close()
    finally:
        owner.terminate()
        owner.wait(60)
    return {
        "bench": "attach_latency",
        "children": CHILDREN,
        "pool": POOL,
        "running_peak": running,
        "window_s": WINDOW_S,
        "view_reads": reads,
        "view": at_view.summary(),
        "screen": at_screen.summary(),
    }


def _throughput_round(folder: Path, clients: int) -> float:
    """Children per second from the batch's start to its end, as the owner recorded them."""
    _project(folder, INSTANT, TP_CHILDREN)
    db = folder / "state" / "flightdeck.db"
    attached = [
        subprocess.Popen([sys.executable, "-c", CLIENT, str(db)], stdout=subprocess.PIPE, text=True)
        for _ in range(clients)
    ]
    for client in attached:
        assert client.stdout is not None and client.stdout.readline() == "ready\n"
    owner, batch_id = _owner(folder, 64)
    owner.wait()
    for client in attached:
        client.wait(30)
        assert client.stdout is not None
        client.stdout.close()
    with StoreReader(db) as reader:
        info = reader.batch(batch_id)
    assert info is not None and info.finished_ts is not None
    return TP_CHILDREN / (info.finished_ts - info.created_ts)


def throughput(base: Path) -> dict[str, Any]:
    alone: list[float] = []
    with_clients: list[float] = []
    for i in range(ROUNDS):
        pair = ((0, alone), (2, with_clients))
        for clients, out in pair if i % 2 == 0 else pair[::-1]:  # neither always goes first
            folder = base / f"tp-{i}-{clients}"
            folder.mkdir()
            out.append(_throughput_round(folder, clients))
    ratios = [w / a for w, a in zip(with_clients, alone, strict=True)]
    return {
        "bench": "attach_throughput",
        "children": TP_CHILDREN,
        "alone_children_per_s": round(statistics.median(alone), 1),
        "two_clients_children_per_s": round(statistics.median(with_clients), 1),
        "two_clients_over_alone": round(statistics.median(ratios), 3),
        "ratios_per_round": [round(r, 3) for r in ratios],
    }


def main() -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        base = Path(tmp)
        (base / "latency").mkdir()
        results = [asyncio.run(latency(base / "latency")), throughput(base)]
    return results


if __name__ == "__main__":
    results = main()
    lat, tp = results
    print(f"attach latency, {lat['children']:,} children, {lat['running_peak']} running:")
    for where in ("view", "screen"):
        s = lat[where]
        print(f"  {where:7} p50 {s.get('p50_ms')} ms  p99 {s.get('p99_ms')} ms  ({s['samples']})")
    print(
        f"owner throughput: alone {tp['alone_children_per_s']}/s, two clients "
        f"{tp['two_clients_children_per_s']}/s, ratio {tp['two_clients_over_alone']}"
    )
    print(json.dumps(results))
