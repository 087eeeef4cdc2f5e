"""What was written to a command's stdin FIFO, kept in a file beside it (`ID.in.sent`, 0600).

A FIFO keeps nothing: what its reader took is gone, and what it has not read yet cannot be seen
without taking it. The owner that adopts a command after its owner died reads this copy to know
every message the dead one wrote, read by the command or not, so as never to write one twice.
Each write is copied here first: one that could not be copied is not written at all.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path


def copy_of(stdin: Path) -> Path:
    """Where the copy of what is written to the FIFO `stdin` is kept."""
    return stdin.with_name(stdin.name + ".sent")


def append(stdin: Path, data: bytes) -> None:
    """`data`, about to be written to `stdin`, added to its copy (OSError if it cannot be)."""
    fd = os.open(copy_of(stdin), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        while data:
            data = data[os.write(fd, data) :]
    finally:
        os.close(fd)


def read(stdin: Path) -> str:
    """All written to `stdin` so far (by every owner of its process)."""
    try:
        return copy_of(stdin).read_text("utf-8", "replace")
    except FileNotFoundError:
        return ""


def forget(stdin: Path) -> None:
    """The copy gone (a new process's input starts empty)."""
    with contextlib.suppress(OSError):
        copy_of(stdin).unlink()
