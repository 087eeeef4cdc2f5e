"""Kill a batch's owner with SIGKILL at random moments, dozens of times, resuming after each;
then check, from the provider's side, that no child that had finished ever ran again.

    .venv/bin/python scripts/kill_resume.py [--kills 30] [--children 60] [--seed 1]

The owner is a real `flightdeck run --headless` (then `flightdeck resume`) process on an OpenAI
route to the tests' loopback server, which counts each child's runs (its first request). After
every kill: the store passes `PRAGMA integrity_check`, and the run counts of the children it
says completed are noted; at the end every child is completed and none of those counts moved.
Exit 0 when all holds; 1 (with what broke) otherwise.
"""

from __future__ import annotations

import argparse
import random
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from durable import CountingServer, flightdeck, project


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=30)
    parser.add_argument("--children", type=int, default=60)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as tmp, CountingServer(chunk_delay_s=0.05) as server:
        folder = project(Path(tmp), server, args.children, pool=4)
        db = folder / "state" / "flightdeck.db"
        frozen: dict[str, int] = {}  # child -> its runs when a kill found it completed
        batch_id: str | None = None
        kills = 0
        while True:
            command = (
                ["run", "tasks.jsonl", "--headless"] if batch_id is None else ["resume", batch_id]
            )
            owner = flightdeck(folder, *command)
            delay = rng.uniform(0.3, 2.0) if kills < args.kills else None
            try:
                code = owner.wait(delay) if delay is not None else owner.wait(120)
            except subprocess.TimeoutExpired:  # still running at the random moment: kill it
                owner.send_signal(signal.SIGKILL)
                owner.wait()
                code = None
            owner.communicate()
            if batch_id is None and db.is_file():
                conn = sqlite3.connect(db)
                row = conn.execute("SELECT id FROM batches").fetchone()
                conn.close()
                batch_id = None if row is None else str(row[0])
            if code is None:
                kills += 1
                note = check_after_kill(db, server, frozen)
                if note:
                    problems.append(f"kill {kills}: {note}")
                print(f"kill {kills}: {len(frozen)} completed so far", flush=True)
                continue
            if batch_id is None:
                problems.append("the batch never reached the store")
                break
            if kills >= args.kills or code in (0, 1):
                break
        runs = server.snapshot()
        conn = sqlite3.connect(db)
        statuses = dict(conn.execute("SELECT id, status FROM children").fetchall())
        conn.close()
        for child, count in frozen.items():
            if runs[child] != count:
                problems.append(f"{child} completed with {count} run(s), then ran again")
        for child, status in statuses.items():
            if status != "completed":
                problems.append(f"{child} ended {status}")
            if not 1 <= runs[child] <= 1 + kills:
                problems.append(f"{child} ran {runs[child]} times")
        if len(statuses) != args.children:
            problems.append(f"{len(statuses)} children in the store, not {args.children}")
        rerun = sum(1 for c in statuses if runs[c] > 1)
        print(f"{kills} kills; {rerun} children ran more than once; {len(problems)} problem(s)")
    for problem in problems:
        print("PROBLEM:", problem)
    return 1 if problems else 0


def check_after_kill(db: Path, server: CountingServer, frozen: dict[str, int]) -> str | None:
    if not db.is_file():
        return None
    time.sleep(0.05)  # the server may still be counting the last request's arrival
    conn = sqlite3.connect(db)
    try:
        ok = conn.execute("PRAGMA integrity_check").fetchone()[0]
        done = [r[0] for r in conn.execute("SELECT id FROM children WHERE status = 'completed'")]
    finally:
        conn.close()
    runs = server.snapshot()
    for child in done:
        frozen.setdefault(child, runs[child])
    return None if ok == "ok" else f"integrity_check: {ok}"


if __name__ == "__main__":
    sys.exit(main())
