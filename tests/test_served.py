"""engine/attached/served.py: the record a `flightdeck serve` keeps for `ls`; stale ones
ignored."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import psutil
from flightdeck.engine.attached import served


def dead_process() -> tuple[int, float]:
    """The pid and start time of a process that has ended."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    start = psutil.Process(child.pid).create_time()
    child.wait()
    return child.pid, start


def test_a_live_servers_record_is_read_back_and_a_dead_ones_is_not(tmp_path: Path) -> None:
    me = served.Served(
        pid=os.getpid(),
        start=psutil.Process().create_time(),
        port=8765,
        batch_id=None,
        read_only=True,
        open=("b1", "b2"),
    )
    path = served.write(tmp_path, me)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    pid, start = dead_process()
    gone = served.Served(pid=pid, start=start, port=9000, batch_id="b3", read_only=False)
    served.write(tmp_path, gone)
    # The same pid now run by another process: not the server that wrote the record.
    reused = served.Served(os.getppid(), start=1.0, port=9001, batch_id="b4", read_only=False)
    served.write(tmp_path, reused)
    (tmp_path / served.SERVING_DIR / "777.json").write_text("{half", encoding="utf-8")

    assert served.live(tmp_path) == [me]
    assert me.serves("b2") and not me.serves("b3")
    served.prune(tmp_path)
    left = sorted(p.name for p in (tmp_path / served.SERVING_DIR).iterdir())
    assert left == sorted([f"{os.getpid()}.json", "777.json"])  # not ours to judge: kept
    served.remove(tmp_path, os.getpid())
    assert served.live(tmp_path) == []


def test_no_folder_is_nothing_served(tmp_path: Path) -> None:
    assert served.live(tmp_path) == []
    served.prune(tmp_path)
    served.remove(tmp_path, 12345)
