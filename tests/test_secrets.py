"""API keys never reach disk or screen, in any form sanitizing or escaping gives them, and a key
no HTTP header can carry is refused at start, naming its variable and never its value."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.errors import ConfigError
from flightdeck.engine.inputs.settings import API_KEY_ENV, Route, load_settings
from flightdeck.engine.inputs.tasks import Batch, Task
from flightdeck.engine.providers import FirstCall, make_provider
from flightdeck.tui.exitcodes import ExitCode

from helpers import flightdeck, run_to_end

CANARY = "sk-CANARY\x1b[31mESCkey4d5e6f70"
# A program that writes its key as it is, as repr and JSON write it, and stripped of its escape.
ECHO = (
    "import json, os, re; k = os.environ['FAKE_KEY']; "
    "print(k); print(repr(k)); print(json.dumps(k)); print(re.sub(r'\\x1b\\[[0-9;]*m', '', k))"
)
# ... and as bash's `printf %q` and `cat -v` write it.
SHELL_ECHO = "; print(k.replace('\\x1b', '\\\\E')); print(k.replace('\\x1b', '^['))"


def test_a_key_echoed_in_any_form_is_redacted_in_the_transcript_and_logs(tmp_path: Path) -> None:
    argv = json.dumps([sys.executable, "-c", ECHO])
    (tmp_path / "flightdeck.toml").write_text(
        '[engine]\ndefault_route = "cli"\nstate_dir = "state"\n'
        f'[routes.cli]\nprovider = "command"\nargv = {argv}\napi_key_env = "FAKE_KEY"\n'
    )
    settings = load_settings(tmp_path / "flightdeck.toml")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "FAKE_KEY": CANARY}
    batch = Batch(name="keys", tasks=(Task(id="t0", goal="echo the key", seq=0),))
    engine = Engine(batch, settings, state_dir=tmp_path / "state", env=env)
    engine.start()
    row = run_to_end(engine).children[0]
    text = Path(row.transcript).read_text(encoding="utf-8")
    assert text.count("[REDACTED]") >= 4, text  # each of the four lines said it
    printed = flightdeck("logs", engine.batch_id, "t0", cwd=tmp_path)
    assert printed.returncode == ExitCode.OK, printed.stderr
    for shown in (text, printed.stdout, row.result or "", row.error or ""):
        assert "CANARY" not in shown and "ESCkey" not in shown


# The key as shells and tools write it: bash's `declare -p` and `printf %q`, `echo -e`, `cat -v`.
SHELL_FORMS = (
    "sk-CANARY\\E[31mESCkey4d5e6f70",
    "sk-CANARY\\e[31mESCkey4d5e6f70",
    "sk-CANARY\\033[31mESCkey4d5e6f70",
    "sk-CANARY^[[31mESCkey4d5e6f70",
)


def test_one_routes_key_is_redacted_from_every_childs_transcript_in_every_form(
    tmp_path: Path,
) -> None:
    # The key was redacted only in its own route's children: a sim child that read a file
    # holding it wrote it to its transcript, the store and `logs`.
    workspace = tmp_path / "ws"
    workspace.mkdir()
    forms = [CANARY, "sk-CANARYESCkey4d5e6f70", *SHELL_FORMS]
    (workspace / "env.txt").write_text("".join(f"FAKE_KEY={form}\n" for form in forms))
    argv = json.dumps([sys.executable, "-c", ECHO + SHELL_ECHO])
    (tmp_path / "flightdeck.toml").write_text(
        '[engine]\ndefault_route = "sim"\nstate_dir = "state"\n'
        f'[routes.cli]\nprovider = "command"\nargv = {argv}\napi_key_env = "FAKE_KEY"\n'
        '[routes.sim]\nprovider = "sim"\ntime_scale = 0.001\ntool_turns = 2\n'
    )
    settings = load_settings(tmp_path / "flightdeck.toml")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "FAKE_KEY": CANARY}
    tasks = (
        Task(id="cli", goal="echo the key", seq=0, route="cli"),
        Task(id="s0", goal="read what is there", seq=1),
        Task(id="s1", goal="read what is there", seq=2),
    )
    batch = Batch(name="keys", tasks=tasks, workspace=workspace)
    engine = Engine(batch, settings, state_dir=tmp_path / "state", env=env)
    engine.start()
    rows = run_to_end(engine).children
    for row in rows:
        text = Path(row.transcript).read_text(encoding="utf-8")
        assert "[REDACTED]" in text, (row.id, text)  # each saw the key, in some form
        assert "CANARY" not in text and "ESCkey" not in text, (row.id, text)
    report = flightdeck("report", engine.batch_id, "--format", "json", cwd=tmp_path)
    assert report.returncode == ExitCode.OK, report.stderr
    for child in ("s0", "s1"):
        printed = flightdeck("logs", engine.batch_id, child, cwd=tmp_path)
        assert printed.returncode == ExitCode.OK, printed.stderr
        assert "read_file" in printed.stdout and "[REDACTED]" in printed.stdout
    for shown in (report.stdout, printed.stdout):
        assert "CANARY" not in shown and "ESCkey" not in shown


@pytest.mark.parametrize(
    "key", ["sk-live\u202e0123456789", "sk-live\x1b[31m0123456789", "sk-lïve-0123456789"]
)
@pytest.mark.slow
def test_a_key_no_http_header_can_carry_is_refused_at_start(tmp_path: Path, key: str) -> None:
    # A bidi mark in the key made every call fail, after its retries, with UnicodeEncodeError.
    config = tmp_path / "flightdeck.toml"
    config.write_text(
        '[routes.o]\nprovider = "openai"\nmodel = "m"\nbase_url = "https://example.invalid/v1"\n'
        'api_key_env = "ODD_KEY"\n'
    )
    settings = load_settings(config)
    with pytest.raises(ConfigError) as caught:
        make_provider(settings.routes["o"], {"ODD_KEY": key}, source=config)
    message = str(caught.value)
    assert message.startswith(f"{config}:5: routes.o.api_key_env: environment variable ODD_KEY")
    assert "HTTP header" in message and "0123456789" not in message
    (tmp_path / "t.jsonl").write_text('{"goal": "x", "route": "o"}\n')
    run = flightdeck("run", "t.jsonl", "--headless", cwd=tmp_path, env={"ODD_KEY": key})
    assert run.returncode == ExitCode.USAGE
    [line] = run.stderr.splitlines()
    assert "ODD_KEY" in line and "0123456789" not in line
    assert not (tmp_path / ".flightdeck").exists()


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_credential_in_a_routes_headers_is_redacted_when_echoed(
    tmp_path: Path, provider: str
) -> None:
    # Found by an audit: a gateway key in `headers`, echoed by the server's 401, was stored in
    # clear in the child's error and transcript; the API key beside it was redacted.
    import dataclasses
    from types import MappingProxyType

    from helpers import batch, settings
    from loopback import KEY_ENV, Loopback, Reply, route_for

    gateway = "gw-CANARY-9f8e7d6c5b4a"
    with Loopback() as server:
        server.script(Reply(status=401, message=f"bad gateway key {gateway} (or {provider})"))
        route = route_for(server, provider)
        headers = {"X-Gateway-Key": gateway, "X-Title": "json"}  # a short value is no secret
        route = dataclasses.replace(
            route, options=MappingProxyType({**route.options, "headers": headers})
        )
        engine = Engine(
            batch(1), settings(route), state_dir=tmp_path / "state", env={KEY_ENV: "sk-other-0"}
        )
        engine.start()
        try:
            row = run_to_end(engine).children[0]
        finally:
            engine.close()
    assert row.error is not None and "[REDACTED]" in row.error, row.error
    for path in (tmp_path / "state").rglob("*"):
        if path.is_file():
            assert b"CANARY" not in path.read_bytes(), path


@pytest.mark.parametrize(
    ("provider", "variable"),
    [("anthropic", "ANTHROPIC_CUSTOM_HEADERS"), ("openai", "OPENAI_CUSTOM_HEADERS")],
)
def test_the_headers_the_sdk_takes_from_the_environment_are_redacted_when_echoed(
    tmp_path: Path, provider: str, variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The SDK sends the headers of its CUSTOM_HEADERS variable on every request; the engine's
    # redaction knew only the route's own, so a gateway key set there and echoed was kept.
    from helpers import batch, settings
    from loopback import KEY_ENV, Loopback, Received, Reply, route_for

    gateway, token = "gw-CANARY-0a1b2c3d4e5f", "tk-CANARY-f5e4d3c2b1a0"
    monkeypatch.setenv(variable, f"X-Gateway-Key: {gateway}\nAuthorization-Proxy: Bearer {token}")
    sent: list[str] = []

    def responder(received: Received) -> Reply:
        sent.append(received.headers.get("x-gateway-key", ""))
        if "Review item 0" in json.dumps(received.body):
            return Reply(status=401, message=f"bad gateway key {gateway}")
        return Reply(text=f"your token is {token}.", chunk_chars=5)

    with Loopback(responder) as server:
        engine = Engine(
            batch(2),
            settings(route_for(server, provider)),
            state_dir=tmp_path / "state",
            env={KEY_ENV: "sk-other-0"},
        )
        engine.start()
        try:
            rows = run_to_end(engine).children
        finally:
            engine.close()
    assert sent and set(sent) == {gateway}  # the SDK did send it
    assert [r.status.value for r in rows] == ["failed", "completed"], rows
    assert "[REDACTED]" in (rows[0].error or "") and "[REDACTED]" in (rows[1].result or "")
    for path in (tmp_path / "state").rglob("*"):
        if path.is_file():
            assert b"CANARY" not in path.read_bytes(), path


def test_a_key_in_a_models_question_or_sub_task_is_redacted_where_they_are_shown(
    tmp_path: Path,
) -> None:
    # Found by an audit: the arguments of the engine's own tools went in unredacted, so a key
    # the model wrote into an `ask_operator` question or a `delegate` goal was stored in clear
    # and shown in the needs-you queue, the headless line, the table and the report.
    import dataclasses

    from flightdeck.engine.triage.needs import needs

    from helpers import batch, settings, until
    from loopback import KEY_ENV, Loopback, Received, Reply, ToolUse, route_for

    key = "sk-CANARY-0a1b2c3d4e5f"

    def responder(received: Received) -> Reply:
        sent = json.dumps(received.body)
        if '"role": "tool"' in sent:  # the tool's result is back: the turn ends
            return Reply(text="done")
        if "t0000" in sent or "Review item 0" in sent:
            tasks = [{"goal": f"use {key} to deploy", "context": f"key {key}"}]
            return Reply(tools=(ToolUse("d1", "delegate", {"tasks": tasks}),))
        if "Review item 1" in sent:
            return Reply(tools=(ToolUse("a1", "ask_operator", {"question": f"is {key} ok?"}),))
        return Reply(text="done")

    with Loopback(responder) as server:
        route = dataclasses.replace(route_for(server, "openai"), delegate=True, ask_operator=True)
        engine = Engine(batch(2), settings(route), state_dir=tmp_path / "state", env={KEY_ENV: key})
        engine.start()
        try:

            def asked_and_delegated() -> bool:
                snap = engine.snapshot()
                made = any(r.parent is not None for r in snap.children)
                return made and any(n.kind == "asks" for n in needs(snap))

            until(asked_and_delegated, what="the question asked and the sub-task made")
            asked = [n.text for n in needs(engine.snapshot()) if n.kind == "asks"]
            engine.stop_all()
            rows = run_to_end(engine).children
        finally:
            engine.close()
    assert asked and "[REDACTED]" in asked[0], asked
    delegates = [r for r in rows if r.parent is not None]
    assert delegates and "[REDACTED]" in delegates[0].goal, delegates
    assert all("CANARY" not in a for a in asked), asked
    assert all("CANARY" not in r.goal for r in rows), [r.goal for r in rows]
    for path in (tmp_path / "state").rglob("*"):
        if path.is_file():
            assert b"CANARY" not in path.read_bytes(), path


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_the_credential_of_an_authorization_header_is_redacted_without_its_scheme(
    tmp_path: Path, provider: str
) -> None:
    # Found by an audit: of `Authorization = "Bearer gw-…"` only the whole value was redacted,
    # so a server's 401 or a model's answer that echoed the token alone (as they do) was
    # stored, transcribed and reported in clear.
    import dataclasses
    from types import MappingProxyType

    from helpers import batch, settings
    from loopback import KEY_ENV, Loopback, Received, Reply, route_for

    token = "gw-CANARY-5e4d3c2b1a09"

    def responder(received: Received) -> Reply:
        if "Review item 0" in json.dumps(received.body):
            return Reply(status=401, message=f"invalid token {token}")
        return Reply(text=f"your token is {token}.", chunk_chars=5)

    with Loopback(responder) as server:
        route = route_for(server, provider)
        headers = {"Authorization": f"Bearer {token}"}
        route = dataclasses.replace(
            route, options=MappingProxyType({**route.options, "headers": headers})
        )
        engine = Engine(
            batch(2), settings(route), state_dir=tmp_path / "state", env={KEY_ENV: "sk-other-0"}
        )
        engine.start()
        try:
            rows = run_to_end(engine).children
        finally:
            engine.close()
    assert [r.status.value for r in rows] == ["failed", "completed"], rows
    assert "[REDACTED]" in (rows[0].error or "") and "[REDACTED]" in (rows[1].result or "")
    report = flightdeck("report", "--format", "json", "--state-dir", "state", cwd=tmp_path)
    assert report.returncode == ExitCode.OK, report.stderr
    assert "[REDACTED]" in report.stdout and "CANARY" not in report.stdout + report.stderr
    for path in (tmp_path / "state").rglob("*"):
        if path.is_file():
            assert b"CANARY" not in path.read_bytes(), path


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_key_cut_off_by_a_broken_stream_leaves_none_of_itself(
    tmp_path: Path, provider: str
) -> None:
    # Found by an audit: a stream that broke mid-key left what had streamed of it in the
    # transcript ("the key is sk-CUTKEY-a1b2c3…", all but what never came), in `logs` and in
    # the search index: only whole lines were redacted, and the key was never whole.
    from helpers import batch, settings
    from loopback import KEY_ENV, Loopback, Reply, route_for

    key = "sk-CUTKEY-a1b2c3d4e5f6a7b8c9d0"
    answer = f"the key is {key} and more"
    with Loopback() as server:
        # 3 characters a chunk: the 10th ends 19 characters into the key.
        server.script(Reply(text=answer, chunk_chars=3, disconnect_after_chunks=10))
        server.default = Reply(text="done")
        engine = Engine(
            batch(1),
            settings(route_for(server, provider)),
            state_dir=tmp_path / "state",
            env={KEY_ENV: key},
        )
        engine.start()
        try:
            [row] = run_to_end(engine).children
        finally:
            engine.close()
    assert row.status.value == "completed", row.error
    text = Path(row.transcript).read_text(encoding="utf-8")
    assert "assistant │ the key is [REDACTED]\n" in text, text  # then "stream broke, retry"
    printed = flightdeck("logs", engine.batch_id, row.id, "--state-dir", "state", cwd=tmp_path)
    assert printed.returncode == ExitCode.OK and "the key is [REDACTED]" in printed.stdout
    for path in (tmp_path / "state").rglob("*"):
        if path.is_file():
            assert b"CUTKEY" not in path.read_bytes(), path


def test_a_key_cut_off_by_a_stop_leaves_none_of_itself() -> None:
    from flightdeck.engine.records.lines import LineFormatter

    key = "sk-CUTKEY-a1b2c3d4e5f6a7b8c9d0"
    lines = LineFormatter((key,))
    assert lines.stream("answer: ", 0.0) + lines.stream(key[:12], 0.0) == b""
    out = lines.end_stream(0.0, interrupted=True).decode()
    assert out.endswith("assistant │ answer: [REDACTED] (interrupted)\n"), out
    # The start of a short key (4 to 7 characters) only as a token of its own, as a whole one.
    short = LineFormatter(("Zq9xW7",))
    short.stream("see xZq9xW ", 0.0)
    short.stream("or Zq9xW", 0.0)
    assert short.end_stream(0.0).decode().endswith("│ see xZq9xW or [REDACTED]\n")


# An agent CLI (Claude Code's stream-json) whose tool's output and whose unknown event are cut
# to what a transcript line keeps just inside a key.
CUT_CLI = """
import json, os
k = os.environ["FAKE_KEY"]
def say(**event): print(json.dumps(event))
say(type="system", subtype="init", session_id="s1", model="claude-x")
use = {"type": "tool_use", "id": "u1", "name": "Bash", "input": {"command": "cat f"}}
say(type="assistant", message={"id": "m1", "content": [use], "usage": {"output_tokens": 1}})
out = {"type": "tool_result", "tool_use_id": "u1", "content": "x" * 1990 + " " + k + " tail"}
say(type="user", message={"content": [out]})
say(type="novel_event", payload="y" * 260 + " " + k)
say(type="result", subtype="success", is_error=False, result="done", session_id="s1",
    total_cost_usd=0.01, num_turns=1, usage={"input_tokens": 1, "output_tokens": 1})
