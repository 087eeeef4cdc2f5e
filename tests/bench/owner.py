"""A real owner for the benchmarks that need one: `flightdeck run --headless` on N `sim`
children, in a folder holding the benchmark's flightdeck.toml, as a user starts a batch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def start_owner(folder: Path, config: str, children: int) -> subprocess.Popen[bytes]:
    """Write `config` and a task file of `children` tasks (c00000, ...) into `folder`, and start
    the owner there; its database is folder/state/flightdeck.db once `config` says so."""
    (folder / "flightdeck.toml").write_text(config)
    with open(folder / "tasks.jsonl", "w") as fh:
        for i in range(children):
            fh.write(json.dumps({"id": f"c{i:05d}", "goal": f"Answer question {i}"}) + "\n")
    return subprocess.Popen(
        [sys.executable, "-m", "flightdeck.tui.cli", "run", "tasks.jsonl", "--headless"],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
