"""`flightdeck limits` against a real owner process: print, change, and refuse bad input with
one line naming the argument (exit 2, nothing written); a resumed batch keeps the changes; a
headless soft-budget hold says how to go on, and `--soft-cost` releases it."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.records.reader import StoreReader
from flightdeck.tui.cli import main

from durable import CountingServer, flightdeck, project
from helpers import HANG_S


def until(condition: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.005)


def run(folder: Path, *args: str) -> tuple[int, str, str]:
    proc = flightdeck(folder, *args)
    out, err = proc.communicate(timeout=HANG_S)
    return proc.returncode, out, err


def limit_requests(db: Path) -> int:
    with sqlite3.connect(db) as conn:
        return int(
            conn.execute("SELECT count(*) FROM requests WHERE kind = 'limits'").fetchone()[0]
        )


@pytest.mark.slow
def test_limits_prints_changes_refuses_bad_arguments_and_survives_a_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with CountingServer() as server:
        server.hold()  # every request waits: the children stay running
        folder = project(tmp_path, server, 10, pool=2)
        owner = flightdeck(folder, "run", "tasks.jsonl", "--headless")
        db = folder / "state" / "flightdeck.db"
        try:
            until(lambda: server.total_runs() == 2)
            with StoreReader(db) as reader:
                batch_id = reader.latest_batch_id()
            assert batch_id is not None
            code, out, _ = run(folder, "limits", batch_id)
            assert code == 0
            assert out.splitlines() == [
                "pool 2",
                "route lb: max_concurrent off, rpm off, tpm off",
                "soft budget off (hard budget none)",
            ]
            code, _, err = run(folder, "limits", batch_id, "--pool", "0")  # as a user runs it
            assert code == 2 and len(err.strip().splitlines()) == 1 and "--pool" in err, err
            state = ("--state-dir", str(folder / "state"))
            for args, named in (  # the same command in this process: no interpreter start each
                (["--rpm", "fast"], "--rpm"),
                (["--route", "nope", "--tpm", "5"], "--route"),
                (["--route", "lb"], "--route"),
                (["--soft-cost", "-1"], "--soft-cost"),
                (["--max-concurrent", "0"], "--max-concurrent"),
                # The config's bound (1024), which a live change was let past:
                (
                    ["--max-concurrent", "999999999"],
                    "--max-concurrent: must be a whole number "
                    "between 1 and 1024 (or off), got 999999999",
                ),
                (["--pool", "off"], "--pool: must be a whole number between 1 and 1024, got 'off'"),
            ):
                assert main(["limits", batch_id, *args, *state]) == 2, args
                err = capsys.readouterr().err
                assert len(err.strip().splitlines()) == 1 and named in err, err
            assert limit_requests(db) == 0  # nothing written

            code, out, err = run(folder, "limits", batch_id, "--pool", "5", "--max-concurrent", "4")
            assert code == 0, err
            assert out.strip() == "limits applied: pool 5; route lb max_concurrent 4"
            until(lambda: server.total_runs() == 4)  # the route's cap of 4, under the pool's 5
            code, out, _ = run(folder, "limits", batch_id)
            assert out.splitlines()[:2] == [
                "pool 5",
                "route lb: max_concurrent 4, rpm off, tpm off",
            ]
            with StoreReader(db) as reader:
                info = reader.batch(batch_id)
                events = [d for _, _, k, d in reader.events(batch_id) if k == "limits"]
            assert info is not None and info.pool_size == 5
            assert [json.loads(d)["change"] for d in events] == [
                {"pool_size": 5, "routes": {"lb": {"max_concurrent": 4}}}
            ]
            code, _, err = run(folder, "limits", batch_id, "--rpm", "90", "--soft-cost", "7.5")
            assert code == 0, err
            owner.send_signal(signal.SIGKILL)  # the owner dies: resume takes the batch over
            owner.wait(HANG_S)
        finally:
            server.release()
            owner.kill()
            owner.communicate()
    # A resumed batch keeps what the operator changed: built from the store (not started).
    engine = Engine.resume(folder / "state", batch_id)
    try:
        assert engine.pool_size == 5
        assert (engine.routes["lb"].max_concurrent, engine.routes["lb"].rpm) == (4, 90)
        limits = engine.limits()
        assert (limits.pool_size, limits.soft_cost_usd) == (5, Decimal("7.5"))
    finally:
        engine.close()


def held_owner(folder: Path) -> tuple[subprocess.Popen[str], str]:
    """A headless owner of the project's batch, started under a soft budget of $0 and returned
    once admission is held (no child has started); and the batch's id."""
    toml = folder / "flightdeck.toml"
    toml.write_text(toml.read_text() + "\n[budget]\nsoft_cost_usd = 0\n")
    owner = flightdeck(folder, "run", "tasks.jsonl", "--headless")
    db = folder / "state" / "flightdeck.db"
    try:
        until(db.is_file)
        with StoreReader(db) as reader:
            until(
                lambda: (
                    (i := reader.batch(reader.latest_batch_id() or "")) is not None
                    and i.held is not None
                )
            )
            batch_id = reader.latest_batch_id()
    except BaseException:
        owner.kill()
        raise
    assert batch_id is not None
    return owner, batch_id


