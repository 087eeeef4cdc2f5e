"""`sim`: an embedded, simulated model. Deterministic for a seed; no key, no network.

It behaves like a streaming chat model with tools: a time to first token, a token rate, tool-using
turns derived from the goal, realistic token counts, injected 429s (with Retry-After), 503s,
stalls and fatal errors, and a provider-side prompt cache whose prefix becomes readable once the
response that wrote it has started streaming. Every delay is multiplied by `time_scale`.
"""

from __future__ import annotations

import hashlib
import json
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from ..flag import Flag
from ..model import Usage
from ..settings import Route
from .base import (
    FatalError,
    Interrupted,
    RateLimited,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    TransientError,
    TurnRequest,
    UsageEvent,
)

_TEXT = (
    "the change looks correct overall but the error path needs a test and the naming could "
    "be clearer in two places; I checked the callers, the config loader, the retry loop and "
    "the docs; nothing blocks merging once the edge case with an empty input is handled and "
    "the log line stops printing the full payload"
)
_WORDS = tuple(_TEXT.split())


def _tokens(text: str) -> int:
    """About four characters a token, like real tokenizers on English and code."""
    return max(1, (len(text) + 3) // 4)


@dataclass(frozen=True, slots=True)
class SimOptions:
    time_scale: float = 1.0
    latency_ms: float = 400.0
    tokens_per_s: float = 60.0
    seed: int = 0
    error_rate: float = 0.0
    retry_after_s: float = 2.0
    server_error_rate: float = 0.0
    stall_rate: float = 0.0
    fail_rate: float = 0.0
    tool_turns: int | None = None
    read_timeout_s: float = 60.0
    cache: bool = True

    @classmethod
    def from_route(cls, route: Route) -> SimOptions:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in route.options.items() if k in known})


