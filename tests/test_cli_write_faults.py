"""A command that cannot write where it must: one clear error naming the place, and nothing
half-written left behind (a resume in a read-only state folder, a report on a full disk)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from flightdeck.tui.cli import main
from flightdeck.tui.exitcodes import ExitCode

from faults import fill, read_only, small_filesystem
from test_resume import abandoned


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file's bytes, but SQLite's shared-memory index a reader leaves, and a WAL it
    leaves empty."""
    files = {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    if files.pop("flightdeck.db-wal", b"") != b"":
        raise AssertionError("the WAL holds writes")
    files.pop("flightdeck.db-shm", None)
    return files


def test_resume_in_a_read_only_state_folder_says_so_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with small_filesystem("4m") as fs:
        state = fs / "state"
        abandoned(state)
        before = files_of(state)
        subprocess.run(["mount", "-o", "remount,ro", str(fs)], check=True)
        assert main(["resume", "b1", "--state-dir", str(state)]) == ExitCode.USAGE
        assert capsys.readouterr() == (
            "",
            f"flightdeck: state_dir: cannot use {state}: not writable\n",
        )
        assert files_of(state) == before


def test_resume_whose_batch_folder_is_read_only_names_that_folder_and_changes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It said `cannot use STATE: Read-only file system`, naming the state folder (writable)
    # not the batch's folder, after claiming the batch: its row had changed.
    state = tmp_path / "state"
    _, folder = abandoned(state)
    before = files_of(state)
    with read_only(folder):
        assert main(["resume", "b1", "--state-dir", str(state)]) == ExitCode.USAGE
    out, err = capsys.readouterr()
    said = f"flightdeck: state_dir: cannot use {state}: {folder} is not writable\n"
    assert (out, err) == ("", said)
    assert files_of(state) == before


@pytest.mark.parametrize(("mode", "unbuffered"), [("w", "1"), ("a", "")])
def test_a_report_the_full_disk_cuts_short_leaves_its_file_as_it_was(
    tmp_path: Path, mode: str, unbuffered: str
) -> None:
    # It printed a traceback, or (PYTHONUNBUFFERED: the text layer drops what a short write
    # left) ended 0 with the report's first 4 KB as the file: a cut report taken for whole.
    state = tmp_path / "state"
    abandoned(state)
    with small_filesystem("1m") as fs:
        out = fs / "report.json"
        out.write_text("kept\n" if mode == "a" else "")
        # One page free (the rest of the file's own, appending): the report (about 5 KB) is
        # cut inside it.
        fill(fs, keep=0 if mode == "a" else 4096)
        argv = [sys.executable, "-m", "flightdeck.tui.cli", "report", "b1", "--format", "json"]
        with open(out, mode) as file:
            done = subprocess.run(
                [*argv, "--state-dir", str(state)],
                stdout=file,
                env={**os.environ, "PYTHONUNBUFFERED": unbuffered},
                stderr=subprocess.PIPE,
                text=True,
                timeout=120,
            )
        assert done.returncode == ExitCode.INCOMPLETE, done.stderr
        assert done.stderr == (
            f"flightdeck: cannot write to {out}: No space left on device: nothing of it was kept\n"
        )
        assert out.read_text() == ("kept\n" if mode == "a" else "")