@pytest.mark.slow
def test_a_headless_soft_budget_hold_says_how_to_go_on(tmp_path: Path) -> None:
    with CountingServer() as server:
        folder = project(tmp_path, server, 6, pool=1)
        owner, batch_id = held_owner(folder)
        try:
            assert server.total_runs() == 0
            code, out, err = run(folder, "limits", batch_id, "--soft-cost", "off")
            assert code == 0, err
            assert out.strip() == "limits applied: soft budget off"
            out, err = owner.communicate(timeout=HANG_S)
        finally:
            server.release()
            owner.kill()
        held = [line for line in out.splitlines() if line.startswith("held:")]
        assert held == [
            f"held: soft budget $0.00 reached: spent $0.00; running children go on. To go on: "
            f"flightdeck limits {batch_id} --soft-cost USD --state-dir {folder / 'state'} "
            f"(raise it) or --soft-cost off (drop it); to stop: flightdeck stop {batch_id} "
            f"--all --state-dir {folder / 'state'}"
        ], out
        assert owner.returncode == 0, err
        assert server.total_runs() == 6


@pytest.mark.slow
def test_wait_and_continue_on_a_soft_budget_hold_say_how_to_lift_it(tmp_path: Path) -> None:
    # Found by a walk-through: `wait` said "admission held: soft budget $0.00 reached: spent
    # $0.00" and nothing more, where an operator's pause comes with the command that continues
    # it; `continue` said "not paused", of a batch that starts nothing.
    with CountingServer() as server:
        folder = project(tmp_path, server, 2, pool=1)
        owner, batch_id = held_owner(folder)
        waiting = flightdeck(folder, "wait", batch_id)
        try:
            assert waiting.stderr is not None
            assert waiting.stderr.readline().startswith(f"waiting for batch {batch_id} to end")
            state = folder / "state"
            assert waiting.stderr.readline() == (
                "admission held: soft budget $0.00 reached: spent $0.00. To go on: flightdeck "
                f"limits {batch_id} --soft-cost USD --state-dir {state} (raise it) or "
                "--soft-cost off (drop it)\n"
            )
            # `continue`, the natural next try, sends nothing (nothing is paused) and says how.
            code, out, err = run(folder, "continue", batch_id)
            assert (code, err) == (0, ""), err
            assert out == (
                f"admission of batch {batch_id}: not paused, but it is held: soft budget $0.00 "
                f"reached: spent $0.00. To go on: flightdeck limits {batch_id} --soft-cost USD "
                f"--state-dir {state} (raise it) or --soft-cost off (drop it)\n"
            )
            code, _, err = run(folder, "limits", batch_id, "--soft-cost", "off")
            assert code == 0, err
            out, err = waiting.communicate(timeout=HANG_S)
            assert waiting.returncode == 0, out + err
        finally:
            server.release()
            waiting.kill()
            owner.kill()
            owner.communicate()


