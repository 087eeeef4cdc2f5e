"""A command child's output file, read as the process writes it, line by line.

The process writes to a file in the batch folder, not a pipe, so its output outlives its owner:
a new owner reads on from the offset of the last whole line the dead one handled."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["MAX_LINE_BYTES", "Line", "Tail"]

# A line longer than this is cut into pieces, so output with no newline is never held whole.
# Not much less: one JSON event is one line, Claude Code's tool results and Codex's command
# output run to hundreds of kilobytes, and a piece of an event parses as nothing.
MAX_LINE_BYTES = 8 * 1024 * 1024
READ_BYTES = 1 << 16


@dataclass(frozen=True, slots=True)
class Line:
    """One line the process wrote (without its newline)."""

    stream: str  # "stdout" or "stderr"
    text: str


class Tail:
    """A file being written by the process, read as it grows, line by line."""

    def __init__(self, path: Path, stream: str, offset: int, fd: int | None = None) -> None:
        """Read from `offset` on; through `fd` when given (the one the process was given,
        opened for reading too: it is closed here), else a new one."""
        self.stream = stream
        self.offset = offset
        self._partial = b""
        self._fd = os.open(path, os.O_RDONLY) if fd is None else fd

    def read(self, out: list[Line], final: bool = False, upto: int | None = None) -> None:
        while upto is None or self.offset < upto:
            size = READ_BYTES if upto is None else min(READ_BYTES, upto - self.offset)
            chunk = os.pread(self._fd, size, self.offset)  # the process moves the fd's own
            if not chunk:
                break
            self.offset += len(chunk)
            data = self._partial + chunk
            end = data.rfind(b"\n") + 1  # past the last whole line
            self._partial = data[end:]
            if end:
                # Decoded in one call, not one a line: a newline byte is never inside a
                # character, so an invalid sequence is replaced the same either way.
                text = data[:end].decode("utf-8", "replace").replace("\r\n", "\n")
                out += [Line(self.stream, line) for line in text.split("\n")[:-1]]
            while len(self._partial) > MAX_LINE_BYTES:
                piece, self._partial = (
                    self._partial[:MAX_LINE_BYTES],
                    self._partial[MAX_LINE_BYTES:],
                )
                out.append(Line(self.stream, _text(piece)))
        if final and self._partial:
            out.append(Line(self.stream, _text(self._partial)))
            self._partial = b""

    @property
    def read_to(self) -> int:
        """Where the next whole line starts (an unfinished one is read again by an adopter)."""
        return self.offset - len(self._partial)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)


def _text(line: bytes) -> str:
    return line.decode("utf-8", "replace").removesuffix("\r")
