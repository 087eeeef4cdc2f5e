"""What a child's earlier attempts cost outlives every resume: a real owner process (`flightdeck
resume`) is killed with SIGKILL after it has queued a lost child again, and the next resume
still counts that attempt's unknown cost in the totals, the report and `ls`; and what is known
of an unknown cost counts against `max_cost_usd`, whatever the route's price makes of its
tokens."""

from __future__ import annotations

import dataclasses
import functools
import signal
import sqlite3
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.attached.view import StoreView
from flightdeck.engine.control.attempts import retry_json
from flightdeck.engine.inputs.settings import Budget, CommandSpec, Price, Route
from flightdeck.engine.model import Activity, ChildStatus, Usage
from flightdeck.engine.records.forecast import forecast
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.report import build_report
from flightdeck.engine.records.store import Store

from helpers import batch, flightdeck, flightdeck_process, run_to_end, settings, until
from test_resume import dead_batch, lost_attempts
from test_store import make_child

FAKE_CLAUDE = Path(__file__).parent / "fakes" / "fake_claude.py"
DONE = Decimal("0.003")  # what the child that completed before the first owner died cost


def test_an_unknown_cost_carried_by_a_queued_child_survives_every_later_resume(
    tmp_path: Path,
) -> None:
    # Found by a walkthrough: the first resume queued the lost child again carrying its unknown
    # cost; its owner killed before the child started, the next resume took the queued row
    # (no tokens counted, cost unknown) for a fresh one, and the totals read a known $0.00x.
    state, db = held_batch(tmp_path)
    for resumes in (1, 2):  # two owners resume it and are killed before it starts again
        owner = flightdeck_process("resume", "b1", "--state-dir", str(state), cwd=tmp_path)
        try:
            until(functools.partial(settled, db, resumes), what=f"resume {resumes} settled")
        finally:
            owner.send_signal(signal.SIGKILL)
            owner.communicate()
        with StoreReader(db) as reader:
            row = reader.child("b1", "t0001")
        assert row is not None and (row.status, row.cost_usd) == (ChildStatus.QUEUED, None)
        assert row.carried_unknown  # its lost_attempt event says so
        with StoreReader(db) as reader:  # no projection while a spend is unknown: `$?`
            assert build_report(reader, "b1")["forecast"]["projected_usd"] is None
    view = StoreView(db, "b1", watch=False)  # as `attach` reads it
    try:
        assert forecast(view.snapshot().children).projected_usd is None
    finally:
        view.close()
    assert lost_attempts(db) == 1
    engine = Engine.resume(state, "b1")
    engine.start()
    try:
        before = engine.snapshot()
        engine.pause_admission(False)
        snap = run_to_end(engine)
    finally:
        engine.close()
    assert (before.totals.cost_usd, before.totals.cost_unknown) == (DONE, 1)  # `$0.003+?`
    assert forecast(before.children).projected_usd is None  # the header's forecast: `$?`
    rerun = snap.child("t0001")
    assert rerun is not None and rerun.status is ChildStatus.COMPLETED, rerun
    assert rerun.cost_usd is None and rerun.cost_floor_usd > 0  # its run's reported cost, known
    assert snap.totals.cost_unknown == 1 and snap.totals.cost_usd == DONE + rerun.cost_floor_usd
    assert snap.lost_cost_usd is None  # the lost attempt's cost: unknown
    with StoreReader(db) as reader:
        report = build_report(reader, "b1")
        (listed,) = reader.batches()
    assert report["totals"]["cost_usd"] is None
    assert report["totals"]["cost_unknown_children"] == 1
    assert report["recovery"]["lost_cost_unknown"] == 1
    assert (listed.cost_usd, listed.cost_unknown) == (snap.totals.cost_usd, 1)
    ls = flightdeck("ls", "--state-dir", str(state), cwd=tmp_path)
    assert ls.returncode == 0, ls.stderr
    assert "+?" in next(line for line in ls.stdout.splitlines() if "b1" in line), ls.stdout


def test_a_lost_attempts_event_is_committed_with_its_queued_row_or_neither_is(
    tmp_path: Path,
) -> None:
    # settle_lost wrote the row queued again, then its lost_attempt event, apart: an owner
    # killed between the two left the row (cost unknown, no token) with no event to tell it
    # from a fresh child, and the next resume counted it a known $0. The event's write refused
    # here stands for that kill, at that point, every time.
    state, db = held_batch(tmp_path)
    with sqlite3.connect(db) as conn:
        conn.execute(
            "CREATE TRIGGER killed BEFORE INSERT ON events WHEN NEW.kind = 'lost_attempt'"
            " BEGIN SELECT RAISE(ABORT, 'the owner was killed here'); END"
        )
    conn.close()
    owner = flightdeck_process("resume", "b1", "--state-dir", str(state), cwd=tmp_path)
    try:
        until(functools.partial(settled, db, 1), what="resume settled")
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.communicate()
    with StoreReader(db) as reader:
        row = reader.child("b1", "t0001")
    assert row is not None and row.status is ChildStatus.RUNNING  # as the dead owner left it
    assert lost_attempts(db) == 0
    with sqlite3.connect(db) as conn:
        conn.execute("DROP TRIGGER killed")
    conn.close()
    engine = Engine.resume(state, "b1")
    engine.start()
    try:  # its attempt lost again, this time recorded, and its unknown cost carried
        totals = engine.snapshot().totals
        assert (totals.cost_usd, totals.cost_unknown) == (DONE, 1)  # `$0.003+?`
        assert engine.resumed is not None and engine.resumed.lost_cost_unknown == 1
    finally:
        engine.close()
    assert lost_attempts(db) == 1