@pytest.mark.slow
def test_a_hold_that_ends_with_the_batch_is_not_said_as_released(tmp_path: Path) -> None:
    # Found by an audit: a soft-budget hold ended by `stop --all` printed "admission released:
    # children start again" as the batch stopped, where nothing starts again.
    with CountingServer() as server:
        folder = project(tmp_path, server, 3, pool=1)
        owner, batch_id = held_owner(folder)
        try:
            code, _, err = run(folder, "stop", batch_id, "--all")
            assert code == 0, err
            out, err = owner.communicate(timeout=HANG_S)
        finally:
            server.release()
            owner.kill()
        said = [line for line in out.splitlines() if line.startswith(("held:", "admission"))]
        assert len(said) == 1 and said[0].startswith("held: soft budget $0.00 reached"), out
        assert server.total_runs() == 0


@pytest.mark.slow
def test_limits_of_a_batch_not_running_say_so_and_a_change_to_an_ended_one_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found by a walk-through: `limits` of an ended batch printed its limits as a running
    # batch's, exit 0, with not a word that nothing would apply them.
    state_dir = tmp_path / "state"
    state = ("--state-dir", str(state_dir))
    with CountingServer() as server:
        server.hold()
        folder = project(tmp_path, server, 1, pool=1)
        owner = flightdeck(folder, "run", "tasks.jsonl", "--headless")
        try:
            until(lambda: server.total_runs() == 1)
            with StoreReader(state_dir / "flightdeck.db") as reader:
                batch_id = reader.latest_batch_id()
            assert batch_id is not None
            owner.send_signal(signal.SIGKILL)
            owner.wait(HANG_S)
        finally:
            owner.kill()
            owner.communicate()
        assert main(["limits", batch_id, *state]) == 0
        out, err = capsys.readouterr()
        assert out.splitlines()[0] == "pool 1"
        assert f"was abandoned: its owner process (pid {owner.pid}) died" in err
        assert f"`flightdeck resume {batch_id} --state-dir {state_dir}`" in err
        assert err.rstrip().endswith("its limits when the owner died:"), err
        server.release()
        code, _, err = run(folder, "resume", batch_id)
        assert code == 0, err

    assert main(["limits", batch_id, *state]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == [
        "pool 1",
        "route lb: max_concurrent off, rpm off, tpm off",
        "soft budget off (hard budget none)",
    ]
    assert err == f"flightdeck: batch {batch_id} has ended (completed); its limits when it ended:\n"
    assert main(["limits", batch_id, "--pool", "3", *state]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"flightdeck: batch {batch_id} has ended (completed): its limits can no longer change\n"
    )
    assert limit_requests(state_dir / "flightdeck.db") == 0


@pytest.mark.slow
def test_a_soft_budget_under_the_spend_says_it_holds_admission_with_its_applied(
    tmp_path: Path,
) -> None:
    # Found by a walk-through: `limits --soft-cost` under what was spent said "limits applied"
    # alone; the hold it made came a step later, so only another `limits` showed it.
    with CountingServer() as server:
        server.hold()  # every request waits: two children stay running, nothing spent
        folder = project(tmp_path, server, 6, pool=2)
        owner = flightdeck(folder, "run", "tasks.jsonl", "--headless")
        try:
            until(lambda: server.total_runs() == 2)
            with StoreReader(folder / "state" / "flightdeck.db") as reader:
                batch_id = reader.latest_batch_id()
            assert batch_id is not None
            code, out, err = run(folder, "limits", batch_id, "--soft-cost", "0")
            assert code == 0, err
            lines = out.splitlines()
            assert lines[0] == "limits applied: soft budget $0.00", out
            assert lines[1:] == ["held: soft budget $0.00 reached: spent $0.00"], out
        finally:
            server.release()
            owner.kill()
            owner.communicate()
