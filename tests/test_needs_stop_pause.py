"""Stopping and pausing a child that waits on the operator's answer (`ask_operator`): a stop
ends it at once and its entry leaves the queue; a pause, then a continue, keeps its question
until it is answered. In-process here; through a real owner and the command line in
tests/tui/test_needs_you.py."""

from __future__ import annotations

from pathlib import Path

from flightdeck.engine.api import Engine
from flightdeck.engine.attached.view import StoreView
from flightdeck.engine.model import ChildStatus
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.report import build_report
from flightdeck.engine.triage.needs import needs

from helpers import HANG_S, batch, stepped, until
from test_needs import asking, asking_settings


def _queue(snap: object) -> list[tuple[str | None, str]]:
    return [(n.child_id, n.kind) for n in needs(snap)]  # type: ignore[arg-type]


def _asking_engine(tmp_path: Path, n: int) -> Engine:
    engine = Engine(
        batch(n, goal="[sim:ask] ship item {i}"), asking_settings(1), state_dir=tmp_path
    )
    engine.start()
    until(lambda: all(asking(c) for c in engine.snapshot().children), what="every child asks")
    return engine


def test_a_stop_ends_a_child_waiting_on_its_answer_and_clears_its_entry(tmp_path: Path) -> None:
    engine = _asking_engine(tmp_path, 2)
    try:
        engine.stop(["t0000"])
        until(
            lambda: engine.snapshot().child("t0000").status is ChildStatus.STOPPED,  # type: ignore[union-attr]
            what="t0000 stopped while it waited",
        )
        snap = engine.snapshot()
        assert _queue(snap) == [("t0001", "asks")]  # its entry went; the other still asks
        stopped = snap.child("t0000")
        assert stopped is not None and stopped.question is None
        assert engine.flush(60)  # the batch's row committed, as an attached view needs
        view = StoreView(tmp_path / "flightdeck.db", snap.batch_id)  # attached views agree
        try:
            until(lambda: _queue(view.snapshot()) == [("t0001", "asks")], what="the store's queue")
        finally:
            view.close()
        engine.answer(["t0001"], "go")
        assert engine.wait(HANG_S)
        snap = engine.snapshot()
    finally:
        engine.close()
    assert snap.child("t0001").status is ChildStatus.COMPLETED  # type: ignore[union-attr]
    assert needs(snap) == ()
    with StoreReader(tmp_path / "flightdeck.db") as reader:
        report = build_report(reader, snap.batch_id)
        view = StoreView(tmp_path / "flightdeck.db", snap.batch_id)
        try:
            assert needs(view.snapshot()) == ()  # the ended batch: nothing waits
        finally:
            view.close()
    actions = [(n["child_id"], n["action"]) for n in report["needs"]]
    assert ("t0000", "ask") in actions and ("t0000", "answer") not in actions


def test_pause_then_continue_keeps_the_question_until_it_is_answered(tmp_path: Path) -> None:
    engine = _asking_engine(tmp_path, 1)
    try:
        before = needs(engine.snapshot())
        assert [(n.child_id, n.kind) for n in before] == [("t0000", "asks")]
        engine.pause(["t0000"])
        until(lambda: engine.snapshot().child("t0000").pausing, what="t0000 pausing")  # type: ignore[union-attr]
        stepped(engine)  # acted on: the pause changes nothing of the question
        assert needs(engine.snapshot()) == before  # same entry (same key: no second alert)
        engine.continue_(["t0000"])
        until(lambda: not engine.snapshot().child("t0000").pausing, what="t0000 continued")  # type: ignore[union-attr]
        assert needs(engine.snapshot()) == before
        engine.answer(["t0000"], "ship it on Monday")
        assert engine.wait(HANG_S)
        snap = engine.snapshot()
    finally:
        engine.close()
    row = snap.child("t0000")
    assert row is not None and row.status is ChildStatus.COMPLETED
    assert "ship it on Monday" in (row.result or "")
    assert needs(snap) == ()


def test_a_pause_taken_after_the_answer_parks_the_child_and_continue_finishes_it(
    tmp_path: Path,
) -> None:
    engine = _asking_engine(tmp_path, 1)
    try:
        engine.pause(["t0000"])
        until(lambda: engine.snapshot().child("t0000").pausing, what="t0000 pausing")  # type: ignore[union-attr]
        # Not "at the end of this turn": the turn waits on the operator (found by an audit).
        said = engine.snapshot().child("t0000").activity.text  # type: ignore[union-attr]
        assert said == "pausing once its question is answered"
        engine.answer(["t0000"], "yes")  # the call returns; the pause is taken at the turn's end
        until(
            lambda: engine.snapshot().child("t0000").status is ChildStatus.PAUSED,  # type: ignore[union-attr]
            what="t0000 paused after its answer",
        )
        assert needs(engine.snapshot()) == ()  # answered: nothing is asked any more
        engine.continue_(["t0000"])
        assert engine.wait(HANG_S)
        snap = engine.snapshot()
    finally:
        engine.close()
    row = snap.child("t0000")
    assert row is not None and row.status is ChildStatus.COMPLETED
    assert "yes" in (row.result or "")