def held_batch(tmp_path: Path) -> tuple[Path, Path]:
    """Batch b1 as its dead owner left it, admission paused by the operator: t0000 completed
    at $0.003, t0001 running, its cost unknown with no token counted (its state folder and
    database)."""
    argv = (sys.executable, str(FAKE_CLAUDE), "-p", "--output-format", "stream-json")
    claude = CommandSpec(argv=(*argv, "--verbose", "{goal}"), format="claude-stream-json")
    route = Route(name="cli", provider="command", model="cli", command=claude)
    state = tmp_path / "state"
    info = dead_batch(state, settings(route), batch(2), heartbeat_ts=1500.0, max_cost_usd=None)
    rows = [
        make_child(
            0,
            id="t0000",
            route="cli",
            status=ChildStatus.COMPLETED,
            usage=Usage(input_tokens=1000, output_tokens=500),
            cost_usd=DONE,
            started_ts=1390.0,
            finished_ts=1400.0,
            transcript=str(state / "t0000.log"),
        ),
        # Its CLI's first run was cut short before it reported anything (a steer-now): no
        # token counted, its cost unknown; its next run was under way when the owner died.
        make_child(
            1,
            id="t0001",
            route="cli",
            status=ChildStatus.RUNNING,
            usage=Usage(),
            cost_usd=None,
            activity=Activity(api_calls=1),
            started_ts=1450.0,
            transcript=str(state / "t0001.log"),
        ),
    ]
    with Store(state / "flightdeck.db") as store:
        store.create_batch(info)
        store.add_children("b1", rows)
    db = state / "flightdeck.db"
    with sqlite3.connect(db) as conn:  # admission paused: a re-run waits, queued, for the kill
        conn.execute("UPDATE batches SET held = 'paused by the operator'")
    conn.close()
    return state, db


def settled(db: Path, resumes: int) -> bool:
    """Whether `resumes` resumes have settled what their dead owners left (each records it
    last)."""
    with sqlite3.connect(db) as conn:
        found = conn.execute("SELECT count(*) FROM events WHERE kind = 'resumed'").fetchone()
    conn.close()
    return int(found[0]) == resumes


@pytest.mark.parametrize("left", ["stopped", "lost", "retried", "made"])
def test_the_known_part_of_an_unknown_cost_counts_against_the_cap_on_a_priced_route(
    tmp_path: Path, left: str
) -> None:
    # A CLI child's turns reported $0.003 and no token, then a stop left the rest unknown. Its
    # route has a price: resumed, the meter priced its tokens instead ($0) and dropped the
    # $0.003, so the $0.002 cap let the queued children run. Each way a resume carries a row.
    claude = CommandSpec(argv=("true",), format="claude-stream-json")  # never runs: the cap
    price = Price(input_per_mtok=Decimal(1), output_per_mtok=Decimal(2))
    route = Route(name="cli", provider="command", model="cli", command=claude, price=price)
    cap = Decimal("0.002")
    cfg = dataclasses.replace(settings(route), budget=Budget(max_cost_usd=cap))
    info = dead_batch(tmp_path, cfg, batch(3), heartbeat_ts=1500.0, max_cost_usd=cap)
    status = {
        "stopped": ChildStatus.STOPPED,
        "lost": ChildStatus.RUNNING,  # when its owner died: run again
        "retried": ChildStatus.QUEUED,  # queued again by the operator, its spend carried
        "made": ChildStatus.STOPPED,  # a wave or delegate: not in the batch's spec
    }[left]
    spent = make_child(
        0,
        id="t0000-w1" if left == "made" else "t0000",
        route="cli",
        status=status,
        usage=Usage(),
        cost_usd=None,
        cost_floor_usd=DONE,
        attempt=2 if left == "retried" else 1,
        started_ts=None if left == "retried" else 1390.0,
        finished_ts=1400.0 if status is ChildStatus.STOPPED else None,
        transcript=str(tmp_path / "spent.log"),
    )
    with Store(tmp_path / "flightdeck.db") as store:
        store.create_batch(info)
        store.add_children("b1", [spent])
        if left == "retried":
            before = dataclasses.replace(spent, status=ChildStatus.STOPPED, attempt=1)
            store.record_event("b1", "t0000", 1450.0, "retry", retry_json(before, 2, "fresh"))
    engine = Engine.resume(tmp_path, "b1")
    engine.start()
    snap = run_to_end(engine)
    ids = ["t0001", "t0002"] if left == "stopped" else ["t0000", "t0001", "t0002"]
    for queued in ids:  # $0.003 known spent: the $0.002 cap is reached already
        row = snap.child(queued)
        assert row is not None and row.status is ChildStatus.STOPPED, row
        assert "budget" in (row.error or ""), row
    assert (snap.totals.cost_usd, snap.totals.cost_unknown) == (DONE, 1)  # `$0.003+?`
