"""The "needs you" queue (engine/triage/needs.py): a model child's `ask_operator` question
waits, holds no slot, and gets the operator's answer as its tool's result; the queue's order
and what clears an entry."""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.attached.client import Client
from flightdeck.engine.attached.view import StoreView
from flightdeck.engine.commands import Answer, CommandError, Context
from flightdeck.engine.control import softbudget
from flightdeck.engine.inputs.settings import Budget, Settings, load_settings
from flightdeck.engine.inputs.tasks import Batch, Task
from flightdeck.engine.model import (
    Activity,
    BatchStatus,
    ChildRow,
    ChildStatus,
    Denial,
    Limits,
    LoopEvidence,
    Question,
    Snapshot,
    Totals,
    Usage,
)
from flightdeck.engine.records.markdown import render_markdown
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.report import build_report
from flightdeck.engine.triage.needs import need_of, needs
from flightdeck.engine.triage.query import parse_filter
from flightdeck.tui.alerts import AlertWatch
from flightdeck.tui.headless import asked_lines

from helpers import HANG_S, Hold, batch, run_to_end, settings, sim_route, start, until

ASKING = {"tool_turns": 0}


def asking_settings(pool: int = 1) -> Settings:
    route = dataclasses.replace(sim_route(**ASKING), ask_operator=True)
    return settings(route, pool=pool)


def asking(row: ChildRow) -> bool:
    return row.question is not None


def test_a_question_waits_without_its_slot_and_the_answer_is_the_tools_result(
    tmp_path: Path,
) -> None:
    # One slot, two children that ask: were the first to keep its slot while it waits, the
    # second could never start and ask.
    engine = Engine(
        batch(2, goal="[sim:ask] ship item {i}"), asking_settings(1), state_dir=tmp_path
    )
    engine.start()
    try:
        until(
            lambda: all(asking(c) for c in engine.snapshot().children),
            what="both children asking",
        )
        snap = engine.snapshot()
        queue = needs(snap)
        assert [(n.child_id, n.kind) for n in queue] == [("t0000", "asks"), ("t0001", "asks")]
        assert "should I go ahead with 'ship item 0'" in queue[0].text
        assert all(c.status is ChildStatus.RUNNING for c in snap.children)
        model_calls = [c.activity.api_calls for c in snap.children]
        engine.answer(["t0001"], "yes, ship it on Friday")
        until(
            lambda: engine.snapshot().children[1].status is ChildStatus.COMPLETED,
            what="t0001 completed",
        )
        snap = engine.snapshot()
        # the other still waits, and waiting made no model call
        assert [n.child_id for n in needs(snap)] == ["t0000"]
        assert snap.children[0].activity.api_calls == model_calls[0]
        assert "yes, ship it on Friday" in (snap.children[1].result or "")
        with pytest.raises(CommandError, match="no question of 't0001' waits"):
            engine.answer(["t0001"], "again")
        engine.answer(["t0000"], "no")
        assert engine.wait(HANG_S)
        assert needs(engine.snapshot()) == ()
    finally:
        engine.close()
    # In the operator's history, beside the steers and stops: the question and its answer.
    with StoreReader(tmp_path / "flightdeck.db") as reader:
        report = build_report(reader, snap.batch_id)
    mine = [(n["child_id"], n["action"]) for n in report["needs"]]
    assert sorted(mine) == [
        ("t0000", "answer"),
        ("t0000", "ask"),
        ("t0001", "answer"),
        ("t0001", "ask"),
    ]
    answer = next(
        n for n in report["needs"] if n["action"] == "answer" and n["child_id"] == "t0001"
    )
    assert answer["text"] == "yes, ship it on Friday"
    table = render_markdown(report)
    assert "| t0001 | answer | yes, ship it on Friday |" in table
    assert "| t0000 | asks | Before I start: should I go ahead with 'ship item 0'? |" in table
    transcript = Path(snap.children[1].transcript).read_text()  # written once the sink drains
    assert "answer: yes, ship it on Friday" in transcript
    assert "asks: Before I start" in transcript or "ask_operator" in transcript


def test_a_route_without_ask_operator_never_offers_it(tmp_path: Path) -> None:
    engine = Engine(
        batch(1, goal="[sim:ask] item {i}"), settings(sim_route(**ASKING)), state_dir=tmp_path
    )
    engine.start()
    try:
        assert engine.wait(HANG_S)
        (row,) = engine.snapshot().children
        assert row.status is ChildStatus.COMPLETED and row.question is None
    finally:
        engine.close()


def test_answer_is_checked_against_who_asks() -> None:
    ctx = Context("b1", {"a", "b"}, lambda: 100, lambda: None, asking=lambda: {"a"})
    Answer(("a",), "yes").check(ctx)
    with pytest.raises(CommandError, match="no question of 'b' waits"):
        Answer(("b",), "yes").check(ctx)
    with pytest.raises(CommandError, match="answer is empty"):
        Answer(("a",), "  ").check(ctx)


