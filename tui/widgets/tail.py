"""Offset reads of a growing transcript file: whole lines only, bounded per read; `read_all`,
every line a block at a time; and `follow`, the reads as the file grows."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from flightdeck.engine.sanitize import sanitize


@dataclass(frozen=True, slots=True)
class Chunk:
    """Complete lines read from `start` up to `end` (a byte offset just past a newline)."""

    lines: tuple[str, ...]
    start: int | None  # the offset the read was asked to continue from; None: first read
    end: int
    cut: bool = False  # earlier lines were skipped to stay within the bounds
    reset: bool = False  # the file shrank (replaced or truncated): the view starts over
    mtime: float = 0.0  # the file's modification time as read: no line in `lines` is newer


def read_chunk(path: Path, offset: int | None, *, max_lines: int, max_bytes: int) -> Chunk:
    """Lines after `offset` (or the last `max_lines` when None), reading at most `max_bytes`.

    A line still being written (no newline yet) is left for the next read.
    """
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        return Chunk((), offset, offset or 0)  # a queued child has no transcript yet
    with fh:
        stat = os.fstat(fh.fileno())
        size, mtime = stat.st_size, stat.st_mtime
        reset = offset is not None and size < offset
        begin = 0 if offset is None or reset else offset
        cut = False
        if size - begin > max_bytes:
            # Too much to show: keep the newest bytes and mark the rest as cut.
            begin, cut = size - max_bytes, True
        # Reading one byte before `begin` tells whether it sits at the start of a line.
        lead = 1 if cut else 0
        fh.seek(begin - lead)
        data = fh.read(size - begin + lead)
    first = 0
    if lead:
        newline = data.find(b"\n")
        if newline < 0:
            return Chunk((), offset, begin, cut=True, reset=reset, mtime=mtime)  # a giant line
        first = newline + 1
    last = data.rfind(b"\n")
    if last < first:
        return Chunk((), offset, begin - lead + first, cut=cut, reset=reset, mtime=mtime)
    raw = data[first:last].split(b"\n")
    if len(raw) > max_lines:
        raw, cut = raw[-max_lines:], True
    lines = tuple(sanitize(line.decode("utf-8", "replace")) for line in raw)
    return Chunk(lines, offset, begin - lead + last + 1, cut=cut, reset=reset, mtime=mtime)


BLOCK = 1 << 20  # `logs` reads a transcript a mebibyte at a time: its memory stays flat


def read_all(path: Path, offset: int = 0, *, block: int = BLOCK) -> Iterator[Chunk]:
    """Every complete line after `offset`, oldest first, in chunks of about `block` bytes:
    a transcript of any size is printed in bounded memory (a line longer than `block` is
    read whole). A file that shrank below `offset` is read from its start, marked `reset`."""
    while True:
        chunk = _forward(path, offset, block)
        if chunk.reset:
            offset = 0
        if chunk.lines or chunk.reset:
            yield chunk
        if chunk.end == offset:
            return  # nothing more that ends in a newline
        offset = chunk.end


def _forward(path: Path, offset: int, block: int) -> Chunk:
    """The complete lines in the first `block` bytes after `offset` (more for one long line)."""
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        return Chunk((), offset, offset)
    with fh:
        stat = os.fstat(fh.fileno())
        size, mtime = stat.st_size, stat.st_mtime
        reset = size < offset
        begin = 0 if reset else offset
        fh.seek(begin)
        data = fh.read(min(block, size - begin))
        last = data.rfind(b"\n")
        while last < 0 and begin + len(data) < size:  # one line longer than a block
            more = fh.read(min(block, size - begin - len(data)))
            if not more:
                break
            found = more.find(b"\n")
            data += more
            last = -1 if found < 0 else len(data) - len(more) + found
    if last < 0:
        return Chunk((), offset, begin, reset=reset, mtime=mtime)
    lines = tuple(sanitize(line.decode("utf-8", "replace")) for line in data[:last].split(b"\n"))
    return Chunk(lines, offset, begin + last + 1, reset=reset, mtime=mtime)


def follow(
    path: Path,
    *,
    ended: Callable[[], bool],
    poll_s: float = 0.25,
    settle_s: float = 0.5,
) -> Iterator[Chunk]:
    """Every line of `path` as it is written (`logs -f`, and the same wake-ups as the pane):
    what is there first, then what is appended, until `ended()` says no more will come and the
    file has not grown for `settle_s` (its writer process may still be writing the last lines).

    Woken by watchfiles when the file changes, and every `poll_s` whatever happens.
    """
    from flightdeck.tui.watch import Waker

    changed = threading.Event()
    waker = Waker(path.parent, (path.name,), changed.set, poll_s=poll_s).start()
    try:
        offset = 0
        quiet_since: float | None = None
        while True:
            start = offset
            # Replaced or truncated: read_all starts over, as `tail -F` does.
            for chunk in read_all(path, offset):
                if chunk.lines:
                    yield chunk
                offset = chunk.end
            grew = offset != start
            if grew:
                quiet_since = None
            elif ended():
                now = time.monotonic()
                quiet_since = quiet_since or now
                if now - quiet_since >= settle_s:
                    return
            changed.wait(poll_s)
            changed.clear()
    finally:
        waker.close()
