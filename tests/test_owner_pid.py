"""The owner's pid, where an operator looks for the process running a batch: the first line of
its owner.log, `flightdeck ls --long`, and the report."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from flightdeck.tui.exitcodes import ExitCode

from helpers import cli, flightdeck

QUICK = "[routes.sim]\ntime_scale = 0.001\nlatency_ms = 20\ntokens_per_s = 400\n"


@pytest.mark.slow  # a detached owner
def test_the_owners_pid_is_in_its_log_in_ls_long_and_in_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "flightdeck.toml").write_text(QUICK, encoding="utf-8")
    (tmp_path / "tasks.jsonl").write_text('{"id": "c1", "goal": "Review it"}\n', encoding="utf-8")
    started = flightdeck("run", "--detach", "tasks.jsonl", cwd=tmp_path)
    assert started.returncode == ExitCode.OK, started.stderr
    batch_id = started.stdout.strip()
    said = re.search(r"owner pid (\d+), log (\S+)", started.stderr)
    assert said is not None, started.stderr
    pid, log = int(said.group(1)), Path(said.group(2))
    # wait, ls and report in this process: other tests run each as a process
    monkeypatch.chdir(tmp_path)
    assert cli(capsys, "wait", batch_id)[0] == ExitCode.OK

    assert log.read_text().splitlines()[0] == f"owner pid {pid} of batch {batch_id}"
    listing = cli(capsys, "ls", "--long")[1]
    [row] = [line for line in listing.splitlines() if batch_id[:8] in line]
    assert f"│ {pid} " in row and "owner pid" in listing
    assert "owner pid" not in cli(capsys, "ls")[1]  # the short listing
    assert f"- owner: pid {pid}\n" in cli(capsys, "report", batch_id)[1]
    report = json.loads(cli(capsys, "report", batch_id, "--format", "json")[1])
    assert report["owner_pid"] == pid


def test_an_owner_that_died_after_a_warning_is_not_said_to_have_failed_with_it(
    tmp_path: Path,
) -> None:
    # Every command logs its warnings as `flightdeck: warning: …` lines (tui/logs.py): in an
    # owner's log, one of those is no reason it died, which a traceback's last line says.
    from flightdeck.engine.attached.spawn import _last_error

    log = tmp_path / "owner.log"
    warned = "flightdeck: warning: could not make Ray's token file /h/.ray/auth_token: denied\n"
    log.write_text(f"{warned}Traceback (most recent call last):\n  File 'x'\nRuntimeError: boom\n")
    assert _last_error(log) == "RuntimeError: boom"
    log.write_text(f"flightdeck: flightdeck.toml:3: pool: bad\n{warned}")  # an error said first
    assert _last_error(log) == "flightdeck.toml:3: pool: bad"
    log.write_text("flightdeck: error: flightdeck store: cannot commit\n")  # logged, and the end
    assert _last_error(log) == "error: flightdeck store: cannot commit"
