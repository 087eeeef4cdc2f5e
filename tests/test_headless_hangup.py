"""A headless owner whose terminal closes (SIGHUP) stops every child and records it, as for
SIGTERM: it used to die at once, its batch left abandoned and an agent CLI's processes running
with nobody watching until a `resume`."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import termios
import threading
from collections.abc import Callable
from fcntl import ioctl
from pathlib import Path

import pytest
from flightdeck.engine.model import BatchStatus, ChildStatus
from flightdeck.engine.records.reader import StoreReader
from flightdeck.tui.exitcodes import ExitCode

from durable import CountingServer, project
from helpers import until
from loopback import KEY_ENV


def _controlled_by_stdin() -> None:
    """In the child, a session leader already (start_new_session): the pty on its standard
    input becomes its controlling terminal, so closing the pty sends it SIGHUP (not ignored,
    whatever the test run's was: an owner keeps an ignored SIGHUP ignored, as under `nohup`)."""
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    ioctl(0, termios.TIOCSCTTY, 0)


def headless_owner(
    folder: Path, tty: int, out: int, preexec: Callable[[], None]
) -> subprocess.Popen[bytes]:
    """`flightdeck run tasks.jsonl --headless` in `folder`, a session leader whose standard
    input is the pty `tty` (made its terminal by `preexec`), its output to `out`."""
    return subprocess.Popen(
        [sys.executable, "-m", "flightdeck.tui.cli", "run", "tasks.jsonl", "--headless"],
        cwd=folder,
        stdin=tty,
        stdout=out,
        stderr=subprocess.STDOUT,
        env={**os.environ, KEY_ENV: "sk-test-durable", "NO_COLOR": "1"},
        start_new_session=True,
        preexec_fn=preexec,
    )


def ended(owner: subprocess.Popen[bytes]) -> None:
    """Killed if it still runs (a failed test), and waited for."""
    if owner.poll() is None:
        owner.kill()
        owner.wait()


@pytest.mark.slow
def test_a_headless_owner_whose_terminal_closes_stops_and_records_every_child(
    tmp_path: Path,
) -> None:
    with CountingServer() as server:
        server.hold()  # every request waits: the children stay running
        folder = project(tmp_path, server, 5, pool=2)
        master, slave = os.openpty()
        owner = headless_owner(folder, slave, slave, _controlled_by_stdin)
        os.close(slave)
        said = bytearray()

        def drain() -> None:  # the owner's writes never block on a full pty
            while True:
                try:
                    data = os.read(master, 65536)
                except OSError:
                    return
                if not data:
                    return
                said.extend(data)

        threading.Thread(target=drain, daemon=True).start()
        try:
            until(lambda: server.total_runs() == 2, 60)
            os.close(master)  # the terminal goes: the kernel hangs it up
            code = owner.wait(60)
        finally:
            server.release()
            ended(owner)
    assert code == ExitCode.HANGUP == 128 + signal.SIGHUP, bytes(said[-2000:])
    with StoreReader(folder / "state" / "flightdeck.db") as reader:
        batch_id = reader.latest_batch_id()
        assert batch_id is not None
        info = reader.batch(batch_id)
        rows = reader.children(batch_id)
    assert info is not None and info.status is BatchStatus.STOPPED, info
    assert sorted(r.status for r in rows) == [ChildStatus.STOPPED] * 5, rows


def _nohup_controlled_by_stdin() -> None:
    """As `nohup` leaves it: SIGHUP ignored (kept across exec), its terminal on stdin only."""
    _controlled_by_stdin()
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


@pytest.mark.slow
def test_a_headless_owner_started_under_nohup_runs_on_when_its_terminal_closes(
    tmp_path: Path,
) -> None:
    # `nohup flightdeck run … --headless &` ignores SIGHUP so the batch outlives the terminal;
    # the handler for a closed terminal replaced that, and stopped every child at the hangup.
    with CountingServer() as server:
        server.hold()
        folder = project(tmp_path, server, 3, pool=2)
        master, slave = os.openpty()
        with open(tmp_path / "nohup.out", "w") as out:  # nohup's own: the output is a file
            owner = headless_owner(folder, slave, out.fileno(), _nohup_controlled_by_stdin)
        os.close(slave)
        try:
            until(lambda: server.total_runs() == 2, 60)
            os.close(master)  # the hangup is sent as the close returns
            server.release()
            code = owner.wait(60)
        finally:
            server.release()
            ended(owner)
    said = (tmp_path / "nohup.out").read_text()
    assert code == ExitCode.OK, said
    assert "stopping all children" not in said, said
    with StoreReader(folder / "state" / "flightdeck.db") as reader:
        batch_id = reader.latest_batch_id()
        assert batch_id is not None
        rows = reader.children(batch_id)
    assert sorted(r.status for r in rows) == [ChildStatus.COMPLETED] * 3, rows
