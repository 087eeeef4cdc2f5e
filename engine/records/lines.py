"""Transcript lines: one child's events formatted as `HH:MM:SS.mmm  role      │ text`, sanitized,
and such a line read back into its parts (`parse`). A reply line cut mid-stream ends in `↩`.

Stdlib only (with `sanitize`): the transcript writer process imports it too, and formats the
lines there from the events the engine sends it (`appender.py`).
"""

from __future__ import annotations

import functools
import re
import time
from dataclasses import dataclass

from flightdeck.engine.sanitize import StreamSanitizer, redact, redact_cut, sanitize

ROLES = ("system", "user", "assistant", "tool", "tool-call", "operator", "engine", "error")
STAMP_WIDTH = len("HH:MM:SS.mmm")
GAP = "  "  # between the stamp and the role
ROLE_WIDTH = 9  # roles are padded to this width, so the text of every line starts in one column
SEPARATOR = " │ "
TEXT_COLUMN = STAMP_WIDTH + len(GAP) + ROLE_WIDTH + len(SEPARATOR)
# Ends a reply line written before its end (another line came mid-stream, or it grew too long):
# the reply goes on in the next assistant line, so it reads whole without the mark. Such a line
# is cut after a word, never inside one, and what it held back is always written after it.
CONTINUED = "↩"
# Ends a reply line whose response was cut off (a stop, a steer --now): nothing follows it.
INTERRUPTED = " (interrupted)"

# A streamed line longer than this is written out unfinished, so memory stays bounded when a
# model streams megabytes without a newline.
MAX_STREAM_LINE = 64 * 1024


class LineFormatter:
    """One transcript's state between events: the stream's held-back bytes and partial line.

    Each method returns the whole lines the event completes (UTF-8, possibly empty). Not
    thread-safe: its owner serializes the calls.
    """

    __slots__ = ("_last_ms", "_last_stamp", "_partial", "_partial_len", "_sanitizer", "_secrets")

    def __init__(self, secrets: tuple[str, ...] = ()) -> None:
        self._secrets = secrets
        self._sanitizer = StreamSanitizer()
        self._partial: list[str] = []
        self._partial_len = 0
        self._last_ms = -1  # the stamp of the last line, reused within its millisecond
        self._last_stamp = ""

    def write(self, role: str, text: str, ts: float) -> bytes:
        """One event; multi-line text becomes several lines with the same stamp."""
        # A pending streamed line goes out first, so the file stays in time order: up to its
        # last word, which waits to go on after this event's lines.
        pending = self._cut_at_word(ts) if self._partial else b""
        body = sanitize(text).rstrip("\n")
        return pending + self._emit(role, body.split("\n"), ts)

    def stream(self, chunk: str, ts: float) -> bytes:
        """Streamed assistant text: the lines it completes."""
        return self._take(self._sanitizer.feed(chunk), ts)

    def end_stream(self, ts: float, *, interrupted: bool = False) -> bytes:
        """The partial last line of the stream, if any; `interrupted` says the response was cut
        off there (a stop, a steer --now)."""
        data = self._take(self._sanitizer.flush(), ts)
        if self._partial and self._secrets:
            # A stream that broke (or was stopped) mid-key must not leave the key's start: the
            # redaction of whole lines (`_emit`) never sees it.
            line = redact(redact_cut("".join(self._partial), self._secrets), self._secrets)
            self._partial = [line]
        if interrupted and self._partial:
            self._partial.append(INTERRUPTED)
        return data + self._flush_partial(ts)

    def _take(self, safe: str, ts: float) -> bytes:
        if not safe:
            return b""
        if "\n" not in safe:
            self._partial.append(safe)
            self._partial_len += len(safe)
            if self._partial_len > MAX_STREAM_LINE:
                return self._cut_partial(ts)
            return b""
        lines = safe.split("\n")
        last = lines.pop()
        if self._partial:
            lines[0] = "".join([*self._partial, lines[0]])
        self._partial = [last] if last else []
        self._partial_len = len(last)
        return self._emit("assistant", lines, ts)

    def _cut_partial(self, ts: float) -> bytes:
        """A streamed line too long to hold: written out before it ends."""
        line = "".join(self._partial)
        if not self._secrets:
            # After its last word; a giant word is cut, its last character held back to go on.
            return self._cut_at_word(ts) or self._cut(line, len(line) - 1, ts)
        # Redacted whole before the cut, and the start of a secret that may end in the next
        # chunk held back: a key across the cut must not go out as two unredacted halves.
        line = redact(line, self._secrets)
        return self._cut(line, len(line) - (max(len(s) for s in self._secrets) - 1), ts)

    def _cut_at_word(self, ts: float) -> bytes:
        """The pending streamed line up to its last word, marked as going on; the last word
        (and anything after it) stays pending. Nothing when it is one word."""
        line = "".join(self._partial)
        end = len(line.rstrip())
        cut = max(line.rfind(" ", 0, end), line.rfind("\t", 0, end)) + 1
        if not line[:cut].strip():
            return b""  # one word (or none): it waits whole
        return self._cut(line, cut, ts)

    def _cut(self, line: str, cut: int, ts: float) -> bytes:
        """`line` up to `cut`, marked as going on; the rest stays pending."""
        held = line[cut:]
        self._partial = [held] if held else []
        self._partial_len = len(held)
        return self._emit("assistant", [line[:cut] + CONTINUED], ts)

    def _flush_partial(self, ts: float) -> bytes:
        if not self._partial:
            return b""
        line = "".join(self._partial)
        self._partial = []
        self._partial_len = 0
        return self._emit("assistant", [line], ts)

    def _emit(self, role: str, lines: list[str], ts: float) -> bytes:
        ms = int(ts * 1000)
        if ms != self._last_ms:  # a fast child writes several lines a millisecond
            self._last_ms, self._last_stamp = ms, _stamp_ms(ms)
        head = f"{self._last_stamp}{GAP}{_LABELS.get(role) or _label(role)}"
        data = head + ("\n" + head).join(lines) + "\n"  # a stamp and label on every line
        if self._secrets:
            data = redact(data, self._secrets)
        return data.encode("utf-8", "replace")


