"""Searching a batch's transcripts: the index (records/searchindex.py) for what it holds, the
files for what it has not reached yet.

Two kinds of pattern:

- **plain** (the default): a case-insensitive match that starts at the start of a word, in a
  line's text (after its stamp and role): `rate limit` finds "Rate limited" and
  "rate-limit", not "accelerate limits" nor "rate, limit" (a space in the pattern stands for
  spaces, hyphens or underscores). The index answers it: FTS5 finds the lines holding
  the pattern's words in order (its last word as a prefix), and each is read back from its
  transcript by its offset and checked against the pattern as typed. A pattern with no word in
  it (`->`) is looked for in the files.
- **regex** (`regex=True`): Python's regex syntax, over each whole line as written
  (`HH:MM:SS.mmm  role      │ text`, so `tool-call +│ write_file` works). It reads every
  transcript (no index can answer every regex): slower on a big batch, said in
  docs/performance.md. It runs in the `regex` module (a superset of `re`'s syntax) for its
  `timeout=`: a pattern that backtracks catastrophically over a line (`(a|aa)+b` over a line of
  `a`s: `re` would take minutes, holding the GIL) raises PatternTooSlow after REGEX_BUDGET_S.

Either way, the part of each file the index has not reached (a line written a moment ago) is
read from the file, so nothing written is missed; a file the index points nowhere into and that
has not grown past it is not opened. Each child's first match only (the TUI's `F`) is one query
that groups the index's lines by file in SQLite, so a phrase in every line of a big batch costs
no Python work per line.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import regex as regexlib  # the module (`regex` is compile_pattern's keyword)
from flightdeck.engine.records.searchindex import (
    OFFSET_MASK,
    SHIFT,
    TRANSCRIPT_SUFFIX,
    SearchIndex,
    open_index,
)
from flightdeck.engine.sanitize import sanitize

FEW_FILES = 64  # named files up to this many are asked of the index by their ids
_LATER = "SELECT rowid FROM lines WHERE lines MATCH ? AND rowid > ? AND rowid < ? ORDER BY rowid"
SCAN_CHUNK = 16 << 20  # bytes of one file read at a time when reading it through
LINE_READ = 4096  # a candidate line is read in pieces of this size until its end
# One regex search over one line: generous for a real pattern (microseconds), short for a hang.
REGEX_BUDGET_S = 1.0


class PatternError(ValueError):
    """A pattern that cannot be searched for (an empty one, a regex that does not compile)."""


class PatternTooSlow(PatternError):
    """A regex that ran past REGEX_BUDGET_S on one line: it backtracks catastrophically."""

    def __init__(self, where: str) -> None:
        self.where = where
        super().__init__(
            f"the pattern took longer than {REGEX_BUDGET_S:g} s on one line of {where}: "
            "it backtracks catastrophically; simplify it"
        )


@dataclass(frozen=True, slots=True)
class Hit:
    """One matching line: its transcript's file name, its byte offset there, the line."""

    name: str
    offset: int
    line: str  # as written (sanitized), without its newline


# Finds the next match in a text from a position: (start, end), or None.
Finder = Callable[[str, int], "tuple[int, int] | None"]


@dataclass(frozen=True, slots=True)
class Pattern:
    """A pattern ready to search: how to find it in text, and its index query (None: the
    files are read)."""

    text: str
    regex: bool
    find: Finder
    query: str | None
    whole_line: bool  # a regex sees the whole line; a plain pattern the text after the role


def compile_pattern(text: str, *, regex: bool = False) -> Pattern:
    """`text` as a plain or regex pattern; PatternError saying what is wrong with it."""
    if not text.strip():  # spaces alone would find every line
        raise PatternError("the pattern is empty")
    if "\n" in text:
        raise PatternError("a pattern matches within one line: it cannot hold a newline")
    if regex:
        try:
            compiled = regexlib.compile(text, regexlib.MULTILINE)  # ^ and $ at each line's ends
        except regexlib.error as exc:
            raise PatternError(f"not a regular expression: {exc}") from None

        def find_rx(s: str, pos: int) -> tuple[int, int] | None:
            # TimeoutError past the budget; the matching lets other threads run (the TUI's).
            m = compiled.search(s, pos, timeout=REGEX_BUDGET_S)
            return None if m is None else m.span()

        return Pattern(text, True, find_rx, None, whole_line=True)
    # A space between two words stands for spaces, hyphens or underscores ("rate limit" finds
    # "rate-limit" and "rate_limit", not "rate, limit"); the rest is matched as typed.
    words = re.compile(r"[\s_-]+".join(re.escape(w) for w in text.lower().split()))

    def find_plain(s: str, pos: int) -> tuple[int, int] | None:
        # `s` is lowered text; a match must start a word.
        while (m := words.search(s, pos)) is not None:
            if m.start() == 0 or not s[m.start() - 1].isalnum():
                return m.span()
            pos = m.start() + 1
        return None

    # FTS5 tokenizes the quoted string as it tokenized the lines; `*` makes its last word a
    # prefix. No word at all: nothing for the index to find, the files are read.
    query = '"' + text.replace('"', '""') + '" *' if any(c.isalnum() for c in text) else None
    return Pattern(text, False, find_plain, query, whole_line=False)


