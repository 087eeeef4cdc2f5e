"""Reading a growing transcript file: `Tail`, its whole lines as they are appended (bounded per
read), shared by the transcript pane and `follow` (`flightdeck logs -f`)."""

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


class Tail:
    """One file read as it grows: each `read` returns the whole lines appended since the last
    (the first, the last `max_lines`); a file that shrank is read again from its start."""

    def __init__(self, path: Path, *, max_lines: int = _ALL, max_bytes: int = _ALL) -> None:
        self.path = path
        self.max_lines = max_lines
        self.max_bytes = max_bytes
        self.offset: int | None = None  # bytes consumed so far; None: nothing read yet

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
        chunk = read_chunk(
            self.path, self.offset, max_lines=self.max_lines, max_bytes=self.max_bytes
        )
        self.offset = chunk.end
        return chunk


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
        tail = Tail(path)
        quiet_since: float | None = None
        while True:
            before = tail.offset
            chunk = tail.read()
            if chunk.lines:
                yield chunk
            if chunk.end != before:
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
