"""The operator's pause and continue: of children (their slot freed, their context kept) and of
the batch's admission, on the sim with small delays."""

from __future__ import annotations

from pathlib import Path

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.child.halt import STAYS, Halt, Move
from flightdeck.engine.inputs.settings import Route
from flightdeck.engine.model import (
    CONTINUED_WAITING,
    PAUSED_SHOWS,
    BatchStatus,
    ChildStatus,
    SteerState,
)
from flightdeck.engine.records.markdown import render_markdown
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.report import build_report

from helpers import (
    Hold,
    SkipClock,
    announced,
    batch,
    run_to_end,
    settings,
    sim_route,
    start,
    stepped,
    stops_asked,
    until,
    watched,
)


def held(hold: Hold) -> Route:
    """Four calls (three of them tools), each held until the test releases it: a pause or a
    stop lands where the test says, however loaded the machine."""
    return sim_route(tool_turns=3, **hold.options())


def pausing(engine: Engine, child_id: str) -> bool:
    """Its pause is asked for and waits for the end of its call."""
    return _row(engine, child_id).activity.text.startswith("pausing")


def _row(engine, child_id):  # type: ignore[no-untyped-def]
    row = engine.snapshot().child(child_id)
    assert row is not None
    return row


def _events(tmp: Path, batch_id: str) -> list[tuple[str | None, str]]:
    """The batch's events (the engine closed: all committed), child and kind."""
    with StoreReader(tmp / "state" / "flightdeck.db") as reader:
        return [(c, k) for _, c, k, _ in reader.events(batch_id)]


def test_a_paused_child_frees_its_slot_and_continues_with_its_context(
    tmp_path: Path, hold: Hold
) -> None:
    hold.release("t0001")
    engine = start(batch(2), settings(held(hold), pool=1), tmp_path)
    try:
        until(lambda: _row(engine, "t0000").activity.api_calls >= 1)
        engine.pause(["t0000"])
        until(lambda: pausing(engine, "t0000"))
        hold.release("t0000", 0)  # the end of its first call: the pause is taken there
        until(lambda: _row(engine, "t0000").status is ChildStatus.PAUSED)
        # Its slot is free: the other child runs, and ends, while it is paused.
        until(lambda: _row(engine, "t0001").status is ChildStatus.COMPLETED)
        paused = _row(engine, "t0000")
        assert paused.status is ChildStatus.PAUSED and paused.finished_ts is None
        snap = engine.snapshot()
        assert (snap.totals.paused, snap.totals.running, snap.status) == (1, 0, BatchStatus.RUNNING)
        engine.continue_(["t0000"])
        hold.release()
        snap = run_to_end(engine)
    finally:
        engine.close()
    row = snap.child("t0000")
    assert row is not None and row.status is ChildStatus.COMPLETED
    # Its conversation went on where it was: 3 tool turns and the answer, no turn run twice.
    assert (row.activity.api_calls, row.activity.tool_calls) == (4, 3)
    text = Path(row.transcript).read_text()
    roles = [line.split("│")[0].split()[-1] for line in text.splitlines() if "│" in line]
    assert (roles.count("system"), roles.count("user")) == (1, 1)
    assert "pause requested" in text and "continue requested" in text
    assert "continued at turn" in text
    assert [k for c, k in _events(tmp_path, engine.batch_id) if c == "t0000"] == [
        "pause",
        "continue",
    ]


def test_a_queued_child_paused_never_starts_until_continued(tmp_path: Path, hold: Hold) -> None:
    engine = start(batch(3), settings(held(hold), pool=1), tmp_path)
    try:
        until(lambda: _row(engine, "t0000").activity.api_calls >= 1)  # held: the others queued
        engine.pause(["t0001"])
        until(lambda: _row(engine, "t0001").status is ChildStatus.PAUSED)
        hold.release()
        until(lambda: _row(engine, "t0002").status is ChildStatus.COMPLETED)
        row = _row(engine, "t0001")
        assert (row.status, row.started_ts) == (ChildStatus.PAUSED, None)
        engine.continue_(["t0001"])
        snap = run_to_end(engine)
    finally:
        engine.close()
    assert {r.status for r in snap.children} == {ChildStatus.COMPLETED}


