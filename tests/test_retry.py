"""Retry (engine/control/attempts.py): a child that ended runs again under a new attempt of its
id, fresh or continuing, on the sim, a loopback model and command children; its earlier attempt
kept (transcript, usage, cost), the batch reopened, a budget holding it like any start."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.commands import CommandError
from flightdeck.engine.control import softbudget
from flightdeck.engine.inputs.settings import Budget, RetrySettings, Settings, load_settings
from flightdeck.engine.inputs.tasks import Batch, Task
from flightdeck.engine.model import BatchStatus, ChildRow, ChildStatus, Usage
from flightdeck.engine.model.session import CliSession
from flightdeck.engine.records.markdown import render_markdown
from flightdeck.engine.records.processes import ProcessLog, session_of
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.report import build_report
from flightdeck.engine.records.store import Store

from helpers import (
    Hold,
    batch,
    cli,
    flightdeck,
    flightdeck_process,
    read_until,
    run_to_end,
    settings,
    sim_route,
    start,
    stepped,
    until,
    wait_ended,
)
from loopback import KEY_ENV, Loopback, Reply, route_for

FAKES = Path(__file__).parent / "fakes"
# A few turns of about 50 ms each.
ROUTE = sim_route(tool_turns=3, latency_ms=40, time_scale=1.0, tokens_per_s=8000)


def _row(engine: Engine, child_id: str = "t0000") -> ChildRow:
    row = engine.snapshot().child(child_id)
    assert row is not None
    return row


def _stopped_mid_run(engine: Engine, hold: Hold, child_id: str = "t0000") -> ChildRow:
    """Pause the child at the end of its first turn, then stop it there; its route holds
    every call (`hold.options()`), so the pause lands before the child can end on its own.
    Every call is let go afterwards, for the attempts that follow."""
    until(lambda: _row(engine, child_id).activity.api_calls >= 1, 60, what="a first call")
    engine.pause([child_id])
    until(lambda: _row(engine, child_id).pausing, 60, what="the pause pending")
    hold.release(child_id, 0)
    until(lambda: _row(engine, child_id).status is ChildStatus.PAUSED, 60, what="paused")
    engine.stop([child_id])
    assert engine.wait(60)
    hold.release()
    return _row(engine, child_id)


def _events(db: Path, batch_id: str, kind: str) -> list[tuple[str | None, dict]]:  # type: ignore[type-arg]
    with StoreReader(db) as reader:
        return [(c, json.loads(d)) for _, c, k, d in reader.events(batch_id) if k == kind]


def test_a_stopped_sim_child_runs_again_fresh_in_the_batch_it_reopens(
    tmp_path: Path, hold: Hold
) -> None:
    engine = start(batch(1), settings(sim_route(tool_turns=3, **hold.options())), tmp_path)
    try:
        first = _stopped_mid_run(engine, hold)
        assert first.status is ChildStatus.STOPPED and engine.status is BatchStatus.STOPPED
        assert first.usage.total > 0 and first.cost_usd
        hold.hold()  # the new attempt's calls wait: it cannot end before it is seen running
        engine.retry(["t0000"])  # returns once queued: the ended batch runs again
        assert engine.status is BatchStatus.RUNNING
        hold.release()
        snap = run_to_end(engine)
    finally:
        engine.close()
    row = snap.child("t0000")
    assert row is not None and row.status is ChildStatus.COMPLETED and row.attempt == 2
    assert snap.status is BatchStatus.COMPLETED
    # The first attempt's spend is kept: in the row and the batch's totals.
    assert row.usage.total > first.usage.total and row.cost_usd > first.cost_usd  # type: ignore[operator]
    assert snap.totals.cost_usd == row.cost_usd
    text = Path(row.transcript).read_text()
    assert "stop requested" in text  # the first attempt's lines are kept, then the second's
    assert "retry requested: attempt 2 (fresh) after stopped" in text
    assert text.count("│ Review item 0") == 2  # its goal, from the start, at each attempt
    db = tmp_path / "state" / "flightdeck.db"
    [(child, retry)] = _events(db, engine.batch_id, "retry")
    assert child == "t0000" and (retry["attempt"], retry["mode"]) == (2, "fresh")
    assert retry["before"]["status"] == "stopped"
    assert Decimal(retry["before"]["cost_usd"]) == first.cost_usd
    with StoreReader(db) as reader:
        stored = reader.child(engine.batch_id, "t0000")
        report = build_report(reader, engine.batch_id)
    assert stored is not None and stored.attempt == 2 and stored.usage == row.usage
    assert report["status"] == "completed" and report["children"][0]["attempt"] == 2
    one, two = report["attempts"]
    assert (one["attempt"], one["began"], one["status"]) == (1, "first", "stopped")
    assert (two["attempt"], two["began"], two["status"]) == (2, "fresh", "completed")
    assert isinstance(one["cost_usd"], float) and isinstance(two["cost_usd"], float)  # as all
    assert one["cost_usd"] + two["cost_usd"] == pytest.approx(float(row.cost_usd or 0))
    assert one["tokens"] + two["tokens"] == row.usage.total
    assert "## Attempts" in render_markdown(report)


def test_a_retry_that_continues_gives_the_model_its_earlier_transcript(tmp_path: Path) -> None:
    with Loopback() as server:
        server.script(Reply(status=500, message="upstream broke"))
        route = route_for(server, "openai", retry=RetrySettings(attempts=1))
        engine = Engine(
            batch(1, goal="Summarize the design notes"),
            settings(route),
            state_dir=tmp_path / "state",
            env={KEY_ENV: "sk-loopback-key-000"},
        )
        engine.start()
        try:
            assert engine.wait(60)
            assert _row(engine).status is ChildStatus.FAILED
            engine.retry(["t0000"], resume=True)
            snap = run_to_end(engine)
        finally:
            engine.close()
        prompt = server.received[-1].body["messages"][-1]["content"]
    row = snap.child("t0000")
    assert row is not None and row.status is ChildStatus.COMPLETED and row.attempt == 2
    assert prompt.startswith("Summarize the design notes")
    assert "An earlier attempt at this task ended (failed: " in prompt
    assert "upstream broke" in prompt and "user      │ Summarize the design notes" in prompt
    text = Path(row.transcript).read_text()
    assert "retry requested: attempt 2 (continue) after failed" in text
    assert "[the earlier attempt's transcript, " in text  # named there, not repeated


def _cli(tmp_path: Path, route: str, b: Batch) -> Engine:
    text = '[engine]\ndefault_route = "cli"\n[routes.cli]\nprovider = "command"\n' + route
    (tmp_path / "flightdeck.toml").write_text(text)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    engine = Engine(
        b, load_settings(tmp_path / "flightdeck.toml"), state_dir=tmp_path / "state", env=env
    )
    engine.start()
    return engine


def _argv(name: str, *args: str) -> str:
    return "argv = " + json.dumps([sys.executable, str(FAKES / name), *args]) + "\n"


def test_a_failed_command_child_runs_again_and_completes(tmp_path: Path) -> None:
    marker = tmp_path / "fixed"
    b = Batch(name="cli", tasks=(Task(id="t0", goal="fix it", seq=0),))
    engine = _cli(tmp_path, _argv("edit_files.py", "--fail-unless", str(marker)), b)
    try:
        assert engine.wait(60)
        first = _row(engine, "t0")
        assert first.status is ChildStatus.FAILED and "exit 3" in (first.error or "")
        marker.touch()
        engine.retry(["t0"])
        snap = run_to_end(engine)
    finally:
        engine.close()
    row = snap.child("t0")
    assert row is not None and row.status is ChildStatus.COMPLETED and row.attempt == 2
    assert snap.status is BatchStatus.COMPLETED
    text = Path(row.transcript).read_text()
    assert "failed: exit 3" in text and "retry requested: attempt 2 (fresh)" in text
    assert text.count("run: ") == 2


def test_a_command_child_stopped_before_its_retry_ran_keeps_its_tokens_unknown(
    tmp_path: Path,
) -> None:
    # Its first attempt ran and its CLI counted no tokens; the retry, held by paused admission,
    # is stopped before it starts: it spent what the first did, unknown, never 0 tokens.
    b = Batch(name="cli", tasks=(Task(id="t0", goal="fix it", seq=0),))
    engine = _cli(tmp_path, _argv("edit_files.py", "--fail-unless", str(tmp_path / "no")), b)
    try:
        assert engine.wait(60)
        first = _row(engine, "t0")
        assert first.status is ChildStatus.FAILED and first.tokens_unknown
        engine.pause_admission()
        engine.retry(["t0"])
        until(lambda: _row(engine, "t0").attempt == 2, 60, what="the retry queued")
        engine.stop(["t0"])
        assert engine.wait(60)
        row = _row(engine, "t0")
        assert engine.flush(60)
        with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
            report = build_report(reader, engine.batch_id)
    finally:
        engine.close()
    assert row.status is ChildStatus.STOPPED and row.started_ts is None and row.attempt == 2
    assert row.cost_usd is None and row.tokens_unknown
    assert report["children"][0]["tokens_in"] is None
    assert [a["tokens"] for a in report["attempts"]] == [None, None]


def test_a_retry_event_is_committed_with_its_queued_row_or_neither_is(tmp_path: Path) -> None:
    # The retry event was written apart from the row that queues the new attempt: an owner
    # killed between the two left a retry the store says ran with no attempt for it (or the
    # reverse). The event refused here stands for that kill, at that point, every time;
    # paused admission keeps the new attempt from writing rows of its own after it.
    engine = start(batch(1), settings(sim_route(fail_rate=1.0)), tmp_path)
    db = tmp_path / "state" / "flightdeck.db"
    try:
        assert engine.wait(60) and engine.flush(60)
        assert _row(engine).status is ChildStatus.FAILED
        with sqlite3.connect(db) as conn:
            conn.execute(
                "CREATE TRIGGER killed BEFORE INSERT ON events WHEN NEW.kind = 'retry'"
                " BEGIN SELECT RAISE(ABORT, 'the owner was killed here'); END"
            )
        conn.close()
        engine.pause_admission()
        engine.retry(["t0000"])
        assert _row(engine).attempt == 2  # in memory, it is queued again
        engine.flush(60)
        with StoreReader(db) as reader:
            stored = reader.child(engine.batch_id, "t0000")
    finally:
        engine.close()
    assert _events(db, engine.batch_id, "retry") == []
    assert stored is not None
    assert (stored.attempt, stored.status) == (1, ChildStatus.FAILED)  # as it was


def test_a_retry_that_continues_resumes_the_cli_s_session(tmp_path: Path) -> None:
    args = ("-p", "--output-format", "stream-json", "--verbose")
    route = _argv("fake_claude.py", *args, "--fake-fail", "quota hit", "{goal}")
    route += "resume_" + _argv("fake_claude.py", *args, "--resume", "{session}", "{message}")
    route += 'format = "claude-stream-json"\n'
    b = Batch(name="cli", tasks=(Task(id="t0", goal="review the change", seq=0),))
    engine = _cli(tmp_path, route, b)
    try:
        assert engine.wait(60)
        first = _row(engine, "t0")
        assert first.status is ChildStatus.FAILED, first.error
        engine.retry(["t0"], resume=True)
        snap = run_to_end(engine)
    finally:
        engine.close()
    row = snap.child("t0")
    assert row is not None and row.status is ChildStatus.COMPLETED and row.attempt == 2
    assert (row.result or "").startswith("resumed sess-0001: Your run before this one ended")
    # The first attempt's cost is kept beside the second's.
    assert first.cost_usd and row.cost_usd and row.cost_usd > first.cost_usd
    assert "--resume sess-0001" in Path(row.transcript).read_text()


def test_a_retry_the_budget_has_no_room_for_is_refused_and_changes_nothing(
    tmp_path: Path, hold: Hold
) -> None:
    s = settings(sim_route(tool_turns=3, **hold.options()))
    s = Settings(engine=s.engine, routes=s.routes, budget=Budget(max_runs=1))
    engine = start(batch(1), s, tmp_path)
    try:
        first = _stopped_mid_run(engine, hold)
        with pytest.raises(CommandError, match=r"not retried: max_runs \(1\) leaves room for 0"):
            engine.retry(["t0000"])
        assert engine.status is BatchStatus.STOPPED and _row(engine) == first
    finally:
        engine.close()
    db = tmp_path / "state" / "flightdeck.db"
    assert _events(db, engine.batch_id, "retry") == []


def _failed_batch(tmp_path: Path, config: str = "") -> tuple[tuple[str, str], str]:
    """A batch of one `sim` child that fails, run headless to its end: (--state-dir, its id)."""
    (tmp_path / "flightdeck.toml").write_text(
        config + '[routes.sim]\nprovider = "sim"\ntime_scale = 0.001\nfail_rate = 1.0\n'
    )
    (tmp_path / "tasks.jsonl").write_text('{"id": "a", "goal": "one"}\n')
    state = ("--state-dir", str(tmp_path / "state"))
    ran = flightdeck("run", "--headless", "tasks.jsonl", *state, cwd=tmp_path)
    assert ran.returncode == 1, ran.stdout + ran.stderr
    batch_id = re.search(r"^batch (\S+)$", ran.stdout, re.M)[1]  # type: ignore[index]
    return state, batch_id


def test_retry_in_an_ended_batch_the_budget_refuses_says_so_and_the_batch_stays_ended(
    tmp_path: Path,
) -> None:
    """The owner started for the retry refuses it: the command says the owner took it, not that
    the batch reopened (it said `reopened` before the refusal), and the batch ends as it was."""
    state, batch_id = _failed_batch(tmp_path, "[budget]\nmax_runs = 1\n")
    retried = flightdeck("retry", batch_id, "a", *state, cwd=tmp_path)
    assert retried.returncode == 1, retried.stderr
    owner = re.search(r"had ended: owner pid (\d+) started to take the retry", retried.stderr)
    assert owner is not None, retried.stderr
    assert "refused: not retried: max_runs (1) leaves room for 0 more runs" in retried.stderr
    assert "reopened" not in retried.stderr
    assert wait_ended(int(owner[1]), 60)
    waited = flightdeck("wait", batch_id, *state, cwd=tmp_path)
    assert waited.returncode == 1 and f"batch {batch_id} failed" in waited.stdout, waited.stdout
    db = tmp_path / "state" / "flightdeck.db"
    assert _events(db, batch_id, "retry") == []


def test_a_retry_that_reopens_an_ended_batch_is_no_recovery_in_its_report(
    tmp_path: Path,
) -> None:
    """The owner `retry` starts for an ended batch takes it over as `resume --reopen` does; no
    owner was lost, so the report has no Recovery section ("resumed after a lost owner")."""
    state, batch_id = _failed_batch(tmp_path)
    retried = flightdeck("retry", batch_id, "a", *state, cwd=tmp_path)
    assert retried.returncode == 0, retried.stderr
    waited = flightdeck("wait", batch_id, *state, cwd=tmp_path)
    assert waited.returncode == 1, waited.stdout + waited.stderr
    report = flightdeck("report", batch_id, "--format", "json", *state, cwd=tmp_path)
    recovery = json.loads(report.stdout)["recovery"]
    assert (recovery["resumes"], recovery["rerun"], recovery["left_unknown"]) == (0, 0, 0)
    markdown = flightdeck("report", batch_id, *state, cwd=tmp_path).stdout
    assert "## Attempts" in markdown and "## Recovery" not in markdown, markdown


def test_a_retry_waits_while_the_soft_budget_holds_and_runs_once_it_is_lifted(
    tmp_path: Path, hold: Hold, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(softbudget, "SOFT_BUDGET_EVERY_S", 0.0)  # looked at every step
    s = settings(sim_route(tool_turns=1, **hold.options()), pool=2)
    s = Settings(engine=s.engine, routes=s.routes, budget=Budget(soft_cost_usd=Decimal("1e-6")))
    engine = start(batch(2), s, tmp_path)
    try:
        until(lambda: engine.snapshot().totals.running == 2, what="both running")
        engine.stop(["t0000"])
        until(lambda: _row(engine).status is ChildStatus.STOPPED, what="t0000 stopped")
        # t0001's first call spends past the budget; its second is held, so the batch lives on
        # (an ended batch holds nothing back) and the hold is there to see.
        hold.release("t0001", call=0)
        until(lambda: engine.snapshot().held is not None, what="t0001's spend holds admission")
        # Accepted (the hold keeps it queued, as it keeps any start) once its end is committed:
        # under load the writer can be behind the row's STOPPED, and the engine says so.
        until(lambda: _retried(engine, "t0000"), what="the retry accepted")
        until(lambda: _row(engine).attempt == 2, what="attempt 2 queued")
        stepped(engine)  # admission has looked at it since: still held
        assert (_row(engine).status, _row(engine).started_ts) == (ChildStatus.QUEUED, None)
        engine.set_limits({"soft_cost_usd": None})
        hold.release()
        snap = run_to_end(engine)
    finally:
        engine.close()
    row = snap.child("t0000")
    assert row is not None and (row.status, row.attempt) == (ChildStatus.COMPLETED, 2)


def _retried(engine: Engine, child_id: str) -> bool:
    """Retry `child_id`; False while its end is still being committed ("retry it in a moment")."""
    try:
        engine.retry([child_id])
    except CommandError as exc:
        if "still ending" not in str(exc):
            raise
        return False
    return True


def test_a_completed_child_or_a_running_one_is_not_retried(tmp_path: Path) -> None:
    engine = start(batch(2), settings(ROUTE, pool=1), tmp_path)
    try:
        until(lambda: _row(engine, "t0000").status is ChildStatus.COMPLETED, 60, what="t0 done")
        with pytest.raises(CommandError, match=r"t0000 completed: nothing to retry"):
            engine.retry(["t0000"])
        with pytest.raises(CommandError, match="no child with id 'zz'"):
            engine.retry(["zz"])
    finally:
        engine.close()


def _codex_continued(tmp_path: Path, *fails: str) -> tuple[ChildRow, ChildRow]:
    """A fake Codex child that fails (its `fails` flags), then `retry --continue`d: its row
    after the first run and at the end, completed at its second attempt."""
    route = _argv("fake_codex.py", "exec", "--json", *fails, "{goal}")
    route += "resume_" + _argv(
        "fake_codex.py", "exec", "resume", "{session}", "--json", "{message}"
    )
    route += 'format = "codex-json"\n'
    b = Batch(name="cli", tasks=(Task(id="t0", goal="review the change", seq=0),))
    engine = _cli(tmp_path, route, b)
    try:
        assert engine.wait(60)
        first = _row(engine, "t0")
        assert first.status is ChildStatus.FAILED, first
        engine.retry(["t0"], resume=True)
        snap = run_to_end(engine)
    finally:
        engine.close()
    row = snap.child("t0")
    assert row is not None and row.status is ChildStatus.COMPLETED and row.attempt == 2
    return first, row


def test_a_retry_that_continues_resumes_a_codex_thread(tmp_path: Path) -> None:
    # Codex has no --resume flag: `codex exec resume THREAD PROMPT` continues the thread.
    first, row = _codex_continued(tmp_path, "--fake-fail")
    assert "429" in (first.error or "")
    assert (row.result or "").startswith("resumed thread-42: Your run before this one ended")
    assert "exec resume thread-42" in Path(row.transcript).read_text()


# One turn of the fake Codex as flightdeck bills it (OpenAI counts cached input inside input).
ONE_TURN = Usage(input_tokens=500, output_tokens=300, cache_read_tokens=1500)


def test_a_retry_that_continues_a_codex_thread_is_billed_what_it_adds(tmp_path: Path) -> None:
    # Codex's `turn.completed` counts its whole thread: the resumed run reports two turns, the
    # first of them billed already. The retry's fresh runner read it from zero: billed three.
    first, row = _codex_continued(tmp_path, "--fake-exit", "1")
    assert first.usage == ONE_TURN, first
    assert row.usage == ONE_TURN + ONE_TURN


def test_a_session_recorded_by_an_owner_before_its_thread_was_kept_reads_as_its_id(
    tmp_path: Path,
) -> None:
    # A "session" event's detail was the bare id; it is JSON since the thread's usage is kept.
    db = tmp_path / "flightdeck.db"
    with Store(db) as store:
        store.record_event("b", "old", 1.0, "session", "thread-42")
        store.record_event("b", "odd", 1.0, "session", "42")  # an id that reads as JSON
        ProcessLog(store, "b").session("new", CliSession("t-7", ONE_TURN), 2.0)
    assert session_of(db, "b", "old") == CliSession("thread-42")
    assert session_of(db, "b", "odd") == CliSession("42")
    assert session_of(db, "b", "new") == CliSession("t-7", ONE_TURN)
    assert session_of(db, "b", "none") is None


def test_a_retry_into_a_batch_whose_admission_is_paused_says_so_as_wait_does(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A batch stopped while its admission was paused reopens paused: `retry` said its children
    # were queued and `wait` waited on them for ever, neither saying that nothing would start.
    (tmp_path / "hold").mkdir()
    (tmp_path / "flightdeck.toml").write_text(
        '[routes.sim]\nprovider = "sim"\ntime_scale = 0.001\nhold_dir = "hold"\n'
    )
    (tmp_path / "tasks.jsonl").write_text('{"id": "a", "goal": "one"}\n')
    state = ("--state-dir", str(tmp_path / "state"))
    started = flightdeck("run", "--detach", "tasks.jsonl", *state, cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    batch_id = started.stdout.strip()
    # pause, stop, wait and continue in this process (as processes in test_durable), retry and
    # the wait that must notice the hold as processes
    monkeypatch.chdir(tmp_path)
    for verb in (("pause", batch_id), ("stop", batch_id, "--all"), ("wait", batch_id)):
        done = cli(capsys, *verb, *state)
        assert done[0] in (0, 1), (verb, done)
    retried = flightdeck("retry", batch_id, "a", *state, cwd=tmp_path)
    owner = re.search(r"owner pid (\d+) started", retried.stderr)
    assert owner is not None, retried.stderr
    waiting = flightdeck_process("wait", batch_id, *state, cwd=tmp_path)
    try:
        assert retried.returncode == 0, retried.stderr
        # The command names the state folder, as the soft budget's does: another shell's
        # default folder would find no such batch.
        go_on = f"flightdeck continue {batch_id} --state-dir {tmp_path / 'state'}"
        held = f"admission held: paused by the operator (`{go_on}` "
        assert held + "continues it)" in retried.stderr, retried.stderr
        assert waiting.stderr is not None
        read_until(waiting.stderr.fileno(), held)
        # Paused already: not paused twice, as `continue` of what is not paused is not sent.
        again = cli(capsys, "pause", batch_id, *state)
        assert again[:2] == (0, f"admission of batch {batch_id}: already paused\n"), again
        assert cli(capsys, "continue", batch_id, *state)[0] == 0
        again = cli(capsys, "continue", batch_id, *state)
        assert again[:2] == (0, f"admission of batch {batch_id}: not paused\n"), again
        (tmp_path / "hold" / "all").touch()
        assert waiting.wait(timeout=60) == 0
    finally:
        waiting.kill()
        waiting.communicate()  # its pipes closed
        flightdeck("stop", batch_id, "--all", *state, cwd=tmp_path)
        assert wait_ended(int(owner[1]), 60)


def test_a_retry_in_an_abandoned_batch_says_its_owner_died_not_that_it_ended(
    tmp_path: Path,
) -> None:
    """Found by a walk-through: it said `had ended`, though the batch was running when its
    owner died, and the owner it starts runs on what the dead one left, as resume does."""
    import sqlite3
    import subprocess

    state, batch_id = _failed_batch(tmp_path)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    conn = sqlite3.connect(tmp_path / "state" / "flightdeck.db")
    with conn:  # as an owner killed before the batch's end was committed leaves it
        conn.execute("UPDATE batches SET status = 'running', owner_pid = ?", (dead.pid,))
    conn.close()
    retried = flightdeck("retry", batch_id, "a", *state, cwd=tmp_path)
    assert retried.returncode == 0, retried.stderr
    assert f"batch {batch_id}'s owner had died: owner pid" in retried.stderr, retried.stderr
    assert "run on what the dead owner left (as resume does)" in retried.stderr
    assert "had ended" not in retried.stderr
    waited = flightdeck("wait", batch_id, *state, cwd=tmp_path)
    assert waited.returncode == 1, waited.stdout + waited.stderr