"""


def test_a_key_in_an_agent_clis_output_is_never_cut_in_two(tmp_path: Path) -> None:
    # Found by an audit: a CLI's tool output (and a denied call's input, an event of an unknown
    # kind) is cut to a transcript line's length before the child redacts it: a key across the
    # cut left its first characters, "sk-CUTKEY-7", which no redaction recognises.
    (tmp_path / "cli.py").write_text(CUT_CLI)
    argv = json.dumps([sys.executable, str(tmp_path / "cli.py")])
    (tmp_path / "flightdeck.toml").write_text(
        '[engine]\ndefault_route = "cli"\nstate_dir = "state"\n'
        f'[routes.cli]\nprovider = "command"\nargv = {argv}\napi_key_env = "FAKE_KEY"\n'
        'format = "claude-stream-json"\n'
    )
    settings = load_settings(tmp_path / "flightdeck.toml")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "FAKE_KEY": "sk-CUTKEY-7e6d5c4b3a29"}
    batch = Batch(name="keys", tasks=(Task(id="t0", goal="cut the key", seq=0),))
    engine = Engine(batch, settings, state_dir=tmp_path / "state", env=env)
    engine.start()
    row = run_to_end(engine).children[0]
    assert row.status.value == "completed", row.error
    text = Path(row.transcript).read_text(encoding="utf-8")
    assert "… (" in text and "novel_event" in text, text  # both were cut
    for path in (tmp_path / "state").rglob("*"):
        if path.is_file():
            assert b"CUTKEY" not in path.read_bytes(), path


@pytest.mark.parametrize(
    ("provider", "variable", "official"),
    [
        ("openai", "OPENAI_BASE_URL", "https://api.openai.com/v1/"),
        ("anthropic", "ANTHROPIC_BASE_URL", "https://api.anthropic.com"),
    ],
)
def test_a_base_url_in_the_environment_never_gets_the_providers_key(
    provider: str, variable: str, official: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by a review: a route without a base_url let the SDK take one from the environment,
    # and send the provider's own key there, which a route's base_url may not do (it must name
    # its own key's variable). Nothing is sent here: the client is made and looked at.
    monkeypatch.setenv(variable, "http://127.0.0.1:9/elsewhere")
    route = Route(name="r", provider=provider, model="m")  # type: ignore[arg-type]
    first = make_provider(route, {API_KEY_ENV[provider]: "sk-the-providers-own-0123456789"})
    assert isinstance(first, FirstCall)
    client = first.client()
    try:
        assert str(client._client.base_url) == official  # type: ignore[attr-defined]
    finally:
        first.close()
