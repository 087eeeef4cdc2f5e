"""Append-only, sanitized, human-readable transcripts: one file per child, one event per line."""

from __future__ import annotations

import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from flightdeck.engine.private import open_private, private_dir
from flightdeck.engine.records.appender import OPEN_FLAGS, write_all
from flightdeck.engine.records.events import EndStream, Raw, Release, Stream, Write
from flightdeck.engine.records.lines import LineFormatter
from flightdeck.engine.records.sink import TranscriptSink
from flightdeck.engine.sanitize import sanitize

log = logging.getLogger("flightdeck.transcripts")

MANIFEST = "manifest.json"


class TranscriptWriter:
    """One child's transcript (thread-safe); the format is `lines.LineFormatter`'s.

    With a sink, the events go to it unformatted and its writer process formats them
    (`appender.py`). Without one, or with secrets to redact (which must not leave this
    process), they are formatted here and each event is one `os.write` of whole lines (or one
    `Raw` event of them to the sink).
    """

    def __init__(
        self,
        path: str | Path,
        clock: Callable[[], float] = time.time,
        *,
        secrets: Iterable[str] = (),
        sink: TranscriptSink | None = None,
        closed: bool = False,
    ) -> None:
        self.path = path
        self._clock = clock
        self._key = os.fspath(path)
        self._lock = threading.Lock()  # stamps follow file order, whichever thread writes
        secrets = tuple(secrets)
        self._sink = sink
        # Exactly one of the two: the writer process formats (`_remote`, the sink: not its bound
        # `send`, 64 bytes more a child, kept to the end), or this object does.
        self._remote = sink if not secrets else None
        self._formatter = None if self._remote is not None else LineFormatter(secrets)
        self._fd: int | None = None
        # Text streamed since the stream last ended: only then has an end anything to write
        # (an end with nothing streamed is one event less for a child to send).
        self._streaming = False
        # Closed (or made for a child that has ended: `closed`): a later line, or stream to
        # its end, opens its file for that alone (the writer would keep it open, and its
        # formatter, for good).
        self._closed = closed
        if sink is None:
            private_dir(Path(path).parent)
            self._fd = None if closed else open_private(path, OPEN_FLAGS)

    def write(self, role: str, text: str, ts: float | None = None) -> None:
        """Append one event; multi-line text becomes several lines with the same stamp."""
        with self._lock:
            ts = self._clock() if ts is None else ts
            self._write(role, text, ts)
            self._let_go(ts)

    def stream(self, chunk: str, ts: float | None = None) -> None:
        """Append streamed assistant text; each line is written as soon as it is complete.
        (`ts`, here and below: when it happened elsewhere, as a relayed event says.)"""
        with self._lock:
            ts = self._clock() if ts is None else ts
            self._streaming = True
            if self._remote is not None:
                self._remote.send(Stream(self._key, ts, chunk))
            else:
                self._out(self._local().stream(chunk, ts))

    def end_stream(self, *, interrupted: bool = False, ts: float | None = None) -> None:
        """Write the partial last line of the stream, if any (`interrupted`: the response was
        cut off there, and the line says so)."""
        with self._lock:
            if not self._streaming:
                return
            self._streaming = False
            ts = self._clock() if ts is None else ts
            if self._remote is not None:
                self._remote.send(EndStream(self._key, ts, interrupted))
            else:
                self._out(self._local().end_stream(ts, interrupted=interrupted))
            # A stream after the close (a call the watchdog gave up on, come back): its file
            # is let go at the stream's end, as after a line.
            self._let_go(ts)

    def close(self, role: str | None = None, text: str = "", ts: float | None = None) -> None:
        """End the stream and close the file; idempotent. Later writes reopen it briefly.

        With `role`, `write(role, text)` comes after the stream's end under the same lock: a
        child's last line costs no lock of its own."""
        with self._lock:
            ts = self._clock() if ts is None else ts
            if self._streaming:
                self._streaming = False
                if self._remote is None:
                    self._out(self._local().end_stream(ts))
                elif role is not None:  # else the writer ends it on `Release`
                    self._remote.send(EndStream(self._key, ts))
            if role is not None:
                self._write(role, text, ts)
            self._closed = True
            if self._sink is not None:
                self._sink.send(Release(self._key, ts))
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> TranscriptWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Below: with the lock held.

    def _let_go(self, ts: float) -> None:
        """A closed writer's file, held in the writer process for no stream: released."""
        if self._closed and not self._streaming and self._sink is not None:
            self._sink.send(Release(self._key, ts))

    def _write(self, role: str, text: str, ts: float) -> None:
        if self._remote is not None:
            self._remote.send(Write(self._key, ts, role, text))
        else:
            self._out(self._local().write(role, text, ts))

    def _local(self) -> LineFormatter:
        assert self._formatter is not None  # set whenever _remote is not
        return self._formatter

    def _out(self, data: bytes) -> None:
        if not data:
            return
        if self._sink is not None:
            self._sink.send(Raw(self._key, data))
            return
        if self._fd is not None:
            write_all(self._fd, data)
            return
        fd = open_private(self.path, OPEN_FLAGS)
        try:
            write_all(fd, data)
        finally:
            os.close(fd)


def write_manifest(
    batch_dir: Path, data: Mapping[str, Any], encoded: Mapping[str, str] | None = None
) -> Path:
    """Atomically write `manifest.json` in `batch_dir` (temp file, fsync, rename).

    `encoded` members are JSON text already, placed after those of `data`: a batch's list of
    children is encoded once and written again with its final status.
    """
    private_dir(batch_dir)
    target = batch_dir / MANIFEST
    # No indent: only then does json use its C encoder, and a manifest lists every child.
    # ASCII, so names from task files reach `cat manifest.json` escaped.
    text = json.dumps(data, default=str)
    if encoded:
        members = [f"{json.dumps(key)}: {v}" for key, v in encoded.items()]
        text = f"{text[:-1]}{', ' if data else ''}{', '.join(members)}}}"
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", suffix=".tmp", dir=batch_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text + "\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def tail_lines(
    path: Path, max_lines: int, *, block_size: int = 64 * 1024, max_bytes: int = 8 * 1024 * 1024
) -> tuple[list[str], bool]:
    """The last `max_lines` lines of a file (sanitized) and whether earlier ones were cut."""
    try:
        fh = path.open("rb")
    except FileNotFoundError:
        return [], False  # a child that has not started yet has no transcript
    with fh:
        end = fh.seek(0, os.SEEK_END)
        if max_lines <= 0:
            return [], end > 0
        pos = end
        blocks: list[bytes] = []
        newlines = 0
        # Read backwards until we hold max_lines full lines plus the newline before them.
        while pos > 0 and newlines <= max_lines and end - pos < max_bytes:
            step = min(block_size, pos)
            pos -= step
            fh.seek(pos)
            block = fh.read(step)
            blocks.append(block)
            newlines += block.count(b"\n")
    data = b"".join(reversed(blocks))
    if not data:
        return [], False
    lines = data.removesuffix(b"\n").split(b"\n")
    cut = pos > 0
    if cut and len(lines) > 1:
        lines = lines[1:]  # the first piece is the tail of a line we did not read whole
    if len(lines) > max_lines:
        lines = lines[-max_lines:]
        cut = True
    return [sanitize(line.decode("utf-8", "replace")) for line in lines], cut
