"""What a child's earlier attempts cost outlives every resume: a real owner process (`flightdeck
resume`) is killed with SIGKILL after it has queued a lost child again, and the next resume
still counts that attempt's unknown cost in the totals, the report and `ls`."""

from __future__ import annotations

import functools
import signal
import sqlite3
import sys
from decimal import Decimal
from pathlib import Path

from flightdeck.engine.api import Engine
from flightdeck.engine.inputs.settings import CommandSpec, Route
from flightdeck.engine.model import Activity, ChildStatus, Usage
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
    with sqlite3.connect(db) as conn:  # admission paused: the re-run waits, queued, for the kill
        conn.execute("UPDATE batches SET held = 'paused by the operator'")
    conn.close()
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


def settled(db: Path, resumes: int) -> bool:
    """Whether `resumes` resumes have settled what their dead owners left (each records it
    last)."""
    with sqlite3.connect(db) as conn:
        found = conn.execute("SELECT count(*) FROM events WHERE kind = 'resumed'").fetchone()
    conn.close()
    return int(found[0]) == resumes
