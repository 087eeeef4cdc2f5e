"""A loopback HTTP server speaking the OpenAI Chat Completions and Anthropic Messages wire formats.

It binds 127.0.0.1 on a random port, serves each connection on its own thread (HTTP/1.1
keep-alive, chunked SSE), records when each request arrived, and answers from a script of
`Reply` values: text, tool calls, usage with cached tokens, rate-limit headers, and faults (429
with or without Retry-After, 5xx/529, insufficient quota, 401, a stall before the headers or in
the middle of the stream, a disconnect mid-stream, a malformed JSON chunk), and, through a
`Fault`, responses whose HTTP is sound but whose content is not (a stream that ends cleanly
before its end marker, a chunk of the wrong shape, an error body of raw bytes).

    with Loopback() as server:
        server.script(Reply(status=429, retry_after="1"), Reply(text="hi"))
        ... point a client at server.openai_url or server.anthropic_url ...
        server.received  # [Received(ts=..., path="/v1/chat/completions", ...), ...]
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import math
import select
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import MappingProxyType
from typing import Any

from flightdeck.engine.api import Engine
from flightdeck.engine.inputs.settings import Price, RetrySettings, Route
from flightdeck.engine.model import Snapshot
from flightdeck.engine.providers import FirstCall, make_provider
from flightdeck.engine.providers.base import Provider, ToolSpec

OPENAI_PATH = "/v1/chat/completions"
ANTHROPIC_PATH = "/v1/messages"
MAX_STALL_S = 30.0  # a stalled handler gives up after this even if nobody releases it


@dataclass(frozen=True)
class ToolUse:
    id: str
    name: str
    arguments: dict[str, Any]


@dataclass(frozen=True)
class Reply:
    """What the server does with one request."""

    status: int = 200
    text: str = "Hello from the loopback server."
    tools: tuple[ToolUse, ...] = ()
    input_tokens: int = 120  # fresh input, excluding cache reads and writes
    output_tokens: int = 12
    cache_read: int = 0
    cache_write: int = 0  # Anthropic only
    headers: dict[str, str] = field(default_factory=dict)
    retry_after: str | None = None  # `retry-after` header value
    retry_after_ms: str | None = None  # `retry-after-ms` header value
    error_type: str | None = None  # body error type/code for a non-200 status
    message: str = "loopback error"
    stream_error: str | None = None  # Anthropic: an `event: error` of this type mid-stream
    chunk_chars: int = 8  # text per SSE chunk
    chunk_delay_s: float = 0.0
    stall_before_headers: bool = False
    stall_after_chunks: int | None = None  # stall once this many content chunks were sent
    disconnect_after_chunks: int | None = None
    malformed_after_chunks: int | None = None
    no_usage: bool = False
    fault: Fault | None = None  # a stream cut short cleanly, a wrong-shaped chunk: see Fault


@dataclass(frozen=True)
class Received:
    ts: float  # time.monotonic() when the request line arrived
    path: str
    headers: dict[str, str]
    body: dict[str, Any]


Responder = Callable[[Received], Reply]


class Loopback:
    """The server; a context manager. `release()` ends every stall at once."""

    def __init__(
        self,
        responder: Responder | None = None,
        formats: dict[str, Callable[[int, dict[str, Any]], _Format]] | None = None,
    ) -> None:
        # The paths served, each in its wire format (more can be added: tests/agentserver.py).
        self.formats = formats or {OPENAI_PATH: _OpenAIFormat, ANTHROPIC_PATH: _AnthropicFormat}
        self._lock = threading.Lock()
        self._script: deque[Reply] = deque()
        self.default = Reply()
        self.responder = responder
        self.received: list[Received] = []
        self.served: list[tuple[float, float, int]] = []  # (received, finished, status)
        self.in_flight = 0
        self.peak_in_flight = 0
        # Stalls that ran out MAX_STALL_S unreleased: a client that saw its stream end while
        # this is 0 was ended by itself (its timeout, a close), not by the server giving up.
        self.stalls_given_up = 0
        self._released = threading.Event()
        self._ids = itertools.count(1)
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.loopback = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    # --- lifecycle ---

    def __enter__(self) -> Loopback:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.release()
        self._server.shutdown()
        self._server.close_all()
        self._server.server_close()
        self._thread.join(5)

    # --- configuration ---

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        return self.url + "/v1"

    @property
    def anthropic_url(self) -> str:
        return self.url

    def script(self, *replies: Reply) -> None:
        """Answer the next requests with these replies, in order; then `default`."""
        with self._lock:
            self._script.extend(replies)

    def release(self) -> None:
        """End every stall (stalled handlers then close their connection)."""
        self._released.set()

    def idle(self) -> bool:
        """No connection open or waiting to be accepted: every request a client sent (one now
        dead included) has been read and counted."""
        # Under the lock, a connection is in one of three places, each seen: the backlog, an
        # accept under way, or the open set (until its handler has counted it and closed it).
        with self._server._conns_lock:
            server = self._server
            if server._conns or server._accepting:
                return False
            return not select.select([server.socket], [], [], 0)[0]

    def drop_connections(self) -> None:
        """Close every open connection from the server's side, as a keep-alive timeout does."""
        self._server.close_all()

    def times(self) -> list[float]:
        with self._lock:
            return [r.ts for r in self.received]

    # --- used by the handler ---

    def _next(self, received: Received) -> Reply:
        with self._lock:
            self.received.append(received)
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
            if self.responder is None and self._script:
                return self._script.popleft()
        return self.responder(received) if self.responder is not None else self.default

    def _done(self, received: Received, status: int) -> None:
        with self._lock:
            self.in_flight -= 1
            self.served.append((received.ts, time.monotonic(), status))

    def _stall(self) -> None:
        if not self._released.wait(MAX_STALL_S):
            with self._lock:
                self.stalls_given_up += 1

    def _id(self) -> int:
        return next(self._ids)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    loopback: Loopback

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        self._accepting = 0  # accepts under way: out of the backlog, not yet in _conns

    def shutdown_request(self, request: Any) -> None:
        with self._conns_lock:
            self._conns.discard(request)
        super().shutdown_request(request)

    def get_request(self) -> tuple[socket.socket, Any]:
        with self._conns_lock:
            self._accepting += 1
        try:
            conn, address = super().get_request()
            with self._conns_lock:
                self._conns.add(conn)  # shutdown_request takes it out, on every path
        finally:
            with self._conns_lock:
                self._accepting -= 1
        # Many small SSE writes: without this, Nagle and delayed ACKs add ~40 ms per response.
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn, address

    def handle_error(self, request: Any, client_address: Any) -> None:
        """Clients that reset or drop their connection are expected here; stay quiet."""
        exc = sys.exc_info()[1]
        if not isinstance(exc, OSError):
            super().handle_error(request, client_address)

    def close_all(self) -> None:
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class _Disconnect(Exception):
    """Drop the connection without finishing the response."""


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read `received` instead."""

    def do_POST(self) -> None:
        ts = time.monotonic()
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {}
        headers = {k.lower(): v for k, v in self.headers.items()}
        loopback = self.server.loopback
        received = Received(ts, self.path, headers, body)
        reply = loopback._next(received)
        status = reply.status
        path = self.path.partition("?")[0].rstrip("/")  # Claude Code adds `?beta=true`
        try:
            if (fmt := loopback.formats.get(path)) is not None:
                self._serve(reply, body, fmt(loopback._id(), body))
            else:
                self._send_json(404, {"error": {"message": f"no route {self.path}"}}, {})
        except (_Disconnect, OSError):
            status = 0  # no complete response
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(socket.SHUT_RDWR)
        finally:
            loopback._done(received, status)

    # --- responses ---

    def _serve(self, reply: Reply, body: dict[str, Any], fmt: _Format) -> None:
        loopback = self.server.loopback
        if reply.stall_before_headers:
            loopback._stall()
            raise _Disconnect
        headers = dict(reply.headers)
        if reply.retry_after is not None:
            headers["retry-after"] = reply.retry_after
        if reply.retry_after_ms is not None:
            headers["retry-after-ms"] = reply.retry_after_ms
        if reply.status != 200:
            if reply.fault is not None and reply.fault.error_body is not None:
                _send_raw(self, reply.status, reply.fault.error_body, headers)
                return
            self._send_json(reply.status, fmt.error(reply), headers)
            return
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.send_header("date", formatdate(usegmt=True))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        sent = 0
        events = fmt.events(reply, bool(body.get("stream")))
        if reply.fault is not None:
            events = reply.fault.apply(events)
        for kind, event in events:
            if kind == "content":
                if reply.stall_after_chunks is not None and sent == reply.stall_after_chunks:
                    loopback._stall()
                    raise _Disconnect
                if reply.disconnect_after_chunks == sent:
                    raise _Disconnect
                if reply.malformed_after_chunks == sent:
                    self._chunk(fmt.malformed())
                sent += 1
                if reply.chunk_delay_s:
                    time.sleep(reply.chunk_delay_s)
            self._chunk(event)
        self._chunk(b"")

    def _chunk(self, data: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.flush()

    def _send_json(self, status: int, payload: dict[str, Any], headers: dict[str, str]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()


# --- wire formats --------------------------------------------------------------------------------


def _pieces(text: str, size: int) -> Iterator[str]:
    for start in range(0, len(text), max(1, size)):
        yield text[start : start + size]


class _Format:
    def events(self, reply: Reply, stream: bool) -> Iterator[tuple[str, bytes]]:
        raise NotImplementedError

    def error(self, reply: Reply) -> dict[str, Any]:
        raise NotImplementedError

    def malformed(self) -> bytes:
        raise NotImplementedError


class _OpenAIFormat(_Format):
    """Chat Completions chunks: `data: {json}` lines, then `data: [DONE]`."""

    def __init__(self, n: int, body: dict[str, Any]) -> None:
        self.id = f"chatcmpl-{n}"
        self.model = str(body.get("model", "loopback"))
        self.include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

    def _data(self, payload: dict[str, Any]) -> bytes:
        base = {"id": self.id, "object": "chat.completion.chunk", "created": 1, "model": self.model}
        return b"data: " + json.dumps({**base, **payload}).encode() + b"\n\n"

    def _choice(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        return self._data({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    def events(self, reply: Reply, stream: bool) -> Iterator[tuple[str, bytes]]:
        yield "meta", self._choice({"role": "assistant", "content": ""})
        for piece in _pieces(reply.text, reply.chunk_chars):
            yield "content", self._choice({"content": piece})
        for i, tool in enumerate(reply.tools):
            head = {"index": i, "id": tool.id, "type": "function"}
            head["function"] = {"name": tool.name, "arguments": ""}
            yield "content", self._choice({"tool_calls": [head]})
            for part in _pieces(json.dumps(tool.arguments), 7):
                yield (
                    "content",
                    self._choice({"tool_calls": [{"index": i, "function": {"arguments": part}}]}),
                )
        yield "meta", self._choice({}, "tool_calls" if reply.tools else "stop")
        if self.include_usage and not reply.no_usage:
            prompt = reply.input_tokens + reply.cache_read
            usage = {
                "prompt_tokens": prompt,
                "completion_tokens": reply.output_tokens,
                "total_tokens": prompt + reply.output_tokens,
                "prompt_tokens_details": {"cached_tokens": reply.cache_read},
            }
            yield "meta", self._data({"choices": [], "usage": usage})
        yield "meta", b"data: [DONE]\n\n"

    def error(self, reply: Reply) -> dict[str, Any]:
        kind = reply.error_type or {401: "invalid_api_key", 429: "rate_limit_exceeded"}.get(
            reply.status, "server_error"
        )
        return {"error": {"message": reply.message, "type": kind, "param": None, "code": kind}}

    def malformed(self) -> bytes:
        return b'data: {"id": "chatcmpl-x", "choices": [{"index": 0, "delta": {"content": "tru\n\n'


class _AnthropicFormat(_Format):
    """Messages events: `event: name` + `data: {json}` pairs."""

    def __init__(self, n: int, body: dict[str, Any]) -> None:
        self.id = f"msg_{n:08d}"
        self.model = str(body.get("model", "loopback"))

    @staticmethod
    def _event(name: str, payload: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps({'type': name, **payload})}\n\n".encode()

    def events(self, reply: Reply, stream: bool) -> Iterator[tuple[str, bytes]]:
        usage = {
            "input_tokens": reply.input_tokens,
            "cache_creation_input_tokens": reply.cache_write,
            "cache_read_input_tokens": reply.cache_read,
            "output_tokens": 1,
        }
        message = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": usage,
        }
        yield "meta", self._event("message_start", {"message": message})
        yield "meta", self._event("ping", {})
        index = 0
        if reply.text:
            block = {"type": "text", "text": ""}
            yield "meta", self._event("content_block_start", {"index": 0, "content_block": block})
            for piece in _pieces(reply.text, reply.chunk_chars):
                delta = {"type": "text_delta", "text": piece}
                yield "content", self._event("content_block_delta", {"index": 0, "delta": delta})
            yield "meta", self._event("content_block_stop", {"index": 0})
            index = 1
        if reply.stream_error is not None:
            error = {"type": reply.stream_error, "message": reply.message}
            yield "meta", self._event("error", {"error": error})
            return
        for i, tool in enumerate(reply.tools, start=index):
            block = {"type": "tool_use", "id": tool.id, "name": tool.name, "input": {}}
            yield "meta", self._event("content_block_start", {"index": i, "content_block": block})
            for part in _pieces(json.dumps(tool.arguments), 7):
                delta = {"type": "input_json_delta", "partial_json": part}
                yield "content", self._event("content_block_delta", {"index": i, "delta": delta})
            yield "meta", self._event("content_block_stop", {"index": i})
        stop = "tool_use" if reply.tools else "end_turn"
        final = {} if reply.no_usage else {"usage": {"output_tokens": reply.output_tokens}}
        delta = {"stop_reason": stop, "stop_sequence": None}
        yield "meta", self._event("message_delta", {"delta": delta, **final})
        yield "meta", self._event("message_stop", {})

    def error(self, reply: Reply) -> dict[str, Any]:
        kind = reply.error_type or {
            400: "invalid_request_error",
            401: "authentication_error",
            402: "billing_error",
            403: "permission_error",
            429: "rate_limit_error",
            529: "overloaded_error",
        }.get(reply.status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": reply.message}}

    def malformed(self) -> bytes:
        return b'event: content_block_delta\ndata: {"type": "content_block_delta", "ind\n\n'


# --- faults a well-formed HTTP response can carry (issue 17: broken streams, huge errors) -------


@dataclass(frozen=True)
class Fault:
    """A response that goes wrong while its HTTP stays well formed, so no transport error shows:
    the body ends cleanly (its last chunk is sent) before the wire format's own end, a raw SSE
    chunk is slipped in, or a non-200 reply's body is raw bytes instead of the JSON error."""

    end_after_chunks: int | None = None  # end the body once this many content chunks were sent
    end_before: str | None = None  # end the body at the first event whose bytes hold this text
    inject: bytes = b""  # raw SSE bytes, sent once `inject_after_chunks` content chunks were
    inject_after_chunks: int = 0
    error_body: bytes | None = None  # a non-200 reply's body, as text/html

    def apply(self, events: Iterator[tuple[str, bytes]]) -> Iterator[tuple[str, bytes]]:
        """The format's events, cut short or with the injected chunk."""
        sent = 0
        for kind, event in events:
            if self.end_before is not None and self.end_before.encode() in event:
                return
            if kind == "content":
                if self.end_after_chunks == sent:
                    return
                if self.inject and self.inject_after_chunks == sent:
                    yield "meta", self.inject
                sent += 1
            yield kind, event


