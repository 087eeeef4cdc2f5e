"""Durable batches: a real owner process killed with SIGKILL, then `flightdeck resume`.

What ran is counted by the provider (the loopback server sees each child's first request),
not taken from the store's own claim."""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from flightdeck.engine.model import BatchStatus, ChildStatus
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.requests import request

from durable import CountingServer, flightdeck, project
from helpers import HANG_S, cli, finished_here
from loopback import KEY_ENV

CHILDREN = 9


# The ceilings are for a hung owner, not a slow one: a `flightdeck` process starting on a
# machine at a load of 20 takes tens of seconds before it does anything.
def until(condition: Callable[[], bool], timeout: float = 90, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def db_of(folder: Path) -> Path:
    return folder / "state" / "flightdeck.db"


def killed_owner(folder: Path, server: CountingServer, moment: Callable[[], bool]) -> str:
    """Start `flightdeck run --headless`, SIGKILL it at `moment`; the batch id. Requests the
    server holds are let go, and every request the owner sent before it died is counted
    (a loaded machine reads one late) before this returns."""
    owner = flightdeck(folder, "run", "tasks.jsonl", "--headless")
    try:
        until(lambda: moment() or owner.poll() is not None, what="the moment to kill")
        owner.send_signal(signal.SIGKILL)
    finally:
        owner.wait(HANG_S)
        owner.communicate()
    server.release()
    until(server.server.idle, what="the dead owner's requests read")
    until(db_of(folder).is_file, what="the database")
    with StoreReader(db_of(folder)) as reader:
        batch_id = reader.latest_batch_id()
    assert batch_id is not None
    return batch_id


def resumed(folder: Path, batch_id: str, *args: str) -> tuple[int, str, str]:
    proc = flightdeck(folder, "resume", batch_id, *args)
    out, err = proc.communicate(timeout=120)
    return proc.returncode, out, err


@pytest.mark.slow
@pytest.mark.parametrize("when", ["before_first_commit", "mid_run", "final_commits"])
def test_a_killed_owner_is_resumed_and_no_finished_child_runs_again(
    tmp_path: Path, when: str
) -> None:
    with CountingServer() as server:
        folder = project(tmp_path, server, CHILDREN)
        moments = {
            "before_first_commit": lambda: server.total_runs() >= 1,
            "mid_run": lambda: server.total_runs() >= CHILDREN // 2,
            # every reply sent: the owner is committing the last rows and the batch's end
            "final_commits": lambda: len(server.server.served) >= CHILDREN,
        }
        batch_id = killed_owner(folder, server, moments[when])
        with StoreReader(db_of(folder)) as reader:
            info = reader.batch(batch_id)
            before = {c.id: c.status for c in reader.children(batch_id)}
        assert info is not None
        if info.status != BatchStatus.COMPLETED:  # the kill can land just after the end
            assert info.status == BatchStatus.ABANDONED
            assert info.finished_ts is not None  # elapsed frozen at the last heartbeat
        if when == "before_first_commit":
            assert ChildStatus.COMPLETED not in before.values()
        ran_before = server.snapshot()

        code, out, err = resumed(folder, batch_id)
        assert code == 0, out + err

        runs = server.snapshot()
        with StoreReader(db_of(folder)) as reader:
            after = reader.batch(batch_id)
            rows = reader.children(batch_id)
        assert after is not None and after.status == BatchStatus.COMPLETED
        assert [r.id for r in rows] == [f"c{i:03d}" for i in range(CHILDREN)]
        assert all(r.status == ChildStatus.COMPLETED for r in rows)
        for child, status in before.items():
            if status == ChildStatus.COMPLETED:
                assert runs[child] == 1, f"{child} finished before the kill, ran again"
        for i in range(CHILDREN):
            child = f"c{i:03d}"
            assert 1 <= runs[child] <= 2, (child, runs[child])
            if runs[child] == 2:  # only a child that was running at the kill
                assert ran_before[child] == 1 and before.get(child) != ChildStatus.COMPLETED
        conn = sqlite3.connect(db_of(folder))
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.close()


@pytest.mark.slow
def test_steer_stop_and_wait_reach_a_live_owner_and_a_pending_one_survives_a_kill(
    tmp_path: Path,
) -> None:
    with CountingServer(chunk_delay_s=0.05) as server:
        server.hold()  # every child waits at its first request until the test lets it go
        folder = project(tmp_path, server, 12, pool=2)
        owner = flightdeck(folder, "run", "tasks.jsonl", "--headless")
        try:
            until(lambda: server.runs["c000"] >= 1, what="c000's first request")
            with StoreReader(db_of(folder)) as reader:
                batch_id = reader.latest_batch_id()
            assert batch_id is not None
            stop = flightdeck(folder, "stop", batch_id, "c011")  # queued: never runs
            out, err = stop.communicate(timeout=120)
            assert stop.returncode == 0, err
            assert "stop applied: c011" in out
            log = folder / "state" / "batches" / batch_id / "c000.log"
            steer = flightdeck(folder, "steer", batch_id, "c000", "-m", "mind the tests")
            until(
                lambda: log.is_file() and "mind the tests" in log.read_text(),
                what="the steer applied",
            )
            server.release("c000")  # its first turn ends: the steer goes in before the next
            out, err = steer.communicate(timeout=120)
            assert steer.returncode == 0, err
            assert "c000: delivered" in out
            waiter = flightdeck(folder, "wait", batch_id)
            everything = flightdeck(folder, "stop", batch_id, "--all")  # c001, c002: held
            out, err = everything.communicate(timeout=120)
            assert everything.returncode == 0 and "stop applied: every child" in out, err
            out, err = waiter.communicate(timeout=120)
            assert waiter.returncode == 1, err  # stopped: not every child completed
            assert f"batch {batch_id} stopped" in out
            assert owner.wait(120) == 1  # the owner ends with the batch
        finally:
            owner.kill()
            owner.communicate()
            server.release()
        assert server.runs["c011"] == 0  # stopped while queued: never ran
        text = log.read_text()
        assert "operator" in text and "delivered: mind the tests" in text


@pytest.mark.slow
def test_a_request_left_pending_by_a_dead_owner_is_applied_by_resume(tmp_path: Path) -> None:
    from flightdeck.engine.commands import Steer, Stop
    from flightdeck.engine.records.requests import submit

    with CountingServer(chunk_delay_s=0.05) as server:
        folder = project(tmp_path, server, 8, pool=2)
        server.hold()  # two children held running: none ends before the kill
        batch_id = killed_owner(folder, server, lambda: server.total_runs() >= 2)
        db = db_of(folder)
        steer = submit(db, batch_id, Steer(("c007",), "after the crash"))
        stop = submit(db, batch_id, Stop(("c006",)))
        # the CLI says plainly that nobody will apply it now
        proc = flightdeck(folder, "stop", batch_id, "c005")
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 1 and "is gone" in err and f"flightdeck resume {batch_id}" in err
        code, out, err = resumed(folder, batch_id, "--no-rerun")
        assert code == 1, out + err  # one stopped, the lost ones left unknown
        assert "re-run" in out
        steered, stopped = request(db, batch_id, steer), request(db, batch_id, stop)
        assert steered is not None and steered.state.value == "applied"
        assert [r.state.value for r in steered.receipts] == ["delivered"]
        assert stopped is not None and stopped.state.value == "applied"
        with StoreReader(db) as reader:
            rows = {r.id: r for r in reader.children(batch_id)}
        assert rows["c006"].status == ChildStatus.STOPPED and server.runs["c006"] == 0
        lost = [r for r in rows.values() if r.status == ChildStatus.UNKNOWN]
        assert lost and all("owner lost" in (r.error or "") for r in lost)
        assert all(server.runs[r.id] == 1 for r in lost)  # --no-rerun: never run again
        assert all("owner lost" in Path(r.transcript).read_text() for r in lost)


@pytest.mark.slow
def test_two_resumes_at_once_leave_one_owner(tmp_path: Path) -> None:
    with CountingServer() as server:
        folder = project(tmp_path, server, 6, pool=2)
        batch_id = killed_owner(folder, server, lambda: server.total_runs() >= 1)
        server.hold()  # the winner cannot finish before the loser has tried
        first, second = (
            flightdeck(folder, "resume", batch_id),
            flightdeck(folder, "resume", batch_id),
        )
        until(lambda: first.poll() is not None or second.poll() is not None, what="a loser")
        loser, winner = (first, second) if first.poll() is not None else (second, first)
        out, err = loser.communicate(timeout=90)
        assert loser.returncode == 2, out + err
        assert f"owned by a live process (pid {winner.pid})" in err
        server.release()
        out, err = winner.communicate(timeout=120)
        assert winner.returncode == 0, out + err
        assert all(1 <= server.runs[f"c{i:03d}"] <= 2 for i in range(6))


@pytest.mark.slow
def test_resume_bad_input_is_one_line_and_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    with CountingServer() as server:
        folder = project(tmp_path, server, 2)
        missing = flightdeck(folder, "resume", "nope")  # a process, as a user runs it
        _, err = missing.communicate(timeout=90)
        assert missing.returncode == 2 and "no flightdeck state here" in err
        # The rest in this process: the tests above (and test_retry's) run each as a process.
        monkeypatch.setenv(KEY_ENV, "sk-test-durable")
        monkeypatch.chdir(folder)
        batch_id = finished_here(folder)
        before = db_of(folder).read_bytes()
        for args, code, text in (
            (("resume", "nope"), 2, "no batch 'nope' in "),
            (("resume", str(batch_id)), 0, "nothing to do"),
            (("steer", "nope", "c000", "-m", "hi"), 2, "no batch 'nope'"),
            (("steer", str(batch_id), "c000", "-m", "hi"), 2, "has ended (completed)"),
            (("stop", str(batch_id)), 2, "name the children to stop, --all or --where"),
            (("stop", str(batch_id), "--where", "idle>5d"), 2, "--where: 'idle>5d': unknown unit"),
            (("stop", "nope", "--where", "stauts:x"), 2, "'stauts:x': unknown field 'stauts'"),
            (("steer", str(batch_id), "--where", "is:tagged", "-m", "hi"), 2, "nothing is tagged"),
            (("stop", str(batch_id), "c000", "--where", "idle>1m"), 2, "not both"),
            # an unset shell variable: refused, not taken as a query that keeps every child
            (("stop", str(batch_id), "--where", " "), 2, "--where: the query is empty (--all"),
            (("retry", str(batch_id), "--where", ""), 2, "--where: the query is empty"),
            (("steer", str(batch_id), "-m", "hi"), 2, "name the children to steer, or --where"),
            (("stop", str(batch_id), "--where", "durable"), 0, "2 children match `durable`, 2 had"),
            # as a child that has ended is said: nothing is left to act on, no error
            (("stop", str(batch_id), "c000"), 0, "c000: had already ended (completed)"),
            (("stop", str(batch_id), "--all"), 0, "has ended (completed): nothing left to stop"),
            (("pause", str(batch_id)), 0, "has ended (completed): nothing left to pause"),
            (("continue", str(batch_id)), 0, "has ended (completed): nothing left to continue"),
            # Two children alike: neither is over 3x the other's median.
            (("stop", str(batch_id), "--where", "is:outlier"), 0, "0 children match `is:outlier`"),
            (("wait", "nope"), 2, "no batch 'nope'"),
            (("wait", str(batch_id)), 0, "completed"),
        ):
            said = cli(capsys, *args)
            assert said[0] == code, (args, said)
            shown = said[1] + said[2]
            assert text in shown, (args, shown)
            assert len(shown.strip().splitlines()) == 1, (args, shown)
        assert db_of(folder).read_bytes() == before


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_resume_in_a_state_folder_the_user_cannot_write(tmp_path: Path) -> None:
    with CountingServer() as server:
        folder = project(tmp_path, server, 1)
        flightdeck(folder, "run", "tasks.jsonl", "--headless").communicate(timeout=120)
        state = folder / "state"
        state.chmod(0o500)
        try:
            proc = flightdeck(folder, "resume", "x")
            _out, err = proc.communicate(timeout=90)
        finally:
            state.chmod(0o700)
        assert proc.returncode == 2 and "not writable" in err


@pytest.mark.slow
def test_stop_and_steer_where_a_query_picks_the_children_of_a_live_owner(tmp_path: Path) -> None:
    with CountingServer(chunk_delay_s=0.05) as server:
        server.hold()  # c000 and c001 held running, the rest queued, until the test says
        folder = project(tmp_path, server, 40, pool=2)
        owner = flightdeck(folder, "run", "tasks.jsonl", "--headless")
        try:
            until(lambda: server.total_runs() >= 2, what="the first two runs")
            with StoreReader(db_of(folder)) as reader:
                batch_id = reader.latest_batch_id()
            assert batch_id is not None
            query = 'status:queued "task c03"'
            stop = flightdeck(folder, "stop", batch_id, "--where", query)
            out, err = stop.communicate(timeout=120)
            assert stop.returncode == 0, err
            assert out.splitlines() == [f"10 children match `{query}`", "stop applied: 10 children"]

            steer = flightdeck(
                folder, "steer", batch_id, "--where", "status:running", "-m", "mind the tests"
            )
            logs = [folder / "state" / "batches" / batch_id / f"{c}.log" for c in ("c000", "c001")]
            until(
                lambda: all(p.is_file() and "mind the tests" in p.read_text() for p in logs),
                what="the steers applied",
            )
            server.release("c000")  # their turns end: the steers go in before the next
            server.release("c001")
            out, err = steer.communicate(timeout=120)
            assert steer.returncode == 0, err
            first, *receipts = out.splitlines()
            assert first == "2 children match `status:running`"
            settled = sorted(line for line in receipts if ": queued" not in line)
            assert settled == ["c000: delivered", "c001: delivered"]  # each settles once

            everything = flightdeck(folder, "stop", batch_id, "--all")  # the next two: held
            assert everything.communicate(timeout=120)[0].startswith("stop applied")
            assert owner.wait(120) == 1
        finally:
            owner.kill()
            owner.communicate()
        assert all(server.runs[f"c03{i}"] == 0 for i in range(10))  # stopped while queued
        with StoreReader(db_of(folder)) as reader:
            stopped = {c.id for c in reader.children(batch_id) if c.status is ChildStatus.STOPPED}
        assert {f"c03{i}" for i in range(10)} <= stopped


@pytest.mark.slow
def test_pause_and_continue_reach_a_live_owner_children_and_admission(tmp_path: Path) -> None:
    with CountingServer(chunk_delay_s=0.02) as server:
        server.hold()  # the first two held running: every c01x is still queued when paused
        folder = project(tmp_path, server, 20, pool=2)
        owner = flightdeck(folder, "run", "tasks.jsonl", "--headless")
        try:
            until(lambda: server.total_runs() >= 1, what="the first run")
            with StoreReader(db_of(folder)) as reader:
                batch_id = reader.latest_batch_id()
            assert batch_id is not None

            def run(*args: str) -> list[str]:
                proc = flightdeck(folder, *args)
                out, err = proc.communicate(timeout=120)
                assert proc.returncode == 0, err
                return out.splitlines()

            assert run("pause", batch_id) == [f"pause applied: admission of batch {batch_id}"]
            with StoreReader(db_of(folder)) as reader:
                info = reader.batch(batch_id)
            assert info is not None and info.held == "paused by the operator"
            assert run("limits", batch_id)[-1] == "held: paused by the operator"  # any hold
            query = 'status:queued "task c01"'
            out = run("pause", batch_id, "--where", query)
            assert out == [f"10 children match `{query}`", "pause applied: 10 children"]

            def statuses() -> dict[str, ChildStatus]:
                with StoreReader(db_of(folder)) as reader:
                    return {c.id: c.status for c in reader.children(batch_id)}

            # What was running ends; nothing new starts while admission is paused.
            server.release()
            until(lambda: ChildStatus.RUNNING not in statuses().values(), what="the running")
            started = server.total_runs()
            time.sleep(0.2)
            assert server.total_runs() == started
            assert run("continue", batch_id) == [f"continue applied: admission of batch {batch_id}"]
            # The paused never start: every other child ends, and the batch waits for them.
            until(
                lambda: sum(s is ChildStatus.COMPLETED for s in statuses().values()) == 10,
                what="the children not paused",
            )
            assert {i for i, s in statuses().items() if s is ChildStatus.PAUSED} == {
                f"c01{i}" for i in range(10)
            }
            assert owner.poll() is None
            out = run("continue", batch_id, "c010", "c011")
            assert out == ["continue applied: c010, c011"]
            out = run("continue", batch_id, "--where", "status:paused")
            assert out[-1] == "continue applied: 8 children"
            assert owner.wait(120) == 0
            said = owner.communicate()[0].splitlines()
        finally:
            owner.kill()
            if owner.stdout is not None and not owner.stdout.closed:
                owner.communicate()
        # The headless owner said when admission was held, and when it was released.
        held = [line for line in said if line.startswith("admission")]
        # Its command names the state folder, as its other hints do: pasted into another shell
        # (whose default folder may differ), it reaches this batch.
        go_on = f"flightdeck continue {batch_id} --state-dir {db_of(folder).parent}"
        assert held == [
            f"admission held: paused by the operator (`{go_on}` continues it)",
            "admission released: children start again",
        ]
        with StoreReader(db_of(folder)) as reader:
            kinds = [k for _, c, k, _ in reader.events(batch_id)]
        assert kinds.count("pause") == 10 and kinds.count("continue") == 10
        assert kinds.count("pause_admission") == kinds.count("continue_admission") == 1


def test_pause_and_continue_check_their_arguments(tmp_path: Path) -> None:
    with CountingServer() as server:
        folder = project(tmp_path, server, 1)
        proc = flightdeck(folder, "pause", "b-none", "--where", "bogus:1")
        _, err = proc.communicate(timeout=90)
        assert proc.returncode == 2 and "bogus" in err
        proc = flightdeck(folder, "continue", "b-none", "c1", "--where", "status:paused")
        _, err = proc.communicate(timeout=90)
        assert proc.returncode == 2 and "not both" in err
