"""A child whose cluster worker was lost (control/lost.py), as the owner's store keeps it: the
lost attempt's event and the row that queues the child again are committed together or not at
all. No Ray: the coordinator's part, over a real store on disk."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from flightdeck.engine.child.elsewhere import Elsewhere
from flightdeck.engine.control.lost import rerun_lost
from flightdeck.engine.control.pauses import Pauses
from flightdeck.engine.control.slots import Slots
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.model import ChildStatus
from flightdeck.engine.owner.recording import StoreRecorder
from flightdeck.engine.records.meter import Meter
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.store import Store

from helpers import sim_route
from test_store import make_batch

ROUTE = sim_route()


def now() -> float:
    return 1000.0


class Ends:
    """The coordinator's side of a child giving back its slot, or ending."""

    def __init__(self, slots: Slots) -> None:
        self.slots = slots

    def release(self, child: Any) -> None:
        self.slots.alive.pop(child.task.id, None)

    def finish(self, child: Any) -> None:
        raise AssertionError(f"{child.task.id} was not to end")


def running_elsewhere(tmp_path: Path, store: Store) -> tuple[Elsewhere, Slots]:
    """Child c1 of batch b1, running on a worker, its running row committed."""
    none: Any = None
    runner: Any = SimpleNamespace(steerable=True)  # its runner runs on the worker, not here
    child = Elsewhere(
        Task(id="c1", goal="Look around", seq=0), ROUTE, runner, str(tmp_path / "c1.log"),
        now, lambda fact: None, queued_ts=0.0, secrets=(),
    )  # fmt: skip
    slots = Slots([child], {ROUTE.name: ROUTE}, pool=none, pool_size=1, clock=now)
    assert child.mark_running()
    slots.alive["c1"] = child
    store.create_batch(make_batch("b1"))
    store.update_child("b1", child.row())
    assert store.flush(10)
    return child, slots


def test_a_lost_attempts_event_is_committed_with_its_queued_row_or_neither_is(
    tmp_path: Path,
) -> None:
    # rerun_lost wrote the lost attempt's row, its event and the row queued again apart: an
    # owner killed between them left a queued row with its spend carried and no event to say
    # it ran, which a resume then counted as a fresh child. The event refused here stands for
    # that kill, at that point, every time.
    db = tmp_path / "state" / "flightdeck.db"
    with Store(db) as store:
        child, slots = running_elsewhere(tmp_path, store)
        with sqlite3.connect(db) as conn:
            conn.execute(
                "CREATE TRIGGER killed BEFORE INSERT ON events WHEN NEW.kind = 'lost_attempt'"
                " BEGIN SELECT RAISE(ABORT, 'the owner was killed here'); END"
            )
        conn.close()
        recorder = StoreRecorder(store, "b1", now)
        pauses = Pauses(slots, Ends(slots), recorder)
        rerun_lost(slots, Ends(slots), pauses, recorder, Meter(), child, "its worker was lost")
        assert child.status is ChildStatus.QUEUED  # in memory, it runs again
        store.flush(10)
    with StoreReader(db) as reader:
        row = reader.child("b1", "c1")
        events = [e for e in reader.events("b1") if e[2] == "lost_attempt"]
    assert row is not None
    assert (row.status, events) == (ChildStatus.RUNNING, [])  # as a killed owner left it


def test_a_lost_attempt_is_recorded_with_the_row_that_queues_it_again(tmp_path: Path) -> None:
    db = tmp_path / "state" / "flightdeck.db"
    with Store(db) as store:
        child, slots = running_elsewhere(tmp_path, store)
        recorder = StoreRecorder(store, "b1", now)
        pauses = Pauses(slots, Ends(slots), recorder)
        rerun_lost(slots, Ends(slots), pauses, recorder, Meter(), child, "its worker was lost")
        assert store.flush(10)
    with StoreReader(db) as reader:
        row = reader.child("b1", "c1")
        events = [e for e in reader.events("b1") if e[2] == "lost_attempt"]
    assert row is not None and row.status is ChildStatus.QUEUED
    assert [e[1] for e in events] == ["c1"]
