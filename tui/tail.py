"""Reading a growing transcript file: `Tail`, its whole lines as they are appended (bounded per
read), shared by the transcript pane, `read_all` (`flightdeck logs`) and `follow` (`logs -f`)."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from flightdeck.engine.sanitize import sanitize

_ALL = 1 << 62  # `logs` prints every line; the pane bounds its reads instead


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


class Tail:
    """One file read as it grows: each `read` returns the whole lines appended since the last
    (the first, the last `max_lines`); a file that shrank is read again from its start.

    With `block`, it reads forward from the start instead, oldest first, at most about `block`
    bytes a read (a line longer than that whole): `logs` prints a transcript of any size in
    bounded memory, a read at a time, until `read` gives nothing new."""

    def __init__(
        self, path: Path, *, max_lines: int = _ALL, max_bytes: int = _ALL, block: int | None = None
    ) -> None:
        self.path = path
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self.block = block
        # Bytes consumed so far; None: nothing read yet (the pane starts at the last lines).
        self.offset: int | None = None if block is None else 0

    def grew(self) -> bool:
        """Whether there may be something new to read (a cheap stat, no read)."""
        if self.offset is None:
            return True
        try:
            return os.stat(self.path).st_size != self.offset
        except FileNotFoundError:
            return False

    def read(self) -> Chunk:
        """The lines appended since the last read; `reset` when the file was replaced or
        truncated and these start over from its start, as `tail -F` does."""
        if self.block is not None:
            chunk = _forward(self.path, self.offset or 0, self.block)
        else:
            chunk = read_chunk(
                self.path, self.offset, max_lines=self.max_lines, max_bytes=self.max_bytes
            )
        self.offset = chunk.end
        return chunk


def read_all(path: Path, *, block: int = BLOCK) -> Iterator[Chunk]:
    """Every complete line of `path`, oldest first, a block at a time (see `Tail`)."""
    tail = Tail(path, block=block)
    while True:
        before = tail.offset
        chunk = tail.read()
        if chunk.lines or chunk.reset:
            yield chunk
        if chunk.end == before and not chunk.reset:
            return  # nothing more that ends in a newline


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
    from flightdeck.engine.attached.watch import Waker

    changed = threading.Event()
    waker = Waker(path.parent, (path.name,), changed.set, poll_s=poll_s).start()
    try:
        tail = Tail(path, block=BLOCK)
        quiet_since: float | None = None
        while True:
            before = tail.offset
            while True:  # a block at a time, until what is there is read
                start = tail.offset
                chunk = tail.read()
                if chunk.lines:
                    yield chunk
                if chunk.end == start and not chunk.reset:
                    break
            if tail.offset != before:
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
