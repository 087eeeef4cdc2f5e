"""Searching every transcript: the index the writer process keeps (records/searchindex.py), what
grep finds in it and in the files it has not reached (records/search.py), `flightdeck grep`."""

from __future__ import annotations

import os
import sqlite3
import stat
import sys
import time
from pathlib import Path

import pytest
from flightdeck.engine.attached.search import lines_around, search
from flightdeck.engine.model import ChildStatus
from flightdeck.engine.records import search as records_search
from flightdeck.engine.records.lines import LineFormatter
from flightdeck.engine.records.search import PatternError, PatternTooSlow, compile_pattern, grep
from flightdeck.engine.records.searchindex import SearchIndex, index_path

from tests.helpers import (
    HANG_S,
    batch,
    cli,
    flightdeck,
    run_to_end,
    settings,
    sim_route,
    start,
    until,
)
from tests.test_agents import config, engine_for, fake, row_of, written

T0 = 1_800_000_000.0


def transcript(path: Path, *events: tuple[str, str]) -> None:
    """Append these (role, text) events to `path`, formatted as the writer formats them."""
    fmt = LineFormatter()
    with path.open("ab") as fh:
        for n, (role, text) in enumerate(events):
            fh.write(fmt.write(role, text, T0 + n))


def texts(folder: Path, pattern: str, *, regex: bool = False, **kw: object) -> list[str]:
    hits = grep(folder, compile_pattern(pattern, regex=regex), **kw)  # type: ignore[arg-type]
    return [f"{h.name}:{h.line.split(' │ ', 1)[1]}" for h in hits]


def index(folder: Path) -> int:
    idx = SearchIndex(folder)
    try:
        return idx.catch_up()
    finally:
        idx.close()


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    transcript(
        tmp_path / "a.log",
        ("user", "Review the Rate limited path and config.py"),
        ("assistant", "accelerate limits are fine\nTransientError: boom"),
        ("tool", "café naïve rate-limit here"),
    )
    transcript(tmp_path / "b.log", ("user", "12:00 the rate limit, again"))
    return tmp_path


PLAIN = [
    # words from the start of a word, case folded; the last one a prefix
    (  # a space stands for any spaces or punctuation, as the docs promise (found by an audit)
        "rate limit",
        [
            "a.log:Review the Rate limited path and config.py",
            "a.log:café naïve rate-limit here",
            "b.log:12:00 the rate limit, again",
        ],
    ),
    (
        "LIMIT",
        [
            "a.log:Review the Rate limited path and config.py",
            "a.log:accelerate limits are fine",
            "a.log:café naïve rate-limit here",
            "b.log:12:00 the rate limit, again",
        ],
    ),
    ("rate-limit", ["a.log:café naïve rate-limit here"]),
    ("config.py", ["a.log:Review the Rate limited path and config.py"]),
    ("café", ["a.log:café naïve rate-limit here"]),
    # inside a word: not a match (that is what --regex is for)
    ("error", []),
    ("imit", []),
    # the stamp and role are not searched, only a line's text
    ("assistant", []),
    ("12:00", ["b.log:12:00 the rate limit, again"]),
]


@pytest.mark.parametrize("indexed", [False, True], ids=["files", "index"])
@pytest.mark.parametrize(("pattern", "expected"), PLAIN, ids=[p for p, _ in PLAIN])
def test_plain_patterns_find_the_same_lines_indexed_or_not(
    folder: Path, indexed: bool, pattern: str, expected: list[str]
) -> None:
    if indexed:
        assert index(folder) == sum(p.stat().st_size for p in folder.glob("*.log"))
    assert texts(folder, pattern) == expected


def test_a_pattern_with_no_word_is_looked_for_in_the_files(folder: Path) -> None:
    transcript(folder / "b.log", ("tool-call", "edit a -> b"))
    index(folder)
    assert compile_pattern("->").query is None
    assert texts(folder, "->") == ["b.log:edit a -> b"]


