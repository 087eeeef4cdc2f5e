"""Append-only, sanitized, human-readable transcripts: one file per child, one event per line."""

from __future__ import annotations

import functools
import json
import logging
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from flightdeck.engine.appender import OPEN_FLAGS, write_all
from flightdeck.engine.sanitize import StreamSanitizer, redact, sanitize
from flightdeck.engine.sink import TranscriptSink

log = logging.getLogger("flightdeck.transcripts")

ROLES = ("system", "user", "assistant", "tool", "tool-call", "operator", "engine", "error")
ROLE_WIDTH = 9
SEPARATOR = " │ "
MANIFEST = "manifest.json"

# A streamed line longer than this is written out unfinished, so memory stays bounded when a
# model streams megabytes without a newline.
MAX_STREAM_LINE = 64 * 1024


class TranscriptWriter:
    """One child's transcript; every write is one `os.write` of whole lines (thread-safe)."""

    def __init__(
        self,
        path: str | Path,
        clock: Callable[[], float] = time.time,
        *,
        secrets: Iterable[str] = (),
        sink: TranscriptSink | None = None,
    ) -> None:
        self.path = path
        self._clock = clock
        self._secrets = tuple(secrets)
        self._lock = threading.Lock()
        self._sanitizer = StreamSanitizer()
        self._partial: list[str] = []
        self._partial_len = 0
        self._sink = sink
        self._key = os.fspath(path)
        self._fd: int | None = None
        self._last_ms = -1  # the stamp of the last line, reused within its millisecond
        self._last_stamp = ""
        if sink is None:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, OPEN_FLAGS, 0o644)

    def write(self, role: str, text: str, ts: float | None = None) -> None:
        """Append one event; multi-line text becomes several lines with the same stamp."""
        with self._lock:
            # A pending streamed line goes out first, so the file stays in time order.
            self._flush_partial()
            body = sanitize(text).rstrip("\n")
            self._emit(role, body.split("\n"), self._clock() if ts is None else ts)

    def stream(self, chunk: str) -> None:
        """Append streamed assistant text; each line is written as soon as it is complete."""
        with self._lock:
            self._take(self._sanitizer.feed(chunk))

    def end_stream(self) -> None:
        """Write the partial last line of the stream, if any."""
        with self._lock:
            self._take(self._sanitizer.flush())
            self._flush_partial()

    def close(self) -> None:
        """End the stream and close the file; idempotent. Later writes reopen it briefly."""
        with self._lock:
            self._take(self._sanitizer.flush())
            self._flush_partial()
            if self._sink is not None:
                self._sink.release(self._key)
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> TranscriptWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # Everything below runs with the lock held.

    def _take(self, safe: str) -> None:
        if not safe:
            return
        if "\n" not in safe:
            self._partial.append(safe)
            self._partial_len += len(safe)
            if self._partial_len > MAX_STREAM_LINE:
                self._flush_partial()
            return
        lines = safe.split("\n")
        last = lines.pop()
        if self._partial:
            lines[0] = "".join([*self._partial, lines[0]])
        self._partial = [last] if last else []
        self._partial_len = len(last)
        self._emit("assistant", lines, self._clock())

    def _flush_partial(self) -> None:
        if self._partial:
            line = "".join(self._partial)
            self._partial = []
            self._partial_len = 0
            self._emit("assistant", [line], self._clock())

    def _emit(self, role: str, lines: list[str], ts: float) -> None:
        ms = int(ts * 1000)
        if ms != self._last_ms:  # a fast child writes several lines a millisecond
            self._last_ms, self._last_stamp = ms, _stamp_ms(ms)
        head = f"{self._last_stamp}  {_LABELS.get(role) or _label(role)}"
        data = head + ("\n" + head).join(lines) + "\n"  # a stamp and label on every line
        if self._secrets:
            data = redact(data, self._secrets)
        raw = data.encode("utf-8", "replace")
        if self._sink is not None:
            self._sink.append(self._key, raw)
            return
        if self._fd is not None:
            write_all(self._fd, raw)
            return
        fd = os.open(self.path, OPEN_FLAGS, 0o644)
        try:
            write_all(fd, raw)
        finally:
            os.close(fd)


@functools.lru_cache(maxsize=256)
def _stamp_ms(ms: int) -> str:
    # Formatting a stamp costs more than the rest of a line, and a busy batch writes many
    # lines per millisecond: HH:MM:SS.mmm once per millisecond, shared by every writer.
    second, millis = divmod(ms, 1000)
    return f"{_hms(second)}.{millis:03d}"


@functools.lru_cache(maxsize=4)
def _hms(second: int) -> str:
    # localtime+strftime: once a second, for every writer.
    return time.strftime("%H:%M:%S", time.localtime(second))


def _label(role: str) -> str:
    return f"{sanitize(role).ljust(ROLE_WIDTH)}{SEPARATOR}"


_LABELS = {role: _label(role) for role in ROLES}  # every line has one: built once, not per line


def write_manifest(batch_dir: Path, data: Mapping[str, Any]) -> Path:
    """Atomically write `manifest.json` in `batch_dir` (temp file, fsync, rename)."""
    batch_dir.mkdir(parents=True, exist_ok=True)
    target = batch_dir / MANIFEST
    fd, tmp = tempfile.mkstemp(prefix=".manifest-", suffix=".tmp", dir=batch_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            # dumps without indent runs the C encoder; json.dump(indent=2) is 10x slower
            # on a 5,000-child manifest.
            fh.write(json.dumps(data, default=str, ensure_ascii=False) + "\n")
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
