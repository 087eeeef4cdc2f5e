"""What was written to a command's stdin FIFO, kept in a file beside it (`ID.in.sent`, 0600).

A FIFO keeps nothing: what its reader took is gone, and what it has not read yet cannot be seen
without taking it. The owner that adopts a command after its owner died reads this copy to know
every message the dead one wrote, read by the command or not, so as never to write one twice.
So the copy holds only what the FIFO took, added after each write: a copy made first claimed,
when the write failed or the owner died between the two, a message the command never got,
which the adopter then never wrote, and waited on for ever. A message the owner died before
copying is found by the adopter in the command's own output once it has read it (a CLI names
each message it takes). The copy is opened before the write: one that cannot be kept at all
(a permission, a folder in its place) means nothing is written.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

log = logging.getLogger(__name__)
_APPEND = os.O_WRONLY | os.O_CREAT | os.O_APPEND


class CopyError(OSError):
    """The copy cannot be kept: nothing was written."""


def copy_of(stdin: Path) -> Path:
    """Where the copy of what is written to the FIFO `stdin` is kept."""
    return stdin.with_name(stdin.name + ".sent")


def write(fd: int, stdin: Path | None, data: bytes) -> None:
    """Write `data` to the FIFO `stdin` (open as `fd`), then add what it took to its copy.
    CopyError (nothing written) if the copy cannot be opened; OSError if the FIFO stopped
    taking it (its reader gone): what it took so far is copied all the same."""
    try:
        copy = None if stdin is None else os.open(copy_of(stdin), _APPEND, 0o600)
    except OSError as exc:
        raise CopyError(exc.errno, exc.strerror) from exc
    done = 0
    try:
        while done < len(data):
            done += os.write(fd, data[done:])
    finally:
        if copy is not None:
            try:
                _write_all(copy, data[:done])
            except OSError as exc:  # written: an adopter learns it from the CLI's output
                log.warning("the copy of %s could not be kept: %s", stdin, exc)
            finally:
                os.close(copy)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


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