def _row(cid: str, status: ChildStatus = ChildStatus.RUNNING, **kw: object) -> ChildRow:
    base = ChildRow(
        id=cid,
        seq=0,
        goal="g",
        group=None,
        route="sim",
        model="sim",
        status=status,
        activity=Activity(),
        usage=Usage(),
        cost_usd=None,
        queued_ts=1.0,
        started_ts=2.0,
        finished_ts=None,
        error=None,
        result=None,
        transcript="",
    )
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def test_each_reason_and_what_clears_it() -> None:
    loop = LoopEvidence("repeat", "read_file a.py 5 times", ("read_file a.py",), 40.0)
    asks = _row("q", question=Question("which branch?", 30.0))
    denied = _row("d", denial=Denial("Bash", '{"command": "rm -rf build"}', 20.0))
    looping = _row("l", loop=loop)
    failed = _row("f", ChildStatus.FAILED, finished_ts=10.0, error="TransientError: 503")
    fatal = _row("x", ChildStatus.FAILED, finished_ts=5.0, error="FatalError: bad key")
    done = _row("ok", ChildStatus.COMPLETED, finished_ts=3.0)
    stalled = _row("s", ChildStatus.STALLED, finished_ts=50.0)
    kinds = {
        r.id: (n.kind if (n := need_of(r)) else None)
        for r in (asks, denied, looping, failed, fatal, done, stalled)
    }
    assert kinds == {
        "q": "asks",
        "d": "denied",
        "l": "looping",
        "f": "failed",
        "x": None,  # a retry sends the same request: not an entry
        "ok": None,
        "s": "stalled",
    }
    assert "Bash" in need_of(denied).text and "rm -rf build" in need_of(denied).text  # type: ignore[union-attr]
    # cleared by the operator: gone until something newer happens
    assert need_of(dataclasses.replace(failed, dismissed_ts=11.0)) is None
    assert need_of(dataclasses.replace(denied, dismissed_ts=21.0)) is None
    assert (
        need_of(dataclasses.replace(denied, dismissed_ts=21.0, denial=Denial("Bash", "{}", 22.0)))
        is not None
    )
    # a question clears only by its answer (the row loses it), never by a dismissal
    assert need_of(dataclasses.replace(asks, dismissed_ts=99.0)) is not None
    # a paused looping child is the operator's act on it
    assert need_of(dataclasses.replace(looping, status=ChildStatus.PAUSED)) is None
    # a delegate of its parent's earlier attempt is history: the parent ran again since
    lost = _row("a.1", ChildStatus.UNKNOWN, finished_ts=60.0, error="owner lost")
    assert need_of(lost) is not None
    assert need_of(dataclasses.replace(lost, superseded=True)) is None


def test_a_superseded_delegate_reads_as_history_in_the_table() -> None:
    from flightdeck.tui.widgets.rows import doing

    stopped = _row("a.1", ChildStatus.STOPPED, finished_ts=60.0, error="stopped by operator")
    assert doing(stopped, 61.0) == ("stopped: stopped by operator", "dim")
    gone = dataclasses.replace(stopped, status=ChildStatus.UNKNOWN, superseded=True)
    assert doing(gone, 61.0) == ("unknown (superseded): stopped by operator", "dim")


def test_a_cli_permission_denial_is_shown_with_the_tool_and_its_input(tmp_path: Path) -> None:
    # The real capture of Claude Code 2.1.332 denying its shell tool, written by a real
    # program (cat) as the CLI wrote it; an attached view reads the same entry from the store.
    capture = Path(__file__).parent / "fixtures" / "agents" / "claude-2.1.332" / "denied.jsonl"
    path = tmp_path / "flightdeck.toml"
    path.write_text(
        '[engine]\ndefault_route = "cli"\n[routes.cli]\nprovider = "command"\n'
        f'argv = ["cat", "{capture}"]\nformat = "claude-stream-json"\n'
    )
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    engine = Engine(batch(1), load_settings(path), state_dir=tmp_path / "state", env=env)
    engine.start()
    snap = run_to_end(engine)
    (row,) = snap.children
    assert row.status is ChildStatus.COMPLETED
    assert row.denial is not None and row.denial.tool == "Bash"
    assert json.loads(row.denial.input)["command"] == "rm -rf build"
    (need,) = needs(snap)
    assert need.kind == "denied" and need.text.startswith("Bash {")
    assert "rm -rf build" in need.text
    assert "permission denied: Bash" in Path(row.transcript).read_text()
    view = StoreView(tmp_path / "state" / "flightdeck.db", snap.batch_id)
    try:
        assert [(n.child_id, n.kind, n.text) for n in needs(view.snapshot())] == [
            ("t0000", "denied", need.text)
        ]
    finally:
        view.close()


def test_is_needs_you_keeps_the_children_in_the_queue() -> None:
    keep = parse_filter("is:needs-you")
    asks = _row("q", question=Question("which branch?", 30.0))
    assert keep.matches(asks) and not keep.matches(_row("r"))
    assert keep.matches(_row("f", ChildStatus.FAILED, finished_ts=3.0, error="boom"))
    assert parse_filter("is:needs-you", tags=False).needs_you_only


