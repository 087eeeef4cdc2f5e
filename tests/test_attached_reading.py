"""An attached view reads only the child rows written since its last read (the store's change
counter), and what it keeps from read to read agrees with reading the whole store again."""

from __future__ import annotations

import dataclasses
import random
import sqlite3
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from flightdeck.engine.attached.reading import BatchReading
from flightdeck.engine.attached.view import StoreView
from flightdeck.engine.model import (
    Activity,
    BatchStatus,
    ChildFinished,
    ChildRow,
    ChildStarted,
    ChildStatus,
    EngineEvent,
    SteerReceipt,
    SteerState,
    Usage,
)
from flightdeck.engine.records import schema
from flightdeck.engine.records.live import live_json
from flightdeck.engine.records.meter import totals_of
from flightdeck.engine.records.store import Store

from helpers import HANG_S
from test_requests import version_5_schema
from test_store import make_batch, make_child

STATUSES = [ChildStatus.QUEUED, ChildStatus.RUNNING, ChildStatus.PAUSED, ChildStatus.COMPLETED,
            ChildStatus.FAILED, ChildStatus.STOPPED]  # fmt: skip


def _changed(rng: random.Random, row: ChildRow) -> ChildRow:
    """`row` as a run might write it next: another status, more usage, a cost known or not."""
    status = rng.choice(STATUSES)
    calls = row.activity.api_calls + 1
    return dataclasses.replace(
        row,
        status=status,
        activity=Activity(api_calls=calls, text=f"call {calls}", last_activity_ts=2000.0 + calls),
        usage=row.usage + Usage(rng.randint(0, 900), rng.randint(0, 90), rng.randint(0, 50), 0),
        cost_usd=None if rng.random() < 0.1 else Decimal(rng.randint(0, 10**6)) / 10**7,
        started_ts=row.started_ts or 1500.0,
        finished_ts=1600.0 if status.terminal else None,
    )


def test_each_read_agrees_with_reading_the_whole_store_again(tmp_path: Path) -> None:
    # Rows changed, rewritten unchanged, steered, settled by a crash recovery, added late; and
    # another batch in the same store writing between the reads.
    rng = random.Random(31)
    db = tmp_path / "flightdeck.db"
    store = Store(db)
    store.create_batch(make_batch("b1"))
    store.create_batch(make_batch("b2"))
    rows = {f"c{i}": make_child(i) for i in range(200)}
    store.add_children("b1", list(rows.values()))
    store.add_children("b2", [make_child(i) for i in range(50)])
    assert store.flush(timeout=HANG_S)
    view = StoreView(db, "b1", watch=False)
    try:
        for round_ in range(25):
            for cid in rng.sample(sorted(rows), 15):
                rows[cid] = _changed(rng, rows[cid])
                store.update_child("b1", rows[cid])
            store.update_child("b1", rows[rng.choice(sorted(rows))])  # the same again
            store.update_child("b2", _changed(rng, make_child(rng.randrange(50))))
            if round_ % 5 == 2:
                steered = rng.choice(sorted(rows))
                receipt = SteerReceipt(round_, steered, "look again", False, SteerState.QUEUED, 1.0)
                store.record_control("b1", receipt)
            if round_ == 10:
                late = make_child(200 + round_, status=ChildStatus.RUNNING)
                rows[late.id] = late
                store.add_children("b1", [late])
            if round_ == 20:
                store.settle_live_children("b1", ChildStatus.FAILED, 1700.0)
            assert store.flush(timeout=HANG_S)
            assert view.refresh()
            again = StoreView(db, "b1", watch=False)
            try:
                kept, fresh = view.snapshot(), again.snapshot()
                assert kept.children == fresh.children
                assert kept.totals == fresh.totals == totals_of(fresh.children)
            finally:
                again.close()
            if round_ == 20:  # every live child settled, as the owner that resumes does
                assert (kept.totals.running, kept.totals.queued, kept.totals.paused) == (0, 0, 0)
        assert kept.totals.children == 201 and any(r.steers for r in kept.children)
    finally:
        view.close()
        store.close()


