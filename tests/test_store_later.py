"""A running child's row the store's writer builds at its commit (`Store.update_running`):
built then, on the writer's thread, never with the child's end, and not at all when a later
row of the child comes in the same transaction (how a child's start and its counters are
recorded)."""

from __future__ import annotations

import dataclasses
import logging
import threading
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from flightdeck.engine.model import Activity, ChildRow, ChildStatus, Usage
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.rows import child_params, running_params
from flightdeck.engine.records.store import Store

from helpers import HANG_S
from test_store import make_child


class Rows:
    """A row source that says how often, and on which thread, it was asked."""

    def __init__(self, row: ChildRow) -> None:
        self.row = row
        self.threads: list[str] = []

    def __call__(self) -> ChildRow:
        self.threads.append(threading.current_thread().name)
        return self.row


def _held(store: Store) -> threading.Event:
    """Holds the writer (inside a commit's callback) until the event is set, so what is queued
    meanwhile is taken, and committed, together."""
    gate, inside = threading.Event(), threading.Event()

    def hold(_committed: bool) -> None:
        inside.set()
        assert gate.wait(HANG_S)

    store.update_child("b1", make_child(9), then=hold)
    assert inside.wait(HANG_S)
    return gate


def _running_child(db: Path) -> Any:
    """A real child, running, with no runner of its own (its row is all these tests read)."""
    from types import SimpleNamespace

    from flightdeck.engine.child.state import Child
    from flightdeck.engine.inputs.tasks import Task

    from helpers import sim_route

    runner: Any = SimpleNamespace(steerable=True)
    child = Child(
        Task(id="c0", goal="Look around", seq=0), sim_route(), runner, str(db.parent / "c0.log"),
        lambda: 1000.0, lambda fact: None, 1000.0, secrets=(),
    )  # fmt: skip
    assert child.mark_running()
    return child


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "state" / "flightdeck.db"


def test_a_running_row_is_built_by_the_writer_as_the_child_is_at_its_commit(db: Path) -> None:
    with Store(db) as store:
        gate = _held(store)
        rows = Rows(make_child(0, status=ChildStatus.RUNNING, started_ts=1001.0))
        store.update_running("b1", "c0", rows)
        rows.row = dataclasses.replace(rows.row, result="since")  # it changed before the commit
        gate.set()
        assert store.flush(timeout=HANG_S)
        assert rows.threads == ["flightdeck-store"]
    with StoreReader(db) as reader:
        row = reader.child("b1", "c0")
    assert row is not None
    assert (row.status, row.started_ts, row.result) == (ChildStatus.RUNNING, 1001.0, "since")


def test_a_running_row_superseded_in_its_transaction_is_never_built(db: Path) -> None:
    with Store(db) as store:
        gate = _held(store)
        rows = Rows(make_child(0, status=ChildStatus.RUNNING))
        store.update_running("b1", "c0", rows)
        store.update_running("b1", "c1", Rows(make_child(1, status=ChildStatus.RUNNING)))
        store.update_child("b1", make_child(0, status=ChildStatus.COMPLETED, result="done"))
        gate.set()
        assert store.flush(timeout=HANG_S)
        assert rows.threads == []
    with StoreReader(db) as reader:
        found = {r.id: (r.status, r.result) for r in reader.children("b1")}
    assert found["c0"] == (ChildStatus.COMPLETED, "done")
    assert found["c1"] == (ChildStatus.RUNNING, None)


def test_a_running_row_built_after_the_child_ended_records_no_end(db: Path) -> None:
    """Its end is its final row's to record, and only once that row is committed (the batch
    announces it then, or counts it lost): a running row must not record it first."""
    ended = make_child(
        0,
        status=ChildStatus.FAILED,
        started_ts=1001.0,
        finished_ts=1002.0,
        error="it broke",
        result="half an answer",
        cost_usd=None,  # unknown, of which 0.25 is known: the columns after the four
        cost_floor_usd=Decimal("0.25"),
    )
    running = dataclasses.replace(
        ended, status=ChildStatus.RUNNING, finished_ts=None, error=None, result=None
    )
    assert running_params("b1", lambda: ended) == child_params("b1", running)
    assert running_params("b1", lambda: running) == child_params("b1", running)
    with Store(db) as store:
        store.update_running("b1", "c0", lambda: ended)
    with StoreReader(db) as reader:
        row = reader.child("b1", "c0")
    assert row is not None
    assert (row.status, row.started_ts, row.finished_ts) == (ChildStatus.RUNNING, 1001.0, None)
    assert (row.error, row.result, row.cost_floor_usd) == (None, None, Decimal("0.25"))


def test_a_running_row_that_cannot_be_built_costs_that_row_alone(
    db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="flightdeck.engine.records.store")

    def broken() -> ChildRow:
        raise ValueError("no row")

    with Store(db) as store:
        gate = _held(store)
        store.update_running("b1", "c0", broken)
        store.update_running("b1", "c1", Rows(make_child(1, status=ChildStatus.RUNNING)))
        store.update_child("b1", make_child(2, status=ChildStatus.COMPLETED))
        gate.set()
        assert store.flush(timeout=HANG_S)
        assert store.failed_writes == 1
    assert "update_child could not be made" in caplog.text and "no row" in caplog.text
    with StoreReader(db) as reader:
        assert [r.id for r in reader.children("b1")] == ["c1", "c2", "c9"]


