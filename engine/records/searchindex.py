"""The transcripts' search index: a SQLite FTS5 table in the batch folder (`search.db`, 0600),
kept up to date from the transcript files themselves.

The index is a cache, never the record: it holds, for each transcript (`files`), how many of
its bytes have been indexed, and for each line up to there its words (`lines`, contentless:
the text stays in the transcript, read back by its offset). Bringing it up to date
(`SearchIndex.catch_up`) reads what each file gained since, whole lines only, in one
transaction with the new byte counts, so it is never half-applied, and any process may do it
(SQLite's lock serializes two at once). A line's rowid is its file's id and its byte offset
(`rowid >> SHIFT`, `rowid & OFFSET_MASK`).

Who keeps it: `Indexer`, a thread beside whatever writes the files (the transcript writer
process, or the engine when that process cannot run): the writer notes which files it appended
to, and the thread catches them up every `INDEX_EVERY_S`, off the writer's path. What it has
not reached yet, a search reads from the files (records/search.py), so a line written a moment
ago is found all the same.

Stdlib only: the writer process imports it.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from flightdeck.engine.records.faults import rollback

INDEX_NAME = "search.db"
TRANSCRIPT_SUFFIX = ".log"
VERSION = 2  # 2: lines without their sizes (columnsize=0)
SHIFT = 40  # a line's rowid: its file's id above, its byte offset (up to 1 TB) below
OFFSET_MASK = (1 << SHIFT) - 1
SEPARATOR = " │ ".encode()  # lines.SEPARATOR: the text that is indexed starts after it
CHUNK = 8 << 20  # bytes of one file read per round: memory stays bounded on a big backlog
INDEX_EVERY_S = 0.5
CLOSE_BUDGET_S = 2.0  # at the writer's end, catching up may take this long; the rest waits
BUSY_S = 30.0

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS files ("
    " id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, indexed INTEGER NOT NULL DEFAULT 0)",
    # unicode61: words, case and diacritics folded. Contentless: the text is in the files.
    # columnsize=0: no row of line sizes beside each line (they serve ranking, which no
    # search does): a fifth less work a line indexed.
    "CREATE VIRTUAL TABLE IF NOT EXISTS lines USING fts5("
    " text, content='', tokenize='unicode61', detail=full, columnsize=0)",
    # Bigger leaves and fewer merges while a big batch streams in: a third faster to build.
    "INSERT INTO lines(lines, rank) VALUES ('pgsz', 4000)",
)


_KNOWN_AT_ONCE = 500  # names a query of `files` asks for (SQLite allows 32,766 parameters)


def index_path(folder: Path) -> Path:
    """Where a batch folder's index lives."""
    return folder / INDEX_NAME


def transcripts(folder: Path) -> list[str]:
    """The names of the transcripts in a batch folder."""
    try:
        return sorted(e.name for e in os.scandir(folder) if e.name.endswith(TRANSCRIPT_SUFFIX))
    except FileNotFoundError:
        return []


def open_index(folder: Path, *, write: bool) -> sqlite3.Connection | None:
    """A connection to the folder's index; None when there is none (or, to read, it cannot be
    read: searching then reads the files). To write, one of another version or a damaged one
    is made again (it is only a cache)."""
    path = index_path(folder)
    if not write:
        if not path.exists():
            return None
        try:
            conn = _connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
            version = conn.execute("PRAGMA user_version").fetchone()[0]
        except sqlite3.Error:
            return None
        if version != VERSION:
            conn.close()
            return None
        return conn
    for attempt in range(2):
        try:
            return _made(path)
        except sqlite3.DatabaseError:
            if attempt:
                raise
            for suffix in ("", "-wal", "-shm"):  # damaged: start again from the files
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(f"{path}{suffix}")
    raise AssertionError("not reached")


def _connect(target: str, *, uri: bool = False) -> sqlite3.Connection:
    conn = sqlite3.connect(
        target, uri=uri, isolation_level=None, check_same_thread=False, timeout=BUSY_S
    )
    conn.execute(f"PRAGMA busy_timeout = {int(BUSY_S * 1000)}")
    return conn


