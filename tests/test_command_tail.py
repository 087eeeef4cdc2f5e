"""A command child's output file read as it grows (agents/tail.py): whole lines, as written."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from flightdeck.engine.agents import tail
from flightdeck.engine.agents.process import Files, OutputError, Process
from flightdeck.engine.agents.tail import Tail


def read_as_written(path: Path, pieces: list[bytes]) -> tuple[list[str], int]:
    """The lines a Tail gives when each piece is appended, then read; and where it read to."""
    path.write_bytes(b"")
    reader = Tail(path, "stdout", 0)
    lines: list[tail.Line] = []
    try:
        for piece in pieces:
            with path.open("ab") as f:
                f.write(piece)
            reader.read(lines)
        read_to = reader.read_to
        reader.read(lines, final=True)
    finally:
        reader.close()
    assert {line.stream for line in lines} <= {"stdout"}
    return [line.text for line in lines], read_to


def test_lines_split_across_reads_come_whole(tmp_path: Path) -> None:
    # A character cut between two reads, a CRLF cut between its two bytes, bytes that are no
    # UTF-8 (replaced, never fatal), a lone CR kept, and an unfinished last line.
    euro = "€".encode()
    pieces = [b"one\r", b"\ntw", b"o " + euro[:2], euro[2:] + b"\n\xff\xfe x\n"]
    pieces += [b"a\rb\n\nla", b"st"]
    lines, read_to = read_as_written(tmp_path / "out", pieces)
    assert lines == ["one", "two €", "\ufffd\ufffd x", "a\rb", "", "last"]
    assert read_to == len(b"".join(pieces)) - len(b"last")  # an adopter reads it again


def test_a_line_longer_than_the_limit_comes_in_pieces(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tail, "MAX_LINE_BYTES", 4)
    lines, _ = read_as_written(tmp_path / "out", [b"abcdefghij", b"k\nxy\n"])
    assert lines == ["abcd", "efgh", "ijk", "xy"]


def test_lines_come_through_the_descriptor_the_process_appends_through(tmp_path: Path) -> None:
    # A spawned command's output file is opened once, read-write, and given to the process: its
    # appends move that descriptor's offset to the end, and the Tail reads at its own.
    path = tmp_path / "out"
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o600)
    reader = Tail(path, "stdout", 0, fd)
    lines: list[tail.Line] = []
    try:
        os.write(fd, b"one\ntw")
        reader.read(lines)
        os.write(fd, b"o\nthree\n")
        reader.read(lines)
        assert [line.text for line in lines] == ["one", "two", "three"]
        assert reader.read_to == os.fstat(fd).st_size
    finally:
        reader.close()
    with pytest.raises(OSError):  # the Tail closed it: the owner holds nothing more
        os.fstat(fd)


def test_a_spawn_whose_error_file_cannot_be_made_leaves_no_descriptor_open(tmp_path: Path) -> None:
    # The owner reads through the descriptors it gives the process: one made before a failure
    # (a full disk, here a folder where the file goes) was left open, one more every child.
    files = Files(tmp_path / "out", tmp_path / "err")
    files.err.mkdir()
    before = set(os.listdir("/proc/self/fd"))
    with pytest.raises(OutputError) as raised:
        Process.spawn(["true"], cwd=tmp_path, env=dict(os.environ), files=files, tag="b/c")
    assert raised.value.errno == errno.EISDIR
    assert not files.out.exists()  # nor is the file made before left in the batch folder
    assert set(os.listdir("/proc/self/fd")) <= before


def test_an_adoption_whose_error_file_is_gone_leaves_no_descriptor_open(tmp_path: Path) -> None:
    # Found by a review: `resume` looked, then the stderr file went before the adoption
    # (anticipated: "its files are gone since resume looked"): the stdout file, opened first,
    # was left open.
    from flightdeck.engine.agents.process import Record
    from flightdeck.engine.agents.tree import Pid

    files = Files(tmp_path / "out", tmp_path / "err")
    files.out.write_bytes(b"a line\n")
    before = set(os.listdir("/proc/self/fd"))
    assert Process.adopt(Record(Pid(os.getpid(), -1), None, files), tag="b/c") is None
    assert set(os.listdir("/proc/self/fd")) <= before
