"""Write faults for the store: a connection whose COMMIT the "disk" refuses while told to, and a
small real filesystem (a tmpfs) where this machine lets a test mount one."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import sqlite3
import subprocess
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flightdeck.engine.records.store import Store


def disk_full() -> sqlite3.OperationalError:
    """What SQLite raises when a write finds no room (SQLITE_FULL)."""
    exc = sqlite3.OperationalError("database or disk is full")
    exc.sqlite_errorcode = sqlite3.SQLITE_FULL  # type: ignore[attr-defined]
    return exc


FAULTS = {
    "disk full": disk_full,
    "I/O error": lambda: sqlite3.OperationalError("disk I/O error"),  # raised without a code
    "ENOSPC": lambda: OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
}


class FaultyConnection:
    """A real connection whose COMMIT raises `fault()` while `failing` is set, after
    `commits_before` commits have gone through."""

    def __init__(self, conn: sqlite3.Connection, fault: Any = disk_full, commits_before: int = 0):
        self._conn = conn
        self.fault = fault
        self.failing = threading.Event()
        self.commits_before = commits_before
        self.commits = 0
        self.refused = 0

    def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
        if sql == "COMMIT":
            if self.failing.is_set() and self.commits >= self.commits_before:
                self.refused += 1
                raise self.fault()
            self.commits += 1
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def faulty(store: Store, **kw: Any) -> FaultyConnection:
    """Put a FaultyConnection in front of the store's write connection (before its first
    write: the writer thread reads the attribute at every transaction)."""
    conn = FaultyConnection(store._conn, **kw)
    store._conn = conn  # type: ignore[assignment]
    return conn


@contextlib.contextmanager
def small_filesystem(size: str = "2m", inodes: int | None = None) -> Iterator[Path]:
    """A tmpfs of `size` (and at most `inodes` files and folders), mounted for the test; the
    test is skipped where mounting is not allowed (not root, no CAP_SYS_ADMIN, no `mount`)."""
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("mounting a small filesystem needs root and mount(8)")
    where = Path("/tmp") / f"flightdeck-tmpfs-{uuid.uuid4().hex[:8]}"
    where.mkdir()
    options = f"size={size}" + (f",nr_inodes={inodes}" if inodes is not None else "")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        where.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)
        with contextlib.suppress(OSError):
            where.rmdir()


@contextlib.contextmanager
def read_only(folder: Path) -> Iterator[None]:
    """`folder` bind-mounted read-only over itself for the test (root can write anywhere a
    chmod forbids, not there); skipped where mounting is not allowed."""
    if shutil.which("mount") is None or os.geteuid() != 0:
        pytest.skip("a read-only bind mount needs root and mount(8)")
    done = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot bind-mount here: {done.stderr.decode().strip()}")
    try:
        subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True)
        yield
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def fill(folder: Path, keep: int = 0) -> Path:
    """Fill the filesystem of `folder` up to `keep` bytes free; returns the filler file."""
    filler = folder / "filler"
    chunk = b"\0" * 65536
    with open(filler, "wb", buffering=0) as fh:
        while True:
            free = shutil.disk_usage(folder).free
            if free <= keep:
                break
            try:
                fh.write(chunk[: max(1, min(len(chunk), free - keep))])
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    return filler


def fill_inodes(folder: Path) -> Path:
    """Take every free inode of the filesystem of `folder` (a small tmpfs): empty files in a
    folder made for them, which is returned; no file or folder can be made there after."""
    filler = folder / "inodes"
    filler.mkdir()
    n = 0
    while True:
        try:
            (filler / str(n)).touch()
        except OSError as exc:
            if exc.errno != errno.ENOSPC:
                raise
            return filler
        n += 1
