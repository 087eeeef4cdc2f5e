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
from flightdeck.engine.errors import FatalError, ProviderError, TransientError
from flightdeck.engine.inputs.settings import Route
from flightdeck.engine.model import Usage
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
    key_secrets,
)
from flightdeck.engine.providers.headers import openai_headroom, retry_after
from flightdeck.engine.providers.sdk import (
    READ_TIMEOUT,
    clip_message,
    connection_error,
    parse_arguments,
    status_error,
    transport_error,
)
from flightdeck.engine.providers.tokens import CHARS_PER_TOKEN, prompt_tokens_estimate
from flightdeck.engine.providers.transport import Abort, http_client, read_stream, timeout_of

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


class OpenAIProvider:
    """One route's client; thread-safe, shared by the route's children."""

    name = "openai"

    def __init__(self, route: Route, api_key: str) -> None:
        self.model = route.model
        self.secrets = key_secrets(api_key)
        options = route.options
        base_url: str | None = options.get("base_url")
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
        host = urlsplit(base_url).hostname if base_url else "api.openai.com"
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
        calls: dict[int, dict[str, str]] = {}
        emitted = False
        usage_seen = False
        received_chars = 0
        chunks = read_stream(
            self._abort,
            lambda: self._p._client.chat.completions.create(**self._params),
            openai_headroom,
        )
        try:
            for chunk in chunks:
                if isinstance(chunk, HeadroomEvent):
                    yield chunk
                    continue
                if chunk.usage is not None:
                    usage_seen = True
                    yield UsageEvent(usage_of(chunk.usage))
                for choice in chunk.choices:
                    delta = choice.delta
                    if delta.content:
                        received_chars += len(delta.content)
                        yield TextDelta(delta.content)
                    for tc in delta.tool_calls or ():
                        # Some compatible servers send whole calls without an index.
                        index = getattr(tc, "index", None)
                        key = index if isinstance(index, int) else len(calls)
                        slot = calls.setdefault(key, {"id": "", "name": "", "args": ""})
                        slot["id"] = slot["id"] or tc.id or f"call_{key}"
                        if tc.function is not None:
                            slot["name"] = slot["name"] or tc.function.name or ""
                            slot["args"] += tc.function.arguments or ""
                            received_chars += len(tc.function.arguments or "")
                    if choice.finish_reason is not None and not emitted:
                        emitted = True
                        yield from _tool_events(calls)
            if not emitted:
                yield from _tool_events(calls)
        except (openai.OpenAIError, httpx2.HTTPError, ValueError) as exc:
            if not usage_seen and received_chars:
                # The server bills a response cut short (by it, the network, or a stop or
                # steer --now here), but its usage chunk never came: count an estimate
                # rather than nothing.
                yield UsageEvent(_estimate(self._request, received_chars), estimated=True)
            if self._abort.fired:
                raise Interrupted from None
            raise map_error(exc, secrets=self._p.secrets) from exc
        finally:
            chunks.close()


def _estimate(request: TurnRequest, received_chars: int) -> Usage:
    out = -(-received_chars // CHARS_PER_TOKEN)
    return Usage(input_tokens=prompt_tokens_estimate(request), output_tokens=out)


def _tool_events(calls: dict[int, dict[str, str]]) -> Iterator[ToolCallEvent]:
    for index in sorted(calls):
        slot = calls[index]
        yield ToolCallEvent(ToolCall(slot["id"], slot["name"], parse_arguments(slot["args"])))


def usage_of(usage: Any) -> Usage:
    """CompletionUsage → Usage; `input_tokens` excludes cached (and cache-written) tokens."""
    details = usage.prompt_tokens_details
    cached = (details.cached_tokens or 0) if details is not None else 0
    written = (getattr(details, "cache_write_tokens", None) or 0) if details is not None else 0
    prompt = usage.prompt_tokens or 0
    return Usage(
        input_tokens=max(0, prompt - cached - written),
        output_tokens=usage.completion_tokens or 0,
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


def map_error(exc: BaseException, *, secrets: tuple[str, ...] = ()) -> ProviderError:
    """An SDK or transport exception as one of our typed errors."""
    if isinstance(exc, openai.APIStatusError):
        code, message = _body_error(exc.body)
        code = code or exc.code
        detail = clip_message(message or exc.message, secrets)
        wait = retry_after(exc.response.headers)
        account = code if code in FATAL_CODES else None
        return status_error(exc.status_code, detail, wait, account=account)
    if isinstance(exc, openai.APITimeoutError):
        return TransientError(READ_TIMEOUT)
    if isinstance(exc, openai.APIConnectionError):
        return connection_error(exc, exc.message, secrets)
    if isinstance(exc, openai.APIError):
        # An error object inside the stream (status 200).
        code, message = _body_error({"error": exc.body})
        detail = clip_message(message or exc.message, secrets)
        if code in FATAL_CODES:
            return FatalError(f"{code}: {detail}")
        return TransientError(f"stream error: {detail}")
    return transport_error(exc, secrets)
