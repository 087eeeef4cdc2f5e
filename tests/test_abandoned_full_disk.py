"""A batch abandoned while its store's disk is full, as `report`, `ls` and `wait` tell it: not
that its owner died (the store may have given up), and its elapsed time a lower bound."""

from __future__ import annotations

from pathlib import Path

import pytest
from flightdeck.engine.attached.view import StoreView
from flightdeck.engine.model import ChildStatus
from flightdeck.engine.records.markdown import render_markdown
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.report import build_report
from flightdeck.engine.records.store import Store
from flightdeck.tui.cli import main
from flightdeck.tui.exitcodes import ExitCode

from faults import fill, small_filesystem
from helpers import batch, settings, sim_route
from test_resume import dead_batch
from test_store import make_child


def gave_up(state: Path) -> None:
    """Batch b1 as an owner on a full disk left it: its heartbeats refused from the first
    (1001.0), one child's end recorded after that (1400.0), one still `running`."""
    info = dead_batch(state, settings(sim_route()), batch(2), heartbeat_ts=1001.0)
    done = make_child(0, id="t0000", status=ChildStatus.COMPLETED, finished_ts=1400.0)
    running = make_child(1, id="t0001", status=ChildStatus.RUNNING, started_ts=1390.0)
    with Store(state / "flightdeck.db") as store:
        store.create_batch(info)
        store.add_children("b1", [done, running])


def test_an_abandoned_batch_s_time_runs_to_the_last_thing_recorded_of_it(tmp_path: Path) -> None:
    # Found by a review: heartbeats a full disk refused from the first left the report's
    # elapsed 0.0s, though a child's end, recorded 399 s later, says it ran that long at least.
    gave_up(tmp_path)
    with StoreReader(tmp_path / "flightdeck.db") as reader:
        report = build_report(reader, "b1")
    assert report["status"] == "abandoned" and report["elapsed_s"] == 400.0
    assert report["disk_full"] is False
    assert "- elapsed: 6m40s" in render_markdown(report)
    view = StoreView(tmp_path / "flightdeck.db", "b1", watch=False)  # the TUI's meter
    try:
        assert view.snapshot().finished_ts == 1400.0
    finally:
        view.close()


def test_a_batch_the_store_gave_up_on_a_full_disk_says_so_in_report_ls_and_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found by a review: after `run` exited 3 on a full disk, `report`, `ls` and `wait` said
    # only that its owner died, and the report's elapsed read 0.0s. A second review: that the
    # store gave up is not known (a batch killed weeks ago would be said so too), the full disk
    # now is.
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "250")
    with small_filesystem("2m") as fs:
        gave_up(fs)
        fill(fs, keep=256 << 10)  # room for a reader's shared-memory file, none for commits
        state = ["--state-dir", str(fs)]
        resume = f"free some space, then `flightdeck resume b1 --state-dir {fs}` runs it to the end"
        # Said as what is known now (the disk is full), not as the cause: no row could say it.

        assert main(["report", "b1", *state]) == ExitCode.OK
        md = capsys.readouterr().out
        assert (
            "- status: **abandoned** (its owner ended before 1 of its children ended, and the "
            "disk holding its store is full now: the store may have given up there, its last "
            f"records kept out; {resume})"
        ) in md, md
        assert "- elapsed: 6m40s at least" in md
        assert "| running when its owner ended | 1 |" in md
        assert "| t0001 | running when its owner ended |" in md
        assert main(["report", "b1", "--format", "json", *state]) == ExitCode.OK
        assert '"elapsed_s": 400.0,\n  "disk_full": true,' in capsys.readouterr().out

        assert main(["ls", *state]) == ExitCode.OK
        assert "│ abandoned (disk full) │" in capsys.readouterr().out

        assert main(["wait", "b1", *state]) == ExitCode.INCOMPLETE
        err = capsys.readouterr().err
        assert "batch b1 was abandoned: its owner process (pid" in err
        assert "has ended and the disk holding its store is full" in err
        assert f"; {resume}" in err