@functools.lru_cache(maxsize=256)
def _stamp_ms(ms: int) -> str:
    # Formatting a stamp costs more than the rest of a line, and a busy batch writes many
    # lines per millisecond: HH:MM:SS.mmm once per millisecond, shared by every formatter.
    second, millis = divmod(ms, 1000)
    return f"{_hms(second)}.{millis:03d}"


@functools.lru_cache(maxsize=4)
def _hms(second: int) -> str:
    # localtime+strftime: once a second, for every formatter.
    return time.strftime("%H:%M:%S", time.localtime(second))


def _label(role: str) -> str:
    return f"{sanitize(role).ljust(ROLE_WIDTH)}{SEPARATOR}"


_LABELS = {role: _label(role) for role in ROLES}  # every line has one: built once, not per line


@dataclass(frozen=True, slots=True)
class Line:
    """One transcript line, read back into its parts."""

    stamp: str  # HH:MM:SS.mmm, local time
    role: str
    text: str  # without the CONTINUED mark
    text_start: int  # the column `text` starts at: TEXT_COLUMN unless the role is wider
    continued: bool = False  # a reply line cut before its end: it goes on in the next one


_LINE = re.compile(rf"(\d\d:\d\d:\d\d\.\d\d\d){GAP}(.*?){re.escape(SEPARATOR)}(.*)", re.DOTALL)


def parse(line: str) -> Line | None:
    """The parts of one line as `LineFormatter` writes it; None for any other text."""
    match = _LINE.match(line)
    if match is None:
        return None
    stamp, role, text = match.groups()
    role = role.strip()
    if role == "assistant" and text.endswith(CONTINUED):
        return Line(stamp, role, text[: -len(CONTINUED)], match.start(3), continued=True)
    return Line(stamp, role, text, match.start(3))