def test_stop_ends_a_paused_child_at_once_and_a_steer_waits_for_the_continue(
    tmp_path: Path, hold: Hold
) -> None:
    engine = start(batch(2), settings(held(hold), pool=2), tmp_path)
    try:
        until(lambda: all(_row(engine, i).activity.api_calls >= 1 for i in ("t0000", "t0001")))
        engine.pause(["t0000", "t0001"])
        until(lambda: pausing(engine, "t0000") and pausing(engine, "t0001"))
        hold.release()
        until(lambda: engine.snapshot().totals.paused == 2)
        engine.steer(["t0001"], "be brief")
        engine.stop(["t0000"])
        until(lambda: _row(engine, "t0000").status is ChildStatus.STOPPED)
        assert [s.state for s in _row(engine, "t0001").steers] == [SteerState.QUEUED]
        engine.continue_(["t0001"])
        snap = run_to_end(engine)
    finally:
        engine.close()
    stopped, steered = snap.children
    assert stopped.error == "stopped by operator while paused"
    assert steered.status is ChildStatus.COMPLETED
    assert [s.state for s in steered.steers] == [SteerState.DELIVERED]


def test_admission_paused_starts_nothing_new_and_the_running_go_on(
    tmp_path: Path, hold: Hold
) -> None:
    engine = start(batch(3), settings(held(hold), pool=1), tmp_path)
    try:
        until(lambda: _row(engine, "t0000").activity.api_calls >= 1)
        engine.pause_admission()
        until(lambda: engine.snapshot().held == "paused by the operator")
        hold.release()
        until(lambda: _row(engine, "t0000").status is ChildStatus.COMPLETED)
        snap = engine.snapshot()
        assert [r.status for r in snap.children[1:]] == [ChildStatus.QUEUED] * 2
        engine.pause_admission(False)
        snap = run_to_end(engine)
    finally:
        engine.close()
    assert snap.held is None
    assert {r.status for r in snap.children} == {ChildStatus.COMPLETED}
    assert [k for c, k in _events(tmp_path, engine.batch_id) if c is None] == [
        "pause_admission",
        "continue_admission",
    ]
    # The report lists both as the operator's actions.
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
        report = build_report(reader, engine.batch_id)
    assert [(p["child_id"], p["action"]) for p in report["pauses"]] == [
        (None, "pause_admission"),
        (None, "continue_admission"),
    ]
    text = render_markdown(report)
    assert "| (admission) | pause admission |" in text
    assert "| (admission) | continue admission |" in text


def test_the_watchdog_never_flags_a_paused_child(tmp_path: Path, hold: Hold) -> None:
    # Paused far longer than the stall and timeout limits (the engine's clock jumps an hour
    # while it is): neither counts the pause.
    clock = SkipClock()
    s = settings(held(hold), pool=1, stall_after_s=60, stall_grace_s=0.1)
    engine = start(batch(1, timeout_s=120), s, tmp_path, clock=clock)
    try:
        until(lambda: _row(engine, "t0000").activity.api_calls >= 1)
        engine.pause(["t0000"])
        until(lambda: pausing(engine, "t0000"))
        hold.release("t0000", 0)
        until(lambda: _row(engine, "t0000").status is ChildStatus.PAUSED)
        clock.skip(3600.0)
        watched(engine)  # the watchdog has looked, an hour on
        assert _row(engine, "t0000").status is ChildStatus.PAUSED
        engine.continue_(["t0000"])
        until(lambda: _row(engine, "t0000").status is ChildStatus.RUNNING)  # its call 1 held
        clock.skip(1.0)  # the watchdog due at once
        watched(engine)  # it has looked at the child running again, the hour paused behind it
        assert not stops_asked(engine) and _row(engine, "t0000").status is ChildStatus.RUNNING
        hold.release()
        row = run_to_end(engine).children[0]
    finally:
        engine.close()
    assert (row.status, row.error) == (ChildStatus.COMPLETED, None)


def _paused_behind_a_held_child(engine: Engine, hold: Hold) -> None:
    """One slot: t0000 paused at its first turn's end, t0001 running in the slot, held."""
    until(lambda: _row(engine, "t0000").activity.api_calls >= 1)
    engine.pause(["t0000"])
    until(lambda: pausing(engine, "t0000"))
    hold.release("t0000", 0)
    until(lambda: _row(engine, "t0001").status is ChildStatus.RUNNING)


