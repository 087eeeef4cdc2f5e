"""The owner's duties (engine/owner/duties.py): its heartbeat never waits behind client requests."""

from __future__ import annotations

import itertools
import sqlite3
import threading
from pathlib import Path

from flightdeck.engine.owner.duties import OwnerDuties
from flightdeck.engine.records.store import Store

from helpers import until
from test_store import make_batch, make_child

PENDING = 10_000


class Clock:
    """Time that moves only when a request is applied (each takes 10 ms of it)."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.lock = threading.Lock()

    def __call__(self) -> float:
        with self.lock:
            return self.now

    def advance(self, seconds: float) -> None:
        with self.lock:
            self.now += seconds


def test_the_heartbeat_goes_on_while_ten_thousand_requests_are_applied(tmp_path: Path) -> None:
    # Issue 32: 10,000 pending requests took 43.7 s to drain, and the heartbeat stood still for
    # 40 s of it, past the 30 s after which a client calls the owner dead.
    db = tmp_path / "flightdeck.db"
    with Store(db) as store:
        store.create_batch(make_batch("b1"))
        store.add_children("b1", [make_child(1)])
    with sqlite3.connect(db) as conn:  # as clients record them (the columns every version has)
        conn.executemany(
            "INSERT INTO requests (batch_id, kind, child_ids, now, state, created_ts)"
            " VALUES ('b1', 'stop', '[\"c1\"]', 0, 'pending', 1.0)",
            [()] * PENDING,
        )
    clock = Clock()
    applied: list[int] = []
    beats: list[float] = []

    def apply(request: object) -> None:
        clock.advance(0.01)  # 10,000 of them: 100 s of the owner's time
        applied.append(1)

    store = Store(db)
    store.heartbeat = lambda batch_id, ts: beats.append(ts)  # type: ignore[method-assign]
    duties = OwnerDuties(db, "b1", store, apply, clock, poll_s=0.01, heartbeat_s=2.0)
    try:
        duties.start()
        until(lambda: len(applied) == PENDING, 60)
    finally:
        duties.stop()
        store.close()
    assert clock() > 1099.9
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    assert beats[0] == 1000.0 and beats[-1] >= 1098.0  # from the start to the end of the drain
    assert max(gaps) <= 2.0 + 0.01  # one request's time late at most, never the whole drain
