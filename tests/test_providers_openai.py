"""The `openai` provider: the official SDK against the loopback server's Chat Completions SSE."""

from __future__ import annotations

import contextlib
import socket
import threading
from pathlib import Path
from types import MappingProxyType

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.errors import (
    BrokenStream,
    ConfigError,
    FatalError,
    ProviderError,
    RateLimited,
    TransientError,
)
from flightdeck.engine.inputs.settings import Route
from flightdeck.engine.model import ChildStatus, Usage
from flightdeck.engine.providers import LOCAL_PLACEHOLDER_KEY, make_provider
from flightdeck.engine.providers.base import (
    HeadroomEvent,
    Interrupted,
    Message,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    TurnRequest,
    UsageEvent,
)
from flightdeck.engine.providers.openai import OpenAIProvider
from flightdeck.engine.providers.sdk import parse_arguments
from flightdeck.engine.records.meter import cost_of

from helpers import HANG_S, batch, settings, until
from loopback import (
    KEY_ENV,
    PRICE,
    READ_FILE,
    Loopback,
    Received,
    Reply,
    ToolUse,
    provider_for,
    route_for,
    run_batch,
)

KEY = "sk-test-0123456789abcdef"
ENV = {KEY_ENV: KEY}
REQUEST = TurnRequest("You are a worker.", (Message("user", "Review a.txt"),), (READ_FILE,), 256)


def provider(server: Loopback, **kw: float) -> OpenAIProvider:
    p = provider_for(server, "openai", KEY, **kw)
    assert isinstance(p, OpenAIProvider)
    return p


def drain(p: OpenAIProvider, request: TurnRequest = REQUEST) -> list[StreamEvent]:
    return list(p.open(request))


def test_text_tool_calls_cached_usage_and_headroom(server: Loopback) -> None:
    server.script(
        Reply(
            text="Let me look at the file first.",
            tools=(
                ToolUse("call_a", "read_file", {"path": "a.txt"}),
                ToolUse("call_b", "read_file", {"path": "dir/b.txt"}),
            ),
            input_tokens=900,
            cache_read=1024,
            output_tokens=40,
            headers={
                "x-ratelimit-remaining-requests": "4999",
                "x-ratelimit-remaining-tokens": "1999000",
                "x-ratelimit-reset-requests": "12ms",
                "x-ratelimit-reset-tokens": "1m30s",
            },
        )
    )
    p = provider(server)
    try:
        events = drain(p)
    finally:
        p.close()
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    calls = [e.call for e in events if isinstance(e, ToolCallEvent)]
    usage = [e.usage for e in events if isinstance(e, UsageEvent)]
    headroom = [e for e in events if isinstance(e, HeadroomEvent)]
    assert text == "Let me look at the file first."
    assert calls == [
        ToolCall("call_a", "read_file", {"path": "a.txt"}),
        ToolCall("call_b", "read_file", {"path": "dir/b.txt"}),
    ]
    # prompt_tokens (1924) includes the cached 1024; our input_tokens does not.
    assert usage == [Usage(input_tokens=900, output_tokens=40, cache_read_tokens=1024)]
    assert headroom == [HeadroomEvent(4999, 1999000, 0.012, 90.0)]


