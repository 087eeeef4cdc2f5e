"""The transcript pane's lag: how far behind the file a real `flightdeck attach` in tmux shows it.

A real owner (`flightdeck run --headless`, another process) runs one bursty `sim` child: a reply
streams 8 tokens a second, then a tool turn writes several lines at once. A real `flightdeck
attach` runs in a tmux pane (100x30) and follows its transcript. For BENCH_TAIL_S (30 s), this
process reads the file every 0.1 s (noting when it first saw each line) and captures the pane
every 0.5 s. A sample's lag: 0 if the pane shows the line that is the file's last, else how long
ago the next line was first seen (the shown line stopped being the last then). The line the
suite held it to until it measured this instead: a second, at nine samples in ten.

BENCH_DIR: where the state folder goes.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: tmux_tail

from flightdeck.engine.records.reader import StoreReader

from tmux_tail import BURSTY, Transcript, ends_with, pane_last_row, screen, words

SAMPLE_FOR_S = float(os.environ.get("BENCH_TAIL_S", "30"))
READY_S = 120.0  # how long the owner, its child and the pane may take to come up
CHILD = "c00000"


def _until(what: str, pred: Any) -> Any:
    deadline = time.monotonic() + READY_S
    while not (found := pred()):
        if time.monotonic() > deadline:
            raise SystemExit(f"bench_tail: {what} not there after {READY_S} s")
        time.sleep(0.05)
    return found


def _transcript(db: Path) -> tuple[str, Path] | None:
    if not db.exists():
        return None
    with StoreReader(db) as reader:
        for info in reader.batches():
            for row in reader.children(info.id):
                if row.id == CHILD and row.transcript and Path(row.transcript).exists():
                    return info.id, Path(row.transcript)
    return None


def _lag(shown: list[str], transcript: Transcript, now: float) -> float | None:
    """The sample's lag (see the module's docstring); None if the row is no line of the file."""
    lines = transcript.lines
    for i in range(len(lines) - 1, -1, -1):
        if ends_with(shown, lines[i]):
            return 0.0 if i == len(lines) - 1 else now - transcript.seen_at[i + 1]
    # The line being written (a reply streaming): the pane shows part of it, current.
    if shown and " ".join(shown[1:]) in " ".join(words(transcript.partial)):
        return 0.0 if shown[0] in transcript.partial else None
    return None


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def main() -> dict[str, Any]:
    if shutil.which("tmux") is None:
        raise SystemExit("bench_tail: tmux is not installed")
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        folder = Path(tmp)
        (folder / "flightdeck.toml").write_text('[engine]\nstate_dir = "state"\n' + BURSTY)
        # Forty turns: it writes for well over the sampling (the default eight end within it).
        task = {"id": CHILD, "goal": "summarize the readme", "max_turns": 40}
        (folder / "tasks.jsonl").write_text(json.dumps(task) + "\n")
        owner = subprocess.Popen(
            [sys.executable, "-m", "flightdeck.tui.cli", "run", "tasks.jsonl", "--headless"],
            cwd=folder,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        tmux = ["tmux", "-S", str(folder / "tmux.sock")]
        try:
            batch_id, path = _until(
                "the child's transcript", lambda: _transcript(folder / "state" / "flightdeck.db")
            )
            attach = [sys.executable, "-m", "flightdeck.tui.cli", "attach", batch_id]
            subprocess.run(
                [
                    *tmux,
                    "new-session",
                    "-d",
                    "-x",
                    "100",
                    "-y",
                    "30",
                    "-c",
                    str(folder),
                    shlex.join(attach),
                ],
                check=True,
            )
            _until("the transcript pane", lambda: pane_last_row(screen(tmux), CHILD))
            transcript = Transcript(path)
            lags: list[float] = []
            unmatched = 0
            end = time.monotonic() + SAMPLE_FOR_S
            next_capture = time.monotonic()
            while time.monotonic() < end:
                transcript.look()
                if time.monotonic() >= next_capture:
                    next_capture = time.monotonic() + 0.5
                    shown = pane_last_row(screen(tmux), CHILD) or []
                    transcript.look()
                    lag = _lag(shown, transcript, time.monotonic())
                    if lag is None:
                        unmatched += 1

                    else:
                        lags.append(lag)
                time.sleep(0.1)
        finally:
            subprocess.run([*tmux, "kill-server"], capture_output=True)
            owner.terminate()
            owner.wait(30)
    if not lags:
        raise SystemExit("bench_tail: no sample matched a line of the transcript")
    return {
        "bench": "attach_tail",
        "samples": len(lags),
        "unmatched": unmatched,  # rows that are no line of the file, ended or being written
        "lag_s_p50": _pct(lags, 0.5),
        "lag_s_p90": _pct(lags, 0.9),
        "lag_s_max": round(max(lags), 3),
        "within_1s_share": round(sum(lag <= 1.0 for lag in lags) / len(lags), 3),
        "load_avg_1m": round(os.getloadavg()[0], 2),
    }


if __name__ == "__main__":
    r = main()
    print(
        f"transcript pane in tmux, {r['samples']} samples (load {r['load_avg_1m']}): lag p50 "
        f"{r['lag_s_p50']} s, p90 {r['lag_s_p90']}, max {r['lag_s_max']}; within a second "
        f"{r['within_1s_share']:.0%}"
    )
    print(json.dumps(r))
