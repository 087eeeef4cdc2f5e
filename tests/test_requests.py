"""Schema 2: the migration from 1, client requests through the store, owner liveness."""

from __future__ import annotations

import os
import sqlite3
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from flightdeck.engine.commands import CommandError, Steer, Stop, StopAll
from flightdeck.engine.model import BatchStatus, ChildStatus, SteerReceipt, SteerState
from flightdeck.engine.records import schema
from flightdeck.engine.records.liveness import owner_of, process_matches
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.requests import (
    Refusal,
    RequestState,
    pending_requests,
    refuse_pending,
    request,
    submit,
)
from flightdeck.engine.records.rows import process_start_time
from flightdeck.engine.records.store import Store

from helpers import HANG_S, Hold
from test_store import make_batch, make_child

# The version 1 schema, as flightdeck wrote it before durable batches.
V1_BATCHES = (
    "CREATE TABLE batches (id TEXT PRIMARY KEY, name TEXT NOT NULL, source TEXT,"
    " spec_json TEXT NOT NULL, workspace TEXT NOT NULL, state_dir TEXT NOT NULL,"
    " owner_pid INTEGER NOT NULL, owner_start REAL, pool_size INTEGER NOT NULL,"
    " max_cost_usd TEXT, status TEXT NOT NULL, created_ts REAL NOT NULL, finished_ts REAL)"
)


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "state" / "flightdeck.db"
    with Store(path) as store:
        store.create_batch(make_batch("b1"))
        store.add_children("b1", [make_child(1), make_child(2)])
    return path


