"""Which batches a `flightdeck serve` serves, for `flightdeck ls`: one small record per server.

`serving/<pid>.json` in the state folder (the folder 0700, the file 0600, written whole) holds
the server's pid and start time, its port, the batch it was started for (or none: the whole
folder) and the batches a browser tab has open now. Never its token: that is printed once and
kept in the server's memory only. A record whose process is gone (killed, so it could not
remove its own) is stale: ignored by readers, removed by the next server that starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from flightdeck.engine.records.liveness import process_matches

SERVING_DIR = "serving"


@dataclass(frozen=True, slots=True)
class Served:
    """One running `flightdeck serve`, as its record says."""

    pid: int
    start: float  # the process's create time: a pid reused by another process is not this one
    port: int
    batch_id: str | None  # None: every batch of the state folder, from its page
    read_only: bool
    open: tuple[str, ...] = ()  # the batches a browser tab has open right now

    def serves(self, batch_id: str) -> bool:
        """Whether this server shows `batch_id` (started for it, or a tab has it open)."""
        return batch_id == self.batch_id or batch_id in self.open


def record_path(state_dir: Path, pid: int) -> Path:
    """Where the record of the server with this pid lives."""
    return state_dir / SERVING_DIR / f"{pid}.json"


def write(state_dir: Path, served: Served) -> Path:
    """Replace this server's record, all at once (readers never see half of one)."""
    folder = state_dir / SERVING_DIR
    folder.mkdir(mode=0o700, exist_ok=True)
    data = {
        "pid": served.pid,
        "start": served.start,
        "port": served.port,
        "batch_id": served.batch_id,
        "read_only": served.read_only,
        "open": list(served.open),
    }
    fd, tmp = tempfile.mkstemp(prefix=".serving-", suffix=".tmp", dir=folder)  # 0600
    target = record_path(state_dir, served.pid)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def remove(state_dir: Path, pid: int) -> None:
    """Remove the record of the server with this pid, if there is one."""
    record_path(state_dir, pid).unlink(missing_ok=True)


def live(state_dir: Path) -> list[Served]:
    """The records of servers still running, by port; stale or unreadable ones are skipped."""
    return sorted((s for s in _records(state_dir) if _alive(s)), key=lambda s: s.port)


def prune(state_dir: Path) -> None:
    """Remove the records of servers that are gone."""
    for served in _records(state_dir):
        if not _alive(served):
            remove(state_dir, served.pid)


def _alive(served: Served) -> bool:
    return process_matches(served.pid, served.start)


def _records(state_dir: Path) -> list[Served]:
    folder = state_dir / SERVING_DIR
    found = []
    with contextlib.suppress(OSError):  # no folder: nothing served
        for path in sorted(folder.glob("*.json")):
            served = _read(path)
            if served is not None:
                found.append(served)
    return found


def _read(path: Path) -> Served | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        batch_id = data["batch_id"]
        served = Served(
            pid=int(data["pid"]),
            start=float(data["start"]),
            port=int(data["port"]),
            batch_id=None if batch_id is None else str(batch_id),
            read_only=bool(data["read_only"]),
            open=tuple(str(b) for b in data["open"]),
        )
    except (OSError, ValueError, KeyError, TypeError):  # half a file from elsewhere: not ours
        return None
    return served if path.stem == str(served.pid) else None