def test_request_shape_streaming_usage_tools_and_history(server: Loopback) -> None:
    history = (
        Message("user", "Review a.txt"),
        Message("assistant", "", (ToolCall("call_1", "read_file", {"path": "a.txt"}),)),
        Message("tool", "hello", tool_call_id="call_1", name="read_file"),
        Message("user", "[operator] be brief"),
    )
    p = provider(server)
    try:
        drain(p, TurnRequest("Be useful.", history, (READ_FILE,), 300))
    finally:
        p.close()
    (received,) = server.received
    body = received.body
    assert received.path == "/v1/chat/completions"
    assert received.headers["authorization"] == f"Bearer {KEY}"
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 300  # a compatible server: max_tokens, not max_completion_tokens
    assert body["model"] == "openai-loopback-1"
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": READ_FILE.description,
                "parameters": dict(READ_FILE.parameters),
            },
        }
    ]
    assert body["messages"] == [
        {"role": "system", "content": "Be useful."},
        {"role": "user", "content": "Review a.txt"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "read_file", "arguments": '{"path": "a.txt"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "hello"},
        {"role": "user", "content": "[operator] be brief"},
    ]


def remote_route(name: str = "gpt", base_url: str | None = "https://api.example.com/v1") -> Route:
    """A route to a server elsewhere: built, never called."""
    options = {"api_key_env": KEY_ENV} | ({"base_url": base_url} if base_url else {})
    return Route(name=name, provider="openai", model="gpt-x", options=MappingProxyType(options))


def test_openai_itself_gets_max_completion_tokens() -> None:
    official = OpenAIProvider(remote_route(base_url=None), KEY)
    compatible = OpenAIProvider(remote_route(), KEY)
    try:
        assert official._max_key == "max_completion_tokens"
        assert compatible._max_key == "max_tokens"
    finally:
        official.close()
        compatible.close()


def test_unparsable_tool_arguments_reach_the_tool_as_text() -> None:
    assert parse_arguments('{"path": "a.txt"}') == {"path": "a.txt"}
    assert parse_arguments('{"path": "a') == {"_unparsed_arguments": '{"path": "a'}
    assert parse_arguments("") == {}
    assert parse_arguments("[1]") == {"_arguments": [1]}


@pytest.mark.parametrize(
    ("reply", "error", "retry_after"),
    [
        (Reply(status=429, retry_after="3"), RateLimited, 3.0),
        (Reply(status=429, retry_after_ms="250", retry_after="9"), RateLimited, 0.25),
        (Reply(status=429), RateLimited, None),
        (Reply(status=500), TransientError, None),
        (Reply(status=503, retry_after="1"), TransientError, 1.0),
        (Reply(status=529), RateLimited, None),
        (Reply(status=408), TransientError, None),
        (Reply(status=409), TransientError, None),
        (Reply(status=401), FatalError, None),
        (Reply(status=403), FatalError, None),
        (Reply(status=429, error_type="insufficient_quota"), FatalError, None),
        (Reply(status=400, error_type="invalid_request_error"), FatalError, None),
        (Reply(malformed_after_chunks=1), BrokenStream, None),
        (Reply(disconnect_after_chunks=2), TransientError, None),
    ],
    ids=lambda v: repr(v)[:60] if isinstance(v, Reply) else None,
)
def test_errors_become_typed_provider_errors(
    server: Loopback, reply: Reply, error: type[ProviderError], retry_after: float | None
) -> None:
    server.script(reply)
    p = provider(server)
    try:
        with pytest.raises(ProviderError) as caught:
            drain(p)
    finally:
        p.close()
    assert type(caught.value) is error
    assert caught.value.retry_after == retry_after


def test_error_messages_are_operator_readable_and_never_carry_the_key(server: Loopback) -> None:
    server.script(
        Reply(status=401, message=f"Incorrect API key provided: {KEY}."),
        Reply(status=429, error_type="insufficient_quota", message="You exceeded your quota."),
    )
    p = provider(server)
    try:
        with pytest.raises(FatalError) as auth:
            drain(p)
        with pytest.raises(FatalError) as quota:
            drain(p)
    finally:
        p.close()
    assert KEY not in str(auth.value)
    assert str(auth.value).startswith("401 authentication failed (check the API key)")
    assert str(quota.value) == "429 insufficient_quota: You exceeded your quota."


def test_a_broken_stream_still_counts_what_was_billed(server: Loopback) -> None:
    server.script(Reply(text="x" * 80, chunk_chars=8, disconnect_after_chunks=5))
    p = provider(server)
    events: list[StreamEvent] = []
    try:
        with pytest.raises(TransientError):
            for event in p.open(REQUEST):
                events.append(event)
    finally:
        p.close()
    (estimate,) = [e.usage for e in events if isinstance(e, UsageEvent)]
    assert estimate.output_tokens == 10  # 40 characters received
    assert estimate.input_tokens > 0


def test_missing_key_fails_before_anything_starts(tmp_path: Path) -> None:
    route = remote_route()
    with pytest.raises(ConfigError) as caught:
        Engine(batch(2, route="gpt"), settings(route), state_dir=tmp_path / "state", env={})
    assert caught.value.field == "routes.gpt.api_key_env"
    assert f"environment variable {KEY_ENV} is not set" in str(caught.value)
    assert not (tmp_path / "state").exists()
    # Exported but empty (or blank) is said so: the user can see it is set (found by an audit).
    for empty in ("", "   "):
        with pytest.raises(ConfigError, match=f"environment variable {KEY_ENV} is set but empty"):
            Engine(batch(1, route="gpt"), settings(route), state_dir=tmp_path, env={KEY_ENV: empty})


def test_a_local_server_needs_no_key(server: Loopback) -> None:
    p = make_provider(route_for(server, "openai"), {})
    try:
        drain(p)
    finally:
        p.close()
    assert server.received[0].headers["authorization"] == f"Bearer {LOCAL_PLACEHOLDER_KEY}"


def _agent(received: Received) -> Reply:
    """A model that lists the workspace once, then answers."""
    if any(m.get("role") == "tool" for m in received.body["messages"]):
        return Reply(text="Done: the workspace is empty.", input_tokens=300, output_tokens=9)
    return Reply(
        text="Looking.",
        tools=(ToolUse("call_ls", "list_dir", {"path": "."}),),
        input_tokens=200,
        cache_read=64,
        output_tokens=7,
        headers={"x-ratelimit-remaining-requests": "41", "x-ratelimit-reset-requests": "2s"},
    )


def test_a_batch_runs_on_openai_with_text_tools_usage_and_cost(tmp_path: Path) -> None:
    snap = run_batch(_agent, "openai", 3, tmp_path, KEY)
    assert [r.status for r in snap.children] == [ChildStatus.COMPLETED] * 3
    for row in snap.children:
        assert row.result == "Done: the workspace is empty."
        assert row.activity.api_calls == 2 and row.activity.tool_calls == 1
        assert row.usage == Usage(input_tokens=500, output_tokens=16, cache_read_tokens=64)
        assert row.cost_usd == cost_of(row.usage, PRICE)
    (headroom,) = snap.routes
    assert headroom.route == "openai" and headroom.remaining_requests == 41
    assert headroom.reset_requests_s == 2.0


def _echo_key(received: Received) -> Reply:
    """A server that echoes the key: in its text, a tool call's name and arguments, an error."""
    if len(received.body["messages"]) > 2:
        return Reply(status=400, message="bad request", error_type=f"bad_{KEY}")
    return Reply(text=f"Your key is {KEY}.", tools=(ToolUse("c1", f"tool_{KEY}", {"path": KEY}),))


def test_a_server_that_echoes_the_key_never_gets_it_recorded(tmp_path: Path) -> None:
    snap = run_batch(_echo_key, "openai", 1, tmp_path, KEY)
    (row,) = snap.children
    assert row.status is ChildStatus.FAILED
    assert row.error is not None and row.error.startswith("FatalError: 400 "), row.error
    transcript = Path(row.transcript).read_text()
    assert "Your key is [REDACTED]." in transcript
    assert "tool_[REDACTED]" in transcript  # the call, and the tool error the model saw
    assert KEY not in repr(snap)
    # Nothing on disk: the database (and its WAL), transcripts, manifest.
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "flightdeck.db" for p in files)
    assert not [p for p in files if KEY.encode() in p.read_bytes()]


