"""The real Claude Code and Codex, unmodified, as flightdeck children (`make test-agents`):
they complete with transcripts and live usage, a stop ends each one's whole tree, steers reach
them both ways, and a session is resumed by a steer or a retry (realcli.py sets them up).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from flightdeck.engine.child.command import RETRY_MESSAGE
from flightdeck.engine.commands import Retry
from flightdeck.engine.model import ChildStatus, SteerState
from realcli import (
    CLIS,
    ROUTE,
    engine_for,
    goal,
    in_tool,
    markers,
    project,
    tagged,
    transcript,
    transcript_file,
    version,
)

from agentserver import RESPONSES_PATH, AgentServer
from helpers import HANG_S, until


@pytest.mark.parametrize("cli", CLIS)
def test_children_complete_with_transcripts_and_live_usage(
    tmp_path: Path, server: AgentServer, cli: str, figures: list[dict[str, Any]]
) -> None:
    repo, env = project(tmp_path, cli, server)
    names = [f"t{i}" for i in range(4)]
    engine = engine_for(tmp_path, repo, env, [goal(tmp_path, n) for n in names])
    try:
        until(lambda: in_tool(engine, names), what="every child inside its tool")
        mid = {r.id: r for r in engine.snapshot().children}
        live = [mid[n].usage.total for n in names]
        pending = [mid[n].activity.unreported for n in names]
        (tmp_path / "gate").touch()
        assert engine.wait(120)
        snap = engine.snapshot()
    finally:
        engine.close()
    # Codex reports a turn's usage at its end: until then its row says so (`$0.00+?`).
    assert pending == [cli == "codex"] * len(names), pending
    for row in snap.children:
        assert row.status is ChildStatus.COMPLETED, (row.id, row.error)
        assert not row.activity.unreported
        assert row.result is not None and row.result.startswith("done: task")
        assert row.usage.total > 0 and row.activity.tool_calls >= 1
        text = transcript_file(row.transcript)
        assert "gate open" in text and "tool-call │" in text
    if cli == "claude":  # its assistant events carry usage as each call streams
        assert all(n > 0 for n in live), live
        assert all(row.model != ROUTE[cli] for row in snap.children)  # what it reported
        assert snap.totals.cost_unknown == 0
    figures.append(
        {
            "cli": cli,
            "version": version(cli),
            "children": len(names),
            "completed": sum(r.status is ChildStatus.COMPLETED for r in snap.children),
            "live_tokens_mid_turn": sum(live),
            "tokens": snap.totals.usage.total,
            "cost_usd": snap.totals.cost_usd,
        }
    )


@pytest.mark.parametrize("cli", CLIS)
def test_stop_ends_the_whole_tree(
    tmp_path: Path, server: AgentServer, cli: str, figures: list[dict[str, Any]]
) -> None:
    repo, env = project(tmp_path, cli, server)
    engine = engine_for(tmp_path, repo, env, [goal(tmp_path, "t0", "--tree")])
    try:
        until(lambda: in_tool(engine, ["t0"]), what="the child inside its tool")
        until(lambda: bool(markers()), what="its tool's grandchild")
        roots = tagged(engine.batch_id)["t0"]
        t0 = time.monotonic()
        engine.stop(["t0"])
        until(lambda: engine.snapshot().child("t0").status.terminal, what="stopped")  # type: ignore[union-attr]
        stop_s = time.monotonic() - t0
        assert engine.wait(HANG_S)
    finally:
        engine.close()
    assert engine.snapshot().child("t0").status is ChildStatus.STOPPED  # type: ignore[union-attr]
    assert markers() == [] and tagged(engine.batch_id) == {}, (markers(), roots)
    figures.append({"cli": cli, "test": "stop", "stop_s": round(stop_s, 2), "left": 0})


@pytest.mark.parametrize("cli", CLIS)
def test_steer_both_ways(
    tmp_path: Path, server: AgentServer, cli: str, figures: list[dict[str, Any]]
) -> None:
    repo, env = project(tmp_path, cli, server)
    engine = engine_for(tmp_path, repo, env, [goal(tmp_path, n) for n in ("t0", "t1")])
    try:
        until(lambda: in_tool(engine, ["t0", "t1"]), what="both inside their tool")
        engine.steer(["t0"], "also the docs")
        engine.steer(["t1"], "focus on security", now=True)
        if cli == "claude":  # written to its input at once; the gate lets the turns go on
            # Once the CLI has read it: a gate opened before that ends the turn first.
            read = "queued by the CLI: also the docs"
            until(lambda: read in transcript(engine, "t0"), what="the steer read by the CLI")
        else:  # --now stops the process, then resumes the session with the message
            until(lambda: "(resume)" in transcript(engine, "t1"), what="the --now resume")
        (tmp_path / "gate").touch()
        assert engine.wait(120)
        snap = engine.snapshot()
    finally:
        engine.close()
    outcome = {}
    for row in snap.children:
        assert row.status is ChildStatus.COMPLETED, (row.id, row.error)
        (receipt,) = row.steers
        assert receipt.state is SteerState.DELIVERED, (row.id, receipt)
        outcome[row.id] = receipt.how
    if cli == "claude":
        assert outcome["t0"] == "into the running turn"
        assert outcome["t1"] == "as a new turn, the running one interrupted"
    else:
        assert outcome == {"t0": "by resuming the session", "t1": "by resuming the session"}
    figures.append({"cli": cli, "test": "steer", "next": outcome["t0"], "now": outcome["t1"]})


def test_a_resumed_codex_thread_is_billed_once(tmp_path: Path) -> None:
    """Codex's `turn.completed` counts its whole thread, a resumed one's earlier turns too: a
    steer's resume is billed what it adds, so the child's tokens are what the server served."""
    with AgentServer() as server:  # its own: every request it received is this child's
        repo, env = project(tmp_path, "codex", server)
        engine = engine_for(tmp_path, repo, env, [goal(tmp_path, "t0")])
        try:
            until(lambda: in_tool(engine, ["t0"]), what="the child inside its tool")
            engine.steer(["t0"], "also the docs")
            (tmp_path / "gate").touch()
            assert engine.wait(120)
            row = engine.snapshot().child("t0")
        finally:
            engine.close()
        served = [r for r in server.received if r.path.startswith(RESPONSES_PATH)]
    assert row is not None and row.status is ChildStatus.COMPLETED, row
    (receipt,) = row.steers
    assert receipt.how == "by resuming the session"
    assert row.usage.input_tokens == sum(len(json.dumps(r.body)) // 4 for r in served)


@pytest.mark.parametrize("cli", CLIS)
def test_a_retry_that_continues_resumes_the_session(
    tmp_path: Path, server: AgentServer, cli: str
) -> None:
    """`retry --continue` of a stopped child runs the route's resume_argv on the session the
    CLI reported: the documented one of each CLI completes (Claude Code's message on stdin)."""
    repo, env = project(tmp_path, cli, server)
    engine = engine_for(tmp_path, repo, env, [goal(tmp_path, "t0")])
    try:
        until(lambda: in_tool(engine, ["t0"]), what="the child inside its tool")
        engine.stop(["t0"])
        assert engine.wait(HANG_S)  # its end committed: a retry before is "still ending"
        (tmp_path / "gate").touch()
        engine.send(Retry(("t0",), resume=True))
        assert engine.wait(120)
        row = engine.snapshot().child("t0")
        text = transcript(engine, "t0")
    finally:
        engine.close()
    assert row is not None and row.status is ChildStatus.COMPLETED, (row.status, row.error)
    assert row.result is not None and row.result.startswith("done: " + RETRY_MESSAGE)
    runs = [line for line in text.splitlines() if "engine    │ run: " in line]
    assert len(runs) == 2 and "resume" in runs[1], runs
