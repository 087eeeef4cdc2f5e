"""The SQLite store: one writer thread, concurrent enqueuers and readers, exact round trips."""

from __future__ import annotations

import dataclasses
import logging
import os
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.errors import StoreError
from flightdeck.engine.model import (
    Activity,
    BatchStatus,
    ChildRow,
    ChildStatus,
    SteerReceipt,
    SteerState,
    Usage,
)
from flightdeck.engine.records import rows as rows_module
from flightdeck.engine.records import schema
from flightdeck.engine.records import writes as writes_module
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.rows import BatchInfo, QueuedChild, process_start_time
from flightdeck.engine.records.schema import SCHEMA_VERSION, StoreNotFoundError, StoreVersionError
from flightdeck.engine.records.store import MAX_BATCH, Store

from helpers import HANG_S


def make_batch(batch_id: str = "b1", created_ts: float = 1000.0, **kw: object) -> BatchInfo:
    info = BatchInfo(
        id=batch_id,
        name=f"batch {batch_id}",
        source="tasks.jsonl",
        spec_json='{"tasks": []}',
        workspace="/work",
        state_dir="/work/.flightdeck",
        owner_pid=os.getpid(),
        owner_start=process_start_time(),
        pool_size=4,
        max_cost_usd=Decimal("2.50"),
        status=BatchStatus.RUNNING,
        created_ts=created_ts,
        finished_ts=None,
    )
    return dataclasses.replace(info, **kw)  # type: ignore[arg-type]


def make_child(seq: int, **kw: object) -> ChildRow:
    row = ChildRow(
        id=f"c{seq}",
        seq=seq,
        goal=f"goal {seq}",
        group="g",
        route="sim",
        model="sim-1",
        status=ChildStatus.QUEUED,
        activity=Activity(),
        usage=Usage(),
        cost_usd=Decimal(0),
        queued_ts=1000.0 + seq,
        started_ts=None,
        finished_ts=None,
        error=None,
        result=None,
        transcript=f"batches/b1/c{seq}.log",
    )
    return dataclasses.replace(row, **kw)  # type: ignore[arg-type]


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / "flightdeck.db"


def test_schema_and_pragmas(db: Path) -> None:
    with Store(db):
        conn = sqlite3.connect(db)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        assert {"batches", "children", "controls", "events"} <= tables
        conn.close()
    Store(db).close()  # reopening an existing database is fine


def test_batch_round_trip_with_summary(db: Path) -> None:
    with Store(db) as store:
        store.create_batch(make_batch("old", created_ts=1.0))
        store.create_batch(make_batch("new", created_ts=2.0, max_cost_usd=None, source=None))
        store.add_children(
            "new",
            [
                make_child(0, status=ChildStatus.COMPLETED, cost_usd=Decimal("0.1")),
                make_child(1, status=ChildStatus.FAILED, cost_usd=Decimal("0.2")),
                make_child(2, status=ChildStatus.STOPPED, cost_usd=None),
                make_child(3, status=ChildStatus.RUNNING, cost_usd=Decimal("0.000001")),
            ],
        )
        store.finish_batch("old", BatchStatus.COMPLETED, 5.0)
    with StoreReader(db) as reader:
        assert [b.id for b in reader.batches()] == ["new", "old"]
        assert reader.latest_batch_id() == "new"
        new = reader.batch("new")
        assert new is not None
        assert new == make_batch(
            "new",
            created_ts=2.0,
            max_cost_usd=None,
            source=None,
            children=4,
            completed=1,
            failed=1,
            stopped=1,  # counted apart from failed
            cost_usd=Decimal("0.300001"),
            cost_unknown=1,
        )
        old = reader.batch("old")
        assert old is not None
        assert (old.status, old.finished_ts, old.children, old.max_cost_usd) == (
            BatchStatus.COMPLETED,
            5.0,
            0,
            Decimal("2.50"),
        )
        assert reader.batch("nope") is None


def test_child_round_trip_is_exact(db: Path) -> None:
    receipt = SteerReceipt(1, "c7", "focus", True, SteerState.DELIVERED, 1.5, 2.5)
    row = make_child(
        7,
        group=None,
        status=ChildStatus.RUNNING,
        activity=Activity(3, 2, 1, 4, "read_file", 1.25, 9.75, "tool: read_file"),
        usage=Usage(100, 20, 3000, 400),
        cost_usd=Decimal("0.000123456789012345678"),
        started_ts=1001.5,
        error="boom | with pipe",
        result='{"ok": true}',
        steers=(receipt,),
    )
    with Store(db) as store:
        store.create_batch(make_batch())
        store.add_children("b1", [row])
        store.record_control("b1", receipt)
        store.record_control(
            "b1", SteerReceipt(2, "c7", "", False, SteerState.DELIVERED, 3.0), kind="stop"
        )
    with StoreReader(db) as reader:
        assert reader.children("b1") == [row]
        assert reader.child("b1", "c7") == row
        assert reader.child("b1", "c8") is None
        assert [c.id for c in reader.controls("b1")] == [1, 2]
        assert [c.id for c in reader.controls("b1", "c7", kind="stop")] == [2]


