"""kill_resume.py's chaos, for the features that meet `resume`: children that delegate, tasks in
groups (completion units), and the operator's `stop`, `pause`, `continue` and `retry` sent to the
running owner between kills.

    .venv/bin/python scripts/kill_resume_fleet.py [--kills 12] [--children 36] [--seed 1]

The owner is a real `flightdeck run --headless` (then `flightdeck resume`) on an OpenAI route
with `delegate = true` to the tests' loopback server. A third of the tasks are parents: their
first turn calls `delegate` with two parts whose goals name the parent's run
(`durable part c003 r2 k1`), so each delegate is one run of the provider's, told apart from a
re-run parent's new ones; half the tasks are in groups `g0`..`g4`. The server counts every run
(a task's or a part's first request). Each owner is SIGKILLed at a random moment; while it runs,
one operator command may go to it through the CLI (stop, pause or continue a random child, pause
or continue admission, retry a stopped one). The last resume is let run: it continues whatever
is paused until the batch ends.

Checked: after every kill `PRAGMA integrity_check` is ok; at the end every child has ended; no
child the store held completed at a kill ran again, and no part ran twice; none ended before it
started; a top-level child
not completed was stopped by the operator; the delegates of a parent's earlier runs are
`superseded` and those of its last run are not, and the batch's status and the report's counts
leave the superseded out; the report's totals (cost, tokens) equal the sum of its children's
rows; `recovery` agrees with the `lost_attempt` and `resumed` events, and no child ran more
often than its lost attempts and retries allow; each group's last `▣` line agrees with the
report's group; no process of the run is left. Exit 0 when all holds; 1 (with what broke)
otherwise. Not part of `make test`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from decimal import Decimal
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from durable import flightdeck
from loopback import KEY_ENV, Loopback, Received, Reply, ToolUse

TASK = re.compile(r"durable task (c\d+)( split)?")
PART = re.compile(r"durable part (c\d+) r(\d+) k(\d+)")
ENDED = {"completed", "failed", "stopped", "timed_out", "stalled", "unknown"}
GROUPS = 5


class FleetServer:
    """The loopback server: counts runs (first turns) by task id or part goal; a parent's first
    turn delegates two parts named after its run."""

    def __init__(self, chunk_delay_s: float) -> None:
        self.runs: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.delay = chunk_delay_s
        self.server = Loopback(self._answer)

    def _answer(self, received: Received) -> Reply:
        messages = received.body.get("messages") or []
        users = [m for m in messages if m.get("role") == "user"]
        goal = str(users[0].get("content")) if users else ""
        first = len(users) == 1 and len(messages) <= 2
        task, part = TASK.search(goal), PART.search(goal)
        key = part.group(0) if part else task.group(1) if task else None
        with self.lock:
            if key is not None and first:
                self.runs[key] += 1
            run = self.runs[key] if key else 0
        if first and task and task.group(2) and not part:
            parts = [{"goal": f"durable part {task.group(1)} r{run} k{k}"} for k in (1, 2)]
            tool = ToolUse("call-1", "delegate", {"tasks": parts})
            return Reply(text="splitting it", tools=(tool,), chunk_delay_s=self.delay)
        return Reply(text="done: " + "x" * 40, chunk_delay_s=self.delay)

    def snapshot(self) -> Counter[str]:
        with self.lock:
            return Counter(self.runs)


def project(folder: Path, server: FleetServer, children: int, pool: int) -> Path:
    with open(folder / "tasks.jsonl", "w") as fh:
        for i in range(children):
            task: dict[str, Any] = {"id": f"c{i:03d}", "goal": f"durable task c{i:03d}"}
            if i % 3 == 1:
                task["goal"] += " split"
            if i % 2 == 0:
                task["group"] = f"g{(i // 2) % GROUPS}"
            fh.write(json.dumps(task) + "\n")
    (folder / "flightdeck.toml").write_text(
        f"""[engine]
max_concurrent = {pool}
default_route = "lb"
state_dir = "state"