def test_a_lone_surrogate_in_a_server_error_is_printed_as_a_replacement(tmp_path: Path) -> None:
    """JSON can carry "\\ud800"; printed as it is, the headless line raised and the run died."""
    from flightdeck.tui.exitcodes import ExitCode
    from flightdeck.tui.headless import run_headless
    from rich.console import Console

    with Loopback(lambda _: Reply(status=400, message="bad \ud800 thing")) as server:
        route = route_for(server, "openai")
        engine = Engine(batch(2, route="openai"), settings(route), state_dir=tmp_path, env=ENV)
        out, err = tmp_path / "out.txt", tmp_path / "err.txt"
        with out.open("w", encoding="utf-8") as o, err.open("w", encoding="utf-8") as e:
            code = run_headless(engine, Console(file=o, width=200), Console(file=e, width=200))
    assert code == ExitCode.INCOMPLETE  # the children failed; the run itself did not
    lines = [line for line in out.read_text().splitlines() if line.startswith("✗ [")]
    assert len(lines) == 2
    assert all("400 request rejected: bad \ufffd thing" in line for line in lines), lines


@pytest.mark.parametrize("kind", ["openai", "anthropic"])
def test_a_lone_surrogate_in_a_reply_does_not_fail_the_childs_next_calls(
    tmp_path: Path, kind: str
) -> None:
    # Found by an audit: JSON can carry "\\udc00"; kept in the conversation, the next request
    # could not be encoded (UnicodeEncodeError), so every later call of the child failed.
    replies = [
        Reply(text="looking t\udc00", tools=(ToolUse("c1", "list_dir", {"path": ".\ud800"}),)),
        Reply(text="done \ud83d\ude00"),  # no surrogate left: answered
    ]
    with Loopback() as server:
        server.script(*replies)
        route = route_for(server, kind)
        engine = Engine(batch(1, route=kind), settings(route), state_dir=tmp_path, env=ENV)
        engine.start()
        try:
            assert engine.wait(60)
            row = engine.snapshot().children[0]
        finally:
            engine.close()
    assert row.status is ChildStatus.COMPLETED, row.error
    assert len(server.received) == 2
    sent = str(server.received[1].body)
    assert "looking t\ufffd" in sent and ".\ufffd" in sent, sent


