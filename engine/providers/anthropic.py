"""`anthropic`: Messages streaming through the official SDK, with prompt caching.

The shared system prompt and the tool list carry `cache_control: ephemeral` breakpoints, so every
child of a batch reads the same cached prefix. Usage arrives cumulatively (`message_start`, then
`message_delta`); it is emitted as increments as soon as it is known, so tokens billed for a turn
that breaks later still count. SDK retries are off; the request is made lazily on the worker
thread that iterates, so `close()` can abort it at any point (see transport.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx2
from flightdeck.engine.errors import (
    BrokenStream,
    FatalError,
    ProviderError,
    RateLimited,
    TransientError,
)
from flightdeck.engine.inputs.settings import Route
from flightdeck.engine.model import CHARS_PER_TOKEN, Usage
from flightdeck.engine.providers.base import (
    HeadroomEvent,
    Interrupted,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    TurnRequest,
    UsageEvent,
    sdk_secrets,
    unsent_key_note,
)
from flightdeck.engine.providers.headers import anthropic_headroom, retry_after
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

EPHEMERAL: dict[str, str] = {"type": "ephemeral"}
# An error event inside a stream is retried unless its type says the request itself is bad.
FATAL_STREAM_TYPES = frozenset(
    {"invalid_request_error", "authentication_error", "permission_error", "not_found_error"}
)
# Account problems (out of credit, spend limit): retrying cannot help, whatever the status.
FATAL_TYPES = frozenset({"billing_error", "insufficient_quota"})


OFFICIAL_URL = "https://api.anthropic.com"


class AnthropicProvider:
    """One route's client; thread-safe, shared by the route's children."""

    name = "anthropic"

    def __init__(self, route: Route, api_key: str) -> None:
        self.model = route.model
        options = route.options
        self.secrets = sdk_secrets(self.name, api_key, options.get("headers"))
        self.key_note = unsent_key_note(options, api_key)
        self._http = http_client(options)
        self._client = anthropic.Anthropic(
            api_key=api_key,
            # Given, never the SDK's own choice: it takes ANTHROPIC_BASE_URL from the
            # environment, and would send ANTHROPIC_API_KEY there (see openai.py).
            base_url=options.get("base_url") or OFFICIAL_URL,
            max_retries=0,  # retries are ours: the engine's retry policy
            timeout=timeout_of(options),
            default_headers=dict(options.get("headers") or {}),
            http_client=self._http,
        )

    def open(self, request: TurnRequest) -> AnthropicStream:
        """A streamed turn for `request`; the request is sent when the stream is iterated."""
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": request.max_tokens,
            "messages": to_anthropic_messages(request),
            "stream": True,
        }
        if request.system:
            params["system"] = [
                {"type": "text", "text": request.system, "cache_control": EPHEMERAL}
            ]
        if request.tools:
            tools: list[dict[str, Any]] = [
                {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)}
                for t in request.tools
            ]
            tools[-1]["cache_control"] = EPHEMERAL  # caches the whole tool list
            params["tools"] = tools
        return AnthropicStream(self, request, params)

    def close(self) -> None:
        """Release the route's connections."""
        self._client.close()
        self._http.close()


class AnthropicStream:
    """One streamed turn. Iterate on one thread; `close()` from any thread ends it at once."""

    def __init__(
        self, provider: AnthropicProvider, request: TurnRequest, params: dict[str, Any]
    ) -> None:
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
            stream = self._p._client.messages.create(**self._params)
            turn.opened = True  # a 200: the server has the prompt
            return stream

        events = read_stream(self._abort, create, anthropic_headroom)
        try:
            for event in events:
                if isinstance(event, HeadroomEvent):
                    yield event
                else:
                    yield from turn.read(event)
            if not turn.stopped:
                # The body ended cleanly but the message did not: the SDK raises nothing here.
                raise broken(f"ended without message_stop{turn.progress()}")
        except BrokenStream:
            yield from turn.unbilled(self._request)
            if self._abort.fired:
                raise Interrupted from None
            raise
        except (anthropic.AnthropicError, httpx2.HTTPError, ValueError) as exc:
            yield from turn.unbilled(self._request)
            if self._abort.fired:
                raise Interrupted from None
            raise map_error(
                exc, secrets=self._p.secrets, streaming=turn.opened, key_note=self._p.key_note
            ) from exc
        finally:
            events.close()