def test_paused_again_while_waiting_for_a_slot_it_stays_paused(tmp_path: Path, hold: Hold) -> None:
    engine = start(batch(2), settings(held(hold), pool=1), tmp_path)
    ended = announced(engine)
    try:
        _paused_behind_a_held_child(engine, hold)
        engine.continue_(["t0000"])  # no slot is free: it waits for t0001's
        engine.pause(["t0000"])  # and is paused again before it gets it
        hold.release("t0001")
        until(lambda: "t0001" in ended, what="t0001's end heard")
        stepped(engine)  # admission has looked at the slot t0001 freed
        assert engine.wait(0) is False
        assert _row(engine, "t0000").status is ChildStatus.PAUSED
        engine.continue_(["t0000"])
        hold.release()
        snap = run_to_end(engine)
    finally:
        engine.close()
    assert {r.status for r in snap.children} == {ChildStatus.COMPLETED}
    kinds = [k for c, k in _events(tmp_path, engine.batch_id) if c == "t0000"]
    assert kinds == ["pause", "continue", "pause", "continue"]


def test_a_continue_waiting_for_a_slot_says_so_in_the_row(tmp_path: Path, hold: Hold) -> None:
    """Continued with the pool full, a child waits for a slot, still paused: its row said
    "paused by the operator" all along, so a continue looked lost (attached, 9 continued
    behind 8 running children: minutes of it)."""
    engine = start(batch(2), settings(held(hold), pool=1), tmp_path)
    try:
        _paused_behind_a_held_child(engine, hold)
        assert _row(engine, "t0000").activity.text == PAUSED_SHOWS
        engine.continue_(["t0000"])  # no slot is free: it waits for t0001's
        until(lambda: _row(engine, "t0000").activity.text == CONTINUED_WAITING)
        assert _row(engine, "t0000").status is ChildStatus.PAUSED
        engine.pause(["t0000"])  # paused again before it got one
        until(lambda: _row(engine, "t0000").activity.text == PAUSED_SHOWS)
        engine.continue_(["t0000"])
        until(lambda: _row(engine, "t0000").activity.text == CONTINUED_WAITING)
        hold.release()
        snap = run_to_end(engine)
    finally:
        engine.close()
    assert {r.status for r in snap.children} == {ChildStatus.COMPLETED}


def test_a_gated_child_paused_is_paused_when_its_gate_opens(tmp_path: Path, hold: Hold) -> None:
    import dataclasses

    # The leader's first token is held: its siblings wait gated until the test releases it.
    route = dataclasses.replace(sim_route(tool_turns=0, **hold.options()), cache_gate_s=60.0)
    engine = start(batch(3), settings(route, pool=3), tmp_path)
    try:
        until(lambda: _row(engine, "t0001").status is ChildStatus.GATED)
        engine.pause(["t0001"])
        log = Path(_row(engine, "t0001").transcript)
        until(lambda: log.exists() and "pause requested" in log.read_text())  # applied
        hold.release()
        until(lambda: _row(engine, "t0002").status is ChildStatus.COMPLETED)
        row = _row(engine, "t0001")
        assert (row.status, row.started_ts) == (ChildStatus.PAUSED, None)
        engine.continue_(["t0001"])
        snap = run_to_end(engine)
    finally:
        engine.close()
    assert {r.status for r in snap.children} == {ChildStatus.COMPLETED}


def test_a_paused_queued_child_handed_out_behind_a_closed_gate_is_not_lost(
    tmp_path: Path, hold: Hold
) -> None:
    # Paused while queued, then handed out (the pool raised) while its route's cache gate is
    # closed: it went into the gate's waiting list as `paused`, and the gate dropped it when it
    # opened, so after `continue` it sat in no queue and the batch never ended.
    import dataclasses

    # The leader's first token is held: the gate stays closed until the test releases it.
    route = dataclasses.replace(sim_route(tool_turns=0, **hold.options()), cache_gate_s=60.0)
    engine = start(batch(3), settings(route, pool=1), tmp_path)
    try:
        until(lambda: _row(engine, "t0000").status is ChildStatus.RUNNING)
        engine.pause(["t0001"])
        until(lambda: _row(engine, "t0001").status is ChildStatus.PAUSED)
        engine.set_limits({"pool_size": 3})
        until(lambda: _row(engine, "t0002").status is ChildStatus.GATED)
        hold.release()
        until(lambda: _row(engine, "t0002").status is ChildStatus.COMPLETED)
        assert _row(engine, "t0001").status is ChildStatus.PAUSED
        engine.continue_(["t0001"])
        snap = run_to_end(engine)
    finally:
        engine.close()
    assert {r.status for r in snap.children} == {ChildStatus.COMPLETED}


