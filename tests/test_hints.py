"""The command lines printed to paste back into a shell (engine/attached/hints.py)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from flightdeck.engine.attached.hints import command_line


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
