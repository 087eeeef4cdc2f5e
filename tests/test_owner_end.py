"""Ending a batch's owner when its starter was interrupted: only that very process is signalled
and waited on (a pid is reused), and a wedged owner is named, not waited on for ever."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from flightdeck.engine.attached.spawn import (
    OwnerDidNotEnd,
    OwnerFailed,
    StartedOwner,
    end_owner,
    wait_ready,
)
from flightdeck.engine.records.rows import process_start_time

from helpers import HANG_S

# Says it is ready (SIGTERM ignored if asked), then waits for its stdin to close.
_HELD = (
    "import signal, sys\n"
    "if sys.argv[1] == 'wedged': signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "print('ready', flush=True)\n"
    "sys.stdin.read()\n"
)


@contextmanager
def _held(kind: str) -> Iterator[subprocess.Popen[str]]:
    argv = [sys.executable, "-c", _HELD, kind]
    with subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
            yield proc
        finally:
            proc.kill()


def _owner(tmp_path: Path, pid: int, start: float | None) -> StartedOwner:
    folder = tmp_path / "batches" / "b1"
    folder.mkdir(parents=True)
    (folder / "owner.log").write_text("flightdeck: owner.toml:1: route: unknown\n")
    return StartedOwner("b1", pid, start, tmp_path / "flightdeck.db", folder / "owner.log")


def test_a_later_process_given_the_owners_pid_is_neither_signalled_nor_waited_on(
    tmp_path: Path,
) -> None:
    with _held("plain") as stranger:
        started = process_start_time(stranger.pid)
        assert started is not None
        # The owner ended and its pid went to `stranger`, which started later.
        gone = _owner(tmp_path, stranger.pid, started - 1000.0)
        with pytest.raises(OwnerFailed, match=r"^owner\.toml:1: route: unknown$"):
            wait_ready(gone)  # at once, not after READY_TIMEOUT_S
        assert end_owner(gone, timeout_s=HANG_S) is None
        assert stranger.poll() is None  # a SIGTERM would have ended it
        assert not gone.log.parent.exists()  # the batch never started: nothing is left of it


def test_a_wedged_owner_is_named_with_how_to_end_it_rather_than_waited_on(
    tmp_path: Path,
) -> None:
    with _held("wedged") as wedged:
        owner = _owner(tmp_path, wedged.pid, process_start_time(wedged.pid))
        with pytest.raises(OwnerDidNotEnd) as raised:
            end_owner(owner, timeout_s=0.2)
        assert str(raised.value) == (
            f"the owner process (pid {wedged.pid}) did not end within 0.2s of SIGTERM; "
            f"end it with `kill -KILL {wedged.pid}`"
        )
        assert wedged.poll() is None


def test_an_owner_that_ends_when_asked_is_waited_for(tmp_path: Path) -> None:
    with _held("plain") as owner_proc:
        owner = _owner(tmp_path, owner_proc.pid, process_start_time(owner_proc.pid))
        # It is our child here, so it stays a zombie (ended, as `alive` says) until reaped.
        assert end_owner(owner, timeout_s=HANG_S) is None
        assert owner_proc.wait(HANG_S) == -15
