"""StoreView over a real store written by an in-process engine: the snapshot follows the
store, and the facts (started, finished, batch finished) are the differences between reads,
whether watchfiles reports the changes or only polling finds them."""

from __future__ import annotations

import dataclasses
import logging
import threading
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.attached.view import StoreView
from flightdeck.engine.model import (
    BatchFinished,
    BatchStatus,
    ChildFinished,
    ChildStarted,
    ChildStatus,
    EngineEvent,
)
from flightdeck.engine.records.reader import StoreReader
from tui_support import view_when_ready

from helpers import HANG_S, Hold, batch, settings, sim_route, until


def events_to_the_end(
    view: StoreView, ended_before: set[str] | None = None, hold: Hold | None = None
) -> list[EngineEvent]:
    """Every fact the view derives, until (and with) the batch's end; `ended_before` gets the
    children that had ended when it subscribed (their ends may have been told to nobody);
    `hold`, if given, is released once it has subscribed."""
    events: list[EngineEvent] = []
    ended = threading.Event()

    def on_event(event: EngineEvent) -> None:
        events.append(event)
        if isinstance(event, BatchFinished):
            ended.set()

    view.subscribe(on_event)
    if ended_before is not None:
        ended_before |= {r.id for r in view.snapshot().children if r.status.terminal}
    if hold is not None:
        hold.release()
    assert ended.wait(HANG_S), "the batch's end seen through the store"
    return events


@pytest.mark.parametrize("force_polling", [False, True], ids=["watchfiles", "polling"])
def test_the_view_follows_the_store_and_derives_the_facts(
    tmp_path: Path, force_polling: bool, hold: Hold
) -> None:
    # Held until the view has subscribed: a batch that ended before then tells it no end.
    route = sim_route(time_scale=0.02, **hold.options())
    engine = Engine(batch(6), settings(route, pool=2), state_dir=tmp_path / "state")
    engine.start()
    try:
        db = tmp_path / "state" / "flightdeck.db"
        view = view_when_ready(db, engine.batch_id, poll_s=0.05, force_polling=force_polling)
        early: set[str] = set()
        events = events_to_the_end(view, early, hold=hold)
        assert view._waker is not None and view._waker.events is not force_polling
        snap = view.snapshot()
        assert snap.status is BatchStatus.COMPLETED and snap.finished_ts is not None
        assert [r.status for r in snap.children] == [ChildStatus.COMPLETED] * 6
        assert snap.totals.completed == 6 and snap.totals.usage.total > 0
        with StoreReader(db) as reader:  # the rows as the store's own reader builds them
            stored = reader.children(engine.batch_id, results=False)
        # ... and what reading the cache saved, at the batch's prices (as in-process)
        live = engine.snapshot().children
        assert [r.cache_saved_usd for r in snap.children] == [r.cache_saved_usd for r in live]
        assert any(r.cache_saved_usd for r in snap.children)
        unsaved = [dataclasses.replace(r, cache_saved_usd=Decimal(0)) for r in snap.children]
        assert unsaved == stored
        finished = [e.row.id for e in events if isinstance(e, ChildFinished)]
        assert len(finished) == len(set(finished))  # each at most once
        assert early == set()  # held: every end came after it subscribed, and was told
        assert set(finished) == {f"t{i:04d}" for i in range(6)}
        started = {e.child_id for e in events if isinstance(e, ChildStarted)}
        assert started <= set(finished)
        assert [e for e in events if isinstance(e, BatchFinished)] == [
            BatchFinished(engine.batch_id, BatchStatus.COMPLETED)
        ]
        assert view.transcript_path("t0000") == Path(snap.children[0].transcript)
        assert view.read_only is not None and "has ended" in view.read_only
        assert not view.refresh()  # nothing committed since: no read
        view.close()
    finally:
        engine.close()


def test_an_attached_view_publishes_each_units_result_once(tmp_path: Path, hold: Hold) -> None:
    from flightdeck.engine.inputs.tasks import Batch, Task
    from flightdeck.engine.model import GroupFinished, UnitStatus

    tasks = tuple(
        Task(id=f"r{i}", goal="x", seq=i, group="security" if i < 3 else None) for i in range(5)
    )
    engine = Engine(
        Batch("units", tasks),
        settings(sim_route(**hold.options()), pool=2),  # held until the view has subscribed
        state_dir=tmp_path / "state",
    )
    engine.start()
    try:
        db = tmp_path / "state" / "flightdeck.db"
        view = view_when_ready(db, engine.batch_id, poll_s=0.05)
        events = events_to_the_end(view, hold=hold)
        view.close()
    finally:
        engine.close()
    (unit,) = [e for e in events if isinstance(e, GroupFinished)]
    assert unit.group == "security" and unit.status is UnitStatus.COMPLETED
    assert [m.id for m in unit.members] == ["r0", "r1", "r2"]
    last = max(i for i, e in enumerate(events) if isinstance(e, ChildFinished) and e.row.group)
    assert events.index(unit) > last  # after its last member