def test_the_queue_is_the_budgets_hold_first_then_oldest_first() -> None:
    rows = (
        _row("new", ChildStatus.FAILED, finished_ts=50.0, error="boom"),
        _row("old", question=Question("?", 10.0)),
        _row("mid", denial=Denial("Bash", "{}", 30.0)),
        _row("fine"),
    )
    snap = Snapshot(
        batch_id="b",
        status=BatchStatus.RUNNING,
        started_ts=0.0,
        now=60.0,
        children=rows,
        totals=Totals(),
        pool_size=4,
        limits=Limits(4, soft_cost_usd=Decimal("5"), soft_held="soft budget $5.00 reached"),
    )
    queue = needs(snap)
    assert [(n.child_id, n.kind) for n in queue] == [
        (None, "budget"),
        ("old", "asks"),
        ("mid", "denied"),
        ("new", "failed"),
    ]
    assert queue[0].text == "soft budget $5.00 reached"


def test_the_soft_budget_holding_many_children_is_one_entry_for_the_batch(
    tmp_path: Path, hold: Hold, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Three running (two held mid-call), nine queued behind the hold: one entry, the batch's,
    # in-process and read from the store, and one alert ("budget held"), not one per child.
    monkeypatch.setattr(softbudget, "SOFT_BUDGET_EVERY_S", 0.0)  # looked at every step
    route = sim_route(tool_turns=0, **hold.options())
    soft = dataclasses.replace(
        settings(route, pool=3), budget=Budget(soft_cost_usd=Decimal("0.000001"))
    )
    engine = start(batch(12), soft, tmp_path)
    watch = AlertWatch()
    try:
        until(lambda: engine.snapshot().totals.running == 3, what="three running")
        watch.observe(needs(engine.snapshot()))  # the baseline: nothing needs the operator
        hold.release("t0000")
        until(lambda: engine.snapshot().held is not None, what="the soft budget holds")
        snap = engine.snapshot()
        assert (snap.totals.completed, snap.totals.running, snap.totals.queued) == (1, 2, 9)
        queue = needs(snap)
        assert [(n.child_id, n.kind) for n in queue] == [(None, "budget")]
        alerted = watch.observe(queue)
        assert (alerted.held, alerted.text) == (1, "budget held")
        assert engine.flush(60)  # the batch's row is queued to the store's writer: committed first
        view = StoreView(engine.state_dir / "flightdeck.db", engine.batch_id)
        try:
            until(lambda: view.snapshot().held is not None, what="the hold in the store")
            assert [(n.child_id, n.kind) for n in needs(view.snapshot())] == [(None, "budget")]
        finally:
            view.close()
        hold.release()
        until(lambda: engine.snapshot().totals.running == 0, what="the two held ones done")
        assert not watch.observe(needs(engine.snapshot()))  # nothing new: no second alert
        engine.set_limits({"soft_cost_usd": None})
        snap = run_to_end(engine)
    finally:
        engine.close()
    assert snap.totals.completed == 12 and needs(snap) == ()


def test_where_is_needs_you_keeps_a_child_asking_of_another_process(tmp_path: Path) -> None:
    # `flightdeck steer --where is:needs-you`: the client reads the store, where the question
    # is an event beside the child's row, as an attached view reads it.
    engine = Engine(batch(1, goal="[sim:ask] ship item {i}"), asking_settings(), state_dir=tmp_path)
    engine.start()
    try:
        with Client(tmp_path / "flightdeck.db", engine.batch_id) as client:
            wants = parse_filter("is:needs-you", tags=False)

            def kept() -> tuple[int, list[str]] | None:
                try:
                    return client.matching(wants)
                except LookupError:  # the store's thread has not written the batch yet
                    return None

            until(lambda: kept() == (1, ["t0000"]), what="the question stored")
            engine.answer(["t0000"], "go")
            assert engine.wait(HANG_S)
            until(lambda: kept() == (0, []), what="the answer stored")
    finally:
        engine.close()


def test_the_answer_command_a_headless_run_prints_names_a_long_id_whole(tmp_path: Path) -> None:
    long_id = "review-" + "x" * 57  # 64 characters, the most an id may have
    tasks = Batch("b", (Task(id=long_id, goal="[sim:ask] ship it", seq=0),))
    engine = Engine(tasks, asking_settings(), state_dir=tmp_path)
    engine.start()
    try:
        until(lambda: all(asking(c) for c in engine.snapshot().children), what="it asks")
        (line,) = asked_lines(engine, set())
        printed = line.plain.rsplit("(`", 1)[1].removesuffix("`)")
        assert shlex.split(printed)[2:4] == [engine.batch_id, long_id]
        engine.answer([long_id], "go")
        assert engine.wait(HANG_S)
    finally:
        engine.close()
