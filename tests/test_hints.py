"""The command lines printed to paste back into a shell (engine/attached/hints.py)."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest
from flightdeck.engine.attached.hints import command_line
from flightdeck.engine.sanitize import sanitize


def test_a_printed_command_pastes_back_as_the_words_it_was_made_of(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    long_id = "c" * 64 + ".1"  # a delegate of a child with the longest id: never cut
    line = command_line("my state", "answer", "20261205-041500-a3f2", long_id, "-m", "…")
    assert line.endswith("-m … --state-dir " + shlex.quote(str(tmp_path / "my state")))
    words = shlex.split(line.replace("…", "ok"))
    folder = str(tmp_path / "my state")  # absolute: it works from any folder
    assert words == [
        "flightdeck",
        "answer",
        "20261205-041500-a3f2",
        long_id,
        "-m",
        "ok",
        "--state-dir",
        folder,
    ]


def test_a_state_folder_with_escape_sequences_is_printed_inert(tmp_path: Path) -> None:
    line = command_line(tmp_path / "s\x1b]0;title\x07x", "report", "b1")
    assert "\x1b" not in line and "\x07" not in line


def test_a_state_folder_with_control_characters_pastes_back_as_that_folder(
    tmp_path: Path,
) -> None:
    # The folder was printed sanitized: "s\x1b]0;t\x07x" as "sx", another folder. Now in
    # bash's $'...' quoting, whose escapes bash reads back to the very bytes; the line itself
    # holds no control character, bidi mark or lone surrogate for the terminal to act on.
    weird = "s\x1b]0;t\x07x\t\n\x9b\u202e 'q' \\ é \udcff"  # \udcff: a byte not UTF-8 (0xff)
    folder = tmp_path / weird
    line = command_line(folder, "report", "b1")
    assert line.isprintable() and sanitize(line) == line
    assert line.startswith("flightdeck report b1 --state-dir $'")
    shown = line.removeprefix("flightdeck")
    out = subprocess.run(
        ["bash", "-c", "printf '%s\\0'" + shown], capture_output=True, check=True
    ).stdout
    assert out.split(b"\0")[:-1] == [b"report", b"b1", b"--state-dir", os.fsencode(folder)]
    # A printable folder keeps the plain quoting it had.
    assert command_line(tmp_path / "a b", "report").endswith(shlex.quote(str(tmp_path / "a b")))
