"""The `anthropic` provider: the official SDK against the loopback server's Messages SSE."""

from __future__ import annotations

from pathlib import Path

import pytest
from flightdeck.engine.errors import (
    BrokenStream,
    FatalError,
    ProviderError,
    RateLimited,
    TransientError,
)
from flightdeck.engine.model import ChildStatus, Usage
from flightdeck.engine.providers.anthropic import AnthropicProvider, to_anthropic_messages
from flightdeck.engine.providers.base import (
    HeadroomEvent,
    Message,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolSpec,
    TurnRequest,
    UsageEvent,
)
from flightdeck.engine.providers.headers import anthropic_headroom
from flightdeck.engine.records.meter import cost_of

from loopback import (
    KEY_ENV,
    PRICE,
    READ_FILE,
    Loopback,
    Received,
    Reply,
    ToolUse,
    provider_for,
    run_batch,
)

KEY = "sk-ant-test-0123456789abcdef"
ENV = {KEY_ENV: KEY}
LIST_DIR = ToolSpec("list_dir", "List a folder", {"type": "object", "properties": {}})
REQUEST = TurnRequest(
    "You are a worker.", (Message("user", "Review a.txt"),), (LIST_DIR, READ_FILE), 256
)


def provider(server: Loopback, **kw: float) -> AnthropicProvider:
    p = provider_for(server, "anthropic", KEY, **kw)
    assert isinstance(p, AnthropicProvider)
    return p


def drain(p: AnthropicProvider, request: TurnRequest = REQUEST) -> list[StreamEvent]:
    return list(p.open(request))


