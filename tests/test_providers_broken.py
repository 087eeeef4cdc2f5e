"""Both SDK providers against responses that are well-formed HTTP but no answer: a stream that
ends before the wire format's end marker, chunks of the wrong shape (issue 17, section 2), and
error bodies of megabytes (section 4).

The SDKs raise nothing for a body that simply ends: these are the cases where a half answer
used to become the child's result.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.errors import BrokenStream
from flightdeck.engine.model import ChildStatus, Usage
from flightdeck.engine.providers.base import (
    Message,
    StreamEvent,
    TextDelta,
    ToolCallEvent,
    TurnRequest,
    UsageEvent,
)
from flightdeck.engine.providers.sdk import READ_OF_MESSAGE, clip_message
from flightdeck.engine.records.reader import StoreReader

from helpers import batch, run_to_end, settings
from loopback import KEY_ENV, READ_FILE, Fault, Loopback, Reply, ToolUse, provider_for, route_for

KEY = "sk-test-0123456789abcdef"
REQUEST = TurnRequest("You are a worker.", (Message("user", "Review a.txt"),), (READ_FILE,), 256)
PROVIDERS = ["openai", "anthropic"]
TEXT = "The first half of an answer, then the rest of it."  # 7 chunks of 8 characters
READ = ToolUse("call_1", "read_file", {"path": "notes/a-long-file-name.txt"})
# Content chunks until the tool call's arguments have begun (text pieces, then the call):
# OpenAI sends the call's head as a content chunk of its own, Anthropic as a content block start.
TOOL_BEGUN = {"openai": 2, "anthropic": 1}


def read_until_broken(server: Loopback, kind: str, reply: Reply) -> list[StreamEvent]:
    """The events a provider yields for `reply` before it raises BrokenStream."""
    server.script(reply)
    p = provider_for(server, kind, KEY)
    events: list[StreamEvent] = []
    try:
        with pytest.raises(BrokenStream) as caught:
            for event in p.open(REQUEST):
                events.append(event)
    finally:
        p.close()
    assert str(caught.value).startswith("broken stream: ")
    return events


def billed(events: list[StreamEvent], *, estimated: bool | None = None) -> Usage:
    return sum(
        (e.usage for e in events if isinstance(e, UsageEvent) and estimated in (None, e.estimated)),
        Usage(),
    )


def streamed(events: list[StreamEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


@pytest.mark.parametrize("kind", PROVIDERS)
def test_a_stream_that_ends_mid_text_is_broken_and_billed_for_what_streamed(
    server: Loopback, kind: str
) -> None:
    events = read_until_broken(server, kind, Reply(text=TEXT, fault=Fault(end_after_chunks=2)))
    assert streamed(events) == TEXT[:16]
    usage = billed(events)
    assert usage.prompt_tokens > 0  # the prompt was sent
    assert usage.output_tokens == math.ceil(16 / 4)  # what streamed, estimated
    assert billed(events, estimated=True).output_tokens > 0


@pytest.mark.parametrize("kind", PROVIDERS)
def test_a_stream_that_ends_before_any_text_is_broken_and_bills_the_prompt(
    server: Loopback, kind: str
) -> None:
    events = read_until_broken(server, kind, Reply(text=TEXT, fault=Fault(end_after_chunks=0)))
    assert streamed(events) == ""
    usage = billed(events)
    assert usage.prompt_tokens > 0 and usage.output_tokens <= 1
    if kind == "openai":  # no usage came at all: the prompt is an estimate
        assert billed(events, estimated=True).prompt_tokens > 0
    else:  # message_start had billed it: the server's count, no estimate
        assert usage.input_tokens == 120 and not billed(events, estimated=True).total


@pytest.mark.parametrize("kind", PROVIDERS)
def test_a_stream_cut_right_after_a_tool_calls_arguments_began_calls_no_tool(
    server: Loopback, kind: str
) -> None:
    reply = Reply(text="", tools=(READ,), fault=Fault(end_after_chunks=TOOL_BEGUN[kind]))
    events = read_until_broken(server, kind, reply)
    assert not [e for e in events if isinstance(e, ToolCallEvent)]
    assert billed(events).output_tokens == math.ceil(len('{"path"') / 4)


def test_anthropic_a_stream_without_message_stop_is_broken(server: Loopback) -> None:
    # Everything else came, message_delta's final usage included: the count is the server's.
    events = read_until_broken(
        server, "anthropic", Reply(text=TEXT, fault=Fault(end_before="event: message_stop"))
    )
    assert streamed(events) == TEXT
    assert billed(events) == Usage(input_tokens=120, output_tokens=12)
    assert not billed(events, estimated=True).total


def test_openai_a_finish_reason_without_done_is_a_whole_answer(server: Loopback) -> None:
    # The chosen rule: finish_reason is the end marker, [DONE] is not required (the SDK eats
    # it without a word, and some compatible servers never send it). A usage chunk that never
    # came after the finish_reason is billed as an estimate, not left at zero.
    server.script(
        Reply(text=TEXT, fault=Fault(end_before="[DONE]")),
        Reply(text=TEXT, fault=Fault(end_before='"usage"')),
    )
    p = provider_for(server, "openai", KEY)
    try:
        with_usage = list(p.open(REQUEST))
        without_usage = list(p.open(REQUEST))
    finally:
        p.close()
    assert streamed(with_usage) == streamed(without_usage) == TEXT
    assert billed(with_usage) == Usage(input_tokens=120, output_tokens=12)
    assert not billed(with_usage, estimated=True).total
    estimate = billed(without_usage, estimated=True)
    assert estimate.prompt_tokens > 0 and estimate.output_tokens == math.ceil(len(TEXT) / 4)


WRONG_SHAPES = {
    "openai": {
        "delta-not-an-object": b'data: {"choices": [{"index": 0, "delta": "oops"}]}\n\n',
        "content-not-text": b'data: {"choices": [{"index": 0, "delta": {"content": 5}}]}\n\n',
        "chunk-not-an-object": b"data: [1, 2]\n\n",
        "choices-not-a-list": b'data: {"choices": {"index": 0}}\n\n',
    },
    "anthropic": {
        "delta-missing": b'event: content_block_delta\ndata: {"type": "content_block_delta", '
        b'"index": 0}\n\n',
        "text-not-text": b'event: content_block_delta\ndata: {"type": "content_block_delta", '
        b'"index": 0, "delta": {"type": "text_delta", "text": 5}}\n\n',
        "event-not-an-object": b"event: content_block_delta\ndata: [1]\n\n",
        "tool-without-id": b'event: content_block_start\ndata: {"type": "content_block_start", '
        b'"index": 3, "content_block": {"type": "tool_use", "input": {}}}\n\n',
    },
}


@pytest.mark.parametrize(
    ("kind", "chunk"),
    [(kind, chunk) for kind, shapes in WRONG_SHAPES.items() for chunk in shapes.values()],
    ids=[f"{kind}-{name}" for kind, shapes in WRONG_SHAPES.items() for name in shapes],
)
def test_a_chunk_of_the_wrong_shape_is_a_broken_stream(
    server: Loopback, kind: str, chunk: bytes
) -> None:
    reply = Reply(text=TEXT, fault=Fault(inject=chunk, inject_after_chunks=2))
    events = read_until_broken(server, kind, reply)
    assert streamed(events) == TEXT[:16]
    assert billed(events).output_tokens == math.ceil(16 / 4)


@pytest.mark.parametrize("kind", PROVIDERS)
def test_a_chunk_that_is_not_json_is_a_broken_stream(server: Loopback, kind: str) -> None:
    read_until_broken(server, kind, Reply(text=TEXT, malformed_after_chunks=2))


# --- in the engine: retried, billed, in the transcript, never the result ----------------------


def run_one(tmp_path: Path, kind: str, *replies: Reply, default: Reply | None = None) -> tuple:
    with Loopback() as server:
        server.script(*replies)
        if default is not None:
            server.default = default
        route = route_for(server, kind)
        engine = Engine(
            batch(1, route=kind), settings(route), state_dir=tmp_path, env={KEY_ENV: KEY}
        )
        engine.start()
        snap = run_to_end(engine)
        received = list(server.received)
    row = snap.children[0]
    return row, received, Path(row.transcript).read_text(encoding="utf-8")


@pytest.mark.parametrize("kind", PROVIDERS)
@pytest.mark.parametrize("cut", ["text", "tool"])
def test_a_broken_stream_is_retried_and_never_taken_as_the_answer(
    tmp_path: Path, kind: str, cut: str
) -> None:
    if cut == "text":
        broken = Reply(text=TEXT, fault=Fault(end_after_chunks=3))
    else:
        broken = Reply(text="", tools=(READ,), fault=Fault(end_after_chunks=TOOL_BEGUN[kind]))
    row, received, transcript = run_one(tmp_path, kind, broken, Reply(text="The whole answer."))
    assert row.status is ChildStatus.COMPLETED
    assert row.result == "The whole answer."
    assert len(received) == 2  # the same turn again: no tool ran, nothing was added to it
    assert received[1].body["messages"] == received[0].body["messages"]
    assert "tool-call" not in transcript
    assert "broken stream, retry 1/3" in transcript
    assert "billed as an estimate" in transcript
    # Anthropic counts the input at the stream's start: only the output is estimated, and the
    # line says only that (found by an audit: "0 input and 3 output tokens ... never came").
    assert " 0 input" not in transcript
    if kind == "anthropic":
        assert re.search(r"call cut short: \d+ output tokens billed as an estimate", transcript)
    # The cut call is billed (the prompt, what streamed) on top of the whole one.
    assert row.usage.prompt_tokens > 120 and row.usage.output_tokens > 12


@pytest.mark.parametrize("kind", PROVIDERS)
def test_a_stream_broken_on_every_attempt_fails_the_child(tmp_path: Path, kind: str) -> None:
    row, received, transcript = run_one(
        tmp_path, kind, default=Reply(text=TEXT, fault=Fault(end_after_chunks=1))
    )
    assert row.status is ChildStatus.FAILED
    assert row.result is None
    assert row.error is not None and row.error.startswith("BrokenStream: broken stream: ended")
    assert len(received) == 4  # the route's 4 attempts
    assert transcript.count("billed as an estimate") == 4


# --- a huge error body (issue 17, section 4) ----------------------------------------------------

MEGABYTES = 2_000_000


@pytest.mark.parametrize("kind", PROVIDERS)
@pytest.mark.parametrize(
    "reply",
    [
        Reply(status=503, message=f"overloaded {KEY} " + "x" * MEGABYTES),
        Reply(status=400, message="bad request " * (MEGABYTES // 12)),
        Reply(status=502, fault=Fault(error_body=b"<html>" + b"gateway " * (MEGABYTES // 8))),
    ],
    ids=["5xx-json", "4xx-json", "5xx-html"],
)
def test_a_huge_error_body_is_capped_in_the_error_the_transcript_and_the_store(
    tmp_path: Path, kind: str, reply: Reply
) -> None:
    row, _, transcript = run_one(tmp_path, kind, default=reply)
    assert row.status is ChildStatus.FAILED
    assert row.error is not None and len(row.error) < 400
    assert KEY not in row.error and KEY not in transcript
    assert len(transcript) < 20_000
    with StoreReader(tmp_path / "flightdeck.db") as reader:
        [stored] = reader.children(row_batch(tmp_path))
    assert stored.error == row.error
    assert (tmp_path / "flightdeck.db").stat().st_size < 1_000_000


@pytest.mark.parametrize("kind", PROVIDERS)
def test_an_error_body_s_escape_sequences_are_not_stored_with_the_reason(
    tmp_path: Path, kind: str
) -> None:
    # The row's error is what `report --json` and exports give out: a server's words, never
    # its escape sequences (every screen sanitized them; the store kept them raw).
    row, _, _ = run_one(tmp_path, kind, default=Reply(status=400, message="\x1b[31mbad\x1b[0m\x07"))
    assert row.status is ChildStatus.FAILED
    with StoreReader(tmp_path / "flightdeck.db") as reader:
        [stored] = reader.children(row_batch(tmp_path))
    assert stored.error is not None and "bad" in stored.error, stored.error
    assert not any(ch in stored.error for ch in "\x1b\x07"), stored.error


def row_batch(state_dir: Path) -> str:
    [folder] = (state_dir / "batches").iterdir()
    return folder.name


def test_a_key_at_the_cut_of_a_long_error_text_is_not_shown_in_part() -> None:
    # The text read ends inside the key: cutting there would leave its start where redaction
    # could no longer recognise it.
    for shift in range(0, len(KEY) + 2):
        text = "word " * ((READ_OF_MESSAGE - shift) // 5) + KEY + " tail" * 1000
        shown = clip_message(text, (KEY,))
        assert KEY[:6] not in shown and len(shown) <= 300