def catch_up(folder: Path) -> int:
    """Bring the folder's index up to date (made if it has none); the bytes indexed."""
    index = SearchIndex(folder)
    try:
        return index.catch_up()
    finally:
        index.close()


def grep(
    folder: Path,
    pattern: Pattern,
    *,
    names: Sequence[str] | None = None,
    first_only: bool = False,
) -> Iterator[Hit]:
    """The lines of these transcripts (all the folder's: None), in the order named, that match;
    `first_only`: each file's first match only. PatternTooSlow (naming the file) for a regex
    that ran past its budget on one of its lines."""
    only = None if names is None or len(names) > FEW_FILES else set(names)
    sizes = _sizes(folder, only)
    names = sorted(n for n in sizes if n.endswith(TRANSCRIPT_SUFFIX)) if names is None else names
    conn = open_index(folder, write=False) if pattern.query is not None else None
    try:
        found = _from_index(conn, pattern, only, first_only) if conn is not None else None
        if found is None:  # no index, or one that cannot answer: every file is read
            if conn is not None:
                conn.close()
            conn, found = None, _Found({}, {})
        for name in names:
            file_id, done = found.files.get(name, (None, 0))
            candidates = found.candidates.get(name, [])
            # A file neither the index points into nor grown past it holds no match: not opened
            # (on a big batch the index names a few files of thousands).
            if not candidates and sizes.get(name, 0) <= done:
                continue
            try:
                fd = os.open(os.path.join(folder, name), os.O_RDONLY)
            except (FileNotFoundError, IsADirectoryError):
                continue
            try:
                offsets: Iterable[int] = candidates
                if first_only and candidates and conn is not None and file_id is not None:
                    # The index gave its first candidate only; the others are asked for if
                    # that one is not a match as typed (rare: the words, not the text).
                    offsets = _LaterCandidates(conn, pattern, file_id, candidates[0], done)
                matched = False
                for hit in _verified(fd, name, offsets, pattern):
                    yield hit
                    matched = True
                    if first_only:
                        break
                if matched and first_only:
                    continue
                for hit in _scanned(fd, name, done, pattern):
                    yield hit
                    if first_only:
                        break
            except TimeoutError:  # one line alone took the regex's whole budget
                raise PatternTooSlow(name) from None
            finally:
                os.close(fd)
    finally:
        if conn is not None:
            conn.close()


@dataclass(frozen=True, slots=True)
class _Found:
    """What the index says: each indexed file's id and indexed bytes, and the offsets of its
    lines that may match (first only: the first of them)."""

    files: dict[str, tuple[int, int]]
    candidates: dict[str, list[int]]


def _from_index(
    conn: sqlite3.Connection, pattern: Pattern, only: set[str] | None, first_only: bool
) -> _Found | None:
    """What the index says (in one read transaction: the files and their lines agree); `only`:
    of these files alone. None if FTS5 cannot parse the query."""
    conn.execute("BEGIN")
    try:
        files = conn.execute("SELECT id, name, indexed FROM files").fetchall()
        if only is not None:
            files = [f for f in files if f[1] in only]
        ids = None if only is None else [int(i) for i, _, _ in files]
        sql, args = _lines_query(first_only, ids)
        try:
            rows = conn.execute(sql, (pattern.query, *args)).fetchall() if ids != [] else []
        except sqlite3.OperationalError:
            return None
    finally:
        conn.execute("COMMIT")
    names = {int(i): str(n) for i, n, _ in files}
    candidates: dict[str, list[int]] = {}
    for file_id, group in itertools.groupby((r[0] for r in rows), key=lambda r: r >> SHIFT):
        name = names.get(file_id)
        if name is not None:  # else lines of a file indexed again under a new id
            candidates[name] = [r & OFFSET_MASK for r in group]
    return _Found({str(n): (int(i), int(d)) for i, n, d in files}, candidates)


def _lines_query(first_only: bool, ids: list[int] | None) -> tuple[str, list[int]]:
    """The index's lines that may match (`first_only`: each file's first, found in SQLite: no
    Python work per line the index holds), of the files of these ids (None: of every file).
    One query either way: FTS5 expands the pattern's last word, a prefix, once per query."""
    what, group = ("min(rowid)", f" GROUP BY rowid >> {SHIFT}") if first_only else ("rowid", "")
    where, args = "", list[int]()
    if ids is not None:
        marks = ", ".join("?" * len(ids))
        where = f" AND rowid BETWEEN ? AND ? AND rowid >> {SHIFT} IN ({marks})"
        args = [min(ids) << SHIFT, (max(ids) << SHIFT) | OFFSET_MASK, *ids]
    sql = f"SELECT {what} AS r FROM lines WHERE lines MATCH ?{where}{group} ORDER BY r"
    return sql, args


