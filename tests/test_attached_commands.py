"""Commands from clients of a real owner process (engine/attached): the owner checks what it
reads from the store as it checks its own commands; `steer` says what it waits for and notices
a dead owner; `limits` prints what the owner learned from the provider."""

from __future__ import annotations

import select
import signal
import sqlite3
import subprocess
from pathlib import Path

import pytest
from flightdeck.engine.records.reader import StoreReader

from durable import CountingServer, flightdeck, project
from helpers import HANG_S, until
from loopback import Reply

pytestmark = pytest.mark.slow

LOCK_HELD = (
    "waiting for the batch's database: another process holds its lock (the owner, if it is "
    "stopped); Ctrl+C records nothing\n"
)


def live_owner(folder: Path) -> tuple[subprocess.Popen[str], str, Path]:
    """`flightdeck run --headless` in `folder`, once its batch row is in the store."""
    owner = flightdeck(folder, "run", "tasks.jsonl", "--headless")
    assert owner.stdout is not None
    first = owner.stdout.readline()  # "batch <id>", printed once it has started
    assert first.startswith("batch "), first
    batch_id = first.split()[1]
    db = folder / "state" / "flightdeck.db"

    def recorded() -> bool:
        with StoreReader(db) as reader:
            return reader.batch(batch_id) is not None

    until(recorded, HANG_S)
    return owner, batch_id, db


def ended(owner: subprocess.Popen[str]) -> None:
    if owner.poll() is None:
        owner.kill()
    owner.communicate()


def test_the_owner_refuses_what_a_client_recorded_that_its_checks_refuse(tmp_path: Path) -> None:
    # Issue 32: a 5,242,880-character steer and a NULL-message steer, written to the store,
    # were applied; the same steers from this process are refused.
    with CountingServer() as server:
        server.hold()  # every reply waits: c000 runs, the others stay queued
        folder = project(tmp_path, server, 3, pool=1, engine="max_task_chars = 100")
        owner, batch_id, db = live_owner(folder)
        try:
            until(lambda: server.total_runs() >= 1, HANG_S)
            with sqlite3.connect(db) as conn:  # as any client could: the columns every one has
                for message in ("x" * 101, None, "keep it short"):
                    conn.execute(
                        "INSERT INTO requests (batch_id, kind, child_ids, message, now, state,"
                        " created_ts) VALUES (?, 'steer', '[\"c001\"]', ?, 0, 'pending', 1.0)",
                        (batch_id, message),
                    )

            def settled() -> list[tuple[int, str, str | None]]:
                with sqlite3.connect(db) as conn:
                    return conn.execute(
                        "SELECT id, state, reason FROM requests ORDER BY id"
                    ).fetchall()

            until(lambda: all(state != "pending" for _, state, _ in settled()), HANG_S)
            long, null, short = settled()
            assert long[1] == "refused" and "too long: 101 characters" in str(long[2])
            assert null[1] == "refused" and "steer message: missing" in str(null[2])
            assert short[1] == "applied"
            # The command line checks it the same way before it records anything.
            proc = flightdeck(folder, "steer", batch_id, "c001", "-m", "y" * 101)
            out, err = proc.communicate(timeout=HANG_S)
            assert proc.returncode == 2 and "too long: 101 characters" in err, out + err
            assert len(settled()) == 3
        finally:
            server.release()
            ended(owner)
    transcript = (folder / "state" / "batches" / batch_id / "c001.log").read_text()
    assert "keep it short" in transcript and "x" * 101 not in transcript


def test_steer_on_a_queued_child_says_what_it_waits_for_and_that_its_owner_died(
    tmp_path: Path,
) -> None:
    # Issue 29: `steer` on a queued child waited 689 s in silence, through a kill -9 of the
    # owner, with no word that the owner was gone.
    with CountingServer() as server:
        server.hold()  # c000 holds the one slot: c002 stays queued
        folder = project(tmp_path, server, 3, pool=1)
        owner, batch_id, _ = live_owner(folder)
        try:
            until(lambda: server.total_runs() >= 1, HANG_S)
            steer = flightdeck(folder, "steer", batch_id, "c002", "-m", "mind the tests")
            assert steer.stdout is not None
            line = steer.stdout.readline()
            assert line == (
                "c002: queued — it has not started: delivered at its first turn; "
                "Ctrl+C leaves it queued\n"
            )
            owner.send_signal(signal.SIGKILL)
            owner.wait(HANG_S)
            out, err = steer.communicate(timeout=30)  # within a poll, not the heartbeat's 30 s
            assert steer.returncode == 1, out + err
            resume = f"flightdeck resume {batch_id} --state-dir {folder / 'state'}"
            assert f"is gone: its steers stay queued; `{resume}`" in err
            assert len(err.strip().splitlines()) == 1
        finally:
            server.release()
            ended(owner)