def _made(path: Path) -> sqlite3.Connection:
    """The index opened to write, made (0600, as the store is) if it is not there."""
    with contextlib.suppress(FileExistsError):  # made here first, so SQLite never widens it
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    conn = _connect(str(path))
    try:
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")  # a cache: a power cut costs a catch-up
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, VERSION):
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("DROP TABLE IF EXISTS files")
            conn.execute("DROP TABLE IF EXISTS lines")
            conn.execute("PRAGMA user_version = 0")
            conn.execute("COMMIT")
            version = 0
        if version == 0:
            conn.execute("BEGIN IMMEDIATE")
            if conn.execute("PRAGMA user_version").fetchone()[0] == 0:
                for statement in _SCHEMA:
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {VERSION}")
            conn.execute("COMMIT")
    except BaseException:
        conn.close()
        raise
    return conn


class SearchIndex:
    """One batch folder's index, opened to bring it up to date."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._where = os.fspath(folder)
        conn = open_index(folder, write=True)
        assert conn is not None
        self._conn = conn

    def close(self) -> None:
        self._conn.close()

    def catch_up(self, names: Iterable[str] | None = None, *, budget_s: float | None = None) -> int:
        """Index what these transcripts (all of the folder's: None) gained since they were last
        indexed; the bytes indexed. With `budget_s`, it stops after the first round that
        passes it (what is left waits for the next call)."""
        wanted = transcripts(self.folder) if names is None else sorted(set(names))
        deadline = None if budget_s is None else time.monotonic() + budget_s
        total = 0
        while wanted:
            done, wanted = self._round(wanted)
            total += done
            if deadline is not None and time.monotonic() > deadline:
                break
        return total

    def _round(self, names: list[str]) -> tuple[int, list[str]]:
        """One transaction: up to CHUNK bytes of each file; the files with more left."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            done, more = 0, []
            known = self._known(names)
            for name in names:
                added, left = self._file(name, known.get(name))
                done += added
                if left:
                    more.append(name)
            conn.execute("COMMIT")
        except BaseException:
            rollback(conn)
            raise
        return done, more

    def _known(self, names: list[str]) -> dict[str, tuple[int, int]]:
        """The id and indexed bytes of those of `names` the index has a row for, a few hundred
        names a query (in the open transaction)."""
        # These files' rows only: the whole table every round made a batch quadratic; one
        # query a file was a fifth of the index's work for a batch of small transcripts.
        known: dict[str, tuple[int, int]] = {}
        for start in range(0, len(names), _KNOWN_AT_ONCE):
            some = names[start : start + _KNOWN_AT_ONCE]
            marks = ", ".join("?" * len(some))
            sql = f"SELECT name, id, indexed FROM files WHERE name IN ({marks})"
            for name, file_id, indexed in self._conn.execute(sql, some):
                known[name] = (file_id, indexed)
        return known

    def _file(self, name: str, known: tuple[int, int] | None) -> tuple[int, bool]:
        """Index the next whole lines of one file (in the open transaction): the bytes indexed,
        and whether more are left."""
        conn = self._conn
        try:
            # os.open and pread: half the cost of a file object, once per file per round
            fd = os.open(os.path.join(self._where, name), os.O_RDONLY)
            try:
                size = os.fstat(fd).st_size
                file_id, start = known if known is not None else (None, 0)
                if size < start:
                    # Shorter than what was indexed: not the file that was. Its old lines keep
                    # their rowids under an id nothing names any more, and are never read.
                    conn.execute("DELETE FROM files WHERE id = ?", (file_id,))
                    file_id, start = None, 0
                if size == start:
                    return 0, False
                data = os.pread(fd, min(size - start, CHUNK), start)
            finally:
                os.close(fd)
        except (FileNotFoundError, IsADirectoryError):
            return 0, False
        end = data.rfind(b"\n") + 1
        if end == 0:
            if len(data) < CHUNK:
                return 0, False  # a line still being written: next time
            end = len(data)  # one line longer than a chunk: indexed in pieces
        if file_id is None:
            # Its row says how far it is indexed at once: the lines go in the same transaction.
            # lastrowid, not RETURNING: beside a RETURNING statement left open, each FTS insert
            # of the file's lines cost several times as much (docs/performance.md).
            inserted = conn.execute("INSERT INTO files (name, indexed) VALUES (?, ?)", (name, end))
            assert inserted.lastrowid is not None  # an INSERT of one row always sets it
            file_id = inserted.lastrowid
        else:
            conn.execute("UPDATE files SET indexed = ? WHERE id = ?", (start + end, file_id))
        base = (file_id << SHIFT) | start
        conn.executemany("INSERT INTO lines (rowid, text) VALUES (?, ?)", _rows(data, end, base))
        return end, start + end < size


def _rows(data: bytes, end: int, base: int) -> Iterable[tuple[int, bytes]]:
    """Each line's rowid and the text after its role, as bytes (SQLite reads them as UTF-8
    text, so no line is decoded here)."""
    sep, width = SEPARATOR, len(SEPARATOR)
    pos = 0
    for line in data[:end].split(b"\n"):
        if line:
            cut = line.find(sep, 12)
            yield base + pos, line[cut + width :] if cut >= 0 else line
        pos += len(line) + 1


class Indexer:
    """A thread that keeps the indexes of the folders a writer appends to up to date.

    `note` (the writer's thread: a set update under a lock no catch-up holds) names the files
    written; every `every_s` the thread catches them up, each folder's index opened the first
    time it is needed (and then every transcript of that folder caught up once: a resumed
    batch's files were written by an owner that may not have indexed them all). Failures are
    counted and the last one kept, never raised: a search reads what the index lacks from the
    files."""

    def __init__(self, every_s: float = INDEX_EVERY_S) -> None:
        self.every_s = every_s
        self._errors = (0, "")  # failures since the last `take_errors`, and the last message
        self._noted = threading.Lock()  # guards `_dirty` only
        self._dirty: set[str] = set()
        self._working = threading.Lock()  # one catch-up at a time
        self._indexes: dict[str, SearchIndex] = {}
        self._wake = threading.Event()
        self._closing = False
        # A daemon: the process never waits on it beyond `close`'s budget.
        self._thread = threading.Thread(target=self._run, name="flightdeck-index", daemon=True)
        self._thread.start()

    def note(self, paths: Iterable[str]) -> None:
        """These transcript files were appended to (any thread; cheap)."""
        with self._noted:
            self._dirty.update(p for p in paths if p.endswith(TRANSCRIPT_SUFFIX))

    def flush(self) -> None:
        """Catch up what was noted, on the calling thread (tests, the benchmark)."""
        self._catch_up(None)

    def take_errors(self) -> tuple[int, str]:
        """Failed catch-ups since the last call, and the last one's message."""
        errors, self._errors = self._errors, (0, "")
        return errors

    def close(self, budget_s: float = CLOSE_BUDGET_S) -> None:
        """Catch up what was noted (for at most `budget_s`), then stop."""
        self._closing = True
        self._wake.set()
        self._thread.join()
        self._catch_up(budget_s)
        with self._working:
            for index in self._indexes.values():
                index.close()
            self._indexes.clear()

    def _run(self) -> None:
        while not self._closing:
            self._wake.wait(self.every_s)
            if not self._closing:
                self._catch_up(None)

    def _catch_up(self, budget_s: float | None) -> None:
        """Every noted file's new lines indexed."""
        with self._noted:
            dirty, self._dirty = self._dirty, set()
        by_folder: dict[str, list[str]] = {}
        for path in dirty:
            folder, name = os.path.split(path)
            by_folder.setdefault(folder, []).append(name)
        with self._working:
            for folder, names in by_folder.items():
                try:
                    index = self._indexes.get(folder)
                    if index is None:
                        index = self._indexes[folder] = SearchIndex(Path(folder))
                        index.catch_up(None, budget_s=budget_s)  # first look: every transcript
                    else:
                        index.catch_up(names, budget_s=budget_s)
                except (OSError, sqlite3.Error) as exc:
                    failed, _ = self._errors
                    self._errors = (failed + 1, f"cannot index the transcripts in {folder}: {exc}")
