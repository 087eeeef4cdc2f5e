"""`openai`: Chat Completions through the official SDK, against any OpenAI-compatible server.

Streaming with `stream_options.include_usage`, tool calls assembled from their deltas, cached
prompt tokens, and `x-ratelimit-*` headroom. SDK retries are off: errors become our typed errors
and the engine's retry policy decides. The request is made lazily, on the worker thread that
iterates the stream, so `close()` can abort it even before the server has sent its headers.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx2
import openai
from flightdeck.engine.errors import BrokenStream, FatalError, ProviderError, TransientError
from flightdeck.engine.inputs.settings import Route
from flightdeck.engine.model import CHARS_PER_TOKEN, Usage
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
    sdk_secrets,
    unsent_key_note,
)
from flightdeck.engine.providers.headers import openai_headroom, retry_after
from flightdeck.engine.providers.sdk import (
    READ_TIMEOUT,
    broken,
    clip_message,
    connection_error,
    expect,
    parse_arguments,
    status_error,
    transport_error,
)
from flightdeck.engine.providers.tokens import prompt_tokens_estimate
from flightdeck.engine.providers.transport import Abort, http_client, read_stream, timeout_of
from openai.types import CompletionUsage
from openai.types.chat import ChatCompletionChunk
from openai.types.chat.chat_completion_chunk import (
    Choice,
    ChoiceDelta,
    ChoiceDeltaToolCall,
    ChoiceDeltaToolCallFunction,
)

# Error codes that mean "this account cannot be served": retrying cannot help.
FATAL_CODES = frozenset(
    {
        "insufficient_quota",
        "billing_hard_limit_reached",
        "billing_not_active",
        "access_terminated",
        "invalid_api_key",
        "account_deactivated",
    }
)


OFFICIAL_URL = "https://api.openai.com/v1"


class OpenAIProvider:
    """One route's client; thread-safe, shared by the route's children."""

    name = "openai"

    def __init__(self, route: Route, api_key: str) -> None:
        self.model = route.model
        options = route.options
        self.secrets = sdk_secrets(self.name, api_key, options.get("headers"))
        self.key_note = unsent_key_note(options, api_key)
        # Given, never the SDK's own choice: it takes OPENAI_BASE_URL from the environment, and
        # would send OPENAI_API_KEY there (a route's base_url names its own key: __init__.py).
        base_url: str = options.get("base_url") or OFFICIAL_URL
        self._http = http_client(options)
        self._client = openai.OpenAI(
            api_key=api_key,
            base_url=base_url,
            max_retries=0,  # retries are ours: the engine's retry policy
            timeout=timeout_of(options),
            default_headers=dict(options.get("headers") or {}),
            http_client=self._http,
        )
        # OpenAI's own models want max_completion_tokens; compatible servers know max_tokens.
        host = urlsplit(base_url).hostname
        self._max_key = "max_completion_tokens" if host == "api.openai.com" else "max_tokens"

    def open(self, request: TurnRequest) -> OpenAIStream:
        """A streamed turn for `request`; the request is sent when the stream is iterated."""
        params: dict[str, Any] = {
            "model": self.model,
            "messages": to_openai_messages(request),
            self._max_key: request.max_tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            params["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": dict(t.parameters),
                    },
                }
                for t in request.tools
            ]
        return OpenAIStream(self, request, params)

    def close(self) -> None:
        """Release the route's connections."""
        self._client.close()
        self._http.close()


class OpenAIStream:
    """One streamed turn. Iterate on one thread; `close()` from any thread ends it at once."""

    def __init__(self, provider: OpenAIProvider, request: TurnRequest, params: dict[str, Any]):
        self._p = provider
        self._request = request
        self._params = params
        self._abort = Abort()

    def close(self) -> None:
        """End the turn from any thread, waking a read blocked on the network."""
        self._abort.fire()

    def __iter__(self) -> Iterator[StreamEvent]:
        if self._abort.fired:
            raise Interrupted
        turn = _Turn()

        def create() -> Any:
            stream = self._p._client.chat.completions.create(**self._params)
            turn.opened = True  # a 200: the server has the prompt
            return stream

        chunks = read_stream(self._abort, create, openai_headroom)
        try:
            for chunk in chunks:
                if isinstance(chunk, HeadroomEvent):
                    yield chunk
                else:
                    yield from turn.read(chunk)
            if not turn.finished:
                # The body ended cleanly but the answer did not: the SDK raises nothing here.
                raise broken(f"ended without a finish_reason{turn.progress()}")
            yield from turn.unbilled(self._request)  # a whole answer whose usage never came
        except BrokenStream:
            yield from turn.unbilled(self._request)
            if self._abort.fired:
                raise Interrupted from None
            raise
        except (openai.OpenAIError, httpx2.HTTPError, ValueError) as exc:
            yield from turn.unbilled(self._request)
            if self._abort.fired:
                raise Interrupted from None
            raise map_error(
                exc, secrets=self._p.secrets, streaming=turn.opened, key_note=self._p.key_note
            ) from exc
        finally:
            chunks.close()


