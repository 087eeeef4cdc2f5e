"""docs/agents.md's claims against the real Claude Code and Codex: steers (two at the next
turn; one waiting when Claude Code is interrupted; Codex's when its run fails), what each call
is billed, and the call Claude Code's permissions deny (realcli.py's helpers)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from flightdeck.engine.child.command import RETRY_MESSAGE
from flightdeck.engine.commands import Retry
from flightdeck.engine.model import ChildStatus
from flightdeck.engine.records.reader import StoreReader
from realcli import (
    CLIS,
    GATE,
    engine_for,
    finished,
    gate_opened,
    goal,
    in_its_tool,
    project,
    row,
    tagged,
    transcript,
)

from agentserver import AgentServer
from helpers import HANG_S, until


def test_a_steer_waiting_when_claude_is_interrupted_goes_into_the_new_turn(
    tmp_path: Path, server: AgentServer
) -> None:
    """Claude Code stopped (SIGSTOP) mid-tool reads neither: `steer` then `steer --now`; once
    it goes on, the interrupt cuts the turn and both go into the new one, as the docs say."""
    repo, env = project(tmp_path, "claude", server)
    with in_its_tool(tmp_path, repo, env) as eng:
        ((cli,),) = tagged(eng.batch_id).values()
        os.kill(cli, signal.SIGSTOP)
        try:
            eng.steer(["t0"], "also the docs")
            until(lambda: "sent to its input: also the docs" in transcript(eng, "t0"), what="sent")
            eng.steer(["t0"], "focus on security", now=True)
            sent = "sent after interrupting the running turn: focus on security"
            until(lambda: sent in transcript(eng, "t0"), what="sent with its interrupt")
        finally:
            os.kill(cli, signal.SIGCONT)
        until(lambda: "[Request interrupted" in transcript(eng, "t0"), what="interrupted")
        done, _ = gate_opened(tmp_path, eng)
    assert done.status is ChildStatus.COMPLETED, done.error
    hows = [(r.message, r.state.value, r.how) for r in done.steers]
    interrupted = "as a new turn, the running one interrupted"
    assert hows == [
        ("also the docs", "delivered", interrupted),
        ("focus on security", "delivered", interrupted),
    ], hows


@pytest.mark.parametrize("cli", CLIS)
def test_two_steers_at_the_next_turn_are_both_delivered(
    tmp_path: Path, server: AgentServer, cli: str
) -> None:
    repo, env = project(tmp_path, cli, server)
    with in_its_tool(tmp_path, repo, env) as eng:
        eng.steer(["t0"], "also the docs")
        eng.steer(["t0"], "and the tests")
        if cli == "claude":
            until(lambda: "queued by the CLI: and the tests" in transcript(eng, "t0"), what="read")
        done, text = gate_opened(tmp_path, eng)
    assert done.status is ChildStatus.COMPLETED, done.error
    assert [(r.message, r.state.value) for r in done.steers] == [
        ("also the docs", "delivered"),
        ("and the tests", "delivered"),
    ], done.steers
    assert done.result is not None and "and the tests" in done.result, (done.result, text)


def served_tokens(server: AgentServer, path: str) -> tuple[int, int]:
    """Input and output tokens the server served on `path` (tests/agentserver.py's counts)."""
    calls = [r for r in server.received if r.path.partition("?")[0] == path]
    return sum(len(json.dumps(r.body)) // 4 for r in calls), len(calls)


@pytest.mark.parametrize("how", ["steer_now", "steer", "retry"])
@pytest.mark.parametrize("cli", CLIS)
def test_every_call_is_billed_once(tmp_path: Path, cli: str, how: str) -> None:
    """Across a steer's turns and a `retry --continue`, the child's input tokens are what the
    server served it: no turn billed twice, none left out; except Codex's turn cut by a stop,
    which Codex never reports: then the child's cost is unknown, as the docs say."""
    from agentserver import RESPONSES_PATH
    from loopback import ANTHROPIC_PATH

    with AgentServer() as server:  # its own: every request it received is this child's
        repo, env = project(tmp_path, cli, server)
        with in_its_tool(tmp_path, repo, env) as eng:
            if how == "retry":
                eng.stop(["t0"])
                assert eng.wait(HANG_S)
                (tmp_path / "gate").touch()
                eng.send(Retry(("t0",), resume=True))
            else:
                eng.steer(["t0"], "also the docs", now=how == "steer_now")
                if cli == "claude":
                    until(lambda: "queued by the CLI" in transcript(eng, "t0"), what="read")
                elif how == "steer_now":  # stopped mid-turn, before its gate opens
                    until(lambda: "SIGTERM sent" in transcript(eng, "t0"), what="stopped")
                (tmp_path / "gate").touch()
            done, text = finished(eng)
        path = ANTHROPIC_PATH if cli == "claude" else RESPONSES_PATH
        served, calls = served_tokens(server, path)
    assert done.status is ChildStatus.COMPLETED, done.error
    if cli == "claude" and how != "retry":  # an interrupted turn's num_turns is not its calls
        assert done.activity.api_calls == calls, (done.activity, text)
    if cli == "codex" and how != "steer":
        # Stopped mid-turn, Codex reports that turn never, the resumed thread's total leaves
        # it out too: its calls go unbilled, and the child's cost stays unknown (docs).
        assert done.cost_usd is None and done.usage.input_tokens < served, (done, text)
    else:  # Claude stopped in its tool (retry): the calls it streamed are billed, all of them
        assert done.cost_usd is not None, text
        assert done.usage.input_tokens == served, (done.usage, served, calls, text)


def test_codex_stopped_in_a_later_turn_keeps_the_turns_reported_spent(
    tmp_path: Path, server: AgentServer
) -> None:
    """Codex stopped in the turn a steer resumed it for: that turn is never reported, so the
    child's cost is unknown, but the first turn's stays spent (`$0.0036+?`), as the docs say:
    the meter's spent went down by it."""
    repo, env = project(tmp_path, "codex", server)
    second = tmp_path / "second"  # its gate, never opened: the stop ends the turn
    with in_its_tool(tmp_path, repo, env) as eng:
        hold = " ".join([sys.executable, str(GATE), str(second)])
        eng.steer(["t0"], f"also the docs [tool: {hold}]")
        (tmp_path / "gate").touch()

        def in_second_tool() -> bool:
            lines = transcript(eng, "t0").splitlines()
            return any("tool-call │" in line and str(second) in line for line in lines)

        until(in_second_tool, what="the resumed turn inside its tool")
        before = eng.snapshot().totals
        assert before.pending == 1 and before.cost_unknown == 0 and before.cost_usd > 0, before
        eng.stop(["t0"])
        done, text = finished(eng, 60)
        after = eng.snapshot().totals
    assert done.status is ChildStatus.STOPPED, done
    assert after.cost_usd == before.cost_usd and after.cost_unknown == 1, (after, before)
    assert done.cost_usd is None and done.cost_known_usd == before.cost_usd, (done, text)


DOCS = Path(__file__).resolve().parent.parent.parent / "docs"


def documented_denial() -> str:
    """The command docs/agents.md shows denied by the documented Claude Code route."""
    text = " ".join((DOCS / "agents.md").read_text().split())
    found = re.search(r'`denied a tool c7 Bash \{"command": "([^"]+)"\}`', text)
    assert found is not None, "docs/agents.md shows no denied call"
    return found.group(1)


def test_the_documented_denial_is_denied_and_needs_the_operator(
    tmp_path: Path, server: AgentServer
) -> None:
    """Without `--allowedTools Bash`, the command docs/agents.md shows denied is denied: the
    transcript says which call, the row holds the denial (the TUI's needs-you queue). Under
    `acceptEdits`, Claude Code 2.1 runs file commands inside its workspace unasked (`rm -rf
    build`, `mkdir`, a redirection), as the docs now say: those are not denied."""
    repo, env = project(tmp_path, "claude", server)
    config = tmp_path / "flightdeck.toml"
    config.write_text(config.read_text().replace(', "--allowedTools", "Bash"', ""))
    command = documented_denial()
    goals = [f"task t0 [tool: {command}]", "task t1 [tool: mkdir build && rm -rf build]"]
    eng = engine_for(tmp_path, repo, env, goals)
    try:
        assert eng.wait(120)
        done, ran = row(eng), row(eng, "t1")
        text = transcript(eng, "t0")
    finally:
        eng.close()
    assert done.denial is not None and done.denial.tool == "Bash", (done.denial, text)
    assert command in done.denial.input
    assert "denied" in text and command in text, text
    assert ran.denial is None, ran.denial


def test_a_codex_steer_is_missed_when_its_run_fails(tmp_path: Path, server: AgentServer) -> None:
    """Codex takes a steer by resuming once its process has ended well: one that crashed
    (killed mid-tool) resumes nothing, and the steer is missed."""
    repo, env = project(tmp_path, "codex", server)
    with in_its_tool(tmp_path, repo, env) as eng:
        eng.steer(["t0"], "also the docs")
        until(lambda: "also the docs" in transcript(eng, "t0"), what="the steer taken")
        ((cli,),) = tagged(eng.batch_id).values()
        os.kill(cli, signal.SIGKILL)
        done, text = finished(eng, 60)
    assert done.status is ChildStatus.FAILED, done
    (receipt,) = done.steers
    assert receipt.state.value == "missed", (receipt, text)
    assert text.count("engine    │ run: ") == 1, text
    assert tagged(eng.batch_id) == {}


@pytest.mark.parametrize("cli", CLIS)
def test_retry_continue_of_an_ended_batch_from_the_command_line(
    tmp_path: Path, server: AgentServer, cli: str
) -> None:
    """A CLI child timed out ends its headless batch; `flightdeck retry --continue` reopens
    it (an owner in the background) and the CLI resumes its session; `wait` exits 0."""
    repo, env = project(tmp_path, cli, server)
    # The retry runs under the same timeout, the CLI's start and its turn included: 4 s timed
    # out a Claude Code that took 3 s to start at load 10, its result 0.4 s late. Codex starts
    # in a fraction of that, and its shell tool gives up on the gated command after 10 s (the
    # turn then completes): its first run must time out before.
    timeout_s = {"claude": 12, "codex": 6}[cli]
    tasks = {
        "batch": {"name": "agents", "workspace": str(repo)},
        "tasks": [{"id": "t0", "goal": goal(tmp_path, "t0"), "timeout_s": timeout_s}],
    }
    (tmp_path / "tasks.yaml").write_text(json.dumps(tasks))
    full = {**os.environ, **env, "NO_COLOR": "1"}

    def flightdeck(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "flightdeck.tui.cli", *args]
        return subprocess.run(
            command, cwd=tmp_path, env=full, capture_output=True, text=True, timeout=120
        )

    run = flightdeck("run", "tasks.yaml", "--headless")
    assert run.returncode != 0, run.stdout + run.stderr
    db = tmp_path / "state" / "flightdeck.db"
    with StoreReader(db) as reader:
        batch_id = reader.latest_batch_id()
        assert batch_id is not None
        (first,) = reader.children(batch_id)
    assert first.status is ChildStatus.TIMED_OUT, first
    (tmp_path / "gate").touch()
    retry = flightdeck("retry", batch_id, "t0", "--continue")
    assert retry.returncode == 0, retry.stdout + retry.stderr
    waited = flightdeck("wait", batch_id)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    with StoreReader(db) as reader:
        (done,) = reader.children(batch_id)
    assert done.status is ChildStatus.COMPLETED, done.error
    assert done.attempt == 2 and done.result is not None
    assert done.result.startswith("done: " + RETRY_MESSAGE), done.result
    runs = [ln for ln in Path(done.transcript).read_text().splitlines() if "│ run: " in ln]
    assert len(runs) == 2 and "resume" in runs[1], runs
    assert tagged(batch_id) == {}