def test_a_running_parents_delegates_start_while_admission_is_held(
    tmp_path: Path, hold: Hold
) -> None:
    # "The children already running finish their turns": a parent's delegates are its work,
    # not new work. Held back, the parent waited for them until its timeout.
    import dataclasses

    from flightdeck.engine.inputs.settings import Budget

    route = dataclasses.replace(
        sim_route(tool_turns=0, delegate_rate=1.0, delegates=2, **hold.options()),
        delegate=True,
    )
    s = dataclasses.replace(settings(route, pool=4), budget=Budget(max_depth=1))
    engine = start(batch(2, timeout_s=60.0), s, tmp_path)
    try:
        until(lambda: _row(engine, "t0000").activity.api_calls >= 1)  # held before it delegates
        engine.pause_admission(True)
        until(lambda: engine.snapshot().held is not None)
        hold.release()
        until(lambda: _row(engine, "t0000").status.terminal)
        snap = engine.snapshot()
        assert snap.child("t0000.1") is not None and snap.child("t0000.2") is not None
        assert _row(engine, "t0000").status is ChildStatus.COMPLETED
        assert {_row(engine, f"t0000.{i}").status for i in (1, 2)} == {ChildStatus.COMPLETED}
        if _row(engine, "t0001").started_ts is None:  # held: the other task never started
            assert _row(engine, "t0001").status is ChildStatus.QUEUED
        engine.pause_admission(False)
        snap = run_to_end(engine)
    finally:
        engine.close()
    assert {r.status for r in snap.children} == {ChildStatus.COMPLETED}


def test_a_stop_that_lands_while_a_child_takes_its_pause_ends_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hold: Hold
) -> None:
    # The stop is handled between the child taking its pause and the coordinator hearing of
    # it: the child was parked with the stop unheeded, `paused` for ever, the batch unending.
    import threading

    from flightdeck.engine.child.state import Child

    engine_box: list[object] = []
    stopped = threading.Event()
    take = Child.take_pause

    def take_then_be_stopped(self: Child) -> bool:
        took = take(self)
        if took and not stopped.is_set():
            stopped.set()
            engine_box[0].stop([self.task.id])  # type: ignore[attr-defined]
            # The stop is handled before the pause is heard (a real window, held open).
            stepped(engine_box[0])  # type: ignore[arg-type]
        return took

    monkeypatch.setattr(Child, "take_pause", take_then_be_stopped)
    engine = start(batch(1), settings(held(hold), pool=1), tmp_path)
    engine_box.append(engine)
    try:
        until(lambda: _row(engine, "t0000").activity.api_calls >= 1)
        engine.pause(["t0000"])
        until(lambda: pausing(engine, "t0000"))
        hold.release()
        snap = run_to_end(engine)
    finally:
        engine.close()
    row = snap.child("t0000")
    assert row is not None and row.status is ChildStatus.STOPPED
    assert row.error is not None and row.error.endswith("while paused")


def test_halt_decides_a_stop_and_a_pause_as_values_the_child_applies() -> None:
    halt = Halt()
    assert halt.stop(ChildStatus.STOPPED, "by the operator") is None  # no call open to close
    halt.stop(ChildStatus.TIMED_OUT, "late")
    assert (halt.stop_status, halt.stop_reason) == (ChildStatus.STOPPED, "by the operator")

    queued = Halt()  # a queued child is paused at once, and queued again on continue
    assert queued.pause(ChildStatus.QUEUED, False, 10.0) == Move(ChildStatus.PAUSED, PAUSED_SHOWS)
    assert queued.cancel(ChildStatus.PAUSED, started=False, ending=False) == Move(
        ChildStatus.QUEUED, ""
    )
    assert queued.pause(ChildStatus.COMPLETED, False, 11.0) is None and not queued.pause_wanted

    running = Halt()  # a running one at its next turn boundary, not if a stop came first
    assert running.pause(ChildStatus.RUNNING, False, 0.0) == STAYS and running.pause_wanted
    assert running.take(ending=True, now=1.0) is None
    assert running.take(ending=False, now=5.0) == Move(ChildStatus.PAUSED, PAUSED_SHOWS)
    assert running.continued(12.5) == Move(ChildStatus.RUNNING, "continued", ticks=True)
    assert running.paused_s == 7.5  # no timeout counts it