def test_absent_values_are_stored_as_sql_null(db: Path) -> None:
    """What the store binds for None is SQL NULL, and binding None elsewhere is unchanged."""
    with Store(db) as store:
        store.create_batch(make_batch())
        store.add_children("b1", [make_child(1, group=None)])
        store.update_child("b1", make_child(2, group=None, error=None))
    conn = sqlite3.connect(db)
    try:
        columns = "grp, current_tool, tool_started_ts, started_ts, finished_ts, error, result"
        types = conn.execute(
            f"SELECT {', '.join(f'typeof({c})' for c in columns.split(', '))} "
            "FROM children ORDER BY seq"
        ).fetchall()
        assert types == [("null",) * 7] * 2
        assert conn.execute("SELECT ? IS NULL, typeof(?)", (None, None)).fetchone() == (1, "null")
    finally:
        conn.close()


def test_queued_children_are_recorded_like_their_rows(db: Path) -> None:
    rows = [make_child(1), make_child(2, group=None)]
    queued = [
        QueuedChild(r.id, r.seq, r.goal, r.group, r.route, r.model, r.queued_ts, r.transcript)
        for r in rows
    ]
    with Store(db) as store:
        store.create_batch(make_batch("b1"))
        store.create_batch(make_batch("b2"))
        store.add_queued("b1", queued)  # the short path: literals for what has not happened
        store.add_children("b2", rows)  # the full rows, every column bound
    with StoreReader(db) as reader:
        assert reader.children("b1") == rows
    # column for column, SQL types included, the short path stores what the full row would
    columns = [c.strip() for c in rows_module.CHILD_COLUMNS.split(",") if c.strip() != "batch_id"]
    select = ", ".join(f"{c}, typeof({c})" for c in columns)
    conn = sqlite3.connect(db)
    try:
        short, full = (
            conn.execute(
                f"SELECT {select} FROM children WHERE batch_id = ? ORDER BY seq", (b,)
            ).fetchall()
            for b in ("b1", "b2")
        )
    finally:
        conn.close()
    assert short == full and len(short) == 2


def test_only_children_that_ran_are_read_as_started(db: Path) -> None:
    # `resume` builds rows only for children that ran: most of a big batch is queued. Found by
    # a review: a queued row's cost is '0', and every queued row was read as one that ran.
    ran = make_child(1, status=ChildStatus.COMPLETED, finished_ts=10.0)
    again = make_child(2, usage=Usage(input_tokens=5), cost_usd=Decimal("0.001"))  # a retry's
    never = make_child(3)
    queued = QueuedChild(never.id, 3, "g", None, "sim", "m", 1.0, never.transcript)
    with Store(db) as store:
        store.create_batch(make_batch("b1"))
        store.add_children("b1", [ran, again])
        store.add_queued("b1", [queued])
    with StoreReader(db) as reader:
        assert [r.id for r in reader.children("b1")] == [ran.id, again.id, never.id]
        assert [r.id for r in reader.children("b1", started=True)] == [ran.id, again.id]


def test_a_literal_for_a_column_that_does_not_exist_is_refused() -> None:
    with pytest.raises(ValueError, match=r"not columns of children: \['tokens'\]"):
        rows_module.upsert(
            "children", rows_module.CHILD_COLUMNS, ("batch_id", "id"), {"tokens": "0"}
        )


def test_decimal_cost_round_trip_is_exact(db: Path) -> None:
    costs = [Decimal("0.1"), Decimal("1E-12"), Decimal("123456789.000000000001"), None]
    with Store(db) as store:
        store.add_children("b1", [make_child(i, cost_usd=c) for i, c in enumerate(costs)])
    with StoreReader(db) as reader:
        assert [c.cost_usd for c in reader.children("b1")] == costs


def test_children_ordered_by_seq_and_update_upserts(db: Path) -> None:
    with Store(db) as store:
        store.add_children("b1", [make_child(i) for i in (2, 0, 1)])
        store.update_child("b1", make_child(1, status=ChildStatus.COMPLETED, result="done"))
        store.update_child("b1", make_child(5))  # not added before: inserted
    with StoreReader(db) as reader:
        rows = reader.children("b1")
    assert [r.id for r in rows] == ["c0", "c1", "c2", "c5"]
    assert (rows[1].status, rows[1].result) == (ChildStatus.COMPLETED, "done")


