"""The real Claude Code and Codex, unmodified, as flightdeck children (`make test-agents`).

`make test-agents` installs the current CLIs from npm into .cache-agents/ and names their
folder in FLIGHTDECK_AGENTS_BIN; each runs with the argv of examples/agents/flightdeck.toml (the
documented one: Claude Code gets `--allowedTools Bash` besides, so its tools run unasked, and
Codex the `-c` flags naming the server as its provider) against the loopback server
(tests/agentserver.py), with dummy keys: nothing leaves this machine. The goals' directives
(`[tool: ...]`) make each CLI run a tool that holds its turn open until the test opens a gate.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import struct
import subprocess
import sys
import termios
import time
import tomllib
import uuid
from pathlib import Path
from typing import Any

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.child.cliinput import user_turn
from flightdeck.engine.child.command import RETRY_MESSAGE
from flightdeck.engine.commands import Retry
from flightdeck.engine.inputs.settings import load_settings
from flightdeck.engine.inputs.tasks import Batch, Task
from flightdeck.engine.model import ChildStatus, SteerReceipt, SteerState
from flightdeck.engine.records.reader import StoreReader

from agentserver import DUMMY_KEY, RESPONSES_PATH, AgentServer
from helpers import until
from loopback import ANTHROPIC_PATH

BIN = Path(os.environ.get("FLIGHTDECK_AGENTS_BIN", ".cache-agents/node_modules/.bin")).resolve()
ROOT = Path(__file__).resolve().parent.parent.parent
EXAMPLE = tomllib.loads((ROOT / "examples" / "agents" / "flightdeck.toml").read_text())
GATE = Path(__file__).with_name("gate.py")
CLIS = ["claude", "codex"]
ROUTE = {"claude": "claude-code", "codex": "codex"}


def version(cli: str) -> str:
    out = subprocess.run([str(BIN / cli), "--version"], capture_output=True, text=True, timeout=60)
    words = out.stdout.split()
    return words[-1] if cli == "codex" else words[0]


def toml_value(value: Any) -> str:
    return json.dumps(value)  # strings, lists of strings and numbers read the same in TOML


def project(tmp_path: Path, cli: str, server: AgentServer) -> tuple[Path, dict[str, str]]:
    """A git workspace and a flightdeck.toml holding the documented route; the environment."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t"}
    git |= {"GIT_COMMITTER_EMAIL": "t@t"}
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "start"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, env={**os.environ, **git})
    route = dict(EXAMPLE["routes"][ROUTE[cli]])
    argv = [str(BIN / cli), *route["argv"][1:]]
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path / "home")}
    (tmp_path / "home").mkdir()
    if cli == "claude":
        argv += ["--allowedTools", "Bash"]
        env |= server.claude_env()
        route["env_pass"] = [k for k in server.claude_env() if k != "ANTHROPIC_API_KEY"]
    else:
        # Literal braces in an argv template are doubled ({name} is a placeholder).
        config = [a.replace("{", "{{").replace("}", "}}") for a in server.codex_config_args()]
        argv[-1:-1] = config
        route["resume_argv"] = [str(BIN / cli), *route["resume_argv"][1:]]
        route["resume_argv"][-1:-1] = config
        route["api_key_env"] = "LOOPBACK_KEY"
        env["LOOPBACK_KEY"] = DUMMY_KEY
    route["argv"] = argv
    if cli == "claude":
        route["resume_argv"] = [str(BIN / cli), *route["resume_argv"][1:], "--allowedTools", "Bash"]
    route["kill_grace_s"] = 1  # its tool ignores SIGTERM: the stop takes the grace
    lines = [f"{k} = {toml_value(v)}" for k, v in route.items() if not isinstance(v, dict)]
    price = route.get("price")
    if price:
        lines.append("price = { " + ", ".join(f"{k} = {v}" for k, v in price.items()) + " }")
    text = '[engine]\nmax_concurrent = 8\nstall_after_s = 120\nstate_dir = "state"\n'
    text += f'default_route = "{ROUTE[cli]}"\n\n[routes.{ROUTE[cli]}]\n' + "\n".join(lines) + "\n"
    (tmp_path / "flightdeck.toml").write_text(text)
    return repo, env


def goal(tmp_path: Path, name: str, *extra: str) -> str:
    command = " ".join([sys.executable, str(GATE), str(tmp_path / "gate"), *extra])
    return f"task {name} [tool: {command}]"


def engine_for(tmp_path: Path, repo: Path, env: dict[str, str], goals: list[str]) -> Engine:
    tasks = tuple(Task(id=f"t{i}", goal=g, seq=i) for i, g in enumerate(goals))
    return engine_on(tmp_path, repo, env, tasks)


