"""`flightdeck continue` of a command child whose slot went to another while it was paused:
it waits, suspended, for a slot, ahead of new work, and the command says so. It said only
`continue applied: t0`, while the child's process stayed stopped (`T` in ps) until a slot freed."""

from __future__ import annotations

from pathlib import Path

import psutil
import pytest
from flightdeck.engine.model import ChildStatus
from flightdeck.engine.records.reader import StoreReader

from helpers import until
from test_adoption import argv, batch_of, flightdeck, project, transcript

# A plain command that prints its pid and waits for the gate.
GATED = (
    "import os, pathlib, sys, time\n"
    "print('pid', os.getpid(), flush=True)\n"
    "while not pathlib.Path(sys.argv[1]).exists():\n"
    "    time.sleep(0.01)\n"
)


@pytest.mark.slow
def test_continue_says_a_child_waits_for_a_slot(tmp_path: Path) -> None:
    script, gate = tmp_path / "gated.py", tmp_path / "gate"
    script.write_text(GATED)
    folder = project(tmp_path / "p", argv(str(script), str(gate)), ["t0", "t1"])
    config = folder / "flightdeck.toml"
    config.write_text(config.read_text().replace("max_concurrent = 4", "max_concurrent = 1"))
    owner = flightdeck(folder, "run", "tasks.jsonl", "--headless")
    try:
        batch_id = batch_of(folder)
        until(lambda: "pid " in transcript(folder, batch_id, "t0"), what="t0 runs")
        pause = flightdeck(folder, "pause", batch_id, "t0")
        assert pause.communicate(timeout=30) and pause.returncode == 0
        # Its slot is t1's now.
        until(lambda: "pid " in transcript(folder, batch_id, "t1"), what="t1 runs")
        go = flightdeck(folder, "continue", batch_id, "t0")
        out, err = go.communicate(timeout=30)
        assert go.returncode == 0, out + err
        assert out.splitlines() == [
            "continue applied: t0",
            "waiting for a slot, ahead of new work: t0",
        ], out
        pid = int(transcript(folder, batch_id, "t0").split("pid ")[1].split()[0])
        assert psutil.Process(pid).status() == psutil.STATUS_STOPPED  # as said: it waits
    finally:
        gate.touch()
    out, err = owner.communicate(timeout=60)
    assert owner.returncode == 0, out + err
    with StoreReader(folder / "state" / "flightdeck.db") as reader:
        assert {r.status for r in reader.children(batch_id)} == {ChildStatus.COMPLETED}
