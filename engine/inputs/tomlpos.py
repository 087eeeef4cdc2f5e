"""Line numbers for TOML: tomllib parses values but reports no positions, so we locate them."""

from __future__ import annotations

import contextlib
import re
import tomllib
from collections.abc import Callable

Key = tuple[str | int, ...]  # ("tasks", 2, "goal"): table keys and array indexes

_AT_LINE = re.compile(r"\s*\(at line (\d+), column (\d+)\)\s*$")
_AT_END = " (at end of document)"
_BARE = re.compile(r"[A-Za-z0-9_-]+")
_SCALAR = re.compile(r"[^,\]}\n#]+")
_BLANK = re.compile(r"(?:[ \t\r]+|#[^\n]*)*")
_BLANK_LINES = re.compile(r"(?:[ \t\r\n]+|#[^\n]*)*")
# A string's body, up to its closing delimiter (escapes skipped in basic strings): one match,
# not a step per character, so a file of long strings is located at the speed of reading it.
_BODY = {
    '"': re.compile(r'[^"\\]*(?:\\.[^"\\]*)*', re.S),
    "'": re.compile(r"[^']*"),
    '"""': re.compile(r'[^"\\]*(?:(?:\\.|"(?!""))[^"\\]*)*', re.S),
    "'''": re.compile(r"[^']*(?:'(?!'')[^']*)*"),
}


def decode_error(exc: tomllib.TOMLDecodeError, text: str) -> tuple[int | None, str]:
    """Split a TOMLDecodeError on `text` into (1-based line, message without the position)."""
    message = str(exc)
    m = _AT_LINE.search(message)
    if m is not None:
        return int(m.group(1)), message[: m.start()]
    if message.endswith(_AT_END):  # e.g. an unclosed array: blame the last line with content
        return max(1, len(text.rstrip().splitlines())), message.removesuffix(_AT_END)
    return None, message


def deep_line(text: str, depth: int = 100) -> int | None:
    """The line where brackets (`[`, `{`, outside quoted strings) first nest `depth` deep: where
    a document too deeply nested for its parser goes wrong (None if no bracket does)."""
    line, level, quote, escaped = 1, 0, "", False
    for char in text:
        if char == "\n":
            line += 1
        if quote:
            if escaped:
                escaped = False
            elif char == "\\" and quote == '"':
                escaped = True
            elif char == quote or char == "\n":  # a quote left open ends with its line
                quote = ""
        elif char in "\"'":
            quote = char
        elif char in "[{":
            level += 1
            if level >= depth:
                return line
        elif char in "]}":
            level = max(0, level - 1)
    return None


class _Unreadable(Exception):
    """The text is not TOML here: tomllib says what is wrong."""


