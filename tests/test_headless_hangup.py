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
    input becomes its controlling terminal, so closing the pty sends it SIGHUP."""
    ioctl(0, termios.TIOCSCTTY, 0)


@pytest.mark.slow
def test_a_headless_owner_whose_terminal_closes_stops_and_records_every_child(
    tmp_path: Path,
) -> None:
    with CountingServer() as server:
        server.hold()  # every request waits: the children stay running
        folder = project(tmp_path, server, 5, pool=2)
        master, slave = os.openpty()
        owner = subprocess.Popen(
            [sys.executable, "-m", "flightdeck.tui.cli", "run", "tasks.jsonl", "--headless"],
            cwd=folder,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env={**os.environ, KEY_ENV: "sk-test-durable", "NO_COLOR": "1"},
            start_new_session=True,
            preexec_fn=_controlled_by_stdin,
        )
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
            if owner.poll() is None:
                owner.kill()
                owner.wait()
    assert code == ExitCode.HANGUP == 128 + signal.SIGHUP, bytes(said[-2000:])
    with StoreReader(folder / "state" / "flightdeck.db") as reader:
        batch_id = reader.latest_batch_id()
        assert batch_id is not None
        info = reader.batch(batch_id)
        rows = reader.children(batch_id)
    assert info is not None and info.status is BatchStatus.STOPPED, info
    assert sorted(r.status for r in rows) == [ChildStatus.STOPPED] * 5, rows