class _LaterCandidates:
    """A file's candidates from its first on, the rest asked of the index only if wanted."""

    def __init__(
        self, conn: sqlite3.Connection, pattern: Pattern, file_id: int, first: int, done: int
    ) -> None:
        self._args = (pattern.query, (file_id << SHIFT) | first, (file_id << SHIFT) | done)
        self._conn = conn
        self._first = first

    def __iter__(self) -> Iterator[int]:
        yield self._first
        for (rowid,) in self._conn.execute(_LATER, self._args):
            yield rowid & OFFSET_MASK


def _sizes(folder: Path, only: set[str] | None) -> dict[str, int]:
    """The size of each file of the folder (of these alone), read in one pass over it: a batch
    of thousands is looked at without a path object or a lookup by name per file."""
    sizes = {}
    if only is not None:
        for name in only:
            with contextlib.suppress(OSError):
                sizes[name] = os.stat(os.path.join(folder, name)).st_size
        return sizes
    try:
        entries = os.scandir(folder)
    except FileNotFoundError:
        return sizes
    with entries:
        for entry in entries:
            try:
                sizes[entry.name] = entry.stat().st_size
            except OSError:  # gone since it was listed
                continue
    return sizes


def _verified(fd: int, name: str, offsets: Iterable[int], pattern: Pattern) -> Iterator[Hit]:
    """The index's candidates that match the pattern as typed."""
    for offset in offsets:
        line = _line_at(fd, offset)
        if _matches(line, pattern):
            yield Hit(name, offset, sanitize(line))


def _line_at(fd: int, offset: int) -> str:
    """The line that starts at `offset`."""
    pieces: list[bytes] = []
    pos = offset
    while True:
        piece = os.pread(fd, LINE_READ, pos)
        end = piece.find(b"\n")
        if end >= 0:
            pieces.append(piece[:end])
            break
        pieces.append(piece)
        if len(piece) < LINE_READ:
            break
        pos += len(piece)
    return b"".join(pieces).decode("utf-8", "replace")


def _text_start(line: str) -> int:
    """Where a line's text starts (after `│ `; 0 for a line of another form)."""
    cut = line.find(" │ ", 12)
    return 0 if cut < 0 else cut + 3


def _matches(line: str, pattern: Pattern) -> bool:
    if pattern.whole_line:
        return pattern.find(line, 0) is not None
    text = line[_text_start(line) :].lower()
    return pattern.find(text, 0) is not None


def _scanned(fd: int, name: str, start: int, pattern: Pattern) -> Iterator[Hit]:
    """The matching lines of the file from byte `start` on, read through in pieces of whole
    lines."""
    pos = start
    while True:
        data = os.pread(fd, SCAN_CHUNK, pos)
        if not data:
            return
        end = data.rfind(b"\n") + 1
        while end == 0:  # one line longer than a piece: read on to its end (or the file's)
            more = os.pread(fd, SCAN_CHUNK, pos + len(data))
            if not more:
                end = len(data)
                break
            data += more
            end = data.rfind(b"\n") + 1
        yield from _in_block(data[:end], pos, name, pattern)
        pos += end


def _in_block(block: bytes, base: int, name: str, pattern: Pattern) -> Iterator[Hit]:
    """The matching lines of a block of whole lines that starts at byte `base` of its file."""
    text = block.decode("utf-8", "replace")
    # A plain pattern is matched on lowered text (same length for every character whose
    # lowercase is one character: the line boundaries found below still hold for those).
    haystack = text if pattern.whole_line else text.lower()
    if len(haystack) != len(text):  # a rare character whose lowercase is longer
        yield from _line_by_line(text, base, name, pattern)
        return
    pos = 0
    byte_pos, char_pos = base, 0  # the byte offset of character `char_pos` of the block
    while True:
        try:
            found = pattern.find(haystack, pos)
        except TimeoutError:
            # The budget is for one line: a slow block may be many lines of a real pattern.
            # Line by line from here, where a line that takes it all raises.
            byte_pos += len(text[char_pos:pos].encode("utf-8", "replace"))
            yield from _line_by_line(text[pos:], byte_pos, name, pattern)
            return
        if found is None:
            return
        start = text.rfind("\n", 0, found[0]) + 1
        end = text.find("\n", found[0])
        end = len(text) if end < 0 else end
        line = text[start:end]
        pos = end + 1
        if not pattern.whole_line and found[0] < start + _text_start(line):
            # In the stamp or role: look again from the text on, in this line only.
            if not _matches(line, pattern):
                continue
        elif "\n" in haystack[found[0] : found[1]] and not _matches(line, pattern):
            continue  # a regex match across lines: the line alone must match
        byte_pos += len(text[char_pos:start].encode("utf-8", "replace"))
        char_pos = start
        yield Hit(name, byte_pos, sanitize(line))


def _line_by_line(text: str, base: int, name: str, pattern: Pattern) -> Iterator[Hit]:
    offset = base
    for line in text.split("\n"):
        if line and _matches(line, pattern):
            yield Hit(name, offset, sanitize(line))
        offset += len(line.encode("utf-8", "replace")) + 1