def test_row_readable_by_fresh_reader_right_after_flush(db: Path) -> None:
    store = Store(db)
    try:
        store.create_batch(make_batch())
        store.add_children("b1", [make_child(i) for i in range(3)])
        for i in range(3):
            store.update_child("b1", make_child(i, status=ChildStatus.COMPLETED, result=f"r{i}"))
            assert store.flush(timeout=HANG_S)
            with StoreReader(db) as reader:  # as another process would after a crash
                row = reader.child("b1", f"c{i}")
                assert row is not None and row.status is ChildStatus.COMPLETED
                assert row.result == f"r{i}"
    finally:
        store.close()


def test_coalescing_keeps_the_last_update(db: Path) -> None:
    ops = [
        writes_module.Write("u", "sql", (), key=("b", "c1")),
        writes_module.Write("e", "sql", ()),
        writes_module.Write("u", "sql", (), key=("b", "c2")),
        writes_module.Write("u", "sql", (), key=("b", "c1")),
    ]
    assert writes_module.coalesce(ops) == [ops[1], ops[2], ops[3]]
    assert writes_module.coalesce(ops[:3]) == ops[:3]
    # End to end: many updates in one drained batch, the last one wins.
    with Store(db) as store:
        for i in range(300):
            store.update_child("b1", make_child(0, activity=Activity(api_calls=i)))
    with StoreReader(db) as reader:
        assert reader.children("b1")[0].activity.api_calls == 299


def test_a_coalesced_update_still_runs_its_callback(db: Path) -> None:
    """A final row superseded in its batch by a later one for the same child: its callback,
    and every other, still runs once the batch is committed, in the order they were queued."""
    calls: list[tuple[int, bool]] = []
    with Store(db) as store:
        for i in range(300):
            store.update_child(
                "b1",
                make_child(0, activity=Activity(api_calls=i)),
                then=lambda committed, i=i: calls.append((i, committed)),
            )
        with StoreReader(db) as reader:
            assert store.flush(timeout=HANG_S)
            assert reader.children("b1")[0].activity.api_calls == 299
    assert calls == [(i, True) for i in range(300)]


