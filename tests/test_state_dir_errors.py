"""A state folder that cannot be used is said at the config line that named it, if a config
did; never judged when --state-dir or FLIGHTDECK_HOME overrides that line (ac5f5ca)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from flightdeck.tui.cli import main
from flightdeck.tui.exitcodes import ExitCode

from faults import small_filesystem
from test_cli import verbs_with_a_batch_id

CONFIG = '[engine]\nmax_concurrent = 2\nstate_dir = "{folder}"\n[routes.sim]\ntime_scale = 0.001\n'


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A task file, and a config whose [engine] state_dir (line 3) names a file."""
    (tmp_path / "blocker").write_text("a file where a folder should be")
    (tmp_path / "flightdeck.toml").write_text(CONFIG.format(folder="blocker"))
    (tmp_path / "tasks.jsonl").write_text(json.dumps({"id": "t0", "goal": "Summarize"}) + "\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("FLIGHTDECK_HOME", raising=False)
    return tmp_path


def test_a_configs_state_dir_that_is_a_file_is_said_at_its_line_by_every_command(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found by a review: `flightdeck: state_dir: cannot use …/blocker: …` named no file or line.
    blocker = project / "blocker"
    said = (
        f"flightdeck: flightdeck.toml:3: engine.state_dir: cannot use {blocker}: "
        f"{blocker} exists and is not a folder\n"
    )
    for args in (["run", "tasks.jsonl", "--headless"], ["ls"], *verbs_with_a_batch_id().values()):
        assert main(args) == ExitCode.USAGE, args
        assert capsys.readouterr() == ("", said), args
    # `run` on a terminal makes the batch's folder itself before its owner starts.
    assert main(["run", "tasks.jsonl", "--detach"]) == ExitCode.USAGE
    err = capsys.readouterr().err
    assert err == f"flightdeck: flightdeck.toml:3: engine.state_dir: cannot use {blocker}: " + (
        "Not a directory\n"
    )


def test_a_configs_state_dir_overridden_is_never_judged(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # 1992cde refused the config at load: `run --state-dir D` failed where it ran (ac5f5ca).
    assert main(["run", "tasks.jsonl", "--headless", "--state-dir", "state"]) == ExitCode.OK
    assert main(["ls", "--state-dir", "state"]) == ExitCode.OK
    monkeypatch.setenv("FLIGHTDECK_HOME", str(project / "home"))
    assert main(["run", "tasks.jsonl", "--headless"]) == ExitCode.OK
    capsys.readouterr()
    # An override that is itself no folder is said as the override, not at the config's line
    # (FLIGHTDECK_HOME naming the very file the config names too).
    monkeypatch.setenv("FLIGHTDECK_HOME", str(project / "blocker"))
    assert main(["run", "tasks.jsonl", "--headless"]) == ExitCode.USAGE
    assert capsys.readouterr().err.startswith("flightdeck: state_dir: cannot use ")


def test_a_configs_state_dir_on_a_read_only_filesystem_is_said_at_its_line(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with small_filesystem("1m") as fs:
        subprocess.run(["mount", "-o", "remount,ro", str(fs)], check=True)
        (project / "flightdeck.toml").write_text(CONFIG.format(folder=fs))
        for args in (["--headless"], ["--detach"]):
            assert main(["run", "tasks.jsonl", *args]) == ExitCode.USAGE, args
            assert capsys.readouterr().err == (
                f"flightdeck: flightdeck.toml:3: engine.state_dir: cannot use {fs}: "
                "Read-only file system\n"
            ), args


def test_a_blank_flightdeck_home_is_one_clear_error_not_a_folder_named_blank(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `run` made a state folder called ' ' (and `ls` looked for ` /flightdeck.db`).
    monkeypatch.setenv("FLIGHTDECK_HOME", " ")
    said = "flightdeck: FLIGHTDECK_HOME: must name a folder, got ' '\n"
    for args in (["run", "tasks.jsonl", "--headless"], ["run", "tasks.jsonl", "--detach"], ["ls"]):
        assert main(args) == ExitCode.USAGE, args
        assert capsys.readouterr() == ("", said), args
    assert not (project / " ").exists()
    # Empty, it is not set: the config's folder is used (here a file, said at its line).
    monkeypatch.setenv("FLIGHTDECK_HOME", "")
    assert main(["ls"]) == ExitCode.USAGE
    assert capsys.readouterr().err.startswith("flightdeck: flightdeck.toml:3: engine.state_dir:")