@pytest.mark.parametrize("again", [ChildStatus.QUEUED, ChildStatus.PAUSED])
def test_a_running_row_built_after_the_child_was_queued_again_is_not_written(
    db: Path, again: ChildStatus
) -> None:
    """A child on a lost Ray worker is queued (or, paused, parked) again, its lost attempt's
    spend carried, in one transaction with its `lost_attempt` event. A running row queued
    before, and built after that, wrote the queued row first: an owner killed between the two
    left a queued row no event explained, which `resume` read as a fresh child (found by
    review: fails on the tree before)."""
    ran = make_child(0, status=ChildStatus.RUNNING, started_ts=1001.0, usage=Usage(100, 20))
    requeued = dataclasses.replace(ran, status=again, started_ts=None, activity=Activity())
    assert running_params("b1", lambda: requeued) is None
    with Store(db) as store:
        store.update_child("b1", ran)
        assert store.flush(timeout=HANG_S)
        store.update_running("b1", "c0", Rows(requeued))
        assert store.flush(timeout=HANG_S) and store.failed_writes == 0
    with StoreReader(db) as reader:
        row = reader.child("b1", "c0")
    assert row is not None and (row.status, row.started_ts) == (ChildStatus.RUNNING, 1001.0)


def test_a_running_row_whose_child_is_held_by_a_stopped_thread_holds_no_other_write(
    db: Path,
) -> None:
    # Found by a review: a second Ctrl+C's handler flushes the store on the main thread, which
    # the signal may have stopped inside a child's `row()`, holding its lock. The writer, to
    # build that child's running row, waited on the lock for ever: the flush gave up after its
    # second, and the final rows queued behind that row were never written.
    from flightdeck.engine.control.liverows import LiveRows
    from flightdeck.engine.owner.recording import StoreRecorder

    child = _running_child(db)
    with Store(db) as store:
        store.update_child("b1", make_child(0))  # c0 queued, as admission found it
        assert store.flush(HANG_S)
        live = LiveRows(StoreRecorder(store, "b1", lambda: 1000.0), lambda rows: None)
        held = child._lock  # the main thread, stopped by the signal inside `row()`
        held.acquire()
        try:
            live.record({"c0": child})  # the coordinator's tick: c0's running row, deferred
            store.update_child("b1", make_child(1, status=ChildStatus.COMPLETED))
            assert store.flush(3.0)  # the handler's flush, within its time
        finally:
            held.release()
    with StoreReader(db) as reader:
        rows = {r.id: r.status for r in reader.children("b1")}
    assert rows == {"c0": ChildStatus.QUEUED, "c1": ChildStatus.COMPLETED}  # c0's row left out


def test_a_row_written_with_its_events_is_kept_when_a_later_row_of_its_child_is_not_built(
    db: Path,
) -> None:
    # A retry queues its child again in one transaction with its "retry" event, and admission
    # starts it at once: its running row, built at the commit, is left out when another thread
    # holds the child past ROW_WAIT_S (the main thread, stopped by a signal). Both in one
    # writer's batch, the queued row was dropped as superseded by the running row: neither was
    # written, and the store kept the child's failed row beside its retry event.
    import functools

    from flightdeck.engine.control.recorder import ROW_WAIT_S
    from flightdeck.engine.owner.recording import StoreRecorder

    child = _running_child(db)
    failed = make_child(0, status=ChildStatus.FAILED, started_ts=1001.0, finished_ts=1002.0)
    with Store(db) as store:
        store.update_child("b1", failed)
        assert store.flush(HANG_S)
        recorder = StoreRecorder(store, "b1", lambda: 1003.0)
        gate = _held(store)
        held = child._lock
        held.acquire()
        try:
            recorder.record(make_child(0), [("retry", "{}")])  # queued again, with its event
            recorder.record_running("c0", functools.partial(child.row, ROW_WAIT_S))
            gate.set()
            assert store.flush(HANG_S)
        finally:
            held.release()
    with StoreReader(db) as reader:
        row = reader.child("b1", "c0")
        kinds = [kind for _, c, kind, _ in reader.events("b1") if c == "c0"]
    assert kinds == ["retry"]
    assert row is not None and row.status is ChildStatus.QUEUED  # its retry's row, with it


def test_a_row_is_kept_when_the_later_row_of_its_child_is_not_built(db: Path) -> None:
    # Found by a review: the same hole as a retry's row, for a row recorded alone. A child takes
    # its pause (its `paused` row, recorded whole), and the coordinator's next tick defers its
    # running row; both in one writer's batch, with the child held past ROW_WAIT_S (the main
    # thread, stopped by a signal), the paused row was dropped as superseded by a row that was
    # then left out: the store said `running` of a paused child (and the tick, which had
    # recorded its version, did not write it again while it stayed paused).
    from flightdeck.engine.control.liverows import LiveRows
    from flightdeck.engine.owner.recording import StoreRecorder

    child = _running_child(db)
    with Store(db) as store:
        store.update_child("b1", child.row())
        assert store.flush(HANG_S)
        child.request_pause()
        assert child.take_pause()  # at its turn boundary
        paused = child.row()
        recorder = StoreRecorder(store, "b1", lambda: 1003.0)
        live = LiveRows(recorder, lambda rows: None)
        gate = _held(store)
        held = child._lock
        held.acquire()
        try:
            recorder.record(paused)  # the coordinator heard it took its pause
            live.record({"c0": child})  # the tick: its row deferred, built at the commit
            gate.set()
            assert store.flush(HANG_S)
        finally:
            held.release()
    with StoreReader(db) as reader:
        row = reader.child("b1", "c0")
    assert row is not None and row.status is ChildStatus.PAUSED
