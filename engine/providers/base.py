"""The one seam between a child and a model: a Protocol, its events and its typed errors."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import field
from typing import Any, Literal, Protocol

from flightdeck.engine.model import Usage, record

Role = Literal["system", "user", "assistant", "tool"]


@record
class ToolCall:
    id: str
    name: str
    arguments: Mapping[str, Any]


@record
class Message:
    """One chat message in a provider-neutral shape."""

    role: Role
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str | None = None  # for role == "tool"
    name: str | None = None  # tool name, for role == "tool"


@record
class ToolSpec:
    name: str
    description: str
    parameters: Mapping[str, Any]  # JSON schema of the arguments


@record
class TurnRequest:
    """Everything a provider needs for one streamed turn."""

    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]
    max_tokens: int
    child_id: str = ""


# --- stream events -----------------------------------------------------------------------------


@record
class TextDelta:
    text: str


@record
class ToolCallEvent:
    call: ToolCall


@record
class UsageEvent:
    """Usage billed for this call; may arrive more than once, each is an increment."""

    usage: Usage
    estimated: bool = False  # counted from characters: the server's own count never came


@record
class HeadroomEvent:
    """Rate-limit headroom from response headers."""

    remaining_requests: int | None = None
    remaining_tokens: int | None = None
    reset_requests_s: float | None = None
    reset_tokens_s: float | None = None
    limit_requests: int | None = None  # the server's stated limits, per minute
    limit_tokens: int | None = None
    malformed: tuple[str, ...] = ()  # rate-limit headers present but unreadable (ignored)


StreamEvent = TextDelta | ToolCallEvent | UsageEvent | HeadroomEvent


# --- errors: defined with the rest of the tree in errors.py, importable from here too -------


class Interrupted(Exception):
    """The stream was closed from the controlling thread (stop or steer --now)."""


# --- the protocol ------------------------------------------------------------------------------


class TurnStream(Protocol):
    """An open streamed response. `close()` may be called from another thread at any time and
    must make a blocked iteration end promptly (raising `Interrupted` or just stopping)."""

    def __iter__(self) -> Iterator[StreamEvent]: ...

    def close(self) -> None: ...


# What a local server (Ollama, vLLM, llama.cpp) gets when its route names no key that is set:
# they ignore the key, but the SDKs insist on one.
LOCAL_PLACEHOLDER_KEY = "local-server-no-key"


def unsent_key_note(options: Mapping[str, object], api_key: str) -> str | None:
    """What a 401/403 adds when the route named a variable for its key and a local server got
    the placeholder instead (the variable unset or empty): which variable to set."""
    named = options.get("api_key_env")
    if api_key != LOCAL_PLACEHOLDER_KEY or not named:
        return None
    return f"{named} is not set or empty, so no key was sent"


# A header value this long may be a credential (a gateway's key); a shorter one ("1", "json")
# would only redact the same word wherever the model writes it.
SECRET_HEADER_CHARS = 8


# A header value `<scheme> <credential>` (`Authorization: Bearer …`, `Basic …`, `Token …`): a
# server or a model that echoes the credential rarely echoes its scheme with it.
_SCHEMED = re.compile(r"[A-Za-z][A-Za-z0-9_-]*\s+(\S+)")


def key_secrets(api_key: str, headers: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """A provider's `secrets`: its key, and the values of the route's `headers` that may be
    credentials (a server can echo either), and the credential of one that names its scheme
    first (`Bearer …`) on its own. A local server's placeholder is no secret: it would only
    redact a model saying it."""
    values: list[str] = []
    for value in (str(v) for v in (headers or {}).values()):
        schemed = _SCHEMED.fullmatch(value.strip())
        values += [value, schemed.group(1)] if schemed else [value]
    key = () if api_key == LOCAL_PLACEHOLDER_KEY else (api_key,)
    return (*key, *dict.fromkeys(v for v in values if len(v) >= SECRET_HEADER_CHARS))


# Each SDK sends the headers of its variable (`Name: value`, a line each) on every request.
SDK_HEADERS_ENV = {"anthropic": "ANTHROPIC_CUSTOM_HEADERS", "openai": "OPENAI_CUSTOM_HEADERS"}


def sdk_secrets(
    provider: str, api_key: str, headers: Mapping[str, str] | None = None
) -> tuple[str, ...]:
    """`key_secrets` of every header the provider's SDK sends: the route's `headers`, and
    those of its SDK_HEADERS_ENV variable (parsed as the SDK parses them; the route's win)."""
    sent: dict[str, str] = {}
    for line in os.environ.get(SDK_HEADERS_ENV[provider], "").split("\n"):
        name, colon, value = line.partition(":")
        if colon:
            sent[name.strip()] = value.strip()
    return key_secrets(api_key, {**sent, **(headers or {})})


class Provider(Protocol):
    """A model client. One instance per route, shared by all of that route's children."""

    name: str
    model: str
    # What must never be written anywhere: the route's API key. A server can echo it in an
    # error or in model output, so the child redacts it from everything it records and shows.
    secrets: tuple[str, ...]

    def open(self, request: TurnRequest) -> TurnStream:
        """Start a streamed turn; may raise a ProviderError before any event."""
        ...

    def close(self) -> None:
        """Release connections; called once when the engine shuts down."""
        ...


@record
class TurnResult:
    """A finished turn as the child loop assembles it."""

    text: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage = field(default_factory=Usage)