class _Counting:
    """A connection that remembers how many rows each statement fetched."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.fetched: list[tuple[str, int]] = []

    def execute(self, sql: str, params: Any = ()) -> Any:
        counting = self

        class Cursor:
            def __init__(self, cursor: sqlite3.Cursor) -> None:
                self.cursor = cursor

            def fetchall(self) -> list[Any]:
                found = self.cursor.fetchall()
                counting.fetched.append((sql, len(found)))
                return found

            def fetchone(self) -> Any:
                return self.cursor.fetchone()

        return Cursor(self.conn.execute(sql, params))

    def child_rows(self) -> int:
        return sum(n for sql, n in self.fetched if "FROM children" in sql)


def _batch(db: Path, children: int) -> tuple[Store, list[ChildRow]]:
    """A store holding batch b1 of `children` queued children, written."""
    store = Store(db)
    store.create_batch(make_batch("b1"))
    rows = [make_child(i) for i in range(children)]
    store.add_children("b1", rows)
    assert store.flush(timeout=HANG_S)
    return store, rows


def test_a_read_fetches_only_the_child_rows_written_since_the_last(tmp_path: Path) -> None:
    db = tmp_path / "flightdeck.db"
    store, rows = _batch(db, 1000)
    conn = _Counting(schema.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True))
    reading = BatchReading(conn, "b1", schema.SCHEMA_VERSION, time.time)  # type: ignore[arg-type]
    assert reading.read() is not None
    assert conn.child_rows() == 1000 + 1000  # the first read: every row, and its fixed columns
    conn.fetched.clear()
    store.update_child("b1", dataclasses.replace(rows[7], status=ChildStatus.RUNNING))
    assert store.flush(timeout=HANG_S)
    events: list[EngineEvent] = []
    snap = reading.read(events)
    assert snap is not None and snap.children[7].status is ChildStatus.RUNNING
    assert snap.totals.running == 1 and snap.totals.queued == 999
    assert [type(e) for e in events] == [ChildStarted]
    assert conn.child_rows() == 1  # the one row written
    conn.fetched.clear()
    store.update_child("b1", dataclasses.replace(rows[7], status=ChildStatus.COMPLETED))
    assert store.flush(timeout=HANG_S)
    events.clear()
    snap = reading.read(events)
    assert snap is not None and conn.child_rows() == 1
    finished = [e for e in events if isinstance(e, ChildFinished)]
    assert [(e.row.id, e.done, e.total) for e in finished] == [("c7", 1, 1000)]
    conn.fetched.clear()
    with sqlite3.connect(db) as raw:  # a writer that does not keep the counter: the triggers do
        raw.execute("UPDATE children SET status = 'failed' WHERE id = 'c8'")
    snap = reading.read()
    assert snap is not None and snap.totals.failed == 1 and conn.child_rows() == 1
    conn.conn.close()
    store.close()


def test_a_version_5_store_is_read_whole_and_then_by_its_counter_once_migrated(
    tmp_path: Path,
) -> None:
    # A batch left by a flightdeck before the counter: read as it is, then its owner (this
    # version) migrates it, and the rows it had are read along with those written since.
    db = tmp_path / "flightdeck.db"
    conn = sqlite3.connect(db)
    conn.executescript(version_5_schema())
    conn.execute("PRAGMA user_version = 5")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.close()
    with sqlite3.connect(db) as raw:
        raw.execute(
            "INSERT INTO batches (id, name, spec_json, workspace, state_dir, owner_pid, "
            "owner_start, pool_size, status, created_ts) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            _batch_values(),
        )
        for i in range(3):
            raw.execute(
                "INSERT INTO children (batch_id, id, seq, goal, route, model, status, queued_ts,"
                " transcript) VALUES ('b1', ?, ?, 'g', 'sim', 'sim-1', 'queued', 1.0, 't')",
                (f"c{i}", i),
            )
    view = StoreView(db, "b1", watch=False)  # read-only: nothing migrates the file
    try:
        assert [r.status for r in view.snapshot().children] == [ChildStatus.QUEUED] * 3
        with sqlite3.connect(db) as raw:  # as a version 5 owner writes a row
            raw.execute("UPDATE children SET status = 'running' WHERE id = 'c1'")
        assert view.refresh()
        assert view.snapshot().totals.running == 1
    finally:
        view.close()
    store = Store(db)  # migrates: the old rows have counter 0
    row = make_child(2, status=ChildStatus.COMPLETED)
    store.update_child("b1", row)
    assert store.flush(timeout=HANG_S)
    raw = sqlite3.connect(db)
    assert raw.execute("SELECT id, rev FROM children ORDER BY id").fetchall() == [
        ("c0", 0),
        ("c1", 0),
        ("c2", 1),
    ]
    raw.close()
    view = StoreView(db, "b1", watch=False)
    try:
        statuses = [r.status for r in view.snapshot().children]
        assert statuses == [ChildStatus.QUEUED, ChildStatus.RUNNING, ChildStatus.COMPLETED]
        store.update_child("b1", make_child(0, status=ChildStatus.RUNNING))
        assert store.flush(timeout=HANG_S)
        assert view.refresh()
        assert view.snapshot().totals.running == 2
        # The version 5 owner still running writes as it did, without the counter: the
        # store's triggers raise it, so the view still sees its rows change.
        with sqlite3.connect(db) as raw:
            raw.execute("UPDATE children SET status = 'completed' WHERE id = 'c1'")
            raw.execute(
                "INSERT INTO children (batch_id, id, seq, goal, route, model, status, queued_ts,"
                " transcript) VALUES ('b1', 'c3', 3, 'g', 'sim', 'sim-1', 'running', 1.0, 't')"
            )
        assert view.refresh()
        statuses = [r.status for r in view.snapshot().children]
        assert statuses == [ChildStatus.RUNNING, ChildStatus.COMPLETED, ChildStatus.COMPLETED,
                            ChildStatus.RUNNING]  # fmt: skip
    finally:
        view.close()
        store.close()


def _batch_values() -> tuple[Any, ...]:
    info = make_batch("b1")
    return (info.id, info.name, info.spec_json, info.workspace, info.state_dir, info.owner_pid,
            info.owner_start, info.pool_size, info.status.value, info.created_ts)  # fmt: skip


@pytest.mark.parametrize("fails", ["_read_live", "_built"])
def test_a_read_that_fails_midway_loses_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: str
) -> None:
    # A read that raised after fetching the rows written since the last one (the database
    # locked for a moment, say): those rows must not be skipped by the next read, nor a row
    # built before the failure be counted in the totals but missing from the rows.
    db = tmp_path / "flightdeck.db"
    store, rows = _batch(db, 5)
    view = StoreView(db, "b1", watch=False)
    try:
        broken = getattr(BatchReading, fails)
        calls = 0

        def once(self: BatchReading, *args: Any) -> Any:
            nonlocal calls
            calls += 1
            if calls == 2:  # _built: the read's second row; _read_live: the first read here
                raise sqlite3.OperationalError("database is locked")
            return broken(self, *args)

        monkeypatch.setattr(BatchReading, fails, once)
        if fails == "_read_live":
            calls = 1
        for i in (1, 2):
            store.update_child("b1", dataclasses.replace(rows[i], status=ChildStatus.COMPLETED))
        assert store.flush(timeout=HANG_S)
        with pytest.raises(sqlite3.OperationalError):
            view.refresh()
        assert view.refresh()  # nothing written since: the failed read is tried again
        kept = view.snapshot()
        assert [r.status for r in kept.children].count(ChildStatus.COMPLETED) == 2
        assert kept.totals.completed == 2 and kept.totals == totals_of(kept.children)
    finally:
        view.close()
        store.close()


def test_a_client_or_view_of_a_folder_with_no_state_says_so(tmp_path: Path) -> None:
    # Found by an audit of the Python API: sqlite3's "unable to open database file" at the
    # first read, where Engine.resume says "no flightdeck state here".
    from flightdeck.engine.attached.client import Client
    from flightdeck.engine.errors import StoreError

    db = tmp_path / "nowhere" / "flightdeck.db"
    for make in (lambda: Client(db, "b1"), lambda: StoreView(db, "b1", watch=False)):
        with pytest.raises(StoreError, match="no flightdeck state here"):
            make()


def test_a_silent_owner_on_a_full_disk_is_said_so_not_called_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by a walk-through: the owner, alive, could record nothing on a full disk; the
    # attached view (what `flightdeck run` shows) guessed SIGSTOP or a hung disk.
    import shutil

    db = tmp_path / "flightdeck.db"
    with Store(db) as store:  # this process owns it, alive, its last heartbeat a minute old
        store.create_batch(make_batch("b1", heartbeat_ts=time.time() - 60))
    view = StoreView(db, "b1", watch=False)
    try:
        assert "SIGSTOP" in (view.snapshot().problem or "")
        full = shutil.disk_usage(tmp_path)._replace(free=4096)
        monkeypatch.setattr(shutil, "disk_usage", lambda _: full)
        problem = view.snapshot().problem or ""
        assert f"the disk of {tmp_path} is full, so it cannot record" in problem, problem
        assert "SIGSTOP" not in problem
    finally:
        view.close()


def test_an_owner_gone_from_a_full_disk_is_said_so_not_only_abandoned(tmp_path: Path) -> None:
    # Found by a walk-through: the owner gave up on a full disk (exit 3) and could record
    # neither its end nor why (its owner.log was cut short on that disk too); the attached TUI
    # `flightdeck run` shows said only that its owner died.
    import subprocess
    import sys

    from faults import fill, small_filesystem

    code = "import os; print(os.getpid())"
    gone = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    with small_filesystem("2m") as fs:
        db = fs / "flightdeck.db"
        with Store(db) as store:  # its owner has ended, its row still `running`
            store.create_batch(make_batch("b1", owner_pid=int(gone.stdout), owner_start=1.0))
        view = StoreView(db, "b1", watch=False)
        try:
            snap = view.snapshot()
            assert snap.status is BatchStatus.ABANDONED and snap.problem is None
            fill(fs)
            problem = view.snapshot().problem or ""
            assert f"the disk of {fs} is full: the batch's owner is gone" in problem, problem
            assert f"flightdeck resume b1 --state-dir {fs} runs it on" in problem, problem
        finally:
            view.close()


def test_rows_built_again_from_live_figures_and_events_agree_with_a_fresh_read(
    tmp_path: Path,
) -> None:
    # Each changed row is built once, its events' and live fields worked out from its columns:
    # after each round of changes, the kept rows are what a fresh view reads.
    rng = random.Random(39)
    db = tmp_path / "flightdeck.db"
    store = Store(db)
    store.create_batch(make_batch("b1"))
    rows = {f"c{i}": make_child(i) for i in range(60)}
    store.add_children("b1", list(rows.values()))
    assert store.flush(timeout=HANG_S)
    view = StoreView(db, "b1", watch=False)
    try:
        for round_ in range(20):
            for cid in rng.sample(sorted(rows), 8):
                rows[cid] = _changed(rng, rows[cid])
                store.update_child("b1", rows[cid])
            alive = [r for r in rows.values() if r.status.live]
            flying = [
                dataclasses.replace(
                    r,
                    in_flight=Usage(rng.randint(1, 900), rng.randint(0, 90), 0, 0),
                    in_flight_cost_usd=Decimal(rng.randint(0, 1000)) / 10**6,
                    activity=dataclasses.replace(r.activity, retrying=rng.random() < 0.3),
                )
                for r in rng.sample(alive, min(len(alive), 10))
            ]
            unsteerable = ["sim"] if round_ % 7 == 3 else []
            store.set_live("b1", live_json(flying, (), None, unsteerable))
            asker = rng.choice(sorted(rows))
            store.record_event("b1", asker, 1550.0 + round_, "ask", '{"question": "which?"}')
            assert store.flush(timeout=HANG_S)
            assert view.refresh()
            again = StoreView(db, "b1", watch=False)
            try:
                kept, fresh = view.snapshot(), again.snapshot()
                assert kept.children == fresh.children
                assert kept.totals == fresh.totals
                assert all(r.steerable == (not unsteerable) for r in kept.children)
            finally:
                again.close()
        assert any(r.in_flight.total for r in kept.children)  # the live figures were read
        assert any(r.question is not None for r in kept.children)  # and the events
    finally:
        view.close()
        store.close()