[routes.lb]
provider = "openai"
model = "gpt-loopback"
base_url = "{server.server.openai_url}"
api_key_env = "{KEY_ENV}"
delegate = true
connect_timeout_s = 2
read_timeout_s = 120
price = {{ input_per_mtok = 2.5, output_per_mtok = 10 }}
retry = {{ attempts = 3, base_s = 0.01, max_s = 0.05 }}
"""
    )
    return folder


def rows(db: Path) -> list[sqlite3.Row]:
    conn = sqlite3.connect(db)
    conn.row_factory = sqlite3.Row
    try:
        return conn.execute("SELECT * FROM children ORDER BY seq").fetchall()
    finally:
        conn.close()


def query(db: Path, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def key_of(row: sqlite3.Row) -> str:
    """The server's name for a row's runs: a task's id, a part's goal."""
    part = PART.search(row["goal"])
    return part.group(0) if part else row["id"]


def pick_op(db: Path, batch: str, rng: random.Random) -> list[str] | None:
    """An operator command on the store's children as they are now (None: none fits)."""
    every = rows(db)
    tops = [r for r in every if "." not in r["id"]]
    by = {s: [r["id"] for r in every if r["status"] == s] for s in ("queued", "running", "paused")}
    ended = [r["id"] for r in tops if r["status"] in ENDED - {"completed"}]
    live = by["queued"] + by["running"]  # delegates among them
    choices: list[list[str]] = []
    if live:
        choices += [["stop", batch, rng.choice(live)], ["pause", batch, rng.choice(live)]] * 2
        choices += [["pause", batch, "--where", "status:running"]]
    if by["paused"]:
        choices += [["continue", batch, rng.choice(by["paused"])]] * 3
    if ended:
        choices += [["retry", batch, rng.choice(ended)]] * 3
    choices += [["pause", batch], ["continue", batch]]
    return rng.choice(choices) if choices else None


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
    except OSError:
        return False
    return state != "Z"


