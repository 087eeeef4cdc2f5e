"""docs/agents.md's Codex route as documented, its key included: the built-in `openai`
provider, its key from the variable the route's `api_key_env` names (realcli.py's
routes name a provider of their own instead, `-c model_providers.loopback=...`). The one flag
the test adds is `-c openai_base_url=...`, pointing the built-in provider at the loopback server:
Codex 0.171.0 ignores OPENAI_BASE_URL in its environment (it went to api.openai.com)."""

from __future__ import annotations

import sys
from pathlib import Path

from flightdeck.engine.model import ChildStatus
from realcli import BIN, EXAMPLE, GATE, engine_for, in_tool, project, route, transcript

from agentserver import DUMMY_KEY, RESPONSES_PATH, AgentServer
from helpers import until
from loopback import Received

KEY_ENV = EXAMPLE["routes"]["codex"]["api_key_env"]


def documented(tmp_path: Path, server: AgentServer, key_env: str) -> tuple[Path, dict[str, str]]:
    """The example's Codex route as it is, but for the base URL; the dummy key in key_env."""
    repo, env = project(tmp_path, "codex", server)
    base = ["-c", f"openai_base_url={server.openai_url}"]
    example = EXAMPLE["routes"]["codex"]
    argv = [str(BIN / "codex"), *example["argv"][1:-1], *base, example["argv"][-1]]
    resume = example["resume_argv"]
    resume_argv = [str(BIN / "codex"), *resume[1:-1], *base, resume[-1]]
    route(tmp_path, argv=argv, resume_argv=resume_argv, api_key_env=key_env)
    del env["LOOPBACK_KEY"]
    env[key_env] = DUMMY_KEY
    return repo, env


def served(server: AgentServer) -> list[Received]:
    return [r for r in server.received if r.path.startswith(RESPONSES_PATH)]


def test_the_documented_codex_key_is_sent_and_redacted(tmp_path: Path) -> None:
    """The route's key arrives as the bearer token, in its run and in a steer's resume (its
    resume_argv); the tool prints the key: neither the transcript nor the batch's records
    hold it."""
    with AgentServer() as server:  # its own: every request it received is this child's
        repo, env = documented(tmp_path, server, KEY_ENV)
        secret = tmp_path / "secret.txt"
        secret.write_text(f"the key is {DUMMY_KEY}\n")
        command = f"cat {secret}; {sys.executable} {GATE} {tmp_path / 'gate'}"
        engine = engine_for(tmp_path, repo, env, [f"task t0 [tool: {command}]"])
        try:
            until(lambda: in_tool(engine, ["t0"]), what="the child inside its tool")
            engine.steer(["t0"], "also the docs")
            (tmp_path / "gate").touch()
            assert engine.wait(120)
            row = engine.snapshot().child("t0")
            text = transcript(engine, "t0")
        finally:
            engine.close()
        requests = served(server)
    assert row is not None and row.status is ChildStatus.COMPLETED, (row, text)
    (receipt,) = row.steers
    assert receipt.how == "by resuming the session"
    assert row.result == "done: also the docs"
    assert len({r.headers.get("session-id") for r in requests}) == 1  # one thread, resumed
    assert any("also the docs" in str(r.body) for r in requests)  # the resume's turn
    assert {r.headers.get("authorization") for r in requests} == {f"Bearer {DUMMY_KEY}"}
    assert "the key is [REDACTED]" in text and DUMMY_KEY not in text, text
    held = [p for p in (tmp_path / "state").rglob("*") if p.is_file()]
    assert held and not [p for p in held if DUMMY_KEY.encode() in p.read_bytes()]


def test_codex_exec_ignores_openai_api_key(tmp_path: Path) -> None:
    """Why the route names CODEX_API_KEY: given OPENAI_API_KEY alone, `codex exec` sends no
    key at all (the loopback serves it anyway; the OpenAI API answers 401)."""
    with AgentServer() as server:
        repo, env = documented(tmp_path, server, "OPENAI_API_KEY")
        engine = engine_for(tmp_path, repo, env, ["task t0"])
        try:
            assert engine.wait(120)
            row = engine.snapshot().child("t0")
        finally:
            engine.close()
        requests = served(server)
    assert row is not None and row.status is ChildStatus.COMPLETED, row
    assert requests and all("authorization" not in r.headers for r in requests), requests


def test_the_documented_codex_route_leaves_no_key_in_home(tmp_path: Path) -> None:
    """Codex writes its shell's environment, the key with it, to ~/.codex/shell_snapshots
    (0644) and leaves it there when it is stopped: the documented route turns that off."""
    with AgentServer() as server:
        repo, env = documented(tmp_path, server, KEY_ENV)
        command = f"{sys.executable} {GATE} {tmp_path / 'gate'}"
        engine = engine_for(tmp_path, repo, env, [f"task t0 [tool: {command}]"])
        try:
            until(lambda: in_tool(engine, ["t0"]), what="the child inside its tool")
            held = [p for p in (tmp_path / "home").rglob("*") if p.is_file()]
            engine.stop(["t0"])
            assert engine.wait(120)
        finally:
            engine.close()
    held += [p for p in (tmp_path / "home").rglob("*") if p.is_file()]
    assert held and not [p for p in held if p.exists() and DUMMY_KEY.encode() in p.read_bytes()]
