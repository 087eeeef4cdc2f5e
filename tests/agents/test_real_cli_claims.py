"""docs/agents.md's claims, each against the real Claude Code and Codex (`make test-agents`):
workspaces and what merge and discard do with them, pause and continue, the live figures, a
fresh retry, the CLI's own failures and retries, the environment, `timeout_s` and stalls.

The routes are realcli.py's (the documented argv, pointed at the loopback server);
`route` and `engine` below change one field of them for a test.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from flightdeck.engine.commands import Accept, Continue, Discard, Pause, Retry
from flightdeck.engine.model import ChildStatus
from flightdeck.engine.records.reader import StoreReader
from realcli import (
    CLIS,
    engine_for,
    finished,
    gate_opened,
    goal,
    in_its_tool,
    markers,
    project,
    route,
    row,
    tagged,
    transcript,
)

from agentserver import AgentServer
from helpers import HANG_S, until


def stopped_states(batch_id: str) -> set[str]:
    """The state letter of every process of the batch's children and their tools' markers."""
    pids = [p for ps in tagged(batch_id).values() for p in ps] + markers()
    states = set()
    for pid in pids:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        states.add(stat[stat.rfind(")") + 2])
    return states


@pytest.mark.parametrize("cli", CLIS)
def test_live_figures_while_in_a_tool(tmp_path: Path, server: AgentServer, cli: str) -> None:
    """The row shows the CLI's current tool, its calls and last activity as they happen."""
    repo, env = project(tmp_path, cli, server)
    with in_its_tool(tmp_path, repo, env) as eng:
        until(lambda: row(eng).activity.current_tool is not None, what="its current tool")
        live = row(eng).activity
        assert live.tool_started_ts is not None and live.last_activity_ts is not None
        assert live.api_calls >= 1, live
        done, _ = gate_opened(tmp_path, eng)
    assert done.status is ChildStatus.COMPLETED, done.error
    assert done.activity.current_tool is None
    # Claude Code counts each call; Codex reports one per turn.
    calls = 2 if cli == "claude" else 1
    assert done.activity.api_calls == calls and done.activity.tool_calls == 1, done.activity
    assert done.cost_usd is not None and done.cost_usd > 0


def test_a_child_being_stopped_shows_stopping_until_it_has_ended(
    tmp_path: Path, server: AgentServer
) -> None:
    # Seen stopping Claude Code in a tool: its row read `tool: Bash 25s` after the stop was
    # confirmed, then `thinking` (the tool result its SIGTERM made), never `stopping`.
    repo, env = project(tmp_path, "claude", server)
    with in_its_tool(tmp_path, repo, env, "--tree") as eng:  # its tool ignores SIGTERM
        until(lambda: bool(markers()), what="its tool's grandchild")
        eng.stop(["t0"])
        seen: list[tuple[str | None, str]] = []

        def ended() -> bool:
            now = row(eng)
            if not now.status.terminal:
                seen.append((now.activity.current_tool, now.activity.text))
            return now.status.terminal

        until(ended, HANG_S, every=0.002, what="stopped")
    assert ("Bash", "stopping") not in seen  # the tool the stop ends is not what it shows
    assert (None, "stopping") in seen, seen
    after = seen[seen.index((None, "stopping")) :]
    assert set(after) == {(None, "stopping")}, after  # nor anything it prints as it dies


@pytest.mark.parametrize("cli", CLIS)
def test_pause_suspends_the_tree_and_continue_resumes_it(
    tmp_path: Path, server: AgentServer, cli: str
) -> None:
    repo, env = project(tmp_path, cli, server)
    try:
        with in_its_tool(tmp_path, repo, env, "--tree") as eng:
            until(lambda: bool(markers()), what="its tool's grandchild")
            eng.send(Pause(("t0",)))
            until(lambda: row(eng).status is ChildStatus.PAUSED, what="paused")
            assert stopped_states(eng.batch_id) == {"T"}, stopped_states(eng.batch_id)
            (tmp_path / "gate").touch()
            time.sleep(1.0)  # suspended: its tool does not see the gate
            assert row(eng).status is ChildStatus.PAUSED
            eng.send(Continue(("t0",)))
            until(lambda: row(eng).status.terminal, timeout=120, what="ended once continued")
            done = row(eng)
            assert eng.wait(HANG_S)
    finally:
        for pid in markers():
            os.kill(pid, 9)
    assert done.status is ChildStatus.COMPLETED, done.error
    assert "gate open" in Path(done.transcript).read_text()