def ours(folder: Path) -> list[int]:
    """Processes working in the project folder (owners, their transcript writers): ours."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and proc.name != str(os.getpid()):
            try:
                cwd = os.readlink(proc / "cwd")
            except OSError:
                continue
            if cwd.startswith(str(folder)) and alive(int(proc.name)):
                found.append(int(proc.name))
    return found


class Chaos:
    def __init__(self, args: argparse.Namespace, folder: Path, server: FleetServer) -> None:
        self.args = args
        self.rng = random.Random(args.seed)
        self.folder = folder
        self.server = server
        self.db = folder / "state" / "flightdeck.db"
        self.batch: str | None = None
        self.frozen: dict[str, int] = {}  # run key -> its runs when a kill found it completed
        self.problems: list[str] = []
        self.outputs: list[str] = []  # every owner's stdout, in order
        self.ops: list[str] = []
        self.kills = 0
        self.resumes = 0
        self.kill_times: list[float] = []  # wall clock, as the store's timestamps

    def run(self) -> None:
        while self.kills < self.args.kills:
            self.reap_stray_owner()
            owner = self.owner()
            self.wait_in_charge(owner)  # a loaded machine takes seconds to start one
            delay = self.rng.uniform(0.2, 2.5)
            op_at = self.rng.uniform(0.0, delay)
            settle = self.rng.random() < 0.5  # let the owner apply it before the kill
            started, op = time.monotonic(), None
            while owner.poll() is None and time.monotonic() - started < delay:
                if op is None and time.monotonic() - started > op_at:
                    op = self.operate()
                    if op is not None and settle:
                        self.finish_op(op)
                        op = None
                time.sleep(0.01)
            killed = owner.poll() is None
            if killed:
                owner.send_signal(signal.SIGKILL)
                self.kill_times.append(time.time())
            self.collect(owner)
            self.finish_op(op)
            self.find_batch()
            if killed:
                self.kills += 1
                self.after_kill()
            elif self.batch is None:
                self.problems.append("the batch never reached the store")
                return
            else:  # the batch ended by itself: what a resume then does is the last run's
                break
        self.reap_stray_owner()
        if self.batch is not None:
            self.last_run()

    def wait_in_charge(self, owner: subprocess.Popen[str]) -> None:
        """Until the batch's row names this owner (or it has ended)."""
        deadline = time.monotonic() + 120
        while owner.poll() is None and time.monotonic() < deadline:
            self.find_batch()
            if self.batch is not None:
                found = query(self.db, "SELECT owner_pid FROM batches WHERE id = ?", self.batch)
                if found and found[0][0] == owner.pid:
                    return
            time.sleep(0.01)

    def owner(self) -> subprocess.Popen[str]:
        if self.batch is None:
            return flightdeck(self.folder, "run", "tasks.jsonl", "--headless")
        self.resumes += 1
        return flightdeck(self.folder, "resume", self.batch, "--reopen")

    def collect(self, proc: subprocess.Popen[str]) -> int:
        out, err = proc.communicate(timeout=300)
        self.outputs.append(out)
        if proc.returncode not in (0, 1, -signal.SIGKILL):
            self.problems.append(f"an owner exited {proc.returncode}: {err.strip()[-300:]}")
        return proc.returncode

    def find_batch(self) -> None:
        if self.batch is None and self.db.is_file():
            try:
                found = query(self.db, "SELECT id FROM batches")
            except sqlite3.OperationalError:  # not made yet
                return
            self.batch = str(found[0][0]) if found else None

    def operate(self) -> subprocess.Popen[str] | None:
        self.find_batch()
        if self.batch is None or not self.db.is_file():
            return None
        args = pick_op(self.db, self.batch, self.rng)
        if args is None:
            return None
        self.ops.append(" ".join(args[:1] + args[2:]) or args[0])
        return flightdeck(self.folder, *args)

    def finish_op(self, op: subprocess.Popen[str] | None) -> None:
        if op is None:
            return
        try:
            _, err = op.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            op.kill()
            _, err = op.communicate()
            self.problems.append(f"`{self.ops[-1]}` still waiting 60 s after its owner died")
        self.ops[-1] += f" -> {op.returncode}"
        if op.returncode not in (0, 1, 2):
            self.problems.append(f"`{self.ops[-1]}`: {err.strip()[-300:]}")

    def reap_stray_owner(self) -> None:
        """A retry sent as the owner ended starts one in the background (`resume --reopen`):
        ours too; it is killed as an owner would be."""
        if self.batch is None:
            return
        (pid,) = query(self.db, "SELECT owner_pid FROM batches WHERE id = ?", self.batch)[0]
        if pid and pid != os.getpid() and alive(pid) and pid in ours(self.folder):
            os.kill(pid, signal.SIGKILL)
            self.kill_times.append(time.time())
            self.ops.append(f"killed a background owner {pid}")
            self.resumes += 1  # it was a `resume --reopen`
            while alive(pid):
                time.sleep(0.01)
            self.kills += 1
            self.after_kill()

    def after_kill(self) -> None:
        time.sleep(0.1)  # the server may still be counting the last request's arrival
        if not self.db.is_file():
            return
        (ok,) = query(self.db, "PRAGMA integrity_check")[0]
        if ok != "ok":
            self.problems.append(f"kill {self.kills}: integrity_check: {ok}")
        runs = self.server.snapshot()
        for row in rows(self.db):
            if row["status"] == "completed":
                self.frozen.setdefault(key_of(row), runs[key_of(row)])
        print(f"kill {self.kills}: {len(self.frozen)} completed; ops {self.ops[-2:]}", flush=True)

    def last_run(self) -> None:
        """Resume once more and let it end, continuing whatever is paused as it runs."""
        assert self.batch is not None
        owner = self.owner()
        deadline = time.monotonic() + 300
        while owner.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
            paused = [r["id"] for r in rows(self.db) if r["status"] == "paused"]
            (held,) = query(self.db, "SELECT held FROM batches WHERE id = ?", self.batch)[0]
            for args in ([paused] if paused else []) + ([[]] if held else []):
                if owner.poll() is None:
                    proc = flightdeck(self.folder, "continue", self.batch, *args)
                    proc.communicate(timeout=120)
        if owner.poll() is None:
            self.problems.append("the last owner did not end in 300 s")
            owner.kill()
        self.collect(owner)


def check_end(chaos: Chaos, report: dict[str, Any]) -> None:
    p = chaos.problems
    db, runs = chaos.db, chaos.server.snapshot()
    table = rows(db)
    for key, count in chaos.frozen.items():
        if runs[key] != count:
            p.append(f"{key} completed with {count} run(s), then ran again")
    for key, count in runs.items():
        if key.startswith("durable part") and count > 1:
            p.append(f"{key} ran {count} times")
    for r in table:
        if r["status"] not in ENDED:
            p.append(f"{r['id']} ended {r['status']}")
        elif r["started_ts"] is not None and r["finished_ts"] < r["started_ts"]:
            p.append(f"{r['id']} ({r['status']}) ended before it started")
    superseded = {c["id"]: c["superseded"] for c in report["children"]}.__getitem__
    stopped = {s.strip() for (s,) in query(db, "SELECT child_id FROM events WHERE kind = 'stop'")}
    for r in table:
        by_op = r["id"] in stopped or r["id"].split(".")[0] in stopped  # a parent's stop
        if r["status"] != "completed" and not by_op and not superseded(r["id"]):
            p.append(f"{r['id']} ended {r['status']} with no stop of the operator's")
    check_supersession(chaos, report, table, runs)
    check_totals(report, table)
    check_recovery(chaos, report, table, runs)
    check_groups(chaos, report)
    expected = all(
        r["status"] == "completed" or row["superseded"]
        for r, row in zip(table, report["children"], strict=True)
    )
    if (report["status"] == "completed") != expected:
        p.append(f"batch {report['status']}, its children say completed={expected}")