def dead_pid() -> tuple[int, float | None]:
    """A pid that was a process a moment ago, and its start time."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    start = process_start_time(proc.pid)
    proc.wait()
    return proc.pid, start


def version_6_schema() -> str:
    """The schema as version 6 made it: no refusal kept with a refused request, no known part
    of an unknown cost on the children."""
    v6 = schema.SCHEMA.replace(schema.REQUESTS_SCHEMA, schema.REQUESTS_V3_SCHEMA)
    v6 = v6.replace("    cost_floor_usd TEXT,\n", "")
    assert "refusal" not in v6 and "cost_floor_usd" not in v6
    return v6


def version_5_schema() -> str:
    """The schema as version 5 made it: no change counter on the children either."""
    v5 = version_6_schema().replace("    rev INTEGER NOT NULL DEFAULT 0,\n", "")
    v5 = v5.replace(schema.REV_INDEX, "")
    assert "rev" not in v5
    return v5


def test_version_1_file_is_migrated_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "flightdeck.db"
    v1 = version_5_schema().replace(schema.REQUESTS_V3_SCHEMA, "")
    v1 = v1.replace(
        "    finished_ts REAL,\n    heartbeat_ts REAL,\n    settings_json TEXT,\n"
        "    held TEXT,\n    limits_json TEXT\n",
        "    finished_ts REAL\n",
    )
    v1 = v1.replace("    request_id INTEGER,\n    reason TEXT,\n", "")
    conn = sqlite3.connect(path)
    conn.executescript(v1)
    conn.execute("PRAGMA user_version = 1")
    conn.execute(
        "INSERT INTO batches VALUES ('old', 'old', NULL, '[]', '/w', '/s', 1, NULL, 1, NULL,"
        " 'completed', 5.0, 6.0)"
    )
    conn.commit()
    conn.close()
    with StoreReader(path) as reader:  # read as it is, before anything migrates it
        old = reader.batch("old")
        assert old is not None and old.status == BatchStatus.COMPLETED and old.heartbeat_ts is None
    Store(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
    assert conn.execute("SELECT count(*) FROM requests").fetchone()[0] == 0
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    with StoreReader(path) as reader:
        assert [b.id for b in reader.batches()] == ["old"]


def _version_2_schema() -> str:
    """The schema as version 2 made it: no held or limits_json, and only three request kinds."""
    v2 = version_5_schema().replace(
        "    settings_json TEXT,\n    held TEXT,\n    limits_json TEXT\n",
        "    settings_json TEXT\n",
    )
    v2 = v2.replace(
        "    kind TEXT NOT NULL,\n    child_ids",
        "    kind TEXT NOT NULL CHECK (kind IN ('steer', 'stop', 'stop_all')),\n    child_ids",
    )
    v2 = v2.replace("    settled_ts REAL,\n    payload TEXT\n", "    settled_ts REAL\n")
    assert v2.count("CHECK (kind IN ('steer', 'stop', 'stop_all'))") == 1 and "payload" not in v2
    return v2


def test_version_2_file_is_migrated_keeping_its_requests_and_takes_any_kind(
    tmp_path: Path,
) -> None:
    path = tmp_path / "flightdeck.db"
    conn = sqlite3.connect(path)
    conn.executescript(_version_2_schema())
    conn.execute("PRAGMA user_version = 2")
    conn.execute(
        "INSERT INTO batches VALUES ('b1', 'b1', NULL, '[]', '/w', '/s', 1, NULL, 4, NULL,"
        " 'running', 5.0, NULL, 6.0, NULL)"
    )
    conn.execute(
        "INSERT INTO children (batch_id, id, seq, goal, route, model, status, queued_ts,"
        " transcript) VALUES ('b1', 'c1', 0, 'g', 'sim', 'm', 'running', 5.0, 't')"
    )
    conn.execute(
        "INSERT INTO requests (batch_id, kind, child_ids, message, now, state, created_ts)"
        " VALUES ('b1', 'steer', '[\"c1\"]', 'hello', 1, 'pending', 7.0)"
    )
    conn.commit()
    conn.close()
    with StoreReader(path) as reader:  # read as it is, before anything migrates it
        old = reader.batch("b1")
        assert old is not None and old.heartbeat_ts == 6.0 and old.held is None
    Store(path).close()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    kept = request(path, "b1", 1)  # a steer as version 2 kept it: read as the command it was
    assert kept is not None and kept.kind == "steer"
    assert kept.command == Steer(("c1",), "hello", now=True) and kept.child_ids == ("c1",)
    # A kind version 2's CHECK refused, and the index still serves pending.
    rid = submit(path, "b1", StopAll())
    assert rid == 2
    stop_all = request(path, "b1", rid)
    assert stop_all is not None and stop_all.command == StopAll()
    with sqlite3.connect(path) as conn:
        assert [r.id for r in pending_requests(conn, "b1")] == [1, 2]
        plan = conn.execute(
            "EXPLAIN QUERY PLAN SELECT id FROM requests WHERE batch_id = 'b1' AND state = 'pending'"
        ).fetchall()
        assert any("requests_pending" in str(step) for step in plan)


def test_version_6_file_is_migrated_and_its_refusals_read_as_saying_not_why(
    tmp_path: Path,
) -> None:
    # Version 7 keeps why the owner refused a request (`refusal`); a version 6 file's refused
    # rows read with none, and what is refused after the migration has one.
    path = tmp_path / "flightdeck.db"
    conn = sqlite3.connect(path)
    conn.executescript(version_6_schema())
    conn.execute("PRAGMA user_version = 6")
    conn.execute(
        "INSERT INTO batches (id, name, spec_json, workspace, state_dir, owner_pid, pool_size,"
        " status, created_ts) VALUES ('b1', 'b1', '[]', '/w', '/s', 1, 2, 'running', 5.0)"
    )
    conn.execute(
        "INSERT INTO children (batch_id, id, seq, goal, route, model, status, queued_ts,"
        " transcript) VALUES ('b1', 'c1', 0, 'g', 'sim', 'm', 'completed', 5.0, 't')"
    )
    conn.execute(
        "INSERT INTO requests (batch_id, kind, child_ids, state, reason, created_ts, payload)"
        " VALUES ('b1', 'stop', ?, 'refused', 'c1 had already ended', 7.0, ?)",
        ('["c1"]', '{"child_ids": ["c1"]}'),
    )
    conn.commit()
    conn.close()
    with StoreReader(path) as reader:  # read as it is, before anything migrates it
        assert [c.id for c in reader.children("b1", results=False)] == ["c1"]
    with Store(path) as store:
        rid = submit(path, "b1", Stop(("c1",)))
        store.settle_request("b1", rid, RequestState.REFUSED, 8.0, reason="no", refusal="error")
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == schema.SCHEMA_VERSION
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    old = request(path, "b1", 1)
    assert old is not None and old.state is RequestState.REFUSED and old.refusal is None
    assert old.reason == "c1 had already ended" and old.child_ids == ("c1",)
    new = request(path, "b1", rid)
    assert new is not None and new.refusal is Refusal.ERROR


def test_database_and_folder_are_the_users_alone(tmp_path: Path) -> None:
    path = tmp_path / "state" / "flightdeck.db"
    Store(path).close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_a_steer_is_pending_until_the_owner_applies_it(db: Path) -> None:
    rid = submit(db, "b1", Steer(("c1", "c2"), "focus on tests", now=True))
    row = request(db, "b1", rid)
    assert row is not None and row.state == RequestState.PENDING
    assert row.command == Steer(("c1", "c2"), "focus on tests", now=True)
    assert row.kind == "steer" and row.child_ids == ("c1", "c2")
    conn = schema.connect(str(db))
    assert [r.id for r in pending_requests(conn, "b1")] == [rid]
    assert pending_requests(conn, "b1", after=rid) == []
    conn.close()
    # The owner: receipts that name the request, then the request marked applied.
    with Store(db) as store:
        for cid, child in ((7, "c1"), (8, "c2")):
            receipt = SteerReceipt(cid, child, "focus on tests", True, SteerState.QUEUED, 1.0)
            store.record_control("b1", receipt, request_id=rid)
        store.settle_request("b1", rid, RequestState.APPLIED, 2.0, control_ids=[7, 8])
        delivered = SteerReceipt(7, "c1", "focus on tests", True, SteerState.DELIVERED, 1.0, 3.0)
        store.record_control("b1", delivered)  # a later write keeps the request id
    row = request(db, "b1", rid)
    assert row is not None and row.state == RequestState.APPLIED and row.control_ids == (7, 8)
    assert [(r.id, r.state) for r in row.receipts] == [
        (7, SteerState.DELIVERED),
        (8, SteerState.QUEUED),
    ]
    assert request(db, "b1", rid + 1) is None


def test_stops_and_a_refusal(db: Path) -> None:
    stop = submit(db, "b1", Stop(("c2",)))
    everything = submit(db, "b1", StopAll())
    assert everything > stop
    with Store(db) as store:
        store.settle_request("b1", stop, RequestState.REFUSED, 1.0, reason="no owner")
        store.settle_request("b1", stop, RequestState.APPLIED, 2.0)  # settled once only
    row = request(db, "b1", stop)
    assert row is not None and row.state == RequestState.REFUSED and row.reason == "no owner"
    assert row.refusal is None  # refused by an owner that said not why (an older one)
    row = request(db, "b1", everything)
    assert row is not None and row.kind == "stop_all" and row.child_ids == ()
    assert row.state is RequestState.PENDING and row.refusal is None


def test_a_refusal_word_is_kept_and_one_not_known_reads_as_an_error(db: Path) -> None:
    ids = [submit(db, "b1", Stop(("c1",))) for _ in range(3)]
    with Store(db) as store:
        for rid, word in zip(ids, ("ended", "error", "later"), strict=True):
            store.settle_request("b1", rid, RequestState.REFUSED, 1.0, reason="r", refusal=word)
    got = [request(db, "b1", rid) for rid in ids]
    # A word from a newer owner is never read as the notice `ended` is.
    assert [r.refusal if r else None for r in got] == [Refusal.ENDED, Refusal.ERROR, Refusal.ERROR]


def test_requests_a_finished_batch_left_pending_are_refused_as_come_after_it_ended(
    db: Path,
) -> None:
    stop = submit(db, "b1", Stop(("c1",)))
    steer = submit(db, "b1", Steer(("c2",), "hi"))
    with Store(db) as store:
        store.finish_batch("b1", BatchStatus.COMPLETED, 9.0)
    assert refuse_pending(db, "b1", "the batch had finished (completed)") == 2
    for rid in (stop, steer):
        row = request(db, "b1", rid)
        assert row is not None and row.state is RequestState.REFUSED
        assert row.refusal is Refusal.ENDED


def test_bad_requests_record_nothing(db: Path, tmp_path: Path) -> None:
    with pytest.raises(LookupError, match="no batch nope"):
        submit(db, "nope", Stop(("c1",)))
    with pytest.raises(CommandError, match="no child with id 'c9'"):
        submit(db, "b1", Steer(("c1", "c9"), "hi"))
    with pytest.raises(CommandError, match="at least one child"):
        submit(db, "b1", Stop(()))
    with pytest.raises(CommandError, match="steer message"):
        submit(db, "b1", Steer(("c1",), "bad \ud800"))
    with pytest.raises(CommandError, match="too long"):
        submit(db, "b1", Steer(("c1",), "x" * 11), max_chars=lambda: 10)
    # A field of the wrong type, as the owner would read it back: not a string's letters taken
    # for ids, not a flag recorded for the owner to refuse.
    with pytest.raises(CommandError, match="expected a list of child ids, got string 'c1'"):
        submit(db, "b1", Stop("c1"))  # type: ignore[arg-type]
    with pytest.raises(CommandError, match="steer now: expected true or false"):
        submit(db, "b1", Steer(("c1",), "hi", now="yes"))  # type: ignore[arg-type]
    with Store(db) as store:
        store.finish_batch("b1", BatchStatus.COMPLETED, 9.0)
    with pytest.raises(CommandError, match="has ended"):
        submit(db, "b1", StopAll())
    with pytest.raises(FileNotFoundError):
        submit(tmp_path / "none.db", "b1", StopAll())
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT count(*) FROM requests").fetchone()[0] == 0
    conn.close()


def test_submits_wait_out_a_busy_database(db: Path) -> None:
    holder = sqlite3.connect(db, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    got: list[int] = []
    t = threading.Thread(target=lambda: got.append(submit(db, "b1", Stop(("c1",)))))
    t.start()
    t.join(0.3)
    assert t.is_alive() and not got  # waiting for the lock, not failing
    holder.execute("COMMIT")
    t.join(HANG_S)
    assert got
    holder.close()


def test_liveness_needs_the_pid_and_its_start_time() -> None:
    me = os.getpid()
    start = process_start_time()
    assert process_matches(me, start)
    assert process_matches(me, None)
    assert start is not None and not process_matches(me, start - 60)  # a reused pid
    pid, gone = dead_pid()
    assert not process_matches(pid, gone)
    owner = owner_of(me, start, heartbeat_ts=100.0, now=160.0)
    assert owner.alive and owner.heartbeat_age_s == 60.0 and owner.stale


def test_a_running_batch_whose_owner_died_reads_as_abandoned(db: Path) -> None:
    pid, start = dead_pid()
    with Store(db) as store:
        store.create_batch(make_batch("dead", owner_pid=pid, owner_start=start, created_ts=50.0))
        store.add_children("dead", [make_child(1, status=ChildStatus.RUNNING)])
        store.heartbeat("dead", 80.0)
        store.create_batch(make_batch("reused", owner_start=(start or 0) - 999, created_ts=60.0))
    with StoreReader(db) as reader:
        dead = reader.batch("dead")
        assert dead is not None and dead.status == BatchStatus.ABANDONED
        assert dead.finished_ts == 80.0 and dead.heartbeat_ts == 80.0
        reused = reader.batch("reused")
        assert reused is not None and reused.status == BatchStatus.ABANDONED
        live = reader.batch("b1")
        assert live is not None and live.status == BatchStatus.RUNNING


def test_an_owner_refuses_a_request_it_cannot_read_and_goes_on(tmp_path: Path, hold: Hold) -> None:
    # The schema takes any kind (a newer client may send one): an owner that cannot read a
    # request refuses it, and its duties (the heartbeat, the next requests) go on.
    from helpers import batch, settings, sim_route, start, until

    held = sim_route(**hold.options())  # running until the stop below ends them
    engine = start(batch(2), settings(held, pool=2), tmp_path)
    db = tmp_path / "state" / "flightdeck.db"
    try:
        with sqlite3.connect(db) as conn:
            for kind, ids, payload in (
                ("set_priority", "[]", None),
                ("stop", "not json", None),
                ("limits", "[]", "5"),  # a payload that is no object: applying it raises
            ):
                conn.execute(
                    "INSERT INTO requests (batch_id, kind, child_ids, now, state, created_ts,"
                    " payload) VALUES (?, ?, ?, 0, 'pending', 1.0, ?)",
                    (engine.batch_id, kind, ids, payload),
                )
        with StoreReader(db) as reader:  # the batch row is committed a moment after start()
            until(lambda: reader.batch(engine.batch_id) is not None, 60)
        rid = submit(db, engine.batch_id, StopAll())

        def applied() -> bool:
            done = request(db, engine.batch_id, rid)
            return done is not None and done.state == RequestState.APPLIED

        until(applied, 60)
        assert engine.wait(60)
        assert engine._duties is not None and engine._duties._thread.is_alive()
        with sqlite3.connect(db) as conn:
            refused = conn.execute(
                "SELECT id, state, reason FROM requests WHERE id < ? ORDER BY id", (rid,)
            ).fetchall()
            words = conn.execute(
                "SELECT refusal FROM requests WHERE id < ? ORDER BY id", (rid,)
            ).fetchall()
        assert words == [("error",)] * 3  # none of them an `ended`, a notice
        assert refused[0] == (1, "refused", "this flightdeck cannot apply a 'set_priority' command")
        assert refused[1][:2] == (2, "refused") and "cannot read the request" in refused[1][2]
        assert (
            refused[2][:2] == (3, "refused") and "limits change: expected a table" in refused[2][2]
        )
    finally:
        engine.close()


def test_a_refusal_is_a_notice_only_when_the_owner_said_it_came_after_the_end() -> None:
    # A stop, pause or continue is a notice (exit 0) when the owner refused it as come after
    # its children (or its batch) ended; for any other reason it failed, however its children
    # are now. An older owner's refusal, which says not why, is judged by the rows.
    from flightdeck.engine.attached.client import ended_first

    ended = (make_child(1, status=ChildStatus.COMPLETED),)
    running = (make_child(1, status=ChildStatus.RUNNING),)

    def never() -> tuple[()]:
        raise AssertionError("rows read for a refusal that says why")

    for kind in ("stop", "pause", "continue"):
        assert ended_first(kind, ("c1",), "ended", never)
        assert not ended_first(kind, ("c1",), "error", never)
        assert ended_first(kind, ("c1",), None, lambda: ended)
        assert not ended_first(kind, ("c1",), None, lambda: running)
    assert ended_first("stop_all", (), "ended", never)  # the batch had finished
    assert not ended_first("stop_all", (), None, lambda: ended)
    assert not ended_first("steer", ("c1",), "ended", never)  # a steer that missed: an error
    assert not ended_first("limits", (), "ended", never)