def test_regex_matches_each_whole_line_stamp_and_role_too(folder: Path) -> None:
    index(folder)
    assert texts(folder, r"rror: \w+", regex=True) == ["a.log:TransientError: boom"]
    assert texts(folder, r"^\d\d:\d\d:\d\d\.\d{3}  tool ", regex=True) == [
        "a.log:café naïve rate-limit here"
    ]
    assert texts(folder, r"limit(ed|s)\b", regex=True) == [
        "a.log:Review the Rate limited path and config.py",
        "a.log:accelerate limits are fine",
    ]
    assert texts(folder, r"fine$", regex=True) == ["a.log:accelerate limits are fine"]
    # A match must fall within one line, never across two.
    assert texts(folder, r"fine\s+\d", regex=True) == []


def test_bad_patterns_say_why() -> None:
    for text, regex, why in (
        ("", False, "empty"),
        ("   ", False, "empty"),  # it found nothing, and said nothing (found by an audit)
        ("a\nb", False, "newline"),
        ("(unclosed", True, "not a regular expression"),
    ):
        with pytest.raises(PatternError, match=why):
            compile_pattern(text, regex=regex)


@pytest.mark.slow
def test_the_regex_budget_is_per_line_and_a_line_past_it_names_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A real pattern slow over a block of many lines is not taken for a catastrophic one: the
    # block is searched again line by line, each line with the whole budget.
    monkeypatch.setattr(records_search, "REGEX_BUDGET_S", 0.1)
    transcript(tmp_path / "a.log", *[("tool", "x" * 12 + " done")] * 2000, ("tool", "xxz"))
    pattern = compile_pattern(r"(x|xx)+z", regex=True)
    began = time.monotonic()
    hits = list(grep(tmp_path, pattern))
    assert time.monotonic() - began > 0.1  # the block alone ran past the budget
    size = (tmp_path / "a.log").stat().st_size
    assert [(h.name, h.offset, h.line.endswith("│ xxz")) for h in hits] == [
        ("a.log", size - len(hits[0].line.encode()) - 1, True)
    ]
    transcript(tmp_path / "b.log", ("tool", "x" * 40))
    with pytest.raises(PatternTooSlow, match=r"took longer than 0\.1 s on one line of b\.log"):
        list(grep(tmp_path, pattern))


def test_lines_written_after_the_index_are_found_at_their_offsets(folder: Path) -> None:
    index(folder)
    transcript(folder / "a.log", ("operator", "steer: rate limit now please"))
    hits = list(grep(folder, compile_pattern("rate limit")))
    assert [h.line.split(" │ ")[1] for h in hits] == [
        "Review the Rate limited path and config.py",
        "café naïve rate-limit here",
        "steer: rate limit now please",
        "12:00 the rate limit, again",
    ]
    for hit in hits:  # the offset is where the line starts: the TUI opens it there
        around = lines_around(folder / hit.name, hit.offset)
        assert around.lines[around.at] == hit.line
    # Caught up, the index answers alone: the files past it are no longer read.
    index(folder)
    conn = sqlite3.connect(index_path(folder))
    sizes = dict(conn.execute("SELECT name, indexed FROM files"))
    assert sizes == {p.name: p.stat().st_size for p in folder.glob("*.log")}
    conn.close()