def check_supersession(
    chaos: Chaos, report: dict[str, Any], table: list[sqlite3.Row], runs: Counter[str]
) -> None:
    """A part of a parent's earlier run is superseded; one of its last is not, unless its
    attempt was lost or retried after (a re-run the operator then stopped before it reached
    the provider: its new attempt made no parts)."""
    by_id = {c["id"]: c for c in report["children"]}
    events = query(chaos.db, "SELECT id, child_id, kind, detail FROM events ORDER BY id")
    made = {c: i for i, c, kind, _ in events if kind == "delegate"}
    again = [
        (i, c)
        for i, c, kind, d in events
        if kind == "retry" or (kind == "lost_attempt" and json.loads(d).get("rerun"))
    ]
    for r in table:
        part = PART.search(r["goal"])
        if part is None:
            continue
        last = runs[part.group(1)]
        sup = bool(by_id[r["id"]]["superseded"])
        later = any(c == part.group(1) and i > made.get(r["id"], 0) for i, c in again)
        if (int(part.group(2)) < last or later) and not sup:
            chaos.problems.append(f"{r['id']} ({part.group(0)}; parent ran {last}x) not superseded")
        if int(part.group(2)) == last and sup and not later:
            chaos.problems.append(
                f"{r['id']} ({part.group(0)}) of its parent's last run superseded"
            )
    totals = report["totals"]
    counted = Counter(c["status"] for c in report["children"] if not c["superseded"])
    for status in ("completed", "failed", "stopped"):
        got = totals[status]
        want = counted[status] + (
            sum(counted[s] for s in ("timed_out", "stalled", "unknown"))
            if status == "failed"
            else 0
        )
        if got != want:
            chaos.problems.append(f"report totals.{status} {got}, its unsuperseded rows {want}")
    history = sum(1 for c in report["children"] if c["superseded"])
    if totals["superseded"] != history:
        chaos.problems.append(f"report totals.superseded {totals['superseded']}, rows {history}")


def check_totals(report: dict[str, Any], table: list[sqlite3.Row]) -> None:
    totals = report["totals"]
    cost = sum((Decimal(r["cost_usd"] or 0) for r in table), Decimal(0))
    problems = []
    if Decimal(str(totals["cost_usd"])) != cost:
        problems.append(f"report cost {totals['cost_usd']}, the rows' {cost}")
    for col, key in (("tokens_in", "tokens_in"), ("tokens_out", "tokens_out")):
        if totals[key] != sum(r[col] for r in table):
            problems.append(f"report {key} {totals[key]}, rows {sum(r[col] for r in table)}")
    listed = sum((Decimal(str(c["cost_usd"] or 0)) for c in report["children"]), Decimal(0))
    if abs(listed - cost) > Decimal("1e-9"):
        problems.append(f"report children's costs sum to {listed}, the rows' {cost}")
    report.setdefault("_problems", []).extend(problems)


def check_recovery(
    chaos: Chaos, report: dict[str, Any], table: list[sqlite3.Row], runs: Counter[str]
) -> None:
    p = chaos.problems
    events = query(chaos.db, "SELECT child_id, kind, detail FROM events ORDER BY id")
    lost = [(c, json.loads(d)) for c, k, d in events if k == "lost_attempt"]
    rec = report["recovery"]
    rerun = sum(1 for _, d in lost if d.get("rerun"))
    if (rec["rerun"], rec["left_unknown"]) != (rerun, len(lost) - rerun):
        p.append(f"recovery {rec}, lost_attempt events: {rerun} rerun of {len(lost)}")
    resumes = [json.loads(d) for _, k, d in events if k == "resumed"]
    # A resume that took up a batch which had ended (killed after its end was recorded)
    # reopened it: no owner was lost, no recovery.
    resumed = sum(1 for d in resumes if not d.get("reopened"))
    if rec["resumes"] != resumed or len(resumes) > chaos.resumes:
        p.append(
            f"recovery resumes {rec['resumes']}, events {resumed}, resumes run {chaos.resumes}"
        )
    carried: dict[str, Decimal] = {}
    lost_cost = Decimal(0)
    for child, kind, detail in events:
        if kind not in ("lost_attempt", "retry") or child is None:
            continue
        found = json.loads(detail)
        cost = Decimal((found["before"] if kind == "retry" else found).get("cost_usd") or 0)
        if kind == "lost_attempt":
            lost_cost += cost - carried.get(child, Decimal(0))
        carried[child] = cost
    if abs(Decimal(str(rec["lost_cost_usd"])) - lost_cost) > Decimal("1e-9"):
        p.append(f"recovery lost_cost_usd {rec['lost_cost_usd']}, its events {lost_cost}")
    again = Counter(c for c, k, _ in events if k in ("lost_attempt", "retry") and c)
    for r in table:
        if "." not in r["id"] and runs[r["id"]] > 1 + again[r["id"]]:
            p.append(f"{r['id']} ran {runs[r['id']]}x with {again[r['id']]} lost/retried")
    p.extend(report.pop("_problems", []))


