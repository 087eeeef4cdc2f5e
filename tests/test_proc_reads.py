"""Reads of /proc (records/liveness.py) give the whole file, longer than one read returns."""

from __future__ import annotations

import subprocess
import sys

from flightdeck.engine.records.liveness import read_proc

LIBRARIES = "ssl, sqlite3, ctypes, decimal, lzma, bz2, pyexpat"  # each maps a shared library


def test_a_proc_file_over_a_page_is_read_whole() -> None:
    # /proc/PID/maps comes a page at a time: a read stopped after a short one must not stop at
    # a full one. The process waits on its input meanwhile, its mappings unchanged.
    script = f"import sys, {LIBRARIES}; print(flush=True); sys.stdin.read()"
    with subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    ) as idle:
        try:
            assert idle.stdout is not None
            idle.stdout.readline()  # started: its interpreter has mapped what it maps
            path = f"/proc/{idle.pid}/maps"
            with open(path, "rb") as f:
                whole = f.read()
            assert len(whole) > 8192  # more than one read
            assert read_proc(path) == whole
        finally:
            idle.kill()