def _send_raw(handler: _Handler, status: int, data: bytes, headers: dict[str, str]) -> None:
    handler.send_response(status)
    handler.send_header("content-type", "text/html")
    handler.send_header("content-length", str(len(data)))
    for name, value in headers.items():
        handler.send_header(name, value)
    handler.end_headers()
    handler.wfile.write(data)
    handler.wfile.flush()


# --- rate-limited responders for the benchmark and the retry tests -------------------------------


class WindowLimit:
    """Answers 429 once more than `limit` requests arrived within the last `window_s` seconds."""

    def __init__(self, limit: int, window_s: float, reply: Reply | None = None) -> None:
        self.limit = limit
        self.window_s = window_s
        self.reply = reply or Reply(text="ok", output_tokens=2)
        self._lock = threading.Lock()
        self._accepted: deque[float] = deque()
        self.ok = 0
        self.limited = 0

    def __call__(self, received: Received) -> Reply:
        with self._lock:
            while self._accepted and received.ts - self._accepted[0] >= self.window_s:
                self._accepted.popleft()
            if len(self._accepted) >= self.limit:
                self.limited += 1
                wait = self.window_s - (received.ts - self._accepted[0])
                return Reply(status=429, retry_after_ms=f"{wait * 1000:.0f}")
            self._accepted.append(received.ts)
            self.ok += 1
            return self.reply