UNIT = re.compile(r"▣ group (\S+)  (\w+): (\d+)/(\d+) completed.*  ((?:\S+ ?)+)$")


def check_groups(chaos: Chaos, report: dict[str, Any]) -> None:
    """The last `▣` line of each group agrees with the report. A unit that ended just before a
    kill may have gone untold (a finish is announced after its commit, and the kill can land
    between), and nothing runs again to tell it: noted, not a problem, when a kill came within
    2 s of its end."""
    last: dict[str, re.Match[str]] = {}
    log = chaos.folder / "state" / "batches" / str(chaos.batch) / "owner.log"
    # A background owner (a retry's) wrote to owner.log; the order between them is unknown,
    # so owner.log is read first and the last foreground owner's lines decide.
    background = [log.read_text()] if log.is_file() else []
    for out in background + chaos.outputs:
        for line in out.splitlines():
            if (m := UNIT.search(line)) is not None:
                last[m.group(1)] = m
    ends = dict(
        query(
            chaos.db,
            "SELECT grp, MAX(finished_ts) FROM children WHERE grp IS NOT NULL GROUP BY grp",
        )
    )
    for g in report["groups"]:
        m = last.get(g["group"])
        end = ends.get(g["group"]) or 0.0
        near_kill = any(0 <= k - end < 2.0 for k in chaos.kill_times)
        told = None if m is None else (m.group(2), int(m.group(3)), int(m.group(4)))
        if g["status"] == "open":
            chaos.problems.append(f"group {g['group']} open at the end")
        elif told != (g["status"], g["completed"], g["children"]):
            what = f"group {g['group']}: ▣ said {told}, the report {g['status']} {g['members']}"
            if near_kill:
                after = min(k - end for k in chaos.kill_times if k >= end)
                print(f"note: {what} (a kill came {after:.2f} s after its end)")
            else:
                chaos.problems.append(what)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=12)
    parser.add_argument("--children", type=int, default=36)
    parser.add_argument("--pool", type=int, default=4)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep the project folder")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fleet-chaos-"))
    server = FleetServer(chunk_delay_s=0.05)
    with server.server:
        folder = project(tmp, server, args.children, args.pool)
        chaos = Chaos(args, folder, server)
        chaos.run()
        if chaos.batch is not None:
            rep = flightdeck(folder, "report", chaos.batch, "--format", "json")
            out, _ = rep.communicate(timeout=120)
            check_end(chaos, json.loads(out))
        time.sleep(1.0)  # a transcript writer finishing its last lines
        for pid in ours(folder):
            chaos.problems.append(f"process {pid} left running: {proc_cmd(pid)}")
            os.kill(pid, signal.SIGKILL)
    runs = server.snapshot()
    print(f"seed {args.seed}: {chaos.kills} kills, {chaos.resumes} resumes, {len(chaos.ops)} ops")
    print("ops:", "; ".join(chaos.ops))
    print(
        f"{sum(1 for c in runs.values() if c > 1)} ran more than once; problems:",
        len(chaos.problems),
    )
    for problem in chaos.problems:
        print("PROBLEM:", problem)
    if args.keep:
        for i, out in enumerate(chaos.outputs):
            (folder / f"owner-{i:02d}.out").write_text(out)
    print("folder:", folder if args.keep else "(removed)")
    if not args.keep:
        subprocess.run(["rm", "-rf", str(tmp)], check=False)
    return 1 if chaos.problems else 0


def proc_cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:200]
    except OSError:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
