"""A real owner process to kill: `flightdeck run --headless` on an OpenAI route to the
loopback server, which counts the runs of each child (its first request) on the provider's
side, whatever the store claims. Shared by tests/test_durable.py and scripts/kill_resume.py."""

from __future__ import annotations

import json
import re
import subprocess
import threading
from collections import Counter
from pathlib import Path

from helpers import flightdeck_process
from loopback import KEY_ENV, Loopback, Received, Reply

GOAL = re.compile(r"durable task (c\d+)")


MAX_HOLD_S = 60.0  # a held request is answered after this even if nobody releases it


class CountingServer:
    """The loopback server, answering every request slowly enough to be killed mid-run, and
    counting the runs of each child: requests carrying only its goal (turn one).

    `hold()` makes every request wait (counted) until `release()` lets all go, or
    `release(child)` that child's: how a test keeps children running while it acts."""

    def __init__(self, chunk_delay_s: float = 0.03) -> None:
        self.runs: Counter[str] = Counter()
        self.served: Counter[str] = Counter()  # runs whose reply was sent in full
        self.lock = threading.Condition()
        self.reply = Reply(text="done: " + "x" * 40, chunk_delay_s=chunk_delay_s)
        self.server = Loopback(self._answer)
        self._held = False
        self._released: set[str] = set()

    def hold(self) -> None:
        with self.lock:
            self._held = True
            self._released.clear()

    def release(self, child: str | None = None) -> None:
        with self.lock:
            if child is None:
                self._held = False
            else:
                self._released.add(child)
            self.lock.notify_all()

    def __enter__(self) -> CountingServer:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()  # nothing left waiting on a test that has ended
        self.server.__exit__(*exc)

    def _answer(self, received: Received) -> Reply:
        messages = received.body.get("messages") or []
        users = [m for m in messages if m.get("role") == "user"]
        found = GOAL.search(str(users[0].get("content"))) if users else None
        child = found.group(1) if found else None
        with self.lock:
            if child is not None and len(users) == 1 and len(messages) <= 2:
                self.runs[child] += 1  # the first turn: a run of the child
            self.lock.wait_for(lambda: not self._held or child in self._released, MAX_HOLD_S)
        return self.reply

    def total_runs(self) -> int:
        with self.lock:
            return sum(self.runs.values())

    def snapshot(self) -> Counter[str]:
        with self.lock:
            return Counter(self.runs)


def project(
    folder: Path, server: CountingServer, children: int, pool: int = 3, engine: str = ""
) -> Path:
    """A folder with tasks.jsonl and a flightdeck.toml whose route is the server (`engine`:
    more lines for its [engine] table)."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "tasks.jsonl", "w") as fh:
        for i in range(children):
            fh.write(json.dumps({"id": f"c{i:03d}", "goal": f"durable task c{i:03d}"}) + "\n")
    (folder / "flightdeck.toml").write_text(
        f"""[engine]
max_concurrent = {pool}
default_route = "lb"
state_dir = "state"
{engine}
[routes.lb]
provider = "openai"
model = "gpt-loopback"
base_url = "{server.server.openai_url}"
api_key_env = "{KEY_ENV}"
connect_timeout_s = 2
read_timeout_s = 120
price = {{ input_per_mtok = 2.5, output_per_mtok = 10 }}
retry = {{ attempts = 3, base_s = 0.01, max_s = 0.05 }}
"""
    )
    return folder


def flightdeck(folder: Path, *args: str) -> subprocess.Popen[str]:
    """`flightdeck ARGS` in the project folder, its output piped."""
    return flightdeck_process(*args, cwd=folder, env={KEY_ENV: "sk-test-durable"})