def test_close_also_aborts_a_connect_that_hangs() -> None:
    """A server whose accept queue is full drops our SYNs: connect blocks until closed."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    port = listener.getsockname()[1]
    fillers = [socket.socket() for _ in range(4)]
    for f in fillers:
        f.setblocking(False)
        with contextlib.suppress(BlockingIOError):
            f.connect(("127.0.0.1", port))
    options = {"base_url": f"http://127.0.0.1:{port}/v1", "connect_timeout_s": 2 * HANG_S}
    route = Route(name="o", provider="openai", model="m", options=MappingProxyType(options))
    p = make_provider(route, {})
    stream = p.open(REQUEST)
    outcome: list[object] = []

    def read() -> None:
        try:
            outcome.extend(stream)
        except BaseException as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read)
    try:
        reader.start()
        reader.join(0.3)
        if not reader.is_alive():
            pytest.skip(f"connect did not block on this platform: {outcome}")
        stream.close()
        reader.join(HANG_S)
        # The close ended it, not the connect timeout (past HANG_S); how fast is for the
        # benchmarks, as a loaded machine can take more than a second to switch threads.
        assert not reader.is_alive()
        assert isinstance(outcome[-1], Interrupted)
    finally:
        p.close()
        for s in (*fillers, listener):
            s.close()


def test_steer_now_on_a_stalled_sdk_stream_restarts_the_turn_without_a_retry(
    tmp_path: Path,
) -> None:
    with Loopback() as server:
        # The first response stalls mid-stream; the restarted turn answers normally.
        server.script(Reply(text="x" * 64, stall_after_chunks=3), Reply(text="Understood."))
        route = route_for(server, "openai", read_timeout_s=2 * HANG_S)
        engine = Engine(batch(1, route="openai"), settings(route), state_dir=tmp_path, env=ENV)
        engine.start()
        try:
            until(lambda: engine.snapshot().children[0].activity.text == "streaming")
            engine.steer([engine.snapshot().children[0].id], "wrap up", now=True)
            assert engine.wait(HANG_S)
            given_up = server.stalls_given_up
            row = engine.snapshot().children[0]
        finally:
            engine.close()
    # The steer ended the stall, not the read timeout (past HANG_S) nor the loopback giving up.
    assert given_up == 0
    assert row.status is ChildStatus.COMPLETED
    assert row.activity.retries == 0  # our own close is an interruption, not a network fault
    assert [s.state.value for s in row.steers] == ["delivered"]
    assert len(server.received) == 2