@pytest.mark.parametrize("cli", CLIS)
@pytest.mark.parametrize("mode", ["worktree", "copy"])
def test_changes_are_kept_then_merged_or_discarded(
    tmp_path: Path, server: AgentServer, cli: str, mode: str
) -> None:
    """A child that changed its workspace keeps it until merged or discarded; one that
    changed nothing has its workspace removed when it ends."""
    repo, env = project(tmp_path, cli, server)
    route(tmp_path, workspace=mode)
    current = ["git", "-C", str(repo), "branch", "--show-current"]
    branch = subprocess.run(current, capture_output=True, text=True).stdout.strip()
    goals = [
        goal(tmp_path, "t0").replace("[tool: ", "[tool: echo made > made.txt && "),
        goal(tmp_path, "t1").replace("[tool: ", "[tool: echo made > gone.txt && "),
        goal(tmp_path, "t2"),
    ]
    (tmp_path / "gate").touch()
    eng = engine_for(tmp_path, repo, env, goals)
    try:
        assert eng.wait(120)
        rows = {n: row(eng, n) for n in ("t0", "t1", "t2")}
        for r in rows.values():
            assert r.status is ChildStatus.COMPLETED, (r.id, r.error)
        assert rows["t2"].changes is None
        assert not (tmp_path / "state" / "batches" / eng.batch_id / "workspaces" / "t2").exists()
        for n, name in (("t0", "made.txt"), ("t1", "gone.txt")):
            changes = rows[n].changes
            assert changes is not None and changes.pending, (n, changes)
            assert [f.path for f in changes.files] == [name]
            assert (Path(changes.workspace) / name).is_file()
        assert not (repo / "made.txt").exists()
        eng.send(Discard(("t1",)))
        until(lambda: not row(eng, "t1").changes.pending, what="discarded")  # type: ignore[union-attr]
        assert not Path(rows["t1"].changes.workspace).exists()  # type: ignore[union-attr]
        if mode == "worktree":
            eng.send(Accept(("t0",), into=branch))
            until(lambda: not row(eng, "t0").changes.pending, what="merged")  # type: ignore[union-attr]
            assert not Path(rows["t0"].changes.workspace).exists()  # type: ignore[union-attr]
    finally:
        eng.close()
    if mode == "worktree":
        show = ["git", "-C", str(repo), "show", f"{branch}:made.txt"]
        assert subprocess.run(show, capture_output=True, text=True).stdout == "made\n"
    assert not (repo / "gone.txt").exists()


@pytest.mark.parametrize("cli", CLIS)
def test_a_fresh_retry_runs_the_argv_again(tmp_path: Path, server: AgentServer, cli: str) -> None:
    repo, env = project(tmp_path, cli, server)
    with in_its_tool(tmp_path, repo, env) as eng:
        eng.stop(["t0"])
        assert eng.wait(HANG_S)
        assert row(eng).status is ChildStatus.STOPPED
        (tmp_path / "gate").touch()
        eng.send(Retry(("t0",)))
        done, text = finished(eng)
    assert done.status is ChildStatus.COMPLETED, done.error
    assert done.attempt == 2 and done.result is not None and done.result.startswith("done: task")
    runs = [line for line in text.splitlines() if "engine    │ run: " in line]
    assert len(runs) == 2 and "resume" not in runs[1], runs


@pytest.mark.parametrize("cli", CLIS)
def test_the_cli_failing_is_failed_with_its_own_words(
    tmp_path: Path, server: AgentServer, cli: str
) -> None:
    repo, env = project(tmp_path, cli, server)
    goals = ["task t0 [fail: 400]", "task t1 [429: 2]"]
    if cli == "codex":  # Claude Code waits out 10 retries, minutes of backoff
        goals.append("task t2 [fail: 429]")
    eng = engine_for(tmp_path, repo, env, goals)
    try:
        assert eng.wait(180)
        failed, retried = row(eng, "t0"), row(eng, "t1")
        gave_up = row(eng, "t2") if cli == "codex" else None
        text = transcript(eng, "t1")
    finally:
        eng.close()
    assert failed.status is ChildStatus.FAILED, failed
    assert failed.error is not None and "loopback refuses this one" in failed.error, failed.error
    assert "exit status" not in failed.error, failed.error
    if gave_up is not None:
        assert gave_up.status is ChildStatus.FAILED, gave_up
        assert gave_up.error is not None and "429" in gave_up.error, gave_up.error
    assert retried.status is ChildStatus.COMPLETED, retried.error
    assert retried.activity.retries >= 1, retried.activity
    assert "retry" in text.lower(), text