def test_text_tool_use_cache_usage_and_headroom(server: Loopback) -> None:
    server.script(
        Reply(
            text="Reading it now.",
            tools=(ToolUse("toolu_1", "read_file", {"path": "a.txt", "lines": [1, 2]}),),
            input_tokens=50,
            cache_write=2048,
            cache_read=0,
            output_tokens=30,
            headers={
                "anthropic-ratelimit-requests-remaining": "49",
                "anthropic-ratelimit-requests-reset": "2099-01-01T00:00:30Z",
                "anthropic-ratelimit-tokens-remaining": "39000",
                "anthropic-ratelimit-input-tokens-remaining": "20000",
                "anthropic-ratelimit-input-tokens-reset": "2099-01-01T00:00:10Z",
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
    assert text == "Reading it now."
    assert calls == [ToolCall("toolu_1", "read_file", {"path": "a.txt", "lines": [1, 2]})]
    # message_start bills the prompt (and the first output token) at once; message_delta the rest.
    assert usage == [Usage(50, 1, 0, 2048), Usage(0, 29, 0, 0)]
    assert sum(usage, Usage()) == Usage(50, 30, 0, 2048)
    (headroom,) = [e for e in events if isinstance(e, HeadroomEvent)]
    assert headroom.remaining_requests == 49
    assert headroom.remaining_tokens == 20000  # the tightest of tokens / input / output
    assert headroom.reset_requests_s is not None and headroom.reset_requests_s > 1e9


def test_headroom_resets_are_seconds_from_now() -> None:
    headers = {
        "anthropic-ratelimit-requests-remaining": "0",
        "anthropic-ratelimit-requests-reset": "2030-01-01T00:00:30Z",
        "anthropic-ratelimit-output-tokens-remaining": "100",
        "anthropic-ratelimit-output-tokens-reset": "2030-01-01T00:00:02.500Z",
    }
    now = 1893456000.0  # 2030-01-01T00:00:00Z
    assert anthropic_headroom(headers, lambda: now) == HeadroomEvent(0, 100, 30.0, 2.5)
    assert anthropic_headroom({}, lambda: now) is None


def test_prompt_caching_marks_the_system_prompt_and_the_last_tool(server: Loopback) -> None:
    p = provider(server)
    try:
        drain(p)
    finally:
        p.close()
    (received,) = server.received
    body = received.body
    assert received.path == "/v1/messages"
    assert KEY in received.headers.get("x-api-key", "") + received.headers.get("authorization", "")
    assert body["stream"] is True and body["max_tokens"] == 256
    assert body["system"] == [
        {"type": "text", "text": "You are a worker.", "cache_control": {"type": "ephemeral"}}
    ]
    assert [t["name"] for t in body["tools"]] == ["list_dir", "read_file"]
    assert "cache_control" not in body["tools"][0]
    assert body["tools"][1]["cache_control"] == {"type": "ephemeral"}
    assert body["tools"][1]["input_schema"] == dict(READ_FILE.parameters)


def test_history_alternates_with_tool_results_in_user_turns() -> None:
    history = (
        Message("user", "Review a.txt"),
        Message(
            "assistant",
            "Two files.  ",
            (
                ToolCall("toolu_1", "read_file", {"path": "a.txt"}),
                ToolCall("toolu_2", "read_file", {"path": "b.txt"}),
            ),
        ),
        Message("tool", "A", tool_call_id="toolu_1", name="read_file"),
        Message("tool", "B", tool_call_id="toolu_2", name="read_file"),
        Message("user", "[operator] be brief"),
    )
    assert to_anthropic_messages(TurnRequest("s", history, (), 10)) == [
        {"role": "user", "content": [{"type": "text", "text": "Review a.txt"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Two files."},
                {
                    "type": "tool_use",
                    "id": "toolu_1",
                    "name": "read_file",
                    "input": {"path": "a.txt"},
                },
                {
                    "type": "tool_use",
                    "id": "toolu_2",
                    "name": "read_file",
                    "input": {"path": "b.txt"},
                },
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "A"},
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "B"},
                {"type": "text", "text": "[operator] be brief"},
            ],
        },
    ]


@pytest.mark.parametrize(
    ("reply", "error", "retry_after"),
    [
        (Reply(status=429, retry_after="2"), RateLimited, 2.0),
        (Reply(status=429, retry_after_ms="1500"), RateLimited, 1.5),
        (Reply(status=529), RateLimited, None),
        (Reply(status=500), TransientError, None),
        (Reply(status=503, retry_after="4"), TransientError, 4.0),
        (Reply(status=401), FatalError, None),
        (Reply(status=403), FatalError, None),
        (Reply(status=402), FatalError, None),
        (Reply(status=400, message="Your credit balance is too low"), FatalError, None),
        (Reply(status=429, error_type="insufficient_quota"), FatalError, None),
        (Reply(stream_error="overloaded_error"), RateLimited, None),
        (Reply(stream_error="api_error"), TransientError, None),
        (Reply(stream_error="invalid_request_error"), FatalError, None),
        (Reply(malformed_after_chunks=1), BrokenStream, None),
        (Reply(disconnect_after_chunks=1), TransientError, None),
        # A server that echoes the key in its error type, not only in the message.
        (Reply(status=400, error_type=f"bad_{KEY}", message=f"key {KEY}"), FatalError, None),
        (Reply(status=500, error_type=f"bad_{KEY}"), TransientError, None),
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
    assert KEY not in str(caught.value)


def test_a_broken_stream_still_counts_the_billed_prompt_and_output(server: Loopback) -> None:
    server.script(Reply(text="y" * 64, input_tokens=700, cache_read=300, disconnect_after_chunks=3))
    p = provider(server)
    events: list[StreamEvent] = []
    try:
        with pytest.raises(TransientError, match="stream broke"):
            for event in p.open(REQUEST):
                events.append(event)
    finally:
        p.close()
    # The prompt from message_start; the output's count would have come at the end, so the
    # 24 characters that did come are estimated at 4 a token: 6, of which 1 was reported.
    usages = [e.usage for e in events if isinstance(e, UsageEvent)]
    assert usages == [Usage(700, 1, 300, 0), Usage(0, 5, 0, 0)]


def _agent(received: Received) -> Reply:
    """A model that lists the workspace once, then answers; the prefix is cached after one call."""
    messages = received.body["messages"]
    answered = any(
        block.get("type") == "tool_result"
        for m in messages
        if isinstance(m["content"], list)
        for block in m["content"]
    )
    if answered:
        return Reply(text="All good.", input_tokens=40, cache_read=1500, output_tokens=5)
    return Reply(
        text="",
        tools=(ToolUse("toolu_ls", "list_dir", {"path": "."}),),
        input_tokens=30,
        cache_write=1500,
        output_tokens=12,
    )


def test_a_batch_runs_on_anthropic_with_tools_cache_usage_and_cost(tmp_path: Path) -> None:
    snap = run_batch(_agent, "anthropic", 2, tmp_path, KEY)
    assert [r.status for r in snap.children] == [ChildStatus.COMPLETED] * 2
    for row in snap.children:
        assert row.result == "All good."
        assert row.usage == Usage(
            input_tokens=70, output_tokens=17, cache_read_tokens=1500, cache_write_tokens=1500
        )
        assert row.cost_usd == cost_of(row.usage, PRICE)