def engine_on(tmp_path: Path, repo: Path, env: dict[str, str], tasks: tuple[Task, ...]) -> Engine:
    """An engine started on these tasks (engine_for's, for fields a goal does not set)."""
    engine = Engine(
        Batch(name="agents", tasks=tasks, workspace=repo),
        load_settings(tmp_path / "flightdeck.toml"),
        state_dir=tmp_path / "state",
        env=env,
    )
    engine.start()
    return engine


def transcript(engine: Engine, child: str) -> str:
    engine.flush(1.0)
    row = engine.snapshot().child(child)
    assert row is not None
    path = Path(row.transcript)
    return path.read_text() if path.exists() else ""


def in_tool(engine: Engine, children: list[str]) -> bool:
    return all(called(transcript(engine, c)) for c in children)


def called(text: str) -> bool:
    """The CLI has called its tool (the goal names it too: its line does not count)."""
    return any(
        line.split("│", 1)[0].endswith("tool-call ")
        for line in text.splitlines()
        if "gate.py" in line
    )


def tagged(batch_id: str) -> dict[str, list[int]]:
    """Per child of the batch, the root processes carrying its tag (read from /proc): the CLI,
    or a run of it started twice, never its own subprocesses."""
    found: dict[str, list[int]] = {}
    tags: dict[int, str] = {}
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            stat = Path(f"/proc/{entry}/stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if fields[0] in (b"Z", b"X") or b"(sleep)" in stat:  # the holder of its input aside
            continue
        for item in environ:
            if item.startswith(f"FLIGHTDECK_CHILD={batch_id}/".encode()):
                tags[int(entry)] = item.split(b"/", 1)[1].decode()
                parents[int(entry)] = int(fields[1])
    for pid, child in tags.items():
        if tags.get(parents[pid]) != child:  # its parent is not of the same child: a root
            found.setdefault(child, []).append(pid)
    return found


@pytest.mark.parametrize("cli", CLIS)
def test_children_complete_with_transcripts_and_live_usage(
    tmp_path: Path, server: AgentServer, cli: str, figures: list[dict[str, Any]]
) -> None:
    repo, env = project(tmp_path, cli, server)
    names = [f"t{i}" for i in range(4)]
    engine = engine_for(tmp_path, repo, env, [goal(tmp_path, n) for n in names])
    try:
        until(lambda: in_tool(engine, names), what="every child inside its tool")
        live = [engine.snapshot().child(n).usage.total for n in names]  # type: ignore[union-attr]
        (tmp_path / "gate").touch()
        assert engine.wait(120)
        snap = engine.snapshot()
    finally:
        engine.close()
    for row in snap.children:
        assert row.status is ChildStatus.COMPLETED, (row.id, row.error)
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


def transcript_file(path: str) -> str:
    return Path(path).read_text()


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
        assert engine.wait(30)
    finally:
        engine.close()
    assert engine.snapshot().child("t0").status is ChildStatus.STOPPED  # type: ignore[union-attr]
    assert markers() == [] and tagged(engine.batch_id) == {}, (markers(), roots)
    figures.append({"cli": cli, "test": "stop", "stop_s": round(stop_s, 2), "left": 0})


def markers() -> list[int]:
    out = subprocess.run(["pgrep", "-f", "flightdeck-tree-marker"], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


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


@pytest.mark.parametrize("cli", CLIS)
def test_a_killed_owner_is_resumed_with_no_doubles(
    tmp_path: Path, server: AgentServer, cli: str, figures: list[dict[str, Any]]
) -> None:
    repo, env = project(tmp_path, cli, server)
    names = ["t0", "t1"]
    tasks = {
        "batch": {"name": "agents", "workspace": str(repo)},
        "tasks": [{"id": name, "goal": goal(tmp_path, name)} for name in names],
    }
    (tmp_path / "tasks.yaml").write_text(json.dumps(tasks))  # JSON is YAML

    def flightdeck(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "flightdeck.tui.cli", *args],
            cwd=tmp_path,
            env={**os.environ, **env, "NO_COLOR": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    owner = flightdeck("run", "tasks.yaml", "--headless")
    db = tmp_path / "state" / "flightdeck.db"

    def started() -> bool:
        assert owner.poll() is None, owner.communicate()
        return db.is_file()

    until(started, what="the database")
    batch: list[str] = []
    until(lambda: bool(batch.extend(filter(None, [latest(db)])) or batch), what="the batch")
    batch_id = batch[0]
    logs = tmp_path / "state" / "batches" / batch_id
    # Killed mid-tool: each CLI has called its tool (its goal names the gate from the start).
    until(lambda: all(called(_read(logs / f"{n}.log")) for n in names), what="both in tools")
    before = tagged(batch_id)
    owner.send_signal(signal.SIGKILL)
    owner.communicate(timeout=30)
    assert sorted(before) == names and all(len(p) == 1 for p in before.values()), before
    doubles: list[dict[str, list[int]]] = []
    resume = flightdeck("resume", batch_id)
    until(lambda: all("adopted" in _read(logs / f"{n}.log") for n in names), what="adopted")
    for _ in range(20):  # sampled while both run under the new owner
        now = tagged(batch_id)
        doubles += [now] if any(len(p) > 1 for p in now.values()) else []
        time.sleep(0.05)
    (tmp_path / "gate").touch()
    out, err = resume.communicate(timeout=120)
    assert resume.returncode == 0, out + err
    assert "2 adopted" in out and doubles == []
    with StoreReader(db) as reader:
        rows = {r.id: r for r in reader.children(batch_id)}
    for name in names:
        assert rows[name].status is ChildStatus.COMPLETED, rows[name].error
        text = _read(logs / f"{name}.log")
        assert text.count("engine    │ run: ") == 1 and "gate open" in text
    assert tagged(batch_id) == {}
    figures.append({"cli": cli, "test": "kill -9 + resume", "adopted": 2, "doubles": 0})


def latest(db: Path) -> str | None:
    with StoreReader(db) as reader:
        return reader.latest_batch_id()


def _read(path: Path) -> str:
    return path.read_text() if path.exists() else ""


class Flightdeck:
    """`flightdeck ARGS` run in a project as a user runs it; `owner` the headless run."""

    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.folder, self.env = folder, {**os.environ, **env, "NO_COLOR": "1"}
        self.owner = self("run", "tasks.yaml", "--headless")

    def __call__(self, *args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "flightdeck.tui.cli", *args],
            cwd=self.folder,
            env=self.env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def owned_in_tool(
    tmp_path: Path, server: AgentServer, cli: str
) -> tuple[Flightdeck, Path, str, Path]:
    """A batch of one task (`t0`) on `cli` run headless, once the CLI is in its tool: the
    command, the database, the batch id and the child's transcript."""
    repo, env = project(tmp_path, cli, server)
    tasks = {
        "batch": {"name": "agents", "workspace": str(repo)},
        "tasks": [{"id": "t0", "goal": goal(tmp_path, "t0")}],
    }
    (tmp_path / "tasks.yaml").write_text(json.dumps(tasks))  # JSON is YAML
    flightdeck = Flightdeck(tmp_path, env)
    db = tmp_path / "state" / "flightdeck.db"
    until(lambda: db.is_file() and latest(db) is not None, what="the batch")
    batch_id = latest(db)
    assert batch_id is not None
    log = tmp_path / "state" / "batches" / batch_id / "t0.log"
    until(lambda: called(_read(log)), what="the CLI in its tool")
    return flightdeck, db, batch_id, log


def the_steers_once_done(
    tmp_path: Path, resume: subprocess.Popen[str], db: Path, batch_id: str
) -> tuple[SteerReceipt, ...]:
    """The gate opened: the resumed batch ends well, and `t0`'s steers' receipts."""
    (tmp_path / "gate").touch()
    out, err = resume.communicate(timeout=120)
    assert resume.returncode == 0, out + err
    with StoreReader(db) as reader:
        row = {r.id: r for r in reader.children(batch_id)}["t0"]
    assert row.status is ChildStatus.COMPLETED, row.error
    return row.steers


@pytest.mark.parametrize("cli", CLIS)
def test_a_steer_to_an_adopted_child_is_delivered(
    tmp_path: Path, server: AgentServer, cli: str
) -> None:
    """`steer` (at the next turn) to a CLI adopted by `resume`: Claude Code takes it on its
    reopened input, Codex by resuming its session once the adopted process ended well (its
    exit status is unknown to the adopter: its result says it ended well)."""
    flightdeck, db, batch_id, log = owned_in_tool(tmp_path, server, cli)
    owner = flightdeck.owner
    owner.send_signal(signal.SIGKILL)
    owner.communicate(timeout=30)
    resume = flightdeck("resume", batch_id)
    until(lambda: "adopted" in _read(log), what="adopted")
    steer = flightdeck("steer", batch_id, "t0", "-m", "also the docs")
    steer.communicate(timeout=60)
    # Claude Code: once it has read it (a gate opened before that ends the turn first).
    taken = "queued by the CLI: " if cli == "claude" else "steer (at next turn): "
    until(lambda: taken + "also the docs" in _read(log), what="the steer taken")
    (receipt,) = the_steers_once_done(tmp_path, resume, db, batch_id)
    assert receipt.state is SteerState.DELIVERED, receipt
    how = "into the running turn" if cli == "claude" else "by resuming the session"
    assert receipt.how == how
    assert tagged(batch_id) == {}


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
        assert engine.wait(30)  # its end committed: a retry before is "still ending"
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


def test_a_steer_the_dead_owner_wrote_is_not_written_again(
    tmp_path: Path, server: AgentServer
) -> None:
    """A steer Claude Code had read when its owner was killed is still queued in the store: the
    owner that adopts the CLI knows it by its uuid when the CLI names it, and never writes it
    again (it went into the running turn; a second copy was a second turn)."""
    flightdeck, db, batch_id, log = owned_in_tool(tmp_path, server, "claude")
    owner = flightdeck.owner
    steer = flightdeck("steer", batch_id, "t0", "-m", "also the docs")  # waits: not waited on
    until(lambda: "queued by the CLI: also the docs" in _read(log), what="the steer read")
    owner.send_signal(signal.SIGKILL)
    owner.communicate(timeout=30)
    steer.communicate(timeout=60)  # it gives up on the dead owner
    resume = flightdeck("resume", batch_id)
    until(lambda: "adopted" in _read(log), what="adopted")
    (receipt,) = the_steers_once_done(tmp_path, resume, db, batch_id)
    assert (receipt.state, receipt.how) == (SteerState.DELIVERED, "into the running turn")
    assert _read(log).count("sent to its input: also the docs") == 1
    assert tagged(batch_id) == {}


def test_a_steer_the_dead_owner_wrote_unread_is_not_written_again(
    tmp_path: Path, server: AgentServer
) -> None:
    """A steer written to Claude Code's input that the CLI had not read when its owner was
    killed (the CLI reads its input at once, mid-turn too: here it is stopped) is in the FIFO
    still: the adopter never writes it again, and it is delivered once, when the CLI reads it."""
    flightdeck, db, batch_id, log = owned_in_tool(tmp_path, server, "claude")
    ((cli,),) = tagged(batch_id).values()
    os.kill(cli, signal.SIGSTOP)
    try:
        first = flightdeck("steer", batch_id, "t0", "-m", "also the docs")
        until(lambda: "sent to its input: also the docs" in _read(log), what="the steer written")
        flightdeck.owner.send_signal(signal.SIGKILL)
        flightdeck.owner.communicate(timeout=30)
        first.communicate(timeout=60)  # it gives up on the dead owner
        resume = flightdeck("resume", batch_id)
        until(lambda: "adopted" in _read(log), what="adopted")
        # The adopter takes its inbox in order: this one is written after the first was dealt
        # with (written again, before the fix).
        second = flightdeck("steer", batch_id, "t0", "-m", "and the tests")
        until(lambda: "sent to its input: and the tests" in _read(log), what="the second written")
        # Its input holds, unread, each steer once (Claude Code 2.1 drops a second copy with
        # the same uuid, so the server cannot tell).
        lines = [user_turn(m, str(uuid.UUID(int=0))) for m in ("also the docs", "and the tests")]
        assert unread(log.parent / "io" / "t0.in") == sum(len(line.encode()) for line in lines)
    finally:
        os.kill(cli, signal.SIGCONT)
    receipts = the_steers_once_done(tmp_path, resume, db, batch_id)
    second.communicate(timeout=60)
    assert _read(log).count("sent to its input: also the docs") == 1
    assert [(r.message, r.state) for r in receipts] == [
        ("also the docs", SteerState.DELIVERED),
        ("and the tests", SteerState.DELIVERED),
    ]
    assert told(server, str(tmp_path)).count("also the docs") == 1
    assert tagged(batch_id) == {}


def unread(fifo: Path) -> int:
    """The bytes written to `fifo` that its reader has not taken (FIONREAD, taking none)."""
    fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4))[0]
    finally:
        os.close(fd)


def told(server: AgentServer, marker: str) -> str:
    """The user's side (JSON) of the longest conversation the server was sent whose goal holds
    `marker`: every message the CLI passed on, each copy of it."""
    told = [""]
    for request in server.received:
        if request.path.partition("?")[0] != ANTHROPIC_PATH:
            continue
        users = [m for m in request.body.get("messages", []) if m.get("role") == "user"]
        if users and marker in json.dumps(users[0]):
            told.append(json.dumps(users))
    return max(told, key=len)