class _Turn:
    """What one response has streamed so far, read event by event; its end marker is
    `message_stop`. Event types we do not know are skipped: the API may add some."""

    def __init__(self) -> None:
        self.opened = False
        self.started = False  # message_start came: it bills the prompt
        self.stopped = False
        self.billed = _Cumulative()
        self.tools: dict[int, dict[str, str]] = {}
        self.received_chars = 0  # of text and tool arguments, for a response cut short
        self.events = 0

    def read(self, event: object) -> Iterator[StreamEvent]:
        kind = expect(getattr(event, "type", None), str, "the event's type")
        self.events += 1
        if kind == "message_start":
            self.started = True
            message = getattr(event, "message", None)
            if message is None:
                raise broken("malformed chunk: message_start without a message")
            increment = self.billed.update(getattr(message, "usage", None))
            if increment is not None:
                yield UsageEvent(increment)
        elif kind == "content_block_start":
            index = expect(getattr(event, "index", None), int, "content_block_start.index")
            block = getattr(event, "content_block", None)
            btype = expect(getattr(block, "type", None), str, "content_block.type")
            if btype == "tool_use":
                tool_id = expect(getattr(block, "id", None), str, "tool_use.id")
                name = expect(getattr(block, "name", None), str, "tool_use.name")
                self.tools[index] = {"id": tool_id, "name": name, "json": ""}
        elif kind == "content_block_delta":
            index = expect(getattr(event, "index", None), int, "content_block_delta.index")
            delta = getattr(event, "delta", None)
            dtype = expect(getattr(delta, "type", None), str, "delta.type")
            if dtype == "text_delta":
                text = expect(getattr(delta, "text", None), str, "text_delta.text")
                if text:
                    self.received_chars += len(text)
                    yield TextDelta(text)
            elif dtype == "input_json_delta":
                part = expect(getattr(delta, "partial_json", None), str, "partial_json")
                if index in self.tools:
                    self.tools[index]["json"] += part
                    self.received_chars += len(part)
        elif kind == "content_block_stop":
            index = expect(getattr(event, "index", None), int, "content_block_stop.index")
            tool = self.tools.pop(index, None)
            if tool is not None:
                # Handed on now, but the child acts on a turn's calls only once it ended well.
                arguments = parse_arguments(tool["json"])
                yield ToolCallEvent(ToolCall(tool["id"], tool["name"], arguments))
        elif kind == "message_delta":
            self.billed.final = True  # the response's own count: nothing to estimate
            increment = self.billed.update(getattr(event, "usage", None))
            if increment is not None:
                yield UsageEvent(increment)
        elif kind == "message_stop":
            self.stopped = True

    def progress(self) -> str:
        if not self.received_chars:
            return f" (after {self.events} events, before any text)"
        return f" (after {self.events} events, {self.received_chars:,} characters)"

    def unbilled(self, request: TurnRequest) -> Iterator[UsageEvent]:
        """For a response cut short after the server took it: what it bills beyond what it
        reported, estimated (the prompt, if message_start never came; the output streamed)."""
        if not self.opened:
            return
        prompt = 0
        if not self.started:
            self.started = True  # once
            prompt = prompt_tokens_estimate(request)
            self.billed.seen = dataclasses.replace(self.billed.seen, input_tokens=prompt)
        rest = self.billed.unreported_output(self.received_chars)
        usage = Usage(input_tokens=prompt) + (rest or Usage())
        if usage.total:
            yield UsageEvent(usage, estimated=True)


