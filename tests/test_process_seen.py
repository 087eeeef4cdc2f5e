"""A command child's process remembers the descendants it saw only while they exist."""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

import pytest
from flightdeck.engine.agents import tree
from flightdeck.engine.agents.process import Files, Process

from helpers import HANG_S, until

# Starts a helper three times over, one after the other, and waits for each, saying so.
PARENT = (
    "import subprocess, sys\n"
    "for _ in range(3):\n"
    "    p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)'])\n"
    "    print(p.pid, flush=True)\n"
    "    p.wait()\n"
    "    print('waited', p.pid, flush=True)\n"
)


def helpers(out: Path) -> list[int]:
    return [int(line) for line in out.read_text().splitlines() if line.isdigit()]


def test_descendants_seen_are_forgotten_once_gone(tmp_path: Path) -> None:
    # Its tree is looked at every 2 s (to reap a sandbox left dead): a child running for hours
    # saw thousands of tool processes, each kept for good, every look and stop went over all of
    # them, and a pid the system reused was taken for the dead one it had been.
    files = Files(tmp_path / "out", tmp_path / "err")
    proc = Process.spawn(
        [sys.executable, "-c", PARENT], cwd=tmp_path, env=dict(os.environ), files=files, tag="b/c"
    )
    try:
        for n in range(3):
            until(lambda n=n: len(helpers(files.out)) == n + 1, HANG_S)
            helper = helpers(files.out)[-1]
            proc.reap()
            assert helper in proc._seen  # seen running under it
            os.kill(helper, signal.SIGKILL)
            until(lambda said=f"waited {helper}": said in files.out.read_text(), HANG_S)
            proc.reap()
            assert helper not in proc._seen, n  # its parent waited for it: gone
    finally:
        proc.signal(signal.SIGKILL)
        proc.wait_gone(10)
        proc.release()


def test_an_orphan_is_found_by_its_tag_read_once_and_forgotten_once_reaped(tmp_path: Path) -> None:
    # A command child's end looks at every child of the owner's main thread (where orphans
    # come), and a program embedding an engine may have its own: each tag is read once, and a
    # process reaped leaves the cache, which would otherwise grow over thousands of children.
    files = Files(tmp_path / "out", tmp_path / "err")
    tree.become_subreaper()
    proc = Process.spawn(
        ["sh", "-c", "sleep 300 & echo $!"],
        cwd=tmp_path,
        env=dict(os.environ),
        files=files,
        tag="b/c",
    )
    try:
        until(lambda: proc.poll() and helpers(files.out), HANG_S)
        orphan = helpers(files.out)[0]
        left = proc.survivors()  # its parent has gone: the orphan is this process's child
        assert [p.pid for p in left] == [orphan]
        assert [p.pid for p in tree._tags if tree._tags[p] == "b/c"] == [orphan]
        os.kill(orphan, signal.SIGKILL)
        until(lambda: not proc.survivors(), HANG_S)  # reaped as one seen
        tree.orphans("b/c", [], tree.adopted())
        assert all(p.pid != orphan for p in tree._tags)
    finally:
        proc.signal(signal.SIGKILL)
        proc.wait_gone(10)
        proc.release()


def test_becoming_a_subreaper_runs_no_process(monkeypatch: pytest.MonkeyPatch) -> None:
    # The first spawn of a batch makes the owner a subreaper while every other spawn waits on
    # the same lock: `ctypes.util.find_library("c")` ran `ldconfig` there, twice (and again at
    # the batch's close).
    def refused(*args: object, **kwargs: object) -> NoReturn:
        raise AssertionError(f"a process was started: {args}")

    monkeypatch.setattr(subprocess, "Popen", refused)
    reaper = tree._Subreaper()
    assert reaper.become()  # Linux: PR_SET_CHILD_SUBREAPER through libc's prctl
    now = ctypes.c_int(0)
    assert reaper._prctl(37, ctypes.byref(now)) and now.value == 1  # PR_GET_CHILD_SUBREAPER
    reaper.opened()
    reaper.closed()
    assert reaper._prctl(37, ctypes.byref(now)) and now.value == 0