def test_logs_follow_ends_when_the_owner_dies_and_says_how_to_resume(tmp_path: Path) -> None:
    # Found by an audit: `logs -f` on a running and on a queued child of a batch whose owner
    # was killed waited in silence for ever; `wait` on the same batch said so at once.
    with CountingServer() as server:
        server.hold()  # c000 holds the one slot: c001 stays queued
        folder = project(tmp_path, server, 2, pool=1)
        owner, batch_id, _ = live_owner(folder)
        follows: list[subprocess.Popen[str]] = []
        try:
            until(lambda: server.total_runs() >= 1, HANG_S)
            follows += [flightdeck(folder, "logs", batch_id, c, "-f") for c in ("c000", "c001")]
            assert follows[0].stdout is not None
            assert follows[0].stdout.readline()  # the running child's transcript, begun
            owner.send_signal(signal.SIGKILL)
            owner.wait(HANG_S)
            resume = f"flightdeck resume {batch_id} --state-dir {folder / 'state'}"
            for follow in follows:
                out, err = follow.communicate(timeout=HANG_S)
                assert follow.returncode == 1, out + err
                assert f"was abandoned: its owner process (pid {owner.pid}) died" in err
                assert f"`{resume}` runs it to the end" in err
        finally:
            server.release()
            ended(owner)
            for follow in follows:  # a failing run leaves no follower behind
                ended(follow)


def test_logs_of_a_child_not_started_yet_says_so(tmp_path: Path) -> None:
    # Found by an audit: `logs B c1` of a queued child printed nothing and exited 0.
    with CountingServer() as server:
        server.hold()  # c000 holds the one slot: c001 stays queued
        folder = project(tmp_path, server, 2, pool=1)
        owner, batch_id, _ = live_owner(folder)
        try:
            until(lambda: server.total_runs() >= 1, HANG_S)
            logs = flightdeck(folder, "logs", batch_id, "c001")
            out, err = logs.communicate(timeout=HANG_S)
            assert (logs.returncode, out) == (1, "")
            assert err == "flightdeck: c001 has not started yet (queued): it has no transcript\n"
            # `-f` waits for it to start, and says so (it waited in silence).
            follow = flightdeck(folder, "logs", batch_id, "c001", "-f")
            try:
                assert follow.stderr is not None
                ready, _, _ = select.select([follow.stderr], [], [], HANG_S)
                assert ready, "nothing said while it waits"
                said = "c001 has not started yet (queued): waiting for it to start; Ctrl+C stops\n"
                assert follow.stderr.readline() == said
            finally:
                ended(follow)
            # Paused before it ran, it has the operator's line, printed as any transcript.
            pause = flightdeck(folder, "pause", batch_id, "c001")
            said = pause.communicate(timeout=HANG_S)
            assert pause.returncode == 0, said
            logs = flightdeck(folder, "logs", batch_id, "c001")
            out, err = logs.communicate(timeout=HANG_S)
            assert (logs.returncode, err) == (0, "")
            assert out.endswith("operator  │ pause requested\n"), out
        finally:
            server.release()
            ended(owner)


def test_stop_names_the_children_that_had_already_ended(tmp_path: Path) -> None:
    # Found by an audit: `stop B c0` of a completed child printed `stop applied: c0`, exit 0,
    # and nothing was stopped; a query's count says how many had ended.
    with CountingServer() as server:
        server.hold()
        folder = project(tmp_path, server, 2, pool=2)
        owner, batch_id, db = live_owner(folder)
        try:
            until(lambda: server.total_runs() >= 2, HANG_S)
            server.release("c000")  # it completes; c001 holds the batch open

            def completed() -> bool:
                with StoreReader(db) as reader:
                    row = reader.child(batch_id, "c000")
                return row is not None and row.status.value == "completed"

            until(completed, HANG_S)
            # A name no child has is the one line of a usage error: c000 was said to have
            # ended first, on stdout, before the error.
            for verb in ("stop", "pause", "continue"):
                bad = flightdeck(folder, verb, batch_id, "c000", "nope")
                out, err = bad.communicate(timeout=HANG_S)
                assert (bad.returncode, out) == (2, ""), (verb, out, err)
                assert err == f"flightdeck: no child with id 'nope' in batch {batch_id}\n", err
            stop = flightdeck(folder, "stop", batch_id, "c000", "c001")
            out, err = stop.communicate(timeout=HANG_S)
            assert stop.returncode == 0, out + err
            assert out.splitlines() == ["c000: had already ended (completed)", "stop applied: c001"]
            stop = flightdeck(folder, "stop", batch_id, "c000")  # nothing left to stop
            out, err = stop.communicate(timeout=HANG_S)
            assert (stop.returncode, out) == (0, "c000: had already ended (completed)\n"), err
        finally:
            server.release()
            ended(owner)