def test_concurrent_writers_and_a_polling_reader(db: Path) -> None:
    store = Store(db)
    store.create_batch(make_batch())
    store.add_children("b1", [make_child(i) for i in range(8)])
    assert store.flush(timeout=HANG_S)
    errors: list[BaseException] = []
    stop_polling = threading.Event()
    polls = 0

    def writer(n: int) -> None:
        try:
            for i in range(500):
                act = Activity(api_calls=i, last_activity_ts=float(i))
                store.update_child("b1", make_child(n, activity=act, status=ChildStatus.RUNNING))
                if i % 100 == 0:
                    store.record_event("b1", f"c{n}", float(i), "tick", f"{n}:{i}")
        except BaseException as exc:
            errors.append(exc)

    def poll() -> None:
        nonlocal polls
        try:
            with StoreReader(db) as reader:
                while not stop_polling.is_set():
                    rows = reader.children("b1")
                    assert len(rows) == 8
                    reader.batches()
                    polls += 1
        except BaseException as exc:
            errors.append(exc)

    poller = threading.Thread(target=poll)
    poller.start()
    writers = [threading.Thread(target=writer, args=(n,)) for n in range(8)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    assert store.flush(timeout=HANG_S)
    stop_polling.set()
    poller.join()
    store.close()
    assert errors == []
    assert polls > 0
    assert store.failed_writes == 0
    with StoreReader(db) as reader:
        rows = reader.children("b1")
        assert [r.activity.api_calls for r in rows] == [499] * 8
        assert all(r.status is ChildStatus.RUNNING for r in rows)
        assert len(reader.events("b1")) == 8 * 5


def test_reader_shared_between_threads(db: Path) -> None:
    with Store(db) as store:
        store.add_children("b1", [make_child(0)])
    reader = StoreReader(db)  # made here, used from other threads (the TUI's worker)
    results: list[int] = []
    threads = [
        threading.Thread(target=lambda: results.append(len(reader.children("b1"))))
        for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    reader.close()
    assert results == [1, 1, 1, 1]


def test_controls_upsert_by_receipt_id(db: Path) -> None:
    queued = SteerReceipt(1, "c0", "try again", False, SteerState.QUEUED, 10.0)
    with Store(db) as store:
        store.add_children("b1", [make_child(0)])
        store.add_children("b2", [make_child(0)])
        store.record_control("b1", queued)
        store.record_control("b2", dataclasses.replace(queued, message="other batch"))
        store.record_control(
            "b1", dataclasses.replace(queued, state=SteerState.DELIVERED, settled_ts=11.0)
        )
    with StoreReader(db) as reader:
        (receipt,) = reader.controls("b1", "c0")
        assert (receipt.state, receipt.settled_ts) == (SteerState.DELIVERED, 11.0)
        assert reader.children("b1")[0].steers == (receipt,)
        assert [r.message for r in reader.controls("b2")] == ["other batch"]


def test_events(db: Path) -> None:
    with Store(db) as store:
        store.record_event("b1", None, 1.0, "batch-started", "4 children")
        store.record_event("b1", "c1", 2.0, "steer", "focus")
        store.record_event("b2", None, 3.0, "batch-started", "")
    with StoreReader(db) as reader:
        assert reader.events("b1") == [
            (1.0, None, "batch-started", "4 children"),
            (2.0, "c1", "steer", "focus"),
        ]


def test_settle_live_children(db: Path) -> None:
    with Store(db) as store:
        store.add_children(
            "b1",
            [
                make_child(0, status=ChildStatus.COMPLETED, finished_ts=5.0),
                make_child(1, status=ChildStatus.RUNNING, activity=Activity(current_tool="x")),
                make_child(2, status=ChildStatus.QUEUED),
            ],
        )
        store.settle_live_children("b1", ChildStatus.UNKNOWN, 9.0)
    with StoreReader(db) as reader:
        rows = reader.children("b1")
    assert [(r.status, r.finished_ts) for r in rows] == [
        (ChildStatus.COMPLETED, 5.0),
        (ChildStatus.UNKNOWN, 9.0),
        (ChildStatus.UNKNOWN, 9.0),
    ]
    assert rows[1].activity.current_tool is None


def test_failed_write_is_logged_and_writer_survives(
    db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="flightdeck.engine.records.store")
    with Store(db) as store:
        store.add_children("b1", [make_child(0)])
        store.record_control("b1", SteerReceipt(1, "c0", "m", False, SteerState.QUEUED, 1.0), "bad")
        store.update_child(
            "b1", dataclasses.replace(make_child(1), seq=2**70)
        )  # OverflowError, not sqlite3.Error
        store.update_child("b1", make_child(0, status=ChildStatus.COMPLETED))
        assert store.flush(timeout=HANG_S)
        assert store.failed_writes == 2
    assert "record_control failed" in caplog.text and "update_child failed" in caplog.text
    with StoreReader(db) as reader:
        assert [(r.id, r.status) for r in reader.children("b1")] == [("c0", ChildStatus.COMPLETED)]
        assert reader.controls("b1") == []


def test_text_that_is_not_valid_unicode_is_kept_with_a_replacement(db: Path) -> None:
    # JSON (a task file, a model's stream) can carry a lone surrogate; SQLite cannot store it.
    with Store(db) as store:
        store.create_batch(make_batch(name="bad \ud800 name"))
        store.add_children("b1", [make_child(0, goal="goal \udfff")])
        store.update_child("b1", make_child(1, result="answer \ud83d", error="e \ud800"))
        assert store.flush(timeout=HANG_S)
        assert store.failed_writes == 0
    with StoreReader(db) as reader:
        info = reader.batch("b1")
        assert info is not None and info.name == "bad \ufffd name"
        rows = reader.children("b1")
    assert rows[0].goal == "goal \ufffd"
    assert (rows[1].result, rows[1].error) == ("answer \ufffd", "e \ufffd")


def test_flush_with_a_timeout_returns_even_while_the_store_lock_is_held(db: Path) -> None:
    """A second Ctrl+C's handler flushes the store, and may have interrupted the main thread
    in the middle of queueing rows, holding the store's lock: it must not wait for ever."""
    store = Store(db)
    results: list[bool] = []
    try:
        with store._lock:  # what the interrupted thread holds
            flusher = threading.Thread(target=lambda: results.append(store.flush(0.1)))
            flusher.start()
            flusher.join(5)
            assert results == [False], "flush(timeout) waited for the lock"
    finally:
        store.close()


def test_waiting_out_a_lock_never_overflows_its_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(schema.time, "sleep", slept.append)
    for attempt in (0, 7, 2000):  # 2**2000 as a float overflowed: the write was dropped
        schema.back_off(attempt)
    assert slept == [0.001, 0.128, 0.128]


def test_close_is_idempotent_and_flushes(db: Path) -> None:
    store = Store(db)
    store.add_children("b1", [make_child(i) for i in range(50)])
    store.close()
    store.close()
    assert store.flush() is True
    with pytest.raises(RuntimeError, match="closed"):
        store.record_event("b1", None, 1.0, "late", "")
    with StoreReader(db) as reader:  # no writer open: the read-only reader still works
        assert len(reader.children("b1")) == 50


def test_reader_errors(tmp_path: Path) -> None:
    with pytest.raises(StoreNotFoundError, match="no flightdeck database") as info:
        StoreReader(tmp_path / "missing.db")
    assert isinstance(info.value, FileNotFoundError)
    assert not (tmp_path / "missing.db").exists()  # read-only: never creates it

    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    with StoreReader(empty) as reader:  # the writer has not made the schema yet
        assert reader.batches() == [] and reader.latest_batch_id() is None

    newer = tmp_path / "newer.db"
    conn = sqlite3.connect(newer)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    with pytest.raises(StoreVersionError, match="newer than this flightdeck") as newer_info:
        Store(newer)
    assert isinstance(newer_info.value, StoreError) and newer_info.value.path == str(newer)
    with StoreReader(newer) as reader, pytest.raises(StoreVersionError):
        reader.batches()


def test_an_unusable_database_is_one_clear_error_naming_it(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"not a database, just text " * 40)
    with pytest.raises(StoreError, match="cannot use the database: file is not a database") as info:
        Store(garbage)
    assert str(info.value).startswith(f"{garbage}: ")
    assert garbage.read_bytes() == b"not a database, just text " * 40  # left as it was
    with StoreReader(garbage) as reader, pytest.raises(StoreError, match="cannot read"):
        reader.batches()

    folder = tmp_path / "folder.db"
    folder.mkdir()  # a folder where the database should be
    with pytest.raises(StoreError, match="cannot open the database"):
        Store(folder)


def test_reader_cannot_write(db: Path) -> None:
    Store(db).close()
    reader = StoreReader(db)
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader._conn.execute("DELETE FROM batches")
    reader.close()


def test_process_start_time() -> None:
    mine = process_start_time()
    if not Path("/proc/self/stat").exists():
        assert mine is None
        return
    assert mine is not None and mine > 0
    assert process_start_time(os.getpid()) == mine
    assert process_start_time(1) is not None and process_start_time(1) <= mine  # type: ignore[operator]
    assert process_start_time(2**31 - 1) is None


def test_consecutive_writes_of_one_statement_run_as_one_executemany_in_order() -> None:
    from flightdeck.engine.records.writes import Write, runs

    writes = [
        Write("a", "A", (1,)),
        Write("a", "A", [(2,), (3,)], many=True),
        Write("b", "B", (4,)),
        Write("a", "A", (5,)),
    ]
    assert list(runs(writes)) == [("A", [(1,), (2,), (3,)]), ("B", [(4,)]), ("A", [(5,)])]
    assert list(runs([])) == []


@pytest.mark.parametrize("rows", [2, 5, 64, 85, 200])
def test_row_inserts_go_several_rows_to_a_statement_in_order(db: Path, rows: int) -> None:
    from flightdeck.engine.records.rows import INSERT_EVENT, UPSERT_CHILD
    from flightdeck.engine.records.writes import insert_rows

    db.parent.mkdir(parents=True)
    conn = sqlite3.connect(db)
    conn.executescript(schema.SCHEMA)
    statements: list[str] = []
    conn.set_trace_callback(statements.append)
    events = [("b1", f"c{i}", float(i), "steer", f"detail {i}") for i in range(rows)]
    insert_rows(conn, INSERT_EVENT, events)
    chunks = [64] * (rows // 64) + [16] * (rows % 64 // 16) + [4] * (rows % 16 // 4)
    chunks += [1] * (rows % 4)
    inserts = [s for s in statements if s.startswith("INSERT")]
    assert [s.count("), (") + 1 for s in inserts] == chunks  # rows per statement
    stored = conn.execute("SELECT batch_id, child_id, ts, kind, detail FROM events ORDER BY id")
    assert stored.fetchall() == events  # every row, in order (ids follow the order given)

    # an upsert chunk may name one child twice: the later row wins, as with one per statement
    first = rows_module.child_params("b1", make_child(1))
    later = rows_module.child_params("b1", make_child(1, status=ChildStatus.COMPLETED))
    others = [rows_module.child_params("b1", make_child(i)) for i in range(2, rows)]
    insert_rows(conn, UPSERT_CHILD, [first, *others, later])
    status = conn.execute("SELECT status FROM children WHERE id = 'c1'").fetchone()[0]
    assert status == "completed"
    assert conn.execute("SELECT count(*) FROM children").fetchone()[0] == max(rows - 1, 1)


# Opens a Store on each path read from stdin, at the moment it is read, and answers a line.
_OPENER = """
import sys
from pathlib import Path
from flightdeck.engine.records.store import Store
for line in sys.stdin:
    try:
        Store(Path(line.strip())).close()
        print("ok", flush=True)
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
"""


def test_two_processes_opening_a_new_database_together_both_succeed(tmp_path: Path) -> None:
    # Two `flightdeck run` started at the same moment on a new state folder: one of them used
    # to fail, on "database is locked" (both turning the file to WAL) or on taking the other's
    # new tables for another program's. Both processes wait on their stdin, so each round
    # starts them within microseconds of each other, on a new file; two rounds in three failed.
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _OPENER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    answers = []
    try:
        for i in range(25):
            db = tmp_path / str(i) / "flightdeck.db"
            for proc in procs:
                assert proc.stdin is not None
                proc.stdin.write(f"{db}\n")
                proc.stdin.flush()
            for proc in procs:
                assert proc.stdout is not None
                answers.append(proc.stdout.readline().strip())
    finally:
        for proc in procs:
            proc.communicate(timeout=HANG_S)
    assert answers == ["ok"] * 50
    with StoreReader(tmp_path / "0" / "flightdeck.db") as reader:
        assert reader.batches() == []  # and the schema is there


def test_turning_a_new_file_to_wal_waits_for_another_connections_lock(
    db: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # SQLite answers "database is locked" at once, without the busy timeout, while another
    # connection holds the new file's write lock: the race above, made certain.
    monkeypatch.setattr(schema, "BUSY_TIMEOUT_MS", 10_000)
    db.parent.mkdir()
    db.touch()
    other = sqlite3.connect(db, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    release = threading.Timer(0.2, other.execute, ("COMMIT",))
    release.start()
    try:
        Store(db).close()
    finally:
        release.join()
        other.close()
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    finally:
        conn.close()


def _queued(n: int) -> list[QueuedChild]:
    return [
        QueuedChild(f"c{i}", i, f"goal {i}", None, "sim", "m", 1.0, f"c{i}.log") for i in range(n)
    ]


def test_a_big_write_lets_another_writer_in_between_its_transactions(db: Path) -> None:
    # A 200,000-task batch was one transaction: seconds of holding the write lock while
    # another process's finished children waited in its queue (lost if it was killed).
    n = 3 * MAX_BATCH
    store = Store(db)
    store.create_batch(make_batch())
    assert store.flush(timeout=HANG_S)
    begins = 0
    between = threading.Event()
    go_on = threading.Event()

    def trace(sql: str) -> None:  # on the writer thread, before each statement runs
        nonlocal begins
        if sql == "BEGIN IMMEDIATE":
            begins += 1
            if begins == 2:  # the big write has committed one transaction
                between.set()
                go_on.wait(HANG_S)

    store._conn.set_trace_callback(trace)
    store.add_queued("b1", _queued(n))
    try:
        assert between.wait(HANG_S), "the whole write went in one transaction"
        other = sqlite3.connect(db, isolation_level=None, timeout=0)
        try:
            other.execute("BEGIN IMMEDIATE")  # at once: no lock is held between transactions
            seen = other.execute("SELECT count(*) FROM children").fetchone()[0]
            other.execute("COMMIT")
        finally:
            other.close()
    finally:
        go_on.set()
    assert store.flush(timeout=HANG_S)
    store.close()
    assert seen == MAX_BATCH
    with StoreReader(db) as reader:
        assert [c.seq for c in reader.children("b1")] == list(range(n))


def test_a_write_waits_for_a_lock_held_past_the_busy_timeout(
    db: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Another process's long transaction used to cost a write after two busy timeouts:
    # "update_child failed: database is locked", and a finished child stayed running.
    monkeypatch.setattr(schema, "BUSY_TIMEOUT_MS", 20)
    caplog.set_level(logging.WARNING, logger="flightdeck.engine.records.store")
    store = Store(db)
    store.add_children("b1", [make_child(0, status=ChildStatus.RUNNING)])
    assert store.flush(timeout=HANG_S)
    attempts = 0
    retried = threading.Event()

    def trace(sql: str) -> None:
        nonlocal attempts
        if sql == "BEGIN IMMEDIATE":
            attempts += 1
            if attempts == 4:  # three attempts met the lock: one more than it used to take
                retried.set()

    store._conn.set_trace_callback(trace)
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    closing = threading.Thread(target=store.close)
    try:
        store.update_child("b1", make_child(0, status=ChildStatus.COMPLETED, finished_ts=9.0))
        assert retried.wait(HANG_S), "the writer stopped trying"
        closing.start()  # close() waits for the write, however long the lock is held ...
        # ... but a second Ctrl+C's flush does not: the lock is held until this test lets it
        # go, so a flush that waited for the write would still be waiting at HANG_S.
        flushed: list[bool] = []
        flusher = threading.Thread(target=lambda: flushed.append(store.flush(timeout=0.2)))
        flusher.start()
        flusher.join(HANG_S)
        assert flushed == [False]
        assert closing.is_alive()
    finally:
        other.execute("COMMIT")
        other.close()
    closing.join(HANG_S)
    assert not closing.is_alive()
    assert store.failed_writes == 0
    assert "failed" not in caplog.text and "database is locked" in caplog.text
    with StoreReader(db) as reader:
        row = reader.child("b1", "c0")
    assert row is not None and (row.status, row.finished_ts) == (ChildStatus.COMPLETED, 9.0)


# Reads a database as a user who cannot write its folder. Root can write any folder (the
# DAC_OVERRIDE capability): a root process gives up those capabilities, then runs again.
_READ_AS_NON_WRITER = """
import ctypes, os, sys
if os.geteuid() == 0 and "--dropped" not in sys.argv:
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, out of the bounding set
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            sys.exit(77)
    os.execv(sys.executable, [sys.executable, "-c", sys.argv[1], sys.argv[1], "--dropped"])
from pathlib import Path
from flightdeck.engine.errors import StoreError
from flightdeck.engine.records.reader import StoreReader
db = Path(os.environ["DB"])
print("writable" if os.access(db.parent, os.W_OK) else "read-only", end=": ")
with StoreReader(db) as reader:
    try:
        print([b.id for b in reader.batches()], len(reader.children("b1")))
    except StoreError as exc:
        print(exc)
"""


def _read_from_read_only_folder(db: Path) -> str:
    db.parent.chmod(0o555)
    try:
        result = subprocess.run(
            [sys.executable, "-c", _READ_AS_NON_WRITER, _READ_AS_NON_WRITER],
            env={**os.environ, "DB": str(db)},
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        db.parent.chmod(0o755)
    if result.returncode == 77:
        pytest.skip("runs as root, and cannot give up the power to write any folder")
    assert (result.returncode, result.stderr) == (0, "")
    return result.stdout


def test_a_read_only_state_folder_can_still_be_read(db: Path) -> None:
    # After a clean close there is no -shm file, and a WAL database's reader needs one: in a
    # folder it cannot write (a read-only mount, another user's), `report` and `ls` failed with
    # "unable to open database file" or "attempt to write a readonly database".
    with Store(db) as store:
        store.create_batch(make_batch())
        store.add_children("b1", [make_child(i) for i in range(3)])
    assert sorted(p.name for p in db.parent.iterdir()) == ["flightdeck.db"]
    assert _read_from_read_only_folder(db) == "read-only: ['b1'] 3\n"
    assert sorted(p.name for p in db.parent.iterdir()) == ["flightdeck.db"]


def test_a_read_only_folder_whose_wal_holds_rows_is_not_read_without_them(
    tmp_path: Path, db: Path
) -> None:
    # A -wal with frames and no -shm (copied from a live one): `immutable` would skip the -wal
    # and show a batch without its children. The reader must refuse, not show less.
    copy = tmp_path / "copy" / "flightdeck.db"
    copy.parent.mkdir()
    with Store(db) as store:
        store.create_batch(make_batch())
        assert store.flush(timeout=HANG_S)
        other = sqlite3.connect(db)
        other.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # the batch, into the database file
        other.close()
        copy.write_bytes(db.read_bytes())
        store.add_children("b1", [make_child(i) for i in range(3)])
        assert store.flush(timeout=HANG_S)
        Path(f"{copy}-wal").write_bytes(Path(f"{db}-wal").read_bytes())
    assert os.path.getsize(f"{copy}-wal") > 0
    out = _read_from_read_only_folder(copy)
    assert out.startswith(f"read-only: {copy}: cannot read the database: ")


def test_a_units_event_commits_with_the_row_that_ends_it(db: Path) -> None:
    """The "unit" event (what a resume reads so as not to announce a unit twice) and the final
    row that ends the unit are one transaction. Queued as two items, the writer could take the
    event at the end of one batch and the row in the next: an owner killed between the two
    commits left a unit recorded as announced whose last row said it still ran."""
    from flightdeck.engine.model import GroupFinished
    from flightdeck.engine.model.units import UNIT_EVENT
    from flightdeck.engine.owner.recording import StoreRecorder

    transactions: list[list[str]] = []
    release = threading.Event()
    with Store(db) as store:
        attempt = store._attempt  # a spy on what each transaction holds

        def spying(writes: list[writes_module.Write]) -> None:
            # a row by its child's id, an event by its kind
            transactions.append(
                [str(w.params[1 if w.what == "update_child" else 3]) for w in writes]
            )
            attempt(writes)

        store._attempt = spying  # type: ignore[method-assign]
        # The writer is held in a commit callback while a batch's worth queues behind it, so
        # the item that ends the unit falls on the writer's batch boundary (MAX_BATCH rows).
        held = threading.Event()

        def hold(_: bool) -> None:
            held.set()
            release.wait(HANG_S)

        store.update_child("b1", make_child(0), then=hold)
        assert held.wait(HANG_S)
        for i in range(MAX_BATCH - 1):
            store.record_event("b1", None, float(i), "note", "")
        row = make_child(1, status=ChildStatus.COMPLETED, finished_ts=1100.0)
        unit = GroupFinished.of("g", (row,))
        StoreRecorder(store, "b1", lambda: 1200.0).record_final(row, lambda _: None, unit)
        release.set()
        assert store.flush(timeout=HANG_S)
    [together] = [t for t in transactions if "c1" in t]
    assert together[-2:] == [UNIT_EVENT, "c1"]  # the event, then its row
    with StoreReader(db) as reader:
        assert [e for e in reader.events("b1") if e[2] == UNIT_EVENT] == [
            (1200.0, None, UNIT_EVENT, '{"group": "g", "status": "completed", "attempts": 1}')
        ]


def test_a_units_event_is_not_committed_without_its_row_when_the_row_fails(db: Path) -> None:
    """A bad write in a batch sends the writer through its writes one transaction at a time, so
    the good ones still land: the event and the row that ends its unit go through together, and
    fail together (the row a value SQLite refuses), never the event alone."""
    from flightdeck.engine.model.units import UNIT_EVENT

    told: list[bool] = []
    with Store(db) as store:
        bad = make_child(1, status=ChildStatus.COMPLETED, activity=Activity(api_calls=2**70))
        store.update_child("b1", bad, then=told.append, events=[(None, 1.0, UNIT_EVENT, "{}")])
        store.update_child("b1", make_child(2))  # a good write beside them lands
        assert store.flush(timeout=HANG_S)
    assert told == [False]
    with StoreReader(db) as reader:
        assert [c.id for c in reader.children("b1")] == ["c2"]
        assert [e for e in reader.events("b1") if e[2] == UNIT_EVENT] == []


def test_each_callback_hears_what_became_of_its_own_row_when_another_write_fails(
    db: Path,
) -> None:
    """A bad write sends the writer through its batch one transaction at a time. A callback is
    told its own row's fate, or (its row coalesced away) whether a later row of its child
    landed: not, as it was, `False` for every row of a child one of whose writes failed."""
    told: dict[str, bool] = {}

    def then(name: str) -> Callable[[bool], None]:
        return lambda ok: told.__setitem__(name, ok)

    release, held = threading.Event(), threading.Event()

    def hold(_: bool) -> None:
        held.set()
        release.wait(HANG_S)

    with Store(db) as store:
        store.update_child("b1", make_child(9), then=hold)  # the rest queue behind it: one batch
        assert held.wait(HANG_S)
        store.update_child("b1", make_child(1), then=then("c1 replaced"))
        store.update_child(
            "b1", make_child(1), then=then("c1 grouped"), events=[(None, 1.0, "n", "")]
        )
        bad = make_child(1, status=ChildStatus.COMPLETED, activity=Activity(api_calls=2**70))
        store.update_child("b1", bad, then=then("c1 bad"))
        store.update_child("b1", make_child(2), then=then("c2 replaced"))
        store.update_child("b1", make_child(2, status=ChildStatus.RUNNING), then=then("c2 last"))
        release.set()
        assert store.flush(timeout=HANG_S)
    assert told == {
        "c1 replaced": True,  # the grouped row after it landed, holding it
        "c1 grouped": True,
        "c1 bad": False,
        "c2 replaced": True,
        "c2 last": True,
    }
    with StoreReader(db) as reader:
        assert {c.id: c.status for c in reader.children("b1")} == {
            "c1": ChildStatus.QUEUED,
            "c2": ChildStatus.RUNNING,
            "c9": ChildStatus.QUEUED,
        }