class _FullAtCommit:
    """A real connection whose COMMIT fails as SQLite's can on a full disk: the transaction
    rolled back by SQLite itself, then SQLITE_FULL."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn

    def execute(self, sql: str, *args: object) -> sqlite3.Cursor:
        if sql == "COMMIT":
            self._conn.execute("ROLLBACK")
            raise sqlite3.OperationalError("database or disk is full")
        return self._conn.execute(sql, *args)

    def __getattr__(self, name: str) -> object:
        return getattr(self._conn, name)


def test_a_commit_refused_by_a_full_disk_says_so(folder: Path) -> None:
    # Found by an audit on a full disk: "cannot index the transcripts …: cannot rollback - no
    # transaction is active", the second ROLLBACK's error in place of the reason.
    idx = SearchIndex(folder)
    idx._conn = _FullAtCommit(idx._conn)  # type: ignore[assignment]
    try:
        with pytest.raises(sqlite3.OperationalError, match="database or disk is full"):
            idx.catch_up()
    finally:
        idx.close()


def test_named_transcripts_only_in_the_order_named_and_first_only(folder: Path) -> None:
    index(folder)
    assert texts(folder, "limit", names=["b.log"]) == ["b.log:12:00 the rate limit, again"]
    assert [t.split(":")[0] for t in texts(folder, "limit", names=["b.log", "a.log"])] == [
        "b.log",
        "a.log",
        "a.log",
        "a.log",
    ]
    assert texts(folder, "limit", first_only=True) == [
        "a.log:Review the Rate limited path and config.py",
        "b.log:12:00 the rate limit, again",
    ]


@pytest.mark.parametrize("names", [None, ["c.log", "d.log"]], ids=["all", "named"])
def test_first_only_looks_past_a_first_candidate_the_text_does_not_match(
    tmp_path: Path, names: list[str] | None
) -> None:
    # The index matches words ("rate, limit" holds both in order); the pattern does not (a
    # space in it stands for spaces, hyphens or underscores, not a comma): each file's first
    # match is the one after, and a file with none gives nothing.
    transcript(
        tmp_path / "c.log",
        ("assistant", "the rate, limit and path"),
        ("tool", "rate-limit? no"),
        ("tool", "a rate limit reached"),
        ("tool", "the rate limit again"),
    )
    transcript(tmp_path / "d.log", ("assistant", "rate; limit"))
    index(tmp_path)
    transcript(tmp_path / "d.log", ("assistant", "a rate limit, written after the index"))
    assert texts(tmp_path, "rate limit", first_only=True, names=names) == [
        "c.log:rate-limit? no",
        "d.log:a rate limit, written after the index",
    ]
    assert texts(tmp_path, "rate limit", names=names) == [
        "c.log:rate-limit? no",
        "c.log:a rate limit reached",
        "c.log:the rate limit again",
        "d.log:a rate limit, written after the index",
    ]


def test_a_damaged_index_is_read_around_and_made_again(folder: Path) -> None:
    index_path(folder).write_bytes(b"not a database" * 100)
    assert len(texts(folder, "limit")) == 4  # unreadable: the files are read
    index(folder)  # to write, it is made again from the files
    assert len(texts(folder, "limit")) == 4
    assert stat.S_IMODE(index_path(folder).stat().st_mode) == 0o600


def test_a_transcript_written_again_from_the_start_is_indexed_again(folder: Path) -> None:
    index(folder)
    (folder / "b.log").unlink()
    transcript(folder / "b.log", ("user", "short"))
    index(folder)
    assert texts(folder, "short") == ["b.log:short"]
    assert texts(folder, "again") == []  # its old lines are never read back


def test_the_writer_process_indexes_every_transcript_of_a_batch(tmp_path: Path) -> None:
    snap = run_to_end(start(batch(12), settings(sim_route()), tmp_path))
    folder = Path(snap.children[0].transcript).parent
    conn = sqlite3.connect(index_path(folder))
    sizes = dict(conn.execute("SELECT name, indexed FROM files"))
    conn.close()
    assert sizes == {
        Path(r.transcript).name: Path(r.transcript).stat().st_size for r in snap.children
    }
    assert stat.S_IMODE(index_path(folder).stat().st_mode) == 0o600
    found = list(search(snap.children, compile_pattern("Review item 7"), first_only=True))
    assert [(f.child_id, f.role, f.text) for f in found] == [("t0007", "user", "Review item 7")]


def test_grep_finds_a_line_a_running_child_wrote_a_moment_ago(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    route = fake(
        "fake_claude.py",
        "-p",
        "--output-format",
        "stream-json",
        "--verbose",
        "--fake-gate",
        str(gate),
        "{goal}",
    )
    route += 'format = "claude-stream-json"\n'
    engine = engine_for(tmp_path, config(tmp_path, route))
    try:
        # Its tool runs until the gate opens: the child is running, and has just written this.
        until(lambda: written(engine, "Looking at the files."), what="the line written")
        assert row_of(engine).status is ChildStatus.RUNNING
        done = flightdeck(
            "grep",
            engine.batch_id,
            "looking at",
            "--state-dir",
            str(tmp_path / "state"),
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        [line] = done.stdout.splitlines()
        assert line.split()[0] == "t0" and line.endswith("assistant │ Looking at the files.")
        gate.touch()
        assert engine.wait(HANG_S)
    finally:
        engine.close()


def test_flightdeck_grep_plain_regex_child_and_exit_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    snap = run_to_end(
        start(batch(3, goal="Review item {i} for rate limits"), settings(sim_route()), tmp_path)
    )
    state = str(tmp_path / "state")
    done = flightdeck("grep", snap.batch_id, "rate limits", "--state-dir", state, cwd=tmp_path)
    assert done.returncode == 0, done.stderr  # as a user runs it: a process
    lines = done.stdout.splitlines()
    assert [ln.split()[0] for ln in lines if " user │ " in ln] == ["t0000", "t0001", "t0002"]

    def grep_(*args: str) -> tuple[int, list[str], str]:  # the rest in this process
        code, out, err = cli(capsys, "grep", snap.batch_id, *args, "--state-dir", state)
        return code, out.splitlines(), err

    code, lines, _ = grep_("Review item \\d for", "--regex", "--child", "t0001")
    assert code == 0 and all(ln.startswith("t0001 ") for ln in lines) and lines
    code, lines, _ = grep_("nothing like this")
    assert (code, lines) == (1, [])
    code, _, err = grep_("(", "--regex")
    assert code == 2 and "not a regular expression" in err
    code, _, err = grep_("x", "--child", "nope")
    assert code == 2 and "no child with id 'nope'" in err
    code, lines, _ = grep_("rate limits", "-m", "2")
    assert code == 0 and len(lines) == 2
    for bad in ("0", "-1"):  # no "stop after none" (grep's own -m 0) and no "every one"
        code, _, err = grep_("rate limits", "-m", bad)
        assert code == 2 and f"must be 1 or more, got {bad}" in err
    code, _, err = cli(capsys, "grep", "no-such-batch", "x", "--state-dir", state)
    assert code == 2 and "no batch 'no-such-batch'" in err
    # A transcript deleted since its child started: said, not skipped as if nothing matched
    # (found by an audit).
    Path(snap.children[1].transcript).unlink()
    code, lines, err = grep_("rate limits")
    assert code == 0 and [ln.split()[0] for ln in lines if " user │ " in ln] == ["t0000", "t0002"]
    assert "1 transcript is gone (deleted since its child started), not searched: t0001" in err


def test_flightdeck_grep_a_catastrophic_regex_says_so_instead_of_hanging(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found by an audit: `re` backtracked over a line of `a`s for ever (2**40 ways to split
    # them), holding the GIL. The `regex` module sees through `(a+)+b` (no line matches); a
    # pattern it cannot, `(a|aa)+b`, is stopped at the per-line budget with an error.
    aaa = "a" * 40
    snap = run_to_end(start(batch(2, goal=f"Look at {aaa} {{i}}"), settings(sim_route()), tmp_path))
    state = str(tmp_path / "state")

    def grep_(pattern: str) -> tuple[int, str]:
        code, _, err = cli(capsys, "grep", snap.batch_id, pattern, "--regex", "--state-dir", state)
        return code, err

    assert grep_("(a+)+b") == (1, "")
    code, _ = grep_(f"{aaa} 1$")  # a real pattern over those lines still finds them
    assert code == 0
    # The pattern that backtracks, as a user runs it: a process. Its timeout bounds a hang
    # (`re` would take hours), not a process slow to start on a loaded machine: the budget's
    # firing is shown by the error below, not by a stopwatch.
    done = flightdeck(
        "grep",
        snap.batch_id,
        "(a|aa)+b",
        "--regex",
        "--state-dir",
        state,
        cwd=tmp_path,
        timeout=120,
    )
    code, err = done.returncode, done.stderr
    assert code == 2
    assert err.strip() == (
        "flightdeck: PATTERN: the pattern took longer than 1 s on one line of t0000's "
        "transcript: it backtracks catastrophically; simplify it"
    )


def test_the_index_is_never_written_by_a_search(folder: Path) -> None:
    assert texts(folder, "limit")
    assert not index_path(folder).exists()
    if sys.platform.startswith("linux"):  # and reading one needs no write access to it
        index(folder)
        os.chmod(index_path(folder), 0o400)
        assert len(texts(folder, "limit")) == 4


def test_catching_up_a_few_files_reads_no_more_of_a_big_index(folder: Path) -> None:
    """A round looks up the files it catches up, not every file indexed: a batch's rounds
    would cost more and more as it grows (quadratic in its children)."""

    def steps(indexed: int) -> int:
        """SQLite's steps (in thousands) to catch up one file beside `indexed` others."""
        here = folder / str(indexed)
        here.mkdir()
        for n in range(indexed):
            transcript(here / f"c{n:05d}.log", ("user", "seen"))
        idx = SearchIndex(here)
        try:
            idx.catch_up()
            transcript(here / "c00000.log", ("assistant", "new"))
            count = [0]

            def tick() -> int:
                count[0] += 1
                return 0

            idx._conn.set_progress_handler(tick, 1000)
            idx.catch_up(["c00000.log"])
            return count[0]
        finally:
            idx.close()

    small, big = steps(30), steps(3000)
    assert big <= small + 5, (small, big)


