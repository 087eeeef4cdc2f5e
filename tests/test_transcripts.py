"""Transcripts: line format, sanitizing, streaming, atomic appends, manifest, tail."""

from __future__ import annotations

import json
import os
import re
import threading
import time
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.records import lines
from flightdeck.engine.records.sink import TranscriptSink
from flightdeck.engine.records.transcripts import TranscriptWriter, tail_lines, write_manifest

TS = time.mktime((2024, 5, 1, 13, 4, 5, 0, 0, -1)) + 0.25  # 13:04:05.250 local time
LINE = re.compile(r"^\d\d:\d\d:\d\d\.\d{3}  .{9} │ .*$")


class FakeClock:
    def __init__(self, now: float = TS) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def read(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_a_key_across_the_cut_of_a_very_long_streamed_line_is_redacted(tmp_path: Path) -> None:
    """A streamed line longer than MAX_STREAM_LINE is written out before it ends; a key that
    straddled that cut went out as two unredacted halves."""
    key = "sk-live-0123456789"
    path = tmp_path / "c1.log"
    with TranscriptWriter(path, clock=FakeClock(), secrets=[key]) as tw:
        tw.stream("x" * (lines.MAX_STREAM_LINE - 5))
        tw.stream(key[:9])  # the line is cut here, inside the key
        tw.stream(key[9:] + " and on\n")
    bodies = [line.split("│ ", 1)[1] for line in read(path)]
    assert len(bodies) == 2 and bodies[0].endswith(lines.CONTINUED)  # it was cut
    bodies[0] = bodies[0].removesuffix(lines.CONTINUED)
    assert key not in "".join(bodies) and "sk-li" not in "".join(bodies)
    assert "".join(bodies) == "x" * (lines.MAX_STREAM_LINE - 5) + "[REDACTED] and on"


def test_line_format(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "dir" / "c1.log"  # parents are created
    with TranscriptWriter(path, clock=FakeClock()) as tw:
        tw.write("user", "hello")
        tw.write("assistant", "hi", ts=TS + 1.5)
        tw.write("tool-call", "read_file(path='a')")
    assert read(path) == [
        "13:04:05.250  user      │ hello",
        "13:04:06.750  assistant │ hi",
        "13:04:05.250  tool-call │ read_file(path='a')",
    ]


def test_a_written_line_parses_back_into_its_parts() -> None:
    formatter = lines.LineFormatter()
    written = formatter.write("operator", "stop │ now", TS) + formatter.write("long-role", "x", TS)
    first, second = written.decode().splitlines()
    assert lines.parse(first) == lines.Line("13:04:05.250", "operator", "stop │ now", 26)
    assert lines.TEXT_COLUMN == 26  # every role the engine writes fits ROLE_WIDTH
    assert lines.parse(second) == lines.Line("13:04:05.250", "long-role", "x", 26)
    wide = lines.parse("13:04:05.250  tool-result-x │ y")
    assert wide is not None and (wide.role, wide.text, wide.text_start) == (
        "tool-result-x",
        "y",
        30,
    )
    for other in ("", "plain text", " " * 24 + "│ wrapped", "13:04:05.250 user │ one gap"):
        assert lines.parse(other) is None


def test_stamps_follow_the_clock_to_the_millisecond(tmp_path: Path) -> None:
    path = tmp_path / "c.log"
    with TranscriptWriter(path, clock=FakeClock()) as tw:
        for offset in (0.0, 0.0004, 0.001, 0.0019, 1.0, 0.0):
            tw.write("user", "x", ts=TS + offset)
    assert [line[:12] for line in read(path)] == [
        "13:04:05.250",
        "13:04:05.250",
        "13:04:05.251",
        "13:04:05.251",
        "13:04:06.250",
        "13:04:05.250",
    ]


def test_multiline_text_gets_a_stamp_per_line(tmp_path: Path) -> None:
    path = tmp_path / "c.log"
    with TranscriptWriter(path, clock=FakeClock()) as tw:
        tw.write("tool", "one\n\nthree\n")
    assert read(path) == [
        "13:04:05.250  tool      │ one",
        "13:04:05.250  tool      │ ",
        "13:04:05.250  tool      │ three",
    ]


def test_everything_is_sanitized(tmp_path: Path) -> None:
    path = tmp_path / "c.log"
    with TranscriptWriter(path, clock=FakeClock()) as tw:
        tw.write("tool", "a\x1b]0;pwned\x07b\x1b[2Jc\rd\u202e")
        tw.stream("x\x1b[3")
        tw.stream("1my\x9b2J\n")
    raw = path.read_bytes()
    assert b"\x1b" not in raw and b"\r" not in raw and "\x9b".encode() not in raw
    assert read(path) == ["13:04:05.250  tool      │ abcd", "13:04:05.250  assistant │ xy"]


def test_an_escape_sequence_a_line_leaves_open_ends_with_that_line(tmp_path: Path) -> None:
    path = tmp_path / "c.log"
    with TranscriptWriter(path, clock=FakeClock()) as tw:
        tw.write("output", "a\x1b]0;never closed\nb\nc")
    assert read(path) == [
        "13:04:05.250  output    │ a",
        "13:04:05.250  output    │ b",
        "13:04:05.250  output    │ c",
    ]


def test_secrets_are_redacted(tmp_path: Path) -> None:
    path = tmp_path / "c.log"
    with TranscriptWriter(path, clock=FakeClock(), secrets=["sk-live-0123456789"]) as tw:
        tw.write("error", "401 for key sk-live-0123456789")
        tw.stream("the key is sk-live-")
        tw.stream("0123456789 ok\n")
    text = path.read_text()
    assert "sk-live-0123456789" not in text
    assert text.count("[REDACTED]") == 2


def test_stream_writes_each_line_when_complete(tmp_path: Path) -> None:
    path = tmp_path / "c.log"
    clock = FakeClock()
    tw = TranscriptWriter(path, clock=clock)
    tw.stream("Hel")
    tw.stream("lo")
    assert path.read_text() == ""  # nothing until the newline
    tw.stream(" world\nsecond ")
    assert read(path) == ["13:04:05.250  assistant │ Hello world"]
    clock.now += 1
    tw.stream("line\nthird\nfourth")
    tw.end_stream()
    tw.end_stream()  # nothing pending: writes nothing
    assert read(path)[1:] == [
        "13:04:06.250  assistant │ second line",
        "13:04:06.250  assistant │ third",
        "13:04:06.250  assistant │ fourth",
    ]
    tw.close()


def test_write_during_stream_keeps_time_order(tmp_path: Path) -> None:
    # The reply's line is cut after its last whole word, never inside one: it is marked as
    # going on, and the word being written goes on after the operator's line.
    path = tmp_path / "c.log"
    with TranscriptWriter(path, clock=FakeClock()) as tw:
        tw.stream("nothing blocks m")
        tw.write("operator", "steer: focus on tests")
        tw.stream("erging once\n")
    written = read(path)
    assert [line.split("│ ")[1] for line in written] == [
        "nothing blocks ↩",
        "steer: focus on tests",
        "merging once",
    ]
    parsed = [lines.parse(line) for line in written]
    assert [(p.role, p.text, p.continued) for p in parsed if p is not None] == [
        ("assistant", "nothing blocks ", True),
        ("operator", "steer: focus on tests", False),
        ("assistant", "merging once", False),
    ]
    assert "".join(p.text for p in parsed if p is not None and p.role == "assistant") == (
        "nothing blocks merging once"
    )


def test_close_flushes_partial_line_and_is_idempotent(tmp_path: Path) -> None:
    path = tmp_path / "c.log"
    tw = TranscriptWriter(path, clock=FakeClock())
    tw.stream("partial\x1b[")
    tw.close()
    tw.close()
    assert read(path) == ["13:04:05.250  assistant │ partial"]
    tw.write("operator", "stop (child already finished)")  # reopens the file briefly
    assert read(path)[-1] == "13:04:05.250  operator  │ stop (child already finished)"


def test_close_with_a_last_event_writes_what_end_write_close_writes(tmp_path: Path) -> None:
    for sink in (None, TranscriptSink()):
        files = [tmp_path / f"{name}-{sink is None}.log" for name in ("two", "one")]
        two, one = (TranscriptWriter(f, clock=FakeClock(), sink=sink) for f in files)
        for tw in (two, one):
            tw.stream("partial\x1b[")
        two.end_stream()
        two.write("engine", "completed")
        two.close()
        one.close("engine", "completed")
        if sink is not None:
            sink.close()
        assert (
            read(files[0])
            == read(files[1])
            == [
                "13:04:05.250  assistant │ partial",  # the stream ends before the last line
                "13:04:05.250  engine    │ completed",
            ]
        )


class Sent:
    """A sink stand-in that keeps what is sent to it (its events, in order)."""

    def __init__(self) -> None:
        self.events: list[object] = []

    def send(self, event: object) -> None:
        self.events.append(event)


def test_an_end_with_nothing_streamed_since_sends_nothing(tmp_path: Path) -> None:
    """An instant child ends its reply's stream, then closes with its last line: the second
    end (and a turn that streamed nothing) has nothing to write, and is not sent."""
    sent = Sent()
    tw = TranscriptWriter(tmp_path / "c.log", clock=FakeClock(), sink=sent)  # type: ignore[arg-type]
    tw.end_stream()  # a turn that streamed no text (tool calls only)
    tw.stream("the answer\n")
    tw.end_stream()
    tw.end_stream(interrupted=True)
    tw.close("engine", "completed")
    kinds = [type(event).__name__ for event in sent.events]
    assert kinds == ["Stream", "EndStream", "Write", "Release"]


def test_ends_sent_or_not_the_lines_are_the_same(tmp_path: Path) -> None:
    for sink in (None, TranscriptSink()):
        path = tmp_path / f"c-{sink is None}.log"
        tw = TranscriptWriter(path, clock=FakeClock(), sink=sink)
        tw.end_stream()
        tw.stream("one\ntw")
        tw.end_stream(interrupted=True)
        tw.end_stream()
        tw.stream("three")
        tw.close("engine", "completed")
        if sink is not None:
            sink.close()
        assert read(path) == [
            "13:04:05.250  assistant │ one",
            "13:04:05.250  assistant │ tw (interrupted)",
            "13:04:05.250  assistant │ three",
            "13:04:05.250  engine    │ completed",
        ]


def test_long_streamed_line_is_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lines, "MAX_STREAM_LINE", 10)
    path = tmp_path / "c.log"
    with TranscriptWriter(path, clock=FakeClock()) as tw:
        for _ in range(5):
            tw.stream("abcd")
    # One giant word: cut, its last character held back so the mark's promise holds.
    assert [line.split("│ ")[1] for line in read(path)] == ["abcdabcdabc↩", "dabcdabcd"]


def test_each_write_is_one_os_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[bytes] = []
    real_write = os.write

    def spy(fd: int, data: bytes | memoryview) -> int:
        calls.append(bytes(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", spy)
    with TranscriptWriter(tmp_path / "c.log", clock=FakeClock()) as tw:
        tw.write("tool", "one\ntwo")
        tw.stream("a\nb\nc")
    assert len(calls) == 3  # the event, the two completed stream lines, the flushed partial
    assert all(call.endswith(b"\n") for call in calls)


def test_concurrent_appenders_never_interleave_within_a_line(tmp_path: Path) -> None:
    path = tmp_path / "c.log"
    writers = [TranscriptWriter(path) for _ in range(2)]  # two fds on one file, plus threads

    def work(n: int) -> None:
        tw = writers[n % 2]
        for i in range(200):
            tw.write("engine", f"thread {n} line {i} " + "x" * 200)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for tw in writers:
        tw.close()
    lines = read(path)
    assert len(lines) == 6 * 200
    assert all(LINE.match(line) and line.endswith("x" * 200) for line in lines)


def test_write_manifest_is_atomic_json(tmp_path: Path) -> None:
    batch_dir = tmp_path / "batches" / "b1"
    path = write_manifest(batch_dir, {"id": "b1", "max_cost_usd": Decimal("1.50")})
    assert path == batch_dir / "manifest.json"
    assert json.loads(path.read_text()) == {"id": "b1", "max_cost_usd": "1.50"}
    write_manifest(batch_dir, {"id": "b1", "status": "completed"})
    assert json.loads(path.read_text())["status"] == "completed"
    assert [p.name for p in batch_dir.iterdir()] == ["manifest.json"]  # no temp files left


def test_the_manifest_is_ascii_so_cat_shows_untrusted_names_escaped(tmp_path: Path) -> None:
    name = "\x9b31mRED \u202eesrever b\udcff.jsonl"  # C1 CSI, bidi override, non-UTF-8 byte
    path = write_manifest(tmp_path, {"name": name}, {"children": json.dumps([{"id": name}])})
    raw = path.read_bytes()
    assert raw.isascii(), raw
    assert json.loads(raw) == {"name": name, "children": [{"id": name}]}


def test_write_manifest_failure_leaves_old_file(tmp_path: Path) -> None:
    path = write_manifest(tmp_path, {"v": 1})
    with pytest.raises(TypeError):
        write_manifest(tmp_path, {(1, 2): "keys must be strings"})  # type: ignore[dict-item]
    assert json.loads(path.read_text()) == {"v": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]


def test_tail_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.log"
    path.write_text("".join(f"line {i}\n" for i in range(1000)))
    assert tail_lines(path, 3) == (["line 997", "line 998", "line 999"], True)
    # Small blocks force several backward reads and cuts mid-line.
    assert tail_lines(path, 5, block_size=7) == ([f"line {i}" for i in range(995, 1000)], True)
    lines, cut = tail_lines(path, 5000)
    assert len(lines) == 1000 and lines[0] == "line 0" and not cut
    assert tail_lines(path, 1000, block_size=13) == ([f"line {i}" for i in range(1000)], False)
    assert tail_lines(path, 0) == ([], True)


def test_tail_lines_edges(tmp_path: Path) -> None:
    path = tmp_path / "t.log"
    assert tail_lines(path, 5) == ([], False)  # missing
    path.write_text("")
    assert tail_lines(path, 5) == ([], False)
    path.write_text("no newline at end")
    assert tail_lines(path, 5) == (["no newline at end"], False)
    path.write_text("a\nb\npartial")
    assert tail_lines(path, 2) == (["b", "partial"], True)
    path.write_bytes("é\x1b[31m\n".encode() * 3)
    assert tail_lines(path, 2, block_size=3) == (["é", "é"], True)


def test_tail_lines_bounded_memory_on_giant_line(tmp_path: Path) -> None:
    path = tmp_path / "t.log"
    path.write_text("x" * 100_000 + "\n")
    lines, cut = tail_lines(path, 5, block_size=1000, max_bytes=5000)
    assert cut and len(lines) == 1 and 4000 < len(lines[0]) < 7000


def test_write_manifest_places_encoded_members_after_the_others(tmp_path: Path) -> None:
    children = [{"id": "a-1", "route": "sim", "transcript": "a-1.log"}, {"id": "ü", "route": "x"}]
    data = {"batch_id": "b1", "status": "completed"}
    path = write_manifest(tmp_path, data, {"children": json.dumps(children, ensure_ascii=False)})
    text = path.read_text(encoding="utf-8")
    assert json.loads(text) == {**data, "children": children}
    assert list(json.loads(text)) == ["batch_id", "status", "children"]
    assert text.endswith("]}\n")
    only = write_manifest(tmp_path, {}, {"children": "[]"})  # nothing before it: no comma
    assert json.loads(only.read_text(encoding="utf-8")) == {"children": []}