class _Turn:
    """What one response has streamed so far, read chunk by chunk.

    The end marker is a `finish_reason`. A missing `data: [DONE]` after it is not a broken
    stream: the SDK consumes [DONE] without telling us, some compatible servers never send it,
    and all that may follow a finish_reason is the usage chunk (`include_usage` is asked for),
    whose absence is billed as an estimate (see `unbilled`) rather than as nothing.
    """

    def __init__(self) -> None:
        self.opened = False
        self.finished = False
        self.usage_seen = False
        self.received_chars = 0  # of text and tool arguments, for a response cut short
        self.chunks = 0
        self.calls: dict[int, dict[str, str]] = {}

    def read(self, chunk: object) -> Iterator[StreamEvent]:
        chunk = expect(chunk, ChatCompletionChunk, "the chunk")
        self.chunks += 1
        if chunk.usage is not None:
            self.usage_seen = True
            yield UsageEvent(usage_of(expect(chunk.usage, CompletionUsage, "usage")))
        for choice in expect(chunk.choices or [], list, "choices"):
            choice = expect(choice, Choice, "a choice")
            if choice.delta is not None:
                yield from self._delta(expect(choice.delta, ChoiceDelta, "delta"))
            if choice.finish_reason is not None and not self.finished:
                self.finished = True
                yield from self._tool_events()

    def _delta(self, delta: ChoiceDelta) -> Iterator[StreamEvent]:
        content = delta.content
        if content is not None and expect(content, str, "delta.content"):
            self.received_chars += len(content)
            yield TextDelta(content)
        for tc in expect(delta.tool_calls or [], list, "delta.tool_calls"):
            tc = expect(tc, ChoiceDeltaToolCall, "a tool call")
            # Some compatible servers send whole calls without an index.
            key = tc.index if isinstance(tc.index, int) else len(self.calls)
            slot = self.calls.setdefault(key, {"id": "", "name": "", "args": ""})
            slot["id"] = slot["id"] or expect(tc.id or "", str, "tool_calls.id") or f"call_{key}"
            if tc.function is not None:
                function = expect(tc.function, ChoiceDeltaToolCallFunction, "tool_calls.function")
                name = expect(function.name or "", str, "function.name")
                args = expect(function.arguments or "", str, "function.arguments")
                slot["name"] = slot["name"] or name
                slot["args"] += args
                self.received_chars += len(args)

    def _tool_events(self) -> Iterator[ToolCallEvent]:
        for index in sorted(self.calls):
            slot = self.calls[index]
            arguments = parse_arguments(slot["args"])
            yield ToolCallEvent(ToolCall(slot["id"], slot["name"], arguments))

    def progress(self) -> str:
        if not self.received_chars:
            return f" (after {self.chunks} chunks, before any text)"
        return f" (after {self.chunks} chunks, {self.received_chars:,} characters)"

    def unbilled(self, request: TurnRequest) -> Iterator[UsageEvent]:
        """For a response the server took (a 200) whose usage chunk never came: cut short (by
        the server, the network, or a stop or steer --now here) or ended without it. The server
        bills the prompt and what it wrote, so count an estimate of both rather than nothing."""
        if self.opened and not self.usage_seen:
            self.usage_seen = True  # once
            out = -(-self.received_chars // CHARS_PER_TOKEN)
            usage = Usage(input_tokens=prompt_tokens_estimate(request), output_tokens=out)
            yield UsageEvent(usage, estimated=True)


def usage_of(usage: Any) -> Usage:
    """CompletionUsage → Usage; `input_tokens` excludes cached (and cache-written) tokens."""
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details is not None else 0
    written = (getattr(details, "cache_write_tokens", None) or 0) if details is not None else 0
    prompt = expect(usage.prompt_tokens or 0, int, "usage.prompt_tokens")
    cached = expect(cached, int, "usage.prompt_tokens_details.cached_tokens")
    written = expect(written, int, "usage.prompt_tokens_details.cache_write_tokens")
    return Usage(
        input_tokens=max(0, prompt - cached - written),
        output_tokens=expect(usage.completion_tokens or 0, int, "usage.completion_tokens"),
        cache_read_tokens=cached,
        cache_write_tokens=written,
    )


def to_openai_messages(request: TurnRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if request.system:
        out.append({"role": "system", "content": request.system})
    for m in request.messages:
        out.append(_message(m))
    return out


def _message(m: Message) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id or "", "content": m.content}
    if m.role == "assistant" and m.tool_calls:
        return {
            "role": "assistant",
            "content": m.content or None,
            "tool_calls": [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": json.dumps(dict(c.arguments))},
                }
                for c in m.tool_calls
            ],
        }
    return {"role": m.role, "content": m.content}


# --- errors --------------------------------------------------------------------------------------


def _body_error(body: object) -> tuple[str | None, str]:
    """(code or type, message) from an OpenAI error body."""
    error = body.get("error", body) if isinstance(body, dict) else None
    if not isinstance(error, dict):
        return None, ""
    code = error.get("code") or error.get("type")
    return (str(code) if code else None), str(error.get("message") or "")


def map_error(
    exc: BaseException,
    *,
    secrets: tuple[str, ...] = (),
    streaming: bool = True,
    key_note: str | None = None,
) -> ProviderError:
    """An SDK or transport exception as one of our typed errors (`streaming`: after a 200)."""
    if isinstance(exc, openai.APIStatusError):
        code, message = _body_error(exc.body)
        code = code or exc.code
        detail = clip_message(message or exc.message, secrets)
        wait = retry_after(exc.response.headers)
        account = code if code in FATAL_CODES else None
        return status_error(exc.status_code, detail, wait, account=account, key_note=key_note)
    if isinstance(exc, openai.APITimeoutError):
        return TransientError(READ_TIMEOUT)
    if isinstance(exc, openai.APIConnectionError):
        return connection_error(exc, exc.message, secrets, streaming=streaming)
    if isinstance(exc, openai.APIError):
        # An error object inside the stream (status 200).
        code, message = _body_error({"error": exc.body})
        detail = clip_message(message or exc.message, secrets)
        if code in FATAL_CODES:
            return FatalError(f"{code}: {detail}")
        return TransientError(f"stream error: {detail}")
    return transport_error(exc, secrets, streaming=streaming)
