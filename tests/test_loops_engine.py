"""Loop detection on deterministic looping sim children: flagged with the right evidence, kept
in the store, cleared by progress, and a route's escalation policy taken step by step."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from flightdeck.engine.attached.view import StoreView
from flightdeck.engine.inputs.settings import LoopSettings
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.model import ChildStatus
from flightdeck.engine.records.loops import evidence_from_json
from flightdeck.engine.records.markdown import render_markdown
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.report import build_report

from tests.helpers import HANG_S, run_to_end, settings, sim_route, start, tasks_batch, until


def _events(engine_db: Path, batch_id: str, kind: str) -> list[tuple[str | None, str]]:
    with StoreReader(engine_db) as reader:
        return [(c, d) for _, c, k, d in reader.events(batch_id) if k == kind]


def test_a_stubborn_looping_child_is_flagged_with_its_repeated_calls(tmp_path: Path) -> None:
    route = dataclasses.replace(sim_route(), loops=LoopSettings(repeat_calls=3, stale_turns=0))
    b = tasks_batch(
        [
            Task(id="loops", goal="Review it [sim:loop!]", seq=0, max_turns=6),
            Task(id="fine", goal="Review it", seq=1),
        ]
    )
    engine = start(b, settings(route), tmp_path)
    snap = run_to_end(engine)
    looper, fine = snap.child("loops"), snap.child("fine")
    assert looper is not None and fine is not None
    assert fine.loop is None
    ev = looper.loop
    assert ev is not None and ev.kind == "repeat"
    assert ev.calls == ('list_dir {"path": "."}',) * 3
    assert ev.summary == 'list_dir {"path": "."} called 3 times with the same arguments'
    transcript = Path(looper.transcript).read_text()
    assert transcript.count("looping (repeat)") == 1  # one line when flagged, not one a turn
    # Kept in the events table, so a view of the store shows the same evidence.
    kept = _events(tmp_path / "state" / "flightdeck.db", snap.batch_id, "loop")
    assert [c for c, _ in kept] == ["loops"]
    assert evidence_from_json(kept[0][1]) == ev


def test_a_finished_child_keeps_its_flag_but_not_its_loop_history(tmp_path: Path) -> None:
    # The detector's history (about 4 KB a child with tool calls) goes when its run ends: a
    # batch of thousands holds only what its rows show.
    route = dataclasses.replace(sim_route(), loops=LoopSettings(repeat_calls=3, stale_turns=0))
    b = tasks_batch(
        [Task(id=f"loops{i}", goal="Review it [sim:loop!]", seq=i, max_turns=4) for i in range(3)]
    )
    engine = start(b, settings(route), tmp_path)
    try:
        assert engine.wait(60)
        snap = engine.snapshot()
        coordinator = engine._coordinator
        assert coordinator is not None
        children = coordinator.slots.by_id.values()
        assert len(children) == 3 and all(c.loops._detector is None for c in children)
        assert all(row.loop is not None and row.loop.kind == "repeat" for row in snap.children)
    finally:
        engine.close()


# About 5 ms a turn; the turns a child may take are only a ceiling (the policy ends it long
# before): ten thousand, tens of seconds, however loaded the machine and its coordinator.
SLOW_TURNS = {"time_scale": 0.01, "latency_ms": 500}
CEILING_TURNS = 10_000


def test_a_nudged_child_stops_looping_and_its_flag_clears(tmp_path: Path) -> None:
    loops = LoopSettings(repeat_calls=0, stale_turns=2, policy=("nudge",))
    route = dataclasses.replace(sim_route(**SLOW_TURNS), loops=loops)
    b = tasks_batch([Task(id="loops", goal="Review it [sim:loop]", seq=0, max_turns=CEILING_TURNS)])
    snap = run_to_end(start(b, settings(route), tmp_path))
    row = snap.children[0]
    assert row.status is ChildStatus.COMPLETED  # the nudge reached it, and it answered
    assert row.loop is None  # progress cleared the flag
    db = tmp_path / "state" / "flightdeck.db"
    flags = [evidence_from_json(d) for _, d in _events(db, snap.batch_id, "loop")]
    assert len(flags) == 2 and flags[1] is None
    assert flags[0] is not None and flags[0].kind == "no_output"
    assert flags[0].summary == "tool calls with no new output for 2 turns"
    assert flags[0].calls == ('turn 2: list_dir {"path": "."}', 'turn 3: list_dir {"path": "."}')
    [(child, detail)] = _events(db, snap.batch_id, "loop_policy")
    step = json.loads(detail)
    assert child == "loops" and step["step"] == "nudge" and (step["number"], step["of"]) == (1, 1)
    assert step["message"] == (
        "You are repeating tool calls with no new output for 2 turns. Try a different "
        "approach or finish with what you have."
    )
    [receipt] = row.steers
    assert receipt.by == "policy" and receipt.state.value == "delivered" and not receipt.now
    transcript = Path(row.transcript).read_text()
    assert "loop policy (step 1 of 1, nudge): steer (at next turn): You are repeating" in transcript
    assert "loop policy: delivered: You are repeating" in transcript
    assert "operator  │" not in transcript  # nothing in it is the operator's
    assert "no longer looping: it made progress" in transcript


def test_a_stubborn_loop_is_nudged_then_steered_now_then_stopped(tmp_path: Path) -> None:
    loops = LoopSettings(
        repeat_calls=3, stale_turns=0, policy=("nudge", "steer_now", "stop"), policy_wait_s=0.05
    )
    route = dataclasses.replace(sim_route(**SLOW_TURNS), loops=loops)
    b = tasks_batch(
        [
            Task(id="loops", goal="Review it [sim:loop!]", seq=0, max_turns=CEILING_TURNS),
            Task(id="fine", goal="Review it", seq=1),
        ]
    )
    snap = run_to_end(start(b, settings(route), tmp_path))
    row = snap.child("loops")
    assert row is not None and row.status is ChildStatus.STOPPED
    assert row.error is not None and row.error.startswith(
        'stopped by the loop policy: it looped (list_dir {"path": "."} called 3 times'
    )
    assert row.loop is not None and row.loop.kind == "repeat"  # why it was stopped, kept
    db = tmp_path / "state" / "flightdeck.db"
    steps = [json.loads(d) for _, d in _events(db, snap.batch_id, "loop_policy")]
    assert [(s["step"], s["number"], s["of"]) for s in steps] == [
        ("nudge", 1, 3),
        ("steer_now", 2, 3),
        ("stop", 3, 3),
    ]
    assert [(r.by, r.now) for r in row.steers] == [("policy", False), ("policy", True)]
    assert _events(db, snap.batch_id, "stop") == []  # not the operator's stop
    assert "by the operator" not in Path(row.transcript).read_text()
    transcript = Path(row.transcript).read_text()
    # Each step after the first acts on fresh evidence: the child looped again (3 more repeats)
    # after the previous step's steer reached it, and no sooner than the wait after that.
    marks = [
        "step 1 of 3, nudge)",
        "loop policy: delivered",
        "still looping after the loop policy's steer (repeat)",
        "step 2 of 3, steer_now)",
        "loop policy: delivered",
        "still looping after the loop policy's steer (repeat)",
        "step 3 of 3, stop)",
    ]
    at = 0
    spans = []
    for mark in marks:
        found = transcript.index(mark, at)
        spans.append(transcript[at:found])
        at = found + len(mark)
    assert spans[2].count('tool-call │ list_dir {"path": "."}') >= 3  # repeats since delivery
    assert spans[5].count('tool-call │ list_dir {"path": "."}') >= 3
    with StoreReader(db) as reader:
        step_ts = [ts for ts, _, k, _ in reader.events(snap.batch_id) if k == "loop_policy"]
        flags = [
            evidence_from_json(d) for _, _, k, d in reader.events(snap.batch_id) if k == "loop"
        ]
    delivered = [r.settled_ts for r in row.steers]
    assert delivered[0] is not None and delivered[1] is not None
    assert step_ts[1] >= delivered[0] + 0.05 and step_ts[2] >= delivered[1] + 0.05
    ts = [f.ts for f in flags if f is not None]
    assert len(flags) == len(ts) == 3 and ts == sorted(ts)  # flagged, then afresh after each
    assert flags[1] is not None and flags[1].ts > delivered[0]
    assert flags[2] is not None and flags[2].ts > delivered[1] and flags[2] == row.loop
    # A view of the store (an attached TUI) sees the same evidence, and whose steers they were.
    view = StoreView(db, snap.batch_id, watch=False)
    try:
        seen = view.snapshot().child("loops")
        assert seen is not None and seen.loop == row.loop
        assert [(r.by, r.now) for r in seen.steers] == [("policy", False), ("policy", True)]
    finally:
        view.close()
    # The report shows them as the policy's, apart from the operator's actions.
    with StoreReader(db) as reader:
        report = build_report(reader, snap.batch_id)
    assert report["steers"] == []
    assert [s["step"] for s in report["loop_policy"]] == ["nudge", "steer_now", "stop"]
    text = render_markdown(report)
    assert "## Loop policy" in text and "No steers or stops." in text


# About 0.1 s a turn, the answer longer still: a policy that escalated on the clock alone
# (the next step `policy_wait_s` after the last, whatever the child did since) would land on
# the answer being written.
ANSWERING_TURNS = {"time_scale": 0.1, "latency_ms": 1000, "tokens_per_s": 600}


def test_a_child_that_answers_after_the_nudge_is_never_escalated(tmp_path: Path) -> None:
    loops = LoopSettings(
        repeat_calls=3, stale_turns=0, policy=("nudge", "steer_now", "stop"), policy_wait_s=0.02
    )
    route = dataclasses.replace(sim_route(**ANSWERING_TURNS), loops=loops)
    b = tasks_batch([Task(id="t", goal="Find every TODO in src/. [sim:loop]", seq=0, max_turns=10)])
    snap = run_to_end(start(b, settings(route), tmp_path))
    row = snap.children[0]
    assert row.status is ChildStatus.COMPLETED and row.result  # its answer, not interrupted
    assert row.loop is None
    db = tmp_path / "state" / "flightdeck.db"
    steps = [json.loads(d)["step"] for _, d in _events(db, snap.batch_id, "loop_policy")]
    assert steps == ["nudge"]
    assert [(r.by, r.now, r.state.value) for r in row.steers] == [("policy", False, "delivered")]
    transcript = Path(row.transcript).read_text()
    assert "steer_now" not in transcript and "still looping" not in transcript
    with StoreReader(db) as reader:
        report = build_report(reader, snap.batch_id)
    assert [s["step"] for s in report["loop_policy"]] == ["nudge"]


def test_a_loop_flag_heard_after_the_operators_pause_starts_no_policy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The operator pauses a child whose turn is just ending with a loop flag: the flag reaches
    # the coordinator after the pause, and used to start the policy the pause had ended, which
    # then steered and stopped the child behind the operator's back once it was continued.
    import threading

    from flightdeck.engine.child.loopwatch import LoopWatch

    from tests.helpers import stepped, until

    box: list[object] = []
    paused = threading.Event()
    changed = LoopWatch._changed

    def pause_first(self: LoopWatch, before: object, found: object, again: bool = False) -> None:
        if found is not None and not paused.is_set():
            paused.set()
            box[0].pause([self._child_id])  # type: ignore[attr-defined]
            stepped(box[0])  # type: ignore[arg-type]  # the pause is handled before the flag
        changed(self, before, found, again)  # type: ignore[arg-type]

    monkeypatch.setattr(LoopWatch, "_changed", pause_first)
    loops = LoopSettings(
        repeat_calls=3, stale_turns=0, policy=("nudge", "steer_now", "stop"), policy_wait_s=0.05
    )
    route = dataclasses.replace(sim_route(tool_turns=3, latency_ms=30, time_scale=1.0), loops=loops)
    b = tasks_batch([Task(id="loops", goal="Review it [sim:loop!]", seq=0, max_turns=12)])
    engine = start(b, settings(route), tmp_path)
    box.append(engine)
    try:
        until(lambda: engine.snapshot().child("loops").status is ChildStatus.PAUSED, 60)  # type: ignore[union-attr]
        engine.continue_(["loops"])
        snap = run_to_end(engine)
    finally:
        engine.close()
    row = snap.child("loops")
    assert row is not None and row.status is not ChildStatus.STOPPED, row.error
    assert [r for r in row.steers if r.by == "policy"] == []


def test_the_operators_nudge_from_a_client_reaches_the_looping_child_only(tmp_path: Path) -> None:
    # The loop nudge is a command like any other: `flightdeck nudge` records it, the owner
    # fills in each looping child's evidence and steers it; one that is not looping is left be.
    loops = LoopSettings(repeat_calls=0, stale_turns=2, policy=())  # flagged, no policy acts
    route = dataclasses.replace(sim_route(**SLOW_TURNS), loops=loops)
    tasks = [
        Task(id="loops", goal="Review it [sim:loop]", seq=0, max_turns=CEILING_TURNS),
        Task(id="calm", goal="Review it", seq=1, max_turns=CEILING_TURNS),
    ]
    engine = start(tasks_batch(tasks), settings(route), tmp_path)
    state = tmp_path / "state"
    try:
        until(lambda: (row := engine.snapshot().child("loops")) is not None and row.loop, HANG_S)

        def nudge(*ids: str) -> tuple[int, list[str]]:
            argv = ["nudge", engine.batch_id, *ids, "--state-dir", str(state)]
            done = subprocess.run(
                [sys.executable, "-m", "flightdeck.tui.cli", *argv],
                capture_output=True,
                text=True,
                timeout=60,
            )
            return done.returncode, done.stdout.splitlines()

        assert nudge("calm") == (0, ["nudge applied: none of them is looping"])
        code, lines = nudge("loops", "calm")  # "queued", if it is seen before "delivered"
        assert code == 0 and lines[-1] == "loops: delivered"
        assert set(lines[:-1]) <= {
            "loops: queued — waiting for its next turn; Ctrl+C leaves it queued"
        }
        calm = engine.snapshot().child("calm")
        assert calm is not None and calm.steers == ()
    finally:
        engine.stop_all()
        run_to_end(engine)
    row = engine.snapshot().children[0]
    [receipt] = row.steers
    assert receipt.message.startswith("You are repeating tool calls with no new output")
    assert receipt.by == "operator"
    transcript = Path(row.transcript).read_text()
    assert "operator  │ steer (at next turn): You are repeating" in transcript
