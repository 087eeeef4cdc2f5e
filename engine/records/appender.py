"""The transcript writer process (`python -I -m flightdeck.engine.records.appender`): it turns
transcript events into lines and appends them to the files. The engine does the same in-process
(`Transcripts`) when the process cannot run.

Why a process: the opens, writes and closes, and the formatting and sanitizing of every line,
then run on another core instead of competing with the engine's worker threads for the
interpreter lock.

It also keeps the batch's search index (`searchindex.Indexer`: a thread that reads back what
was appended and indexes it, off the path of the writes).

It imports only the standard library, `events`, `lines`, `sanitize` and `searchindex`, so it
starts in milliseconds beside every batch.
"""

from __future__ import annotations

import os
import signal
import struct
import sys
from collections import OrderedDict
from collections.abc import Iterable

from flightdeck.engine.private import open_private, private_dir
from flightdeck.engine.records.events import (
    EndStream,
    Event,
    Raw,
    Release,
    Stream,
    Write,
    decode,
)
from flightdeck.engine.records.lines import LineFormatter

# Not `typing.TYPE_CHECKING`: this process starts without `typing` (mypy reads the name alike).
TYPE_CHECKING = False
if TYPE_CHECKING:  # imported with the first lines written: the process starts without it
    from flightdeck.engine.records.searchindex import Indexer

OPEN_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0)

# The process's answer after each read it has applied and written: how many bytes of frames it
# has written in all, how many writes failed since the last answer, and the length of the last
# failure's message, which follows (`writerproc.py` keeps frames until an answer covers them).
DONE = struct.Struct("<QII")
READ_SIZE = 1 << 20


class FileAppender:
    """Coalesces lines per file and appends them, keeping up to `max_open` descriptors.

    `add` only queues. `write_pending` appends each file's queued lines with one `os.write` of
    whole lines (O_APPEND: a reader never sees half a line), in order. `release` writes that
    file's lines, then closes its descriptor. A failed write is counted, never raised.
    """

    def __init__(self, max_open: int = 128) -> None:
        self.max_open = max_open
        self._pending: dict[str, list[bytes]] = {}
        self._fds: OrderedDict[str, int] = OrderedDict()
        self.failed = 0
        self.last_error = ""

    def add(self, path: str, data: bytes) -> None:
        """Queue `data` (whole lines) for `path`."""
        chunks = self._pending.get(path)
        if chunks is None:
            self._pending[path] = [data]
        else:
            chunks.append(data)

    @property
    def pending(self) -> list[str]:
        """The files with lines queued."""
        return list(self._pending)

    def release(self, path: str) -> None:
        """Write what is queued for `path`, then close its descriptor."""
        self._write(path, self._pending.pop(path, None))
        fd = self._fds.pop(path, None)
        if fd is not None:
            os.close(fd)

    def write_pending(self) -> None:
        """Append every file's queued lines, one write per file."""
        for path, chunks in self._pending.items():
            self._write(path, chunks)
        self._pending.clear()

    def close(self) -> None:
        """Write everything queued and close every descriptor."""
        self.write_pending()
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def take_errors(self) -> tuple[int, str]:
        """Failed writes since the last call, and the last one's message."""
        errors = (self.failed, self.last_error)
        self.failed, self.last_error = 0, ""
        return errors

    def _write(self, path: str, chunks: list[bytes] | None) -> None:
        if not chunks:
            return
        try:
            write_all(self._fd(path), chunks[0] if len(chunks) == 1 else b"".join(chunks))
        except OSError as exc:
            self.failed += 1
            self.last_error = f"cannot append to transcript {path}: {exc.strerror or exc}"

    def _fd(self, path: str) -> int:
        fd = self._fds.get(path)
        if fd is not None:
            self._fds.move_to_end(path)
            return fd
        if len(self._fds) >= self.max_open:
            os.close(self._fds.popitem(last=False)[1])
        try:
            fd = open_private(path, OPEN_FLAGS)
        except FileNotFoundError:
            private_dir(os.path.dirname(path) or ".")
            fd = open_private(path, OPEN_FLAGS)
        self._fds[path] = fd
        return fd


