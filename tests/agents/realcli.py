"""What the real-CLI tests share (`make test-agents`): a project running the documented
route of each CLI against the loopback server, engines on it, and what to read of a child's
transcript, its processes and its input.

`make test-agents` installs the current CLIs from npm into .cache-agents/ and names their
folder in FLIGHTDECK_AGENTS_BIN; each runs with the argv of examples/agents/flightdeck.toml (the
documented one: Claude Code gets `--allowedTools Bash` besides, so its tools run unasked, and
Codex the `-c` flags naming the server as its provider) against the loopback server
(tests/agentserver.py), with dummy keys: nothing leaves this machine. The goals' directives
(`[tool: ...]`) make each CLI run a tool that holds its turn open until the test opens a gate.
`route` and `engine` change one field of a test's flightdeck.toml.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import struct
import subprocess
import sys
import termios
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.inputs.settings import load_settings
from flightdeck.engine.inputs.tasks import Batch, Task
from flightdeck.engine.model import ChildRow, ChildStatus, SteerReceipt
from flightdeck.engine.records.reader import StoreReader

from agentserver import DUMMY_KEY, AgentServer
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
    if cli == "codex" and tmp_path.resolve().is_relative_to("/dev"):
        # Else each test waits out Codex's 10 s shell yield and fails on a missing output line.
        pytest.fail(
            f"{tmp_path} is under /dev, which Codex's sandbox replaces with a /dev of its own: "
            "its commands cannot see the test's gate and files. Use a --basetemp (or TMPDIR) "
            "outside /dev, such as /tmp (docs/agents.md, Codex's sandbox)."
        )
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


def engine_for(
    tmp_path: Path,
    repo: Path,
    env: dict[str, str],
    goals: list[str],
    clock: Callable[[], float] | None = None,
) -> Engine:
    tasks = tuple(Task(id=f"t{i}", goal=g, seq=i) for i, g in enumerate(goals))
    return engine_on(tmp_path, repo, env, tasks, clock)


def engine_on(
    tmp_path: Path,
    repo: Path,
    env: dict[str, str],
    tasks: tuple[Task, ...],
    clock: Callable[[], float] | None = None,
) -> Engine:
    """An engine started on these tasks (engine_for's, for fields a goal does not set)."""
    engine = Engine(
        Batch(name="agents", tasks=tasks, workspace=repo),
        load_settings(tmp_path / "flightdeck.toml"),
        state_dir=tmp_path / "state",
        env=env,
        clock=clock,
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


def transcript_file(path: str) -> str:
    return Path(path).read_text()


def markers() -> list[int]:
    out = subprocess.run(["pgrep", "-f", "flightdeck-tree-marker"], capture_output=True, text=True)
    return [int(p) for p in out.stdout.split()]


def latest(db: Path) -> str | None:
    with StoreReader(db) as reader:
        return reader.latest_batch_id()


def read(path: Path) -> str:
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
    until(lambda: called(read(log)), what="the CLI in its tool")
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


def route(tmp_path: Path, **fields: object) -> None:
    """Add these fields to the test's route (the last table of its flightdeck.toml)."""
    config = tmp_path / "flightdeck.toml"
    text = config.read_text()
    for k, v in fields.items():
        line = f"{k} = " + json.dumps(v)
        text = re.sub(rf"^{k} = .*$", line, text, flags=re.M) if f"\n{k} = " in text else text
        text += "" if line in text else line + "\n"
    config.write_text(text)


def engine(tmp_path: Path, **fields: float) -> None:
    """Set these fields of its [engine] table."""
    config = tmp_path / "flightdeck.toml"
    text = config.read_text()
    for k, v in fields.items():
        text = re.sub(rf"^{k} = .*$", f"{k} = {v}", text, flags=re.M) if k in text else text
        if f"{k} = " not in text:
            text = text.replace("[engine]\n", f"[engine]\n{k} = {v}\n")
    config.write_text(text)


def row(engine_: Engine, child: str = "t0"):  # type: ignore[no-untyped-def]
    found = engine_.snapshot().child(child)
    assert found is not None
    return found


@contextmanager
def in_its_tool(
    tmp_path: Path,
    repo: Path,
    env: dict[str, str],
    *extra: str,
    clock: Callable[[], float] | None = None,
) -> Iterator[Engine]:
    """An engine whose one child, t0 (`goal` with these arguments), is inside its tool, its
    gate shut; closed at the end."""
    eng = engine_for(tmp_path, repo, env, [goal(tmp_path, "t0", *extra)], clock)
    try:
        until(lambda: in_tool(eng, ["t0"]), what="the child inside its tool")
        yield eng
    finally:
        eng.close()


def finished(eng: Engine, timeout: float = 120) -> tuple[ChildRow, str]:
    """Once the batch has ended: t0's row and transcript."""
    assert eng.wait(timeout)
    return row(eng), transcript(eng, "t0")


def gate_opened(tmp_path: Path, eng: Engine, timeout: float = 120) -> tuple[ChildRow, str]:
    """Open the gate (t0's tool returns); once the batch has ended, t0's row and transcript."""
    (tmp_path / "gate").touch()
    return finished(eng, timeout)