class InFlightLimit:
    """Answers 429 when more than `limit` requests are being served at once."""

    def __init__(self, server: Loopback, limit: int, reply: Reply | None = None) -> None:
        self.server = server
        self.limit = limit
        self.reply = reply or Reply(text="ok", output_tokens=2)
        self.ok = 0
        self.limited = 0

    def __call__(self, received: Received) -> Reply:
        # `in_flight` already counts this request.
        if self.server.in_flight > self.limit:
            self.limited += 1
            return Reply(status=429)
        self.ok += 1
        return self.reply


# --- routes pointing at a server -----------------------------------------------------------------

KEY_ENV = "FLIGHTDECK_TEST_KEY"


PRICE = Price(Decimal("2.50"), Decimal("10"), Decimal("0.25"), Decimal("3"))  # every route's


def route_for(
    server: Loopback,
    provider: str,
    name: str | None = None,
    *,
    read_timeout_s: float = 10.0,
    **fields: Any,
) -> Route:
    """A Route for `provider` ("openai" or "anthropic") on this server, key in KEY_ENV."""
    url = server.openai_url if provider == "openai" else server.anthropic_url
    options = {
        "base_url": url,
        "api_key_env": KEY_ENV,
        "connect_timeout_s": 2.0,
        "read_timeout_s": read_timeout_s,
    }
    fields.setdefault("retry", RetrySettings(attempts=4, base_s=0.01, max_s=0.05))
    fields.setdefault("price", PRICE)
    return Route(
        name=name or provider,
        provider=provider,  # type: ignore[arg-type]
        model=f"{provider}-loopback-1",
        options=MappingProxyType(options),
        **fields,
    )