def test_an_attached_view_knows_who_delegated_whom(tmp_path: Path, hold: Hold) -> None:
    # The store keeps a delegate's parent as an event, not in its row: read back, the rows must
    # still say parent and depth, or the tree order and `depth>0` see a flat batch.
    import dataclasses

    from flightdeck.engine.inputs.settings import Budget

    route = dataclasses.replace(
        sim_route(time_scale=0.02, tool_turns=0, delegate_rate=1.0, delegates=2, **hold.options()),
        delegate=True,
    )
    s = dataclasses.replace(settings(route, pool=4), budget=Budget(max_depth=2))
    engine = Engine(batch(1), s, state_dir=tmp_path / "state")
    engine.start()
    try:
        db = tmp_path / "state" / "flightdeck.db"
        view = view_when_ready(db, engine.batch_id, poll_s=0.05)
        events_to_the_end(view, hold=hold)
        snap = view.snapshot()
        view.close()
        live = {r.id: (r.parent, r.depth) for r in engine.snapshot().children}
    finally:
        engine.close()
    seen = {r.id: (r.parent, r.depth) for r in snap.children}
    assert seen == live
    assert sorted(depth for _, depth in seen.values()) == [0, 1, 1, 2, 2, 2, 2]
    assert seen["t0000.1.1"] == ("t0000.1", 2)
    with StoreReader(db) as reader:
        assert {r.id: (r.parent, r.depth) for r in reader.children(engine.batch_id)} == live


def test_an_attached_view_publishes_a_retried_units_result_again(
    tmp_path: Path, hold: Hold
) -> None:
    # Found by an audit: the engine publishes a unit again once a retried member (and what it
    # delegated) has ended; a view attached to it told each group once, for good.
    from flightdeck.engine.inputs.tasks import Batch, Task
    from flightdeck.engine.model import GroupFinished, UnitStatus

    tasks = tuple(Task(id=i, goal="x", seq=n, group="g") for n, i in enumerate("ab"))
    engine = Engine(
        Batch("units", tasks), settings(sim_route(**hold.options()), pool=2), state_dir=tmp_path
    )
    live: list[EngineEvent] = []
    engine.subscribe(live.append)
    engine.start()
    try:
        view = view_when_ready(tmp_path / "flightdeck.db", engine.batch_id, poll_s=0.05)
        events: list[EngineEvent] = []
        view.subscribe(events.append)

        def units() -> list[GroupFinished]:
            return [e for e in events if isinstance(e, GroupFinished)]

        def row_of(child_id: str) -> ChildStatus:
            return {r.id: r for r in view.snapshot().children}[child_id].status

        until(lambda: engine.snapshot().totals.running == 2)
        engine.stop(["a"])
        hold.release("b")
        until(lambda: len(units()) == 1, what="the unit, through the store")
        engine.retry(["a"])
        until(lambda: row_of("a") is ChildStatus.RUNNING, what="the retry, through the store")
        hold.release()
        until(lambda: len(units()) == 2, what="the retried unit, through the store")
        assert engine.wait(HANG_S)
        view.close()
    finally:
        engine.close()
    assert [u.status for u in units()] == [UnitStatus.PARTIAL, UnitStatus.COMPLETED]
    assert [u.status for u in units()] == [u.status for u in live if isinstance(u, GroupFinished)]


def test_a_stop_pause_or_continue_of_a_batch_ended_since_the_key_is_a_notice(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Found by a review: a batch that ended between the TUI's look at it and the send (stop all
    # and quit, the admission's pause) made the send an error (`stop all not sent: batch B has
    # ended`), and the decision stopped there: the TUI did not quit. `flightdeck stop` says it
    # as a notice, exit 0.
    from flightdeck.engine.commands import CommandError, PauseAdmission, Steer, Stop, StopAll

    engine = Engine(batch(1), settings(sim_route(tool_turns=0)), state_dir=tmp_path / "state")
    engine.start()
    try:
        assert engine.wait(HANG_S)
    finally:
        engine.close()
    view = StoreView(tmp_path / "state" / "flightdeck.db", engine.batch_id, watch=False)
    try:
        with caplog.at_level(logging.WARNING, logger="flightdeck.engine.attached"):
            for command in (StopAll(), Stop(("t0000",)), PauseAdmission()):
                view.send(command)
        ended = f"batch {engine.batch_id} has ended (completed)"
        assert [r.getMessage() for r in caplog.records] == [
            f"{ended}: nothing left to stop",
            f"{ended}: nothing left to stop",
            f"{ended}: nothing left to pause",
        ]
        with pytest.raises(CommandError, match="has ended"):  # a steer is still refused
            view.send(Steer(("t0000",), "go on", False))
    finally:
        view.close()
