"""The store under a failing disk: a refused commit is held and tried again for a bounded time,
then given up on and counted; a callback is told whether its write was committed."""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Any

import pytest
from flightdeck.engine.model import BatchStatus
from flightdeck.engine.records import store as store_module
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.store import Store, storage_fault

from faults import FAULTS, faulty, fill, small_filesystem
from helpers import HANG_S, until
from test_store import make_batch, make_child


class Calls:
    """`then` callbacks: which child, committed or not, in the order they ran."""

    def __init__(self) -> None:
        self.seen: list[tuple[int, bool]] = []
        self.lock = threading.Lock()

    def then(self, seq: int) -> Any:
        def call(committed: bool) -> None:
            with self.lock:
                self.seen.append((seq, committed))

        return call


@pytest.mark.parametrize("fault", FAULTS.values(), ids=FAULTS.keys())
def test_a_refused_commit_is_held_and_lands_once_the_disk_takes_it_again(
    tmp_path: Path, fault: Any
) -> None:
    store = Store(tmp_path / "flightdeck.db", retry_s=30)
    conn = faulty(store, fault=fault)
    calls = Calls()
    try:
        store.create_batch(make_batch())
        assert store.flush(timeout=HANG_S)
        conn.failing.set()
        for seq in range(3):
            store.update_child("b1", make_child(seq), then=calls.then(seq))
        until(lambda: conn.refused >= 2)  # refused, and tried again
        assert store.trouble is not None and not store.trouble.gave_up
        assert storage_fault(fault()) == store.trouble.reason
        assert calls.seen == []  # nothing is said to be committed while it is not
        with StoreReader(tmp_path / "flightdeck.db") as reader:
            assert reader.children("b1") == []
        conn.failing.clear()  # room again
        assert store.flush(timeout=HANG_S)
        assert calls.seen == [(0, True), (1, True), (2, True)]
        assert store.trouble is None and store.failed_writes == 0
        with StoreReader(tmp_path / "flightdeck.db") as reader:
            assert [r.id for r in reader.children("b1")] == ["c0", "c1", "c2"]
    finally:
        conn.failing.clear()
        store.close()


def test_a_commit_refused_past_the_retry_window_is_given_up_counted_and_said(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = Store(tmp_path / "flightdeck.db", retry_s=0.2)
    conn = faulty(store)
    calls = Calls()
    try:
        store.create_batch(make_batch())
        assert store.flush(timeout=HANG_S)
        conn.failing.set()
        with caplog.at_level(logging.WARNING, logger="flightdeck"):
            for seq in range(3):
                store.update_child("b1", make_child(seq), then=calls.then(seq))
            assert not store.flush(timeout=10)  # not committed: flush does not say it was
            assert sorted(calls.seen) == [(0, False), (1, False), (2, False)]
            assert store.trouble is not None and store.trouble.gave_up
            assert store.failed_writes == 3
            # Given up: a later write is tried once, not for another window.
            refused = conn.refused
            store.update_child("b1", make_child(3), then=calls.then(3))
            store.flush(timeout=HANG_S)
            assert conn.refused == refused + 1 and calls.seen[-1] == (3, False)
            # A write that lands after that is committed, and said to be.
            conn.failing.clear()
            store.update_child("b1", make_child(4), then=calls.then(4))
            store.finish_batch("b1", BatchStatus.FAILED, 2000.0)
            store.flush(timeout=HANG_S)
            assert calls.seen[-1] == (4, True)
        messages = [r.getMessage() for r in caplog.records]
        assert any("cannot commit" in m and "database or disk is full" in m for m in messages)
        assert any("gave up" in m for m in messages)
        with StoreReader(tmp_path / "flightdeck.db") as reader:
            assert [r.id for r in reader.children("b1")] == ["c4"]
    finally:
        store.close()


def test_the_writer_thread_survives_any_error_and_tells_the_callbacks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The writer's one error path: an unexpected exception costs the writes in hand (logged,
    counted, their callbacks told), never the thread."""
    real = store_module.coalesce
    broken = threading.Event()
    broken.set()

    def coalesce(writes: list[Any]) -> list[Any]:
        if broken.is_set():
            broken.clear()
            raise RuntimeError("a bug in the writer")
        return real(writes)

    monkeypatch.setattr(store_module, "coalesce", coalesce)
    calls = Calls()
    with Store(tmp_path / "flightdeck.db") as store:
        with caplog.at_level(logging.ERROR, logger="flightdeck"):
            store.update_child("b1", make_child(0), then=calls.then(0))
            until(lambda: calls.seen == [(0, False)])
        assert "a bug in the writer" in caplog.text
        store.update_child("b1", make_child(1), then=calls.then(1))
        assert store.flush(timeout=HANG_S)
        assert calls.seen == [(0, False), (1, True)]
        assert store.failed_writes == 1


def test_a_full_real_filesystem_holds_the_rows_and_they_land_when_room_is_made() -> None:
    """On a 2 MB tmpfs filled to the brim: SQLite's own SQLITE_FULL, rows held, then committed
    once a file is deleted. Skipped where this machine cannot mount one."""
    with small_filesystem("2m") as fs:
        db = fs / "state" / "flightdeck.db"
        store = Store(db, retry_s=30)
        calls = Calls()
        try:
            store.create_batch(make_batch())
            assert store.flush(timeout=HANG_S)
            filler = fill(fs)
            big = "x" * 90_000  # more than a full disk has room for, in any WAL page reused
            for seq in range(4):
                store.update_child("b1", make_child(seq, result=big), then=calls.then(seq))
            until(lambda: store.trouble is not None, timeout=60)
            assert "full" in store.trouble.reason  # type: ignore[union-attr]
            assert calls.seen == []
            filler.unlink()
            assert store.flush(timeout=HANG_S)
            assert sorted(calls.seen) == [(s, True) for s in range(4)]
            assert store.trouble is None
        finally:
            store.close()
        with StoreReader(db) as reader:
            assert len(reader.children("b1")) == 4


def test_a_full_real_filesystem_past_the_window_gives_the_rows_up_and_says_so() -> None:
    with small_filesystem("2m") as fs:
        db = fs / "state" / "flightdeck.db"
        store = Store(db, retry_s=0.3)
        calls = Calls()
        try:
            store.create_batch(make_batch())
            assert store.flush(timeout=HANG_S)
            fill(fs)
            for seq in range(4):
                store.update_child("b1", make_child(seq, result="y" * 90_000), then=calls.then(seq))
            assert not store.flush(timeout=10)
            assert sorted(calls.seen) == [(s, False) for s in range(4)]
            assert store.trouble is not None and store.trouble.gave_up
            assert store.failed_writes == 4
        finally:
            store.close()


def test_a_database_file_deleted_under_the_store_is_a_storage_fault_not_a_silent_loss(
    tmp_path: Path,
) -> None:
    """SQLite would go on committing to the deleted file it has open: rows nobody can read."""
    db = tmp_path / "flightdeck.db"
    store = Store(db, retry_s=0.2)
    calls = Calls()
    try:
        store.create_batch(make_batch())
        assert store.flush(timeout=HANG_S)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{db}{suffix}").unlink(missing_ok=True)
        store.update_child("b1", make_child(0), then=calls.then(0))
        assert not store.flush(timeout=10)
        assert calls.seen == [(0, False)]
        assert store.trouble is not None and store.trouble.gave_up
        assert "was deleted or replaced" in store.trouble.reason
    finally:
        store.close()