# The tool the scripted replies call; provider tests put it in their requests.
READ_FILE = ToolSpec(
    "read_file",
    "Read a file in the workspace",
    {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
)


def provider_for(server: Loopback, provider: str, key: str, **fields: Any) -> Provider:
    """A real SDK provider for `route_for(server, provider, ...)`, holding `key`: the SDK's
    client itself, made now (the engine's is made at its route's first turn: FirstCall)."""
    made = make_provider(route_for(server, provider, **fields), {KEY_ENV: key})
    assert isinstance(made, FirstCall)
    return made.client()


def run_batch(
    responder: Responder, provider: str, children: int, state_dir: Path, key: str
) -> Snapshot:
    """`children` tasks on a `provider` route to a server answering with `responder`, its key
    `key`, run to the end: the final snapshot (the engine closed)."""
    from helpers import batch, run_to_end, settings

    with Loopback(responder) as server:
        route = route_for(server, provider)
        engine = Engine(
            batch(children, route=provider),
            settings(route),
            state_dir=state_dir,
            env={KEY_ENV: key},
        )
        engine.start()
        return run_to_end(engine)


# --- a provider's rate limit: a bucket with real waits, and its headers in both dialects ---------
# (kept apart from the replies and responders above: the rate-limit benchmark and tests use it)


class BucketLimit:
    """Enforces a provider's per-minute limits the way providers do: a bucket of `requests`
    that refills `requests`/60 a second (and, with `tokens`, one of that many tokens, charged
    each reply's usage on arrival); an empty bucket answers 429 with `retry-after` (seconds
    until one request fits). Every response carries the limits in `dialect` ("openai":
    `x-ratelimit-*`, "anthropic": `anthropic-ratelimit-*`, None: no limit headers at all).

    `scale` runs the bucket's time faster (4: refills four times as fast); the headers then
    state the limit per scaled minute, as a server with a limit `scale` times higher would.
    `bound_s(n)` is the shortest time in which the bucket lets `n` requests through.
    """

    def __init__(
        self,
        requests: int | None = 240,
        tokens: int | None = None,
        *,
        dialect: str | None = "openai",
        scale: float = 1.0,
        reply: Reply | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.dialect = dialect
        self.scale = scale
        self.reply = reply or Reply(text="ok", output_tokens=12)
        self._clock = clock
        self._lock = threading.Lock()
        now = clock()
        # name -> [capacity, level, stamp]; refill per real second = capacity / 60 * scale
        self._buckets: dict[str, list[float]] = {}
        if requests:
            self._buckets["requests"] = [float(requests), float(requests), now]
        if tokens:
            self._buckets["tokens"] = [float(tokens), float(tokens), now]
        self.ok = 0
        self.limited = 0

    def cost(self, kind: str) -> float:
        """What one reply takes from the `kind` bucket."""
        return (
            1.0 if kind == "requests" else float(self.reply.input_tokens + self.reply.output_tokens)
        )

    def bound_s(self, n: int) -> float:
        """The least time, from the first request, in which the buckets admit `n` requests."""
        worst = 0.0
        for kind, (capacity, _, _) in self._buckets.items():
            over = n * self.cost(kind) - capacity
            worst = max(worst, over / (capacity / 60.0 * self.scale)) if over > 0 else worst
        return worst

    def _refill(self, bucket: list[float], now: float) -> None:
        capacity, level, stamp = bucket
        bucket[1] = min(capacity, level + (now - stamp) * capacity / 60.0 * self.scale)
        bucket[2] = now

    def __call__(self, received: Received) -> Reply:
        with self._lock:
            now = self._clock()
            for bucket in self._buckets.values():
                self._refill(bucket, now)
            short = [
                (self.cost(kind) - b[1]) / (b[0] / 60.0 * self.scale)
                for kind, b in self._buckets.items()
                if b[1] < self.cost(kind)
            ]
            if short:
                self.limited += 1
                wait = max(short)
                headers = self._headers(received, now)
                return Reply(status=429, retry_after=f"{max(1, math.ceil(wait))}", headers=headers)
            for kind, bucket in self._buckets.items():
                bucket[1] -= self.cost(kind)
            self.ok += 1
            headers = {**self._headers(received, now), **self.reply.headers}
            return dataclasses.replace(self.reply, headers=headers)

    def _headers(self, received: Received, now: float) -> dict[str, str]:
        dialect = self.dialect
        if dialect is None:
            return {}
        out: dict[str, str] = {}
        for kind, (capacity, level, _) in self._buckets.items():
            per_minute = capacity * self.scale
            refill = capacity / 60.0 * self.scale
            left = max(0, int(level))
            full_in = (capacity - level) / refill  # seconds until the bucket is full again
            if dialect == "openai":
                out[f"x-ratelimit-limit-{kind}"] = f"{per_minute:.0f}"
                out[f"x-ratelimit-remaining-{kind}"] = str(left)
                out[f"x-ratelimit-reset-{kind}"] = f"{full_in:.3f}s"
            else:
                when = datetime.now(UTC) + timedelta(seconds=full_in)
                out[f"anthropic-ratelimit-{kind}-limit"] = f"{per_minute:.0f}"
                out[f"anthropic-ratelimit-{kind}-remaining"] = str(left)
                out[f"anthropic-ratelimit-{kind}-reset"] = when.isoformat().replace("+00:00", "Z")
        return out