class SimProvider:
    """A simulated streaming chat model; one instance per route, shared by its children."""

    name = "sim"

    def __init__(self, route: Route) -> None:
        self.model = route.model
        self.options = SimOptions.from_route(route)
        self._lock = threading.Lock()
        self._opens: dict[str, int] = {}
        self._prefix_ready: dict[str, threading.Event] = {}
        self._prefix_keys: dict[tuple[str, int], tuple[str, int]] = {}

    def close(self) -> None:
        """Nothing to release: no connections."""

    def _rng(self, request: TurnRequest) -> random.Random:
        with self._lock:
            n = self._opens.get(request.child_id, 0)
            self._opens[request.child_id] = n + 1
        key = f"{self.options.seed}|{request.child_id}|{n}".encode()
        return random.Random(int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big"))

    def _cache_split(self, request: TurnRequest) -> tuple[int, int, threading.Event | None]:
        """(cache_read, cache_write) prefix tokens and the event this response must set."""
        if not self.options.cache:
            return 0, 0, None
        # Children of a route share one system prompt and tool tuple: key them by identity.
        ident = (request.system, id(request.tools))
        known = self._prefix_keys.get(ident)
        if known is None:
            prefix = request.system + json.dumps([t.name for t in request.tools])
            digest = hashlib.blake2b(prefix.encode(), digest_size=8).hexdigest()
            known = self._prefix_keys[ident] = (digest, _tokens(prefix) + 60 * len(request.tools))
        key, size = known
        with self._lock:
            ready = self._prefix_ready.get(key)
            if ready is None:
                ready = self._prefix_ready[key] = threading.Event()
                return 0, size, ready
        if ready.is_set():
            return size, 0, None
        # Written by a response that has not started streaming yet: a miss, written again.
        return 0, size, None

    def open(self, request: TurnRequest) -> SimStream:
        rng = self._rng(request)
        o = self.options
        roll = rng.random()
        if roll < o.fail_rate:
            raise FatalError("sim: simulated fatal error (invalid request)")
        roll -= o.fail_rate
        if roll < o.error_rate:
            raise RateLimited("sim: 429 rate limited", retry_after=o.retry_after_s * o.time_scale)
        roll -= o.error_rate
        if roll < o.server_error_rate:
            raise TransientError("sim: 503 service unavailable")
        stall = rng.random() < o.stall_rate
        return SimStream(self, request, rng, stall)


class SimStream:
    """One simulated streamed response; `close()` from any thread ends it within one tick."""

    def __init__(
        self, provider: SimProvider, request: TurnRequest, rng: random.Random, stall: bool
    ) -> None:
        self._p = provider
        self._req = request
        self._rng = rng
        self._stall = stall
        self._closed = Flag()

    def close(self) -> None:
        self._closed.set()

    def _wait(self, seconds: float) -> None:
        # Below a millisecond a timed wait costs more than the delay it models (a condition,
        # a futex, a GIL hand-off), so an "instant" sim only checks for close().
        if seconds < 0.001:
            if self._closed.is_set():
                raise Interrupted
            return
        if self._closed.wait(seconds):
            raise Interrupted

    def __iter__(self) -> Iterator[StreamEvent]:
        o = self._p.options
        text, calls = _plan(self._req, self._rng, o.tool_turns)
        cache_read, cache_write, writes = self._p._cache_split(self._req)
        prompt = _tokens(self._req.system) + sum(_tokens(m.content) for m in self._req.messages)
        prompt += 60 * len(self._req.tools) + sum(
            _tokens(json.dumps(dict(c.arguments))) for m in self._req.messages for c in m.tool_calls
        )
        usage_in = max(1, prompt - cache_read - cache_write)
        self._wait(o.latency_ms / 1000.0 * o.time_scale * self._rng.uniform(0.6, 1.4))
        if writes is not None:
            writes.set()  # the prefix is readable once the writing response streams
        per_token = o.time_scale / o.tokens_per_s
        # Emit a few tokens per chunk; coarser when the delay per chunk would be negligible.
        chunk_chars = 16 if per_token * 4 >= 0.002 else 4096
        sent = 0
        for start in range(0, len(text), chunk_chars):
            piece = text[start : start + chunk_chars]
            self._wait(per_token * _tokens(piece))
            sent += _tokens(piece)
            yield TextDelta(piece)
            if self._stall and start >= len(text) // 3:
                # Hang like a server that stopped sending; the read timeout breaks it.
                self._wait(o.read_timeout_s * o.time_scale)
                yield UsageEvent(Usage(usage_in, sent, cache_read, cache_write))
                raise TransientError("sim: stream stalled past the read timeout")
        for call in calls:
            self._wait(per_token * _tokens(json.dumps(dict(call.arguments))))
            yield ToolCallEvent(call)
        out = _tokens(text) + sum(_tokens(json.dumps(dict(c.arguments))) + 8 for c in calls)
        yield UsageEvent(Usage(usage_in, out, cache_read, cache_write))


def _plan(
    req: TurnRequest, rng: random.Random, tool_turns: int | None
) -> tuple[str, tuple[ToolCall, ...]]:
    """Decide this turn's text and tool calls from the conversation so far."""
    goal = next((m.content for m in req.messages if m.role == "user"), "the task")
    goal_line = goal.splitlines()[0][:120] if goal else "the task"
    done_tool_turns = sum(1 for m in req.messages if m.role == "assistant" and m.tool_calls)
    if tool_turns is None:
        digest = hashlib.blake2b(goal.encode(), digest_size=2).digest()
        tool_turns = 1 + digest[0] % 3
    tool_names = {t.name for t in req.tools}
    last = req.messages[-1] if req.messages else None
    preface = ""
    if last is not None and last.role == "user" and last.content.startswith("[operator]"):
        preface = f"Understood — {last.content.removeprefix('[operator]').strip()[:200]}. "
    if done_tool_turns < tool_turns and tool_names:
        call = _next_tool(req, rng, done_tool_turns, tool_names)
        if call is not None:
            return preface + _sentence(rng) + "\n", (call,)
    body = " ".join(_sentence(rng) for _ in range(3 + int(rng.random() * 7)))
    return f"{preface}Result for: {goal_line}\n{body}\n", ()


def _next_tool(req: TurnRequest, rng: random.Random, turn: int, names: set[str]) -> ToolCall | None:
    call_id = f"call_{rng.getrandbits(40):010x}"
    if turn == 0 and "list_dir" in names:
        return ToolCall(call_id, "list_dir", {"path": "."})
    listing = [m.content for m in req.messages if m.role == "tool" and m.name == "list_dir"]
    files = [
        line.strip()
        for text in listing[-1:]
        for line in text.splitlines()
        if line.strip() and not line.strip().endswith("/") and not line.startswith("error")
    ]
    if files and "read_file" in names:
        return ToolCall(call_id, "read_file", {"path": rng.choice(files)})
    if "list_dir" in names:
        return ToolCall(call_id, "list_dir", {"path": "."})
    return None


def _make_sentences() -> tuple[str, ...]:
    """A fixed pool of sentences: generating text per call would dominate a fast sim run."""
    rng = random.Random(0)
    out = []
    for _ in range(64):
        start = rng.randrange(len(_WORDS))
        n = rng.randint(8, 20)
        words = [_WORDS[(start + i) % len(_WORDS)] for i in range(n)]
        out.append(" ".join(words).capitalize().rstrip(";,") + ".")
    return tuple(out)


_SENTENCES = _make_sentences()


def _sentence(rng: random.Random) -> str:
    return _SENTENCES[int(rng.random() * len(_SENTENCES))]