def test_a_round_of_new_transcripts_asks_for_their_rows_in_few_statements(folder: Path) -> None:
    """Catching up many small transcripts (an instant child's is five lines): their rows in
    `files` are looked up a few hundred names a query, and a new one's row is written with
    its count (no UPDATE after its lines); a file that grew is updated, and nothing is lost."""
    for n in range(1200):
        transcript(folder / f"c{n:05d}.log", ("user", f"goal {n}"), ("engine", "completed"))
    idx = SearchIndex(folder)
    statements: list[str] = []
    idx._conn.set_trace_callback(statements.append)
    try:
        idx.catch_up()
        on_files = [s for s in statements if " files " in f"{s} "]
        assert len(on_files) - 1202 <= 3, len(on_files)  # 1,202 inserts, 3 lookups
        assert not [s for s in on_files if s.startswith("UPDATE")]
        transcript(folder / "c00007.log", ("operator", "grown since"))
        statements.clear()
        idx.catch_up(["c00007.log"])
        assert [s.split()[0] for s in statements if " files " in f"{s} "] == ["SELECT", "UPDATE"]
    finally:
        idx.close()
    assert texts(folder, "goal 1199") == ["c01199.log:goal 1199"]
    assert texts(folder, "grown since") == ["c00007.log:grown since"]
    assert len(texts(folder, "completed")) == 1200


def test_the_index_keeps_no_line_sizes_and_one_of_the_version_before_is_made_again(
    folder: Path,
) -> None:
    """Lines are indexed without their sizes (`columnsize=0`: only ranking reads them, and no
    search ranks); an index made before (version 1, with them) is dropped and made again."""
    conn = sqlite3.connect(index_path(folder))
    conn.execute("CREATE TABLE files (id INTEGER PRIMARY KEY, name TEXT UNIQUE, indexed INT)")
    conn.execute("CREATE VIRTUAL TABLE lines USING fts5(text, content='', detail=full)")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    assert index(folder) > 0
    conn = sqlite3.connect(index_path(folder))
    try:
        tables = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
        assert "lines_docsize" not in tables and "lines_idx" in tables
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 2
    finally:
        conn.close()
    for pattern, expected in PLAIN:
        assert texts(folder, pattern) == expected, pattern
