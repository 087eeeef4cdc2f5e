"""What the two SDK providers share: tool-call arguments, and typed errors from HTTP statuses and
transport failures."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, TypeVar

import httpx2
from flightdeck.engine.errors import (
    BrokenStream,
    FatalError,
    ProviderError,
    RateLimited,
    TransientError,
)
from flightdeck.engine.sanitize import redact

READ_TIMEOUT = "timeout: no data within the read timeout"
MAX_MESSAGE = 300  # an error message the operator reads in one row
# Of a server's error text, at most this much is read at all: a 4xx/5xx body (a proxy's HTML
# page, an echo of the request) can be megabytes, for every child that meets it.
READ_OF_MESSAGE = 16 * MAX_MESSAGE
_LAST_SPACE = re.compile(r"\s\S*\Z")

T = TypeVar("T")


def parse_arguments(raw: str) -> Mapping[str, Any]:
    """A tool call's JSON arguments; unparsable text is handed on for the tool to reject."""
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested past Python's stack
        return {"_unparsed_arguments": raw}
    return value if isinstance(value, dict) else {"_arguments": value}


def clip_message(text: str, secrets: tuple[str, ...]) -> str:
    """One line, the key redacted, at most MAX_MESSAGE characters: an error fit for the row."""
    if len(text) > READ_OF_MESSAGE:
        # Cut at a space, which no key holds: a key split by the cut would escape redaction.
        head = text[:READ_OF_MESSAGE]
        space = _LAST_SPACE.search(head)
        text = (head[: space.start()] if space else "") + " …"
    text = redact(" ".join(text.split()), secrets)
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


def status_error(
    status: int,
    detail: str,
    wait: float | None,
    *,
    kind: str | None = None,
    account: str | None = None,
    key_note: str | None = None,
) -> ProviderError:
    """An HTTP error status as one of our typed errors.

    `kind` is the provider's error type, named in the message when given; `account` names an
    account problem (out of credit, key revoked) that no retry can fix; `key_note` why no key
    went with the request (base.unsent_key_note).
    """
    if status in (401, 403):
        check = f"check the API key: {key_note}" if key_note else "check the API key"
        return FatalError(f"{status} authentication failed ({check}): {detail}")
    if account is not None:
        return FatalError(f"{status} {account}: {detail}")
    if status == 429:
        return RateLimited(f"429 rate limited: {detail}", retry_after=wait)
    if status == 529:
        return RateLimited(f"529 overloaded: {detail}", retry_after=wait)
    if status in (408, 409) or status >= 500:
        return TransientError(f"{status} {kind or 'server error'}: {detail}", retry_after=wait)
    return FatalError(f"{status} {kind or 'request rejected'}: {detail}")


def connection_error(
    exc: BaseException, message: str, secrets: tuple[str, ...], *, streaming: bool = True
) -> ProviderError:
    """An SDK's connection error, naming the socket-level cause when there is one. After a 200
    (`streaming`) it is the body that failed: anthropic 2.17 wraps a failed read of the stream
    in its connection error, where earlier versions let httpx's error through."""
    cause = exc.__cause__
    if streaming and isinstance(cause, httpx2.HTTPError):
        return transport_error(cause, secrets, streaming=True)
    why = f"{type(cause).__name__}: {cause}" if cause is not None else message
    return TransientError(clip_message(f"connection error: {why}", secrets))


def transport_error(
    exc: BaseException, secrets: tuple[str, ...], *, streaming: bool = True
) -> ProviderError:
    """What is left once an SDK's own errors are mapped: httpx failures and malformed data
    (`streaming`: a 200 response had begun, so bad data there is a broken stream)."""
    if isinstance(exc, httpx2.TimeoutException):
        return TransientError(READ_TIMEOUT)
    if isinstance(exc, httpx2.HTTPError):
        return TransientError(clip_message(f"stream broke: {type(exc).__name__}: {exc}", secrets))
    if not streaming:  # raised before any response: not the stream's fault
        return TransientError(clip_message(f"request failed: {type(exc).__name__}: {exc}", secrets))
    # json.JSONDecodeError (a ValueError): an SSE data line that is not JSON.
    return broken(clip_message(f"malformed chunk: {type(exc).__name__}: {exc}", secrets))


def broken(why: str) -> BrokenStream:
    """A stream cut short or unreadable, in the words the transcript and the row show (the
    retry notice shows the part before the first colon: "broken stream")."""
    return BrokenStream(f"broken stream: {why}")


def expect(value: object, kind: type[T], where: str) -> T:
    """`value` if it is a `kind`, else the chunk is malformed. The SDKs build stream events
    without validating them (pydantic `construct`), so an event of the wrong shape shows only
    when a field of it is read: each field the providers use is read through this."""
    if not isinstance(value, kind):
        raise broken(f"malformed chunk: {where} is {type(value).__name__}, not {kind.__name__}")
    return value
