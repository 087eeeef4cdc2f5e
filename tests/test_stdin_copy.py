"""The copy of what an owner wrote to a command child's stdin FIFO (engine/agents/sent.py): the
owner that adopts the process after its owner died reads it as written, so it must never hold
what the FIFO did not take: a real process, its real FIFO."""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from flightdeck.engine.agents.process import NOT_READ, Files, Process
from flightdeck.engine.child.cliinput import CliInput
from flightdeck.engine.model import SteerReceipt, SteerState

from helpers import HANG_S, until

# Closes its input, says so (a file), and runs on: a write to its FIFO then finds no reader.
CLOSES_INPUT = "import os, sys, time; os.close(0); open(sys.argv[1], 'w').close(); time.sleep(600)"


def test_a_steer_the_fifo_did_not_take_is_not_in_the_copy_an_adopter_reads(
    tmp_path: Path,
) -> None:
    ready = tmp_path / "closed"
    files = Files(tmp_path / "c1.out", tmp_path / "c1.err", tmp_path / "c1.in")
    argv = [sys.executable, "-c", CLOSES_INPUT, str(ready)]
    proc = Process.spawn(argv, cwd=tmp_path, env=dict(os.environ), files=files, tag="fd-copy")
    try:
        until(ready.exists, HANG_S, what="the process closed its input")
        receipt = SteerReceipt(7, "c1", "add tests", False, SteerState.QUEUED, 0.0)
        assert CliInput(proc.write, tag="b/c1").steer(receipt) == NOT_READ
        assert proc.written() == ""  # it was never written: its copy says nothing of it
        # An owner adopting the process takes the steer for unwritten: it writes it, and does
        # not wait for the CLI to answer a message it never got.
        adopter = CliInput(lambda line: None, tag="b/c1")
        adopter.expect([receipt], proc.written())
        assert adopter.written_before() == []
    finally:
        proc.signal(signal.SIGKILL)
        assert proc.wait_gone(30) == []
        proc.release()


def test_what_the_fifo_took_is_in_the_copy(tmp_path: Path) -> None:
    files = Files(tmp_path / "c1.out", tmp_path / "c1.err", tmp_path / "c1.in")
    proc = Process.spawn(["cat"], cwd=tmp_path, env=dict(os.environ), files=files, tag="fd-copy")
    try:
        assert proc.write("one\n") is None and proc.write("two\n") is None
        assert proc.written() == "one\ntwo\n"
        until(lambda: files.out.read_text() == "one\ntwo\n", HANG_S, what="cat to echo its input")
    finally:
        proc.signal(signal.SIGKILL)
        assert proc.wait_gone(30) == []
        proc.release()