class _Cumulative:
    """Anthropic reports usage as running totals; hand out only what is new."""

    def __init__(self) -> None:
        self.seen = Usage()
        self.final = False

    def update(self, usage: Any) -> Usage | None:
        if usage is None:
            return None
        total = Usage(
            input_tokens=_max(usage, "input_tokens", self.seen.input_tokens),
            output_tokens=_max(usage, "output_tokens", self.seen.output_tokens),
            cache_read_tokens=_max(usage, "cache_read_input_tokens", self.seen.cache_read_tokens),
            cache_write_tokens=_max(
                usage, "cache_creation_input_tokens", self.seen.cache_write_tokens
            ),
        )
        seen, self.seen = self.seen, total
        increment = Usage(
            total.input_tokens - seen.input_tokens,
            total.output_tokens - seen.output_tokens,
            total.cache_read_tokens - seen.cache_read_tokens,
            total.cache_write_tokens - seen.cache_write_tokens,
        )
        return increment if increment.total else None

    def unreported_output(self, received_chars: int) -> Usage | None:
        """For a response cut short: the output written beyond what was reported, estimated
        from its characters. The server bills it, but the final usage never came."""
        estimate = -(-received_chars // CHARS_PER_TOKEN)
        if self.final or estimate <= self.seen.output_tokens:
            return None
        increment = Usage(output_tokens=estimate - self.seen.output_tokens)
        self.seen = dataclasses.replace(self.seen, output_tokens=estimate)
        return increment


def _max(usage: Any, field: str, seen: int) -> int:
    value = getattr(usage, field, None)
    return max(seen, int(value)) if isinstance(value, int) else seen


def to_anthropic_messages(request: TurnRequest) -> list[dict[str, Any]]:
    """Our messages in Messages API shape: tool results travel in user turns, and consecutive
    same-role turns are merged (the API wants user and assistant to alternate)."""
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for m in request.messages:
        if m.role == "tool":
            result = {
                "type": "tool_result",
                "tool_use_id": m.tool_call_id or "",
                "content": m.content,
            }
            add("user", [result])
        elif m.role == "assistant":
            blocks: list[dict[str, Any]] = []
            if m.content.strip():
                blocks.append({"type": "text", "text": m.content.rstrip()})
            blocks += [
                {"type": "tool_use", "id": c.id, "name": c.name, "input": dict(c.arguments)}
                for c in m.tool_calls
            ]
            add("assistant", blocks)
        elif m.role == "user":
            add("user", [{"type": "text", "text": m.content or " "}])
    return out


# --- errors --------------------------------------------------------------------------------------


def _detail(exc: anthropic.APIError) -> tuple[str | None, str]:
    body = exc.body
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict):
        kind = error.get("type")
        return (str(kind) if kind else None), str(error.get("message") or exc.message)
    return None, exc.message


def map_error(
    exc: BaseException,
    *,
    secrets: tuple[str, ...] = (),
    streaming: bool = True,
    key_note: str | None = None,
) -> ProviderError:
    """An SDK or transport exception as one of our typed errors (`streaming`: after a 200)."""
    if isinstance(exc, anthropic.APIStatusError):
        kind, message = _detail(exc)
        if kind is not None:  # the server's text, like the message: it may echo the key
            kind = clip_message(kind, secrets)
        detail = clip_message(message, secrets)
        wait = retry_after(exc.response.headers)
        status = exc.status_code
        if status == 200:  # an `event: error` inside the stream
            where = f"{kind or 'error'} (in stream): {detail}"
            if kind == "rate_limit_error":
                return RateLimited(f"429 {where}", retry_after=wait)
            if kind == "overloaded_error":
                return RateLimited(f"529 {where}", retry_after=wait)
            if kind in FATAL_TYPES or kind in FATAL_STREAM_TYPES:
                return FatalError(where)
            return TransientError(where)
        account = (kind or "billing_error") if status == 402 or kind in FATAL_TYPES else None
        return status_error(status, detail, wait, kind=kind, account=account, key_note=key_note)
    if isinstance(exc, anthropic.APITimeoutError):
        return TransientError(READ_TIMEOUT)
    if isinstance(exc, anthropic.APIConnectionError):
        return connection_error(exc, exc.message, secrets, streaming=streaming)
    if isinstance(exc, anthropic.APIError):
        return TransientError(clip_message(f"stream error: {exc.message}", secrets))
    return transport_error(exc, secrets, streaming=streaming)
