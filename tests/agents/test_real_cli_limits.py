"""docs/agents.md's claims against the real Claude Code and Codex, continued: the environment,
`timeout_s` and stalls (a tool or a model call that hangs), pause and the clock, a CLI that
fails to start, is not installed or prints what its format is not, and what its tools leave
running (realcli.py's helpers)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from flightdeck.engine.commands import Continue, Pause, Retry
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.model import ChildStatus
from realcli import (
    BIN,
    CLIS,
    engine,
    engine_for,
    engine_on,
    finished,
    gate_opened,
    goal,
    in_its_tool,
    in_tool,
    markers,
    project,
    route,
    row,
    tagged,
    version,
)

from agentserver import DUMMY_KEY, AgentServer
from helpers import HANG_S, SkipClock, until, watched


@pytest.mark.parametrize("cli", CLIS)
def test_the_key_and_passed_values_are_redacted(
    tmp_path: Path, server: AgentServer, cli: str
) -> None:
    """The tool prints the key and a value passed by env_pass: the transcript shows neither."""
    repo, env = project(tmp_path, cli, server)
    key = "ANTHROPIC_API_KEY" if cli == "claude" else "LOOPBACK_KEY"
    config = tmp_path / "flightdeck.toml"
    config.write_text(config.read_text().replace("env_pass = [", 'env_pass = ["MY_SECRET", '))
    if cli == "codex":
        route(tmp_path, env_pass=["MY_SECRET"])
    env["MY_SECRET"] = "hush-hush-0123"
    env["NOT_PASSED"] = "not-passed-4567"
    command = f"echo $MY_SECRET $NOT_PASSED ${key} FLIGHTDECK_CHILD=$FLIGHTDECK_CHILD"
    eng = engine_for(tmp_path, repo, env, [f"task t0 [tool: {command}]"])
    try:
        done, text = finished(eng)
    finally:
        eng.close()
    assert done.status is ChildStatus.COMPLETED, done.error
    assert f"FLIGHTDECK_CHILD={eng.batch_id}/t0" in text, text
    assert "not-passed-4567" not in text
    if cli == "claude":  # Codex's shell drops *KEY*/*SECRET* variables itself
        assert text.count("[REDACTED]") == 2, text
    assert "hush-hush-0123" not in text and DUMMY_KEY not in text


@pytest.mark.parametrize("cli", CLIS)
def test_timeout_and_stall_end_a_cli_that_hangs(
    tmp_path: Path, server: AgentServer, cli: str
) -> None:
    """Its gate never opens: a task's timeout_s times it out, `tool_stall_after_s` stalls it;
    either way its whole tree is ended."""
    repo, env = project(tmp_path, cli, server)
    engine(tmp_path, stall_after_s=3, tool_stall_after_s=3)
    tasks = (
        Task(id="t0", goal=goal(tmp_path, "t0", "--tree"), seq=0, timeout_s=2.0),
        Task(id="t1", goal=goal(tmp_path, "t1"), seq=1),
    )
    eng = engine_on(tmp_path, repo, env, tasks)
    try:
        assert eng.wait(120)
        timed, stalled = row(eng, "t0"), row(eng, "t1")
    finally:
        eng.close()
    assert timed.status is ChildStatus.TIMED_OUT, (timed.status, timed.error)
    assert stalled.status is ChildStatus.STALLED, (stalled.status, stalled.error)
    assert markers() == [] and tagged(eng.batch_id) == {}


@pytest.mark.parametrize("cli", CLIS)
def test_a_paused_cli_never_stalls_and_a_stop_ends_it_paused(
    tmp_path: Path, server: AgentServer, cli: str
) -> None:
    """Paused longer than its stall limits it is not stalled, nor once continued; paused
    again, a stop ends it and its whole tree (SIGCONT, SIGTERM, the grace, SIGKILL)."""
    repo, env = project(tmp_path, cli, server)
    engine(tmp_path, stall_after_s=3, tool_stall_after_s=3)
    clock = SkipClock()
    with in_its_tool(tmp_path, repo, env, "--tree", clock=clock) as eng:
        until(lambda: bool(markers()), what="its tool's grandchild")
        eng.send(Pause(("t0",)))
        until(lambda: row(eng).status is ChildStatus.PAUSED, what="paused")
        clock.skip(10)  # paused for longer than both limits
        watched(eng)
        assert row(eng).status is ChildStatus.PAUSED
        eng.send(Continue(("t0",)))
        until(lambda: row(eng).status is ChildStatus.RUNNING, what="running again")
        watched(eng)  # its silence before the pause counts for nothing now
        assert row(eng).status is ChildStatus.RUNNING, row(eng).error
        eng.send(Pause(("t0",)))
        until(lambda: row(eng).status is ChildStatus.PAUSED, what="paused again")
        t0 = time.monotonic()
        eng.stop(["t0"])
        until(lambda: row(eng).status.terminal, what="stopped")
        stop_s = time.monotonic() - t0
        done, _ = finished(eng, 30)
    assert done.status is ChildStatus.STOPPED, (done.status, done.error)
    assert stop_s < 3, stop_s
    assert markers() == [] and tagged(eng.batch_id) == {}


@pytest.mark.parametrize("cli", CLIS)
def test_a_cli_waiting_out_retries_is_never_stalled(
    tmp_path: Path, server: AgentServer, cli: str
) -> None:
    """Its backoffs (Claude Code's 4th is 4.4 s) outlast `stall_after_s`: held, not stalled."""
    repo, env = project(tmp_path, cli, server)
    engine(tmp_path, stall_after_s=2)
    eng = engine_for(tmp_path, repo, env, ["task t0 [429: 4]"])
    try:
        assert eng.wait(120)
        done = row(eng)
    finally:
        eng.close()
    assert done.status is ChildStatus.COMPLETED, (done.status, done.error)
    assert done.activity.retries >= 4, done.activity


@pytest.mark.parametrize("cli", CLIS)
def test_a_cli_that_exits_non_zero_fails_with_its_stderr(
    tmp_path: Path, server: AgentServer, cli: str
) -> None:
    repo, env = project(tmp_path, cli, server)
    config = tmp_path / "flightdeck.toml"
    flag = '"--no-such-flag", '
    config.write_text(
        re.sub(r'^argv = \["([^"]*)", ', rf'argv = ["\1", {flag}', config.read_text(), flags=re.M)
    )
    eng = engine_for(tmp_path, repo, env, ["task t0"])
    try:
        assert eng.wait(60)
        done = row(eng)
    finally:
        eng.close()
    assert done.status is ChildStatus.FAILED, done
    assert done.error is not None and "exit" in done.error and "no-such-flag" in done.error, (
        done.error
    )


@pytest.mark.parametrize("cli", CLIS)
def test_a_cli_not_installed_is_refused_before_anything_starts(
    tmp_path: Path, server: AgentServer, cli: str
) -> None:
    repo, env = project(tmp_path, cli, server)
    config = tmp_path / "flightdeck.toml"
    config.write_text(
        re.sub(r'^argv = \["[^"]*"', 'argv = ["no-such-cli"', config.read_text(), flags=re.M)
    )
    (tmp_path / "tasks.yaml").write_text(
        json.dumps(
            {"batch": {"name": "x", "workspace": str(repo)}, "tasks": [{"id": "t0", "goal": "g"}]}
        )
    )
    out = subprocess.run(
        [sys.executable, "-m", "flightdeck.tui.cli", "run", "tasks.yaml", "--headless"],
        cwd=tmp_path,
        env={**os.environ, **env, "NO_COLOR": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out
    assert "flightdeck.toml:" in out.stderr and "no-such-cli" in out.stderr, out.stderr
    assert not (tmp_path / "state" / "batches").exists() or not any(
        (tmp_path / "state" / "batches").iterdir()
    )


DAEMON = (
    "import signal, subprocess, sys; subprocess.Popen([sys.executable, '-c', "
    "'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(10**6)', "
    "'flightdeck-tree-marker'], start_new_session=True); print('daemon started')"
)


@pytest.mark.parametrize("cli", CLIS)
def test_descendants_left_when_the_cli_exits_are_ended(
    tmp_path: Path, server: AgentServer, cli: str
) -> None:
    """Its tool starts a daemon (its own session, deaf to SIGTERM) and returns: the CLI ends
    well, and the daemon is ended with it."""
    repo, env = project(tmp_path, cli, server)
    (tmp_path / "daemon.py").write_text(DAEMON)
    eng = engine_for(
        tmp_path, repo, env, [f"task t0 [tool: {sys.executable} {tmp_path / 'daemon.py'}]"]
    )
    try:
        assert eng.wait(120)
        done = row(eng)
    finally:
        eng.close()
    left = markers()
    for pid in left:
        os.kill(pid, 9)
    assert done.status is ChildStatus.COMPLETED, done.error
    assert "daemon started" in Path(done.transcript).read_text()
    assert left == [] and tagged(eng.batch_id) == {}


@pytest.mark.parametrize("cli", CLIS)
def test_a_retry_that_continues_works_on_in_the_worktree(
    tmp_path: Path, server: AgentServer, cli: str
) -> None:
    """Stopped with a change made: a fresh retry is refused until it is decided; `--continue`
    works on in the worktree as it was left."""
    repo, env = project(tmp_path, cli, server)
    eng = engine_for(
        tmp_path,
        repo,
        env,
        [goal(tmp_path, "t0").replace("[tool: ", "[tool: echo made > made.txt && ")],
    )
    try:
        made = tmp_path / "state" / "batches" / eng.batch_id / "workspaces" / "t0" / "made.txt"
        until(lambda: in_tool(eng, ["t0"]) and made.exists(), what="its change made")
        eng.stop(["t0"])
        assert eng.wait(HANG_S)
        stopped = row(eng)
        assert stopped.changes is not None and stopped.changes.pending, stopped
        with pytest.raises(Exception, match="changes not yet accepted"):
            eng.send(Retry(("t0",)))
        (tmp_path / "gate").touch()
        eng.send(Retry(("t0",), resume=True))
        assert eng.wait(120)
        done = row(eng)
    finally:
        eng.close()
    assert done.status is ChildStatus.COMPLETED, done.error
    assert done.changes is not None and done.changes.workspace == stopped.changes.workspace
    assert [f.path for f in done.changes.files] == ["made.txt"]
    assert (Path(done.changes.workspace) / "made.txt").read_text() == "made\n"


@pytest.mark.parametrize("cli", CLIS)
def test_an_unset_api_key_is_refused(tmp_path: Path, server: AgentServer, cli: str) -> None:
    """The key `api_key_env` names must be set: an error at its line, before anything runs."""
    from flightdeck.engine.errors import ConfigError

    repo, env = project(tmp_path, cli, server)
    key = "ANTHROPIC_API_KEY" if cli == "claude" else "LOOPBACK_KEY"
    env.pop(key)
    with pytest.raises(
        ConfigError, match=rf"flightdeck.toml:\d+: routes\.\S+\.api_key_env: .*{key}"
    ):
        engine_for(tmp_path, repo, env, ["task t0"])
    assert tagged_any(tmp_path) == []


def tagged_any(tmp_path: Path) -> list[Path]:
    """Batch folders made under the test's state folder (none: nothing started)."""
    batches = tmp_path / "state" / "batches"
    return list(batches.iterdir()) if batches.exists() else []


@pytest.mark.parametrize("cli", CLIS)
def test_a_cli_whose_model_hangs_is_stalled_or_timed_out(tmp_path: Path, cli: str) -> None:
    """The server never answers its first call: silent for `stall_after_s` it is stalled; a
    task's `timeout_s` shorter than that times it out. Either way nothing of it is left."""
    with AgentServer() as server:  # its own: the stalls it releases at the end are this test's
        repo, env = project(tmp_path, cli, server)
        _hung(tmp_path, cli, repo, env, server)


def _hung(tmp_path: Path, cli: str, repo: Path, env: dict[str, str], server: AgentServer) -> None:
    engine(tmp_path, stall_after_s=4)
    tasks = (
        Task(id="t0", goal="task t0 [hang: 1]", seq=0),
        Task(id="t1", goal="task t1 [hang: 1]", seq=1, timeout_s=2.0),
    )
    eng = engine_on(tmp_path, repo, env, tasks)
    try:
        assert eng.wait(60)
        stalled, timed = row(eng, "t0"), row(eng, "t1")
    finally:
        eng.close()
        server.release()
    assert stalled.status is ChildStatus.STALLED, (stalled.status, stalled.error)
    assert timed.status is ChildStatus.TIMED_OUT, (timed.status, timed.error)
    assert tagged(eng.batch_id) == {}


@pytest.mark.parametrize("cli", CLIS)
def test_a_cli_printing_what_its_format_is_not_is_shown_and_ends_by_its_exit(
    tmp_path: Path, server: AgentServer, cli: str
) -> None:
    """The route's format, the CLI run to print plain text (`--version`) and a line of JSON no
    reader knows: each line is shown, nothing is fatal, and exit 0 is `completed` with the
    output lines as the result."""
    repo, env = project(tmp_path, cli, server)
    config = tmp_path / "flightdeck.toml"
    text = config.read_text()
    script = tmp_path / "garbage.sh"
    script.write_text(
        f'#!/bin/sh\n"{BIN / cli}" --version\necho \'{{"type": "from_the_future", "x": 1}}\'\n'
        "printf '\\x00\\x1b[31mnot json\\n'\n"
    )
    script.chmod(0o755)
    argv = f'argv = ["{script}", "--replay-user-messages"]'  # what the claude route requires
    text = re.sub(r"^argv = \[.*$", argv, text, flags=re.M)
    config.write_text(text)
    eng = engine_for(tmp_path, repo, env, ["task t0"])
    try:
        done, shown = finished(eng, 60)
    finally:
        eng.close()
    assert done.status is ChildStatus.COMPLETED, (done.error, shown)
    assert done.result is not None and version(cli) in done.result, done.result
    assert "from_the_future" in shown and "not json" in shown, shown
    assert "\x1b" not in shown and "\x00" not in shown


@pytest.mark.parametrize("cli", CLIS)
def test_time_paused_counts_toward_no_timeout(
    tmp_path: Path, server: AgentServer, cli: str
) -> None:
    repo, env = project(tmp_path, cli, server)
    task = Task(id="t0", goal=goal(tmp_path, "t0"), seq=0, timeout_s=6.0)
    clock = SkipClock()
    eng = engine_on(tmp_path, repo, env, (task,), clock)
    try:
        until(lambda: in_tool(eng, ["t0"]), what="the child inside its tool")
        eng.send(Pause(("t0",)))
        until(lambda: row(eng).status is ChildStatus.PAUSED, what="paused")
        clock.skip(10)  # paused for longer than its timeout
        watched(eng)
        eng.send(Continue(("t0",)))
        done, _ = gate_opened(tmp_path, eng, 60)
    finally:
        eng.close()
    assert done.status is ChildStatus.COMPLETED, (done.status, done.error)


@pytest.mark.parametrize("cli", CLIS)
def test_a_stop_needs_no_sigkill_when_the_tool_obeys_sigterm(
    tmp_path: Path, server: AgentServer, cli: str, figures: list[dict[str, Any]]
) -> None:
    """The documented route's grace (kill_grace_s 5, the default): the CLI and a tool that
    obeys SIGTERM end on it, without waiting the grace out (Claude Code takes 0.2 to
    1.6 s to exit on SIGTERM, Codex about 0.1 s)."""
    repo, env = project(tmp_path, cli, server)
    config = tmp_path / "flightdeck.toml"
    config.write_text(config.read_text().replace("kill_grace_s = 1\n", ""))
    with in_its_tool(tmp_path, repo, env) as eng:
        t0 = time.monotonic()
        eng.stop(["t0"])
        until(lambda: row(eng).status.terminal, what="stopped")
        stop_s = time.monotonic() - t0
        done, text = finished(eng, 30)
    assert done.status is ChildStatus.STOPPED
    assert stop_s < 4.0 and "SIGKILL sent" not in text, (stop_s, text)
    assert tagged(eng.batch_id) == {}
    figures.append({"cli": cli, "test": "stop, tool obeys SIGTERM", "stop_s": round(stop_s, 2)})


def test_claude_waiting_for_its_background_command_is_not_stalled(
    tmp_path: Path, server: AgentServer
) -> None:
    """Its command outlives the Bash tool's timeout (shortened here to 2 s): moved to the
    background, the turn ends, and Claude Code waits, silent, for the command: longer than
    `stall_after_s`, inside a tool (docs/agents.md), not stalled."""
    repo, env = project(tmp_path, "claude", server)
    env["BASH_DEFAULT_TIMEOUT_MS"] = "2000"
    route(
        tmp_path,
        env_pass=[*server.claude_env().keys() - {"ANTHROPIC_API_KEY"}, "BASH_DEFAULT_TIMEOUT_MS"],
    )
    # Past Claude Code's start under load (over 2 s at load 8): the silence judged is the
    # skipped one, not the start's.
    engine(tmp_path, stall_after_s=30)
    clock = SkipClock()
    eng = engine_for(tmp_path, repo, env, [goal(tmp_path, "t0")], clock)
    try:
        until(lambda: row(eng).activity.current_tool == "background command (1)", timeout=120)
        clock.skip(60)  # silent for longer than stall_after_s
        watched(eng)
        assert row(eng).status is ChildStatus.RUNNING, row(eng).error
        done, text = gate_opened(tmp_path, eng)
    finally:
        eng.close()
    assert done.status is ChildStatus.COMPLETED, (done.status, done.error, text)
    assert "moved to the background" in text