class TomlLocator:
    """Maps key paths of a TOML document to the line that defines them. `found`, if given, is
    told each key path as it is first located, with its line: raising there stops the scan,
    which is how a task file of too many tasks is refused before tomllib builds it."""

    def __init__(self, text: str, found: Callable[[Key, int], None] | None = None) -> None:
        self._s = text
        self._i = 0
        self._line = 1
        self._lines: dict[Key, int] = {}
        self._aot: dict[Key, int] = {}  # array-of-tables path -> index of its current entry
        self._found = found
        # Located up to there: a document tomllib accepts is always read to its end.
        with contextlib.suppress(_Unreadable):
            self._scan()

    def line(self, *key: str | int) -> int | None:
        """The line of `key`, else of its nearest located parent (None: nowhere, e.g. empty)."""
        for n in range(len(key), 0, -1):
            found = self._lines.get(key[:n])
            if found is not None:
                return found
        return None

    # --- scanner: finds structure only, and stops at what is not TOML (_Unreadable) ---

    def _peek(self, n: int = 1) -> str:
        return self._s[self._i : self._i + n]

    def _advance(self, n: int = 1) -> None:
        self._line += self._s.count("\n", self._i, self._i + n)
        self._i += n

    def _skip(self, pattern: re.Pattern[str]) -> None:
        match = pattern.match(self._s, self._i)
        if match is not None:
            self._advance(match.end() - self._i)

    def _skip_blank(self, newlines: bool) -> None:
        self._skip(_BLANK_LINES if newlines else _BLANK)

    def _expect(self, token: str) -> None:
        if not self._s.startswith(token, self._i):
            raise _Unreadable
        self._advance(len(token))

    def _record(self, key: Key) -> None:
        if key not in self._lines:
            self._lines[key] = self._line
            if self._found is not None:
                self._found(key, self._line)

    def _scan(self) -> None:
        table: Key = ()
        while True:
            self._skip_blank(newlines=True)
            if self._i >= len(self._s):
                return
            if self._peek(2) == "[[":
                self._advance(2)
                parts = self._key()
                self._expect("]]")
                parent = self._resolve(parts[:-1])
                table = (*parent, parts[-1])
                index = self._aot.get(table, -1) + 1
                self._aot[table] = index
                self._record(table)
                table = (*table, index)
                self._record(table)
            elif self._peek() == "[":
                self._advance()
                parts = self._key()
                self._expect("]")
                table = self._resolve(parts)
                self._record(table)
            else:
                self._pair(table)
            self._skip_blank(newlines=False)
            if self._i < len(self._s):
                self._expect("\n")  # one header or key = value a line

    def _resolve(self, parts: list[str]) -> Key:
        # A header like [tasks.extra] after [[tasks]] refers to the latest tasks entry.
        key: Key = ()
        for part in parts:
            key = (*key, part)
            if key in self._aot:
                key = (*key, self._aot[key])
        for n in range(1, len(key) + 1):
            self._record(key[:n])
        return key

    def _pair(self, table: Key) -> None:
        key = table
        for part in self._key():
            key = (*key, part)
            self._record(key)
        self._skip_blank(newlines=False)
        self._expect("=")
        self._skip_blank(newlines=False)
        self._value(key)

    def _key(self) -> list[str]:
        parts: list[str] = []
        while True:
            self._skip_blank(newlines=False)
            c = self._peek()
            if c in ('"', "'"):
                start = self._i + 1
                self._string()
                raw = self._s[start : self._i - 1]
                parts.append(raw if c == "'" else _unescape(raw))
            else:
                m = _BARE.match(self._s, self._i)
                if m is None:
                    raise _Unreadable
                parts.append(m.group())
                self._advance(m.end() - self._i)
            self._skip_blank(newlines=False)
            if self._peek() != ".":
                return parts
            self._advance()

    def _value(self, key: Key) -> None:
        c = self._peek()
        if c in ('"', "'"):
            self._string()
        elif c == "[":
            # One comma after each value, no other: a stray one would be an item counted.
            self._advance()
            index = 0
            while True:
                self._skip_blank(newlines=True)
                if self._peek() == "]":
                    break
                self._record((*key, index))
                self._value((*key, index))
                self._skip_blank(newlines=True)
                if self._peek() != ",":
                    break
                self._advance()
                index += 1
            self._expect("]")
        elif c == "{":
            self._advance()
            while True:
                self._skip_blank(newlines=False)
                if self._peek() == "}":
                    break
                self._pair(key)
                self._skip_blank(newlines=False)
                if self._peek() != ",":
                    break
                self._advance()
            self._expect("}")
        else:
            m = _SCALAR.match(self._s, self._i)
            if m is None:  # at the end of the text, or at a `]` or `,` where a value goes
                raise _Unreadable
            self._advance(m.end() - self._i)

    def _string(self) -> None:
        quote = self._peek()
        delim = quote * 3 if self._peek(3) == quote * 3 else quote
        self._advance(len(delim))
        self._skip(_BODY[delim])
        self._expect(delim)
        # A multi-line string may end with up to two extra quotes: """a"""""
        while len(delim) == 3 and self._peek() == quote:
            self._advance()


def _unescape(raw: str) -> str:
    """Decode a basic-string key the way tomllib does (keys with escapes are rare)."""
    try:
        value = tomllib.loads(f'k = "{raw}"')["k"]
    except tomllib.TOMLDecodeError:
        raise _Unreadable from None
    assert isinstance(value, str)
    return value


__all__ = ["Key", "TomlLocator", "decode_error"]