@pytest.mark.parametrize("cli", CLIS)
def test_a_steered_cli_still_edits_its_workspace(
    tmp_path: Path, server: AgentServer, cli: str
) -> None:
    """The steer asks for an edit: Claude Code makes it in the running turn, Codex in the
    resumed session, which must keep the route's `workspace-write` sandbox (a `codex exec
    resume` without it runs read-only, and the edit fails)."""
    repo, env = project(tmp_path, cli, server)
    with in_its_tool(tmp_path, repo, env) as eng:
        eng.steer(["t0"], "also this [tool: echo steered > steered.txt]")
        if cli == "claude":
            until(lambda: "queued by the CLI" in transcript(eng, "t0"), what="the steer read")
        done, text = gate_opened(tmp_path, eng)
    assert done.status is ChildStatus.COMPLETED, done.error
    (receipt,) = done.steers
    assert receipt.state.value == "delivered", receipt
    assert done.changes is not None, text
    assert [f.path for f in done.changes.files] == ["steered.txt"], text


@pytest.mark.parametrize("cli", CLIS)
def test_diff_merge_and_discard_from_the_command_line(
    tmp_path: Path, server: AgentServer, cli: str
) -> None:
    """A headless batch of two children that each add a file ends; then `flightdeck diff`,
    `merge --into` and `discard`, run as a user runs them, with no owner."""
    repo, env = project(tmp_path, cli, server)
    current = ["git", "-C", str(repo), "branch", "--show-current"]
    branch = subprocess.run(current, capture_output=True, text=True).stdout.strip()
    tasks = {
        "batch": {"name": "agents", "workspace": str(repo)},
        "tasks": [
            {"id": "c1", "goal": "task c1 [tool: echo one > one.txt]"},
            {"id": "c2", "goal": "task c2 [tool: echo two > two.txt]"},
        ],
    }
    (tmp_path / "tasks.yaml").write_text(json.dumps(tasks))
    full = {**os.environ, **env, "NO_COLOR": "1"}

    def flightdeck(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "flightdeck.tui.cli", *args]
        return subprocess.run(command, cwd=tmp_path, env=full, capture_output=True, text=True)

    run = flightdeck("run", "tasks.yaml", "--headless")
    assert run.returncode == 0, run.stdout + run.stderr
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
        batch_id = reader.latest_batch_id()
    assert batch_id is not None
    diff = flightdeck("diff", batch_id, "c1")
    assert diff.returncode == 0 and "+one" in diff.stdout, diff
    merged = flightdeck("merge", batch_id, "c1", "--into", branch)
    assert merged.returncode == 0 and f"accepted c1 into {branch}" in merged.stdout, merged
    show = ["git", "-C", str(repo), "show", f"{branch}:one.txt"]
    assert subprocess.run(show, capture_output=True, text=True).stdout == "one\n"
    dropped = flightdeck("discard", batch_id, "c2")
    assert dropped.returncode == 0, dropped
    workspaces = tmp_path / "state" / "batches" / batch_id / "workspaces"
    assert not (workspaces / "c1").exists() and not (workspaces / "c2").exists()
    gone = flightdeck("diff", batch_id, "c2")
    assert gone.returncode == 1, gone


@pytest.mark.parametrize("cli", CLIS)
def test_shared_edits_the_workspace_and_keep_worktrees_keeps_them(
    tmp_path: Path, server: AgentServer, cli: str
) -> None:
    """`shared`: the CLI edits the batch workspace itself (no changes to decide). A worktree
    route with `keep_worktrees = true` keeps an unchanged child's worktree."""
    repo, env = project(tmp_path, cli, server)
    route(tmp_path, workspace="shared")
    eng = engine_for(tmp_path, repo, env, ["task t0 [tool: echo shared > shared.txt]"])
    try:
        assert eng.wait(120)
        shared = row(eng)
    finally:
        eng.close()
    assert shared.status is ChildStatus.COMPLETED and shared.changes is None, shared
    assert (repo / "shared.txt").read_text() == "shared\n"
    route(tmp_path, workspace="worktree", keep_worktrees=True)
    eng = engine_for(tmp_path, repo, env, ["task t1"])
    try:
        assert eng.wait(120)
        kept = row(eng)
        batch = eng.batch_id
    finally:
        eng.close()
    assert kept.status is ChildStatus.COMPLETED, kept.error
    assert (tmp_path / "state" / "batches" / batch / "workspaces" / "t0" / ".git").exists()