def write_all(fd: int, data: bytes | bytearray) -> None:
    """Write all of `data` to `fd`."""
    # One write is the normal case (O_APPEND makes a file write atomic); loop on a short write.
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


class Transcripts:
    """Applies transcript events: formats each file's lines, then appends them (`files`);
    with `index`, the files written are kept indexed for search (an `Indexer`, made when the
    first lines are written)."""

    def __init__(self, max_open: int = 128, *, index: bool = False) -> None:
        self.files = FileAppender(max_open)
        self._formatters: dict[str, LineFormatter] = {}
        self._index = index
        self.indexer: Indexer | None = None
        self._released: list[str] = []  # written and closed since the index last heard

    def apply(self, events: Iterable[Event]) -> None:
        """Format each event into its file's lines and queue them (see `write_pending`)."""
        for event in events:
            path = event.path
            match event:  # class patterns that capture nothing: cheaper, and this is every event
                case Write():
                    data = self._formatter(path).write(event.role, event.text, event.ts)
                case Stream():
                    data = self._formatter(path).stream(event.chunk, event.ts)
                case EndStream():
                    data = self._formatter(path).end_stream(event.ts, interrupted=event.interrupted)
                case Release():
                    formatter = self._formatters.pop(path, None)
                    if formatter is not None:
                        self._add(path, formatter.end_stream(event.ts))
                    self.files.release(path)
                    self._released.append(path)  # the index hears of it with the rest
                    continue
                case Raw():
                    data = event.data
            self._add(path, data)

    def write_pending(self) -> None:
        """Append the lines queued so far."""
        paths = self.files.pending
        self.files.write_pending()
        self._written(paths)

    def close(self) -> None:
        """Write everything queued and close the files (the index caught up, for a while)."""
        paths = self.files.pending
        self.files.close()
        self._written(paths)
        if self.indexer is not None:
            self.indexer.close()

    def take_errors(self) -> tuple[int, str]:
        """Failed writes (and index updates) since the last call, and the last one's message."""
        failed, error = self.files.take_errors()
        if self.indexer is not None:
            unindexed, why = self.indexer.take_errors()
            failed, error = failed + unindexed, why or error
        return failed, error

    def _written(self, paths: list[str]) -> None:
        """Lines were appended to these files (and to those released since): the index reads
        them back."""
        if self._released:
            paths = paths + self._released
            self._released = []
        if not self._index or not paths:
            return
        if self.indexer is None:
            from flightdeck.engine.records.searchindex import Indexer

            self.indexer = Indexer()
        self.indexer.note(paths)

    def _formatter(self, path: str) -> LineFormatter:
        formatter = self._formatters.get(path)
        if formatter is None:
            formatter = self._formatters[path] = LineFormatter()
        return formatter

    def _add(self, path: str, data: bytes) -> None:
        if data:  # nothing to write must not create the file
            self.files.add(path, data)


def apply_frames(buf: bytes | bytearray, transcripts: Transcripts) -> int:
    """Apply the complete frames at the start of `buf`; return how many bytes they took."""
    events, done = decode(buf)
    transcripts.apply(events)
    return done


def serve(inp: int, out: int, transcripts: Transcripts) -> None:
    """Apply frames read from `inp` until end of input; after each read, answer on `out`."""
    buf = bytearray()
    written = 0
    answering = True
    while chunk := os.read(inp, READ_SIZE):
        buf += chunk
        done = apply_frames(buf, transcripts)
        del buf[:done]
        transcripts.write_pending()  # what one read brought: one write per file
        written += done
        failed, error = transcripts.take_errors()
        text = error.encode("utf-8", "replace")
        if answering:
            try:
                write_all(out, DONE.pack(written, failed, len(text)) + text)
            except OSError:  # the engine died: still write every line it sent before that
                answering = False
    transcripts.close()


def main() -> None:
    """The writer process: events from stdin, answers on stdout, until stdin closes."""
    # The engine ends this process by closing the pipe after its last lines: a Ctrl+C meant for
    # the engine must not end it first (it also runs in a session of its own).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serve(sys.stdin.fileno(), sys.stdout.fileno(), Transcripts(int(sys.argv[1]), index=True))


if __name__ == "__main__":
    main()