def test_a_child_named_twice_is_sent_the_command_once(tmp_path: Path) -> None:
    # Found by an audit: `steer B c0 c0 -m …` steered c0 twice (two steers in its transcript
    # and the report), and `stop B c1 c1` said `stop applied: c1, c1`.
    with CountingServer() as server:
        server.hold()
        folder = project(tmp_path, server, 2, pool=2)
        owner, batch_id, db = live_owner(folder)
        try:
            until(lambda: server.total_runs() >= 2, HANG_S)
            steer = flightdeck(folder, "steer", batch_id, "c000", "c000", "-m", "once", "--now")
            out, err = steer.communicate(timeout=HANG_S)
            assert steer.returncode == 0, out + err
            assert out.splitlines()[-1] == "c000: delivered" and out.count("c000: d") == 1, out
            stop = flightdeck(folder, "stop", batch_id, "c001", "c001")
            out, err = stop.communicate(timeout=HANG_S)
            assert (stop.returncode, out) == (0, "stop applied: c001\n"), err
            retry = flightdeck(folder, "retry", batch_id, "c001", "c001")
            out, err = retry.communicate(timeout=HANG_S)
            assert (retry.returncode, out) == (0, "retry (fresh) queued: c001\n"), err
            with sqlite3.connect(db) as conn:
                sent = conn.execute("SELECT kind, child_ids FROM requests ORDER BY id").fetchall()
            assert sent == [("steer", '["c000"]'), ("stop", '["c001"]'), ("retry", '["c001"]')]
        finally:
            server.release()
            ended(owner)


def test_limits_prints_what_the_owner_learned_from_the_providers_headers(tmp_path: Path) -> None:
    with CountingServer() as server:
        headers = {
            "x-ratelimit-limit-requests": "240",
            "x-ratelimit-remaining-requests": "239",
            "x-ratelimit-reset-requests": "0.250s",
        }
        server.reply = Reply(text="done", headers=headers)
        folder = project(tmp_path, server, 4, pool=2)
        owner, batch_id, _ = live_owner(folder)
        assert owner.wait(60) == 0
        ended(owner)
        proc = flightdeck(folder, "limits", batch_id)
        out, err = proc.communicate(timeout=HANG_S)
    assert proc.returncode == 0, err
    assert (
        "route lb: max_concurrent off, rpm off, tpm off (learned from the provider: rpm 240)"
        in (out.splitlines())
    )


def test_stop_on_a_silent_owner_says_what_it_waits_for_then_that_the_owner_died(
    tmp_path: Path,
) -> None:
    with CountingServer() as server:
        server.hold()
        folder = project(tmp_path, server, 3, pool=1)
        owner, batch_id, _ = live_owner(folder)
        try:
            until(lambda: server.total_runs() >= 1, HANG_S)
            owner.send_signal(signal.SIGSTOP)  # alive, but applying nothing
            stop = flightdeck(folder, "stop", batch_id, "c002")
            assert stop.stderr is not None
            ready, _, _ = select.select([stop.stderr], [], [], 30)
            assert ready, "nothing said while it waits"
            # Stopped in a write (a busy machine makes that likelier), the owner holds the
            # database's lock as well: the request is recorded only once the owner is gone.
            assert stop.stderr.readline() in (
                f"waiting for the owner (pid {owner.pid}) to apply it; Ctrl+C leaves the "
                "request pending\n",
                LOCK_HELD,
            )
            owner.send_signal(signal.SIGKILL)
            owner.wait(HANG_S)
            out, err = stop.communicate(timeout=HANG_S)
            assert stop.returncode == 1 and out == "", out + err
            assert err == (
                f"flightdeck: the owner of batch {batch_id} (pid {owner.pid}) is gone: the "
                f"request stays pending; `flightdeck resume {batch_id} --state-dir "
                f"{folder / 'state'}` runs the batch on\n"
            )
        finally:
            server.release()
            ended(owner)


def test_a_command_waiting_on_the_databases_lock_says_so_then_is_applied(tmp_path: Path) -> None:
    # An owner stopped in a write (SIGSTOP, a debugger) holds the lock: `stop` waited in
    # silence. Here this test holds it, as such an owner would, until the line is said.
    with CountingServer() as server:
        server.hold()
        folder = project(tmp_path, server, 3, pool=1)
        owner, batch_id, db = live_owner(folder)
        try:
            until(lambda: server.total_runs() >= 1, HANG_S)
            holder = sqlite3.connect(db, isolation_level=None)
            holder.execute("BEGIN IMMEDIATE")
            try:
                stop = flightdeck(folder, "stop", batch_id, "c002")
                assert stop.stderr is not None
                ready, _, _ = select.select([stop.stderr], [], [], 60)
                assert ready, "nothing said while the lock is held"
                assert stop.stderr.readline() == LOCK_HELD
            finally:
                holder.execute("ROLLBACK")
                holder.close()
            out, err = stop.communicate(timeout=60)
            assert stop.returncode == 0, err
            assert out == "stop applied: c002\n", out + err
        finally:
            server.release()
            ended(owner)
