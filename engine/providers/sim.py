"""`sim`: an embedded, simulated model. Deterministic for a seed; no key, no network.

It behaves like a streaming chat model with tools: a time to first token, a token rate, tool-using
turns derived from the goal, realistic token counts, injected 429s (with Retry-After), 503s,
stalls and fatal errors, and a provider-side prompt cache whose prefix becomes readable once the
response that wrote it has started streaming. Every delay is multiplied by `time_scale`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import operator
import random
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from flightdeck.engine.errors import FatalError, RateLimited, TransientError
from flightdeck.engine.inputs.settings import Route
from flightdeck.engine.interrupt import Interrupt
from flightdeck.engine.model import ASK_TOOL, Usage
from flightdeck.engine.providers.base import (
    Interrupted,
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallEvent,
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


def turn_random(seed: int, child_id: str, turn: int) -> random.Random:
    """The draws of one simulated turn: fixed by the route's seed, the child and its turn number,
    so a batch replays for a seed however its threads interleave."""
    return random.Random(f"{seed}|{child_id}|{turn}")


@dataclass(frozen=True, slots=True)
class SimOptions:
    """A sim route's options; every delay is multiplied by `time_scale`."""

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
    # With the `delegate` tool offered: the chance a child splits its task on its first turn,
    # and into how many sub-tasks.
    delegate_rate: float = 0.0
    delegates: int = 3
    read_timeout_s: float = 60.0
    cache: bool = True
    # A folder that holds every call before its first token until a file in it releases the
    # call: `all`, `<child id>` or `<child id>@<call number>` (tests, demos; see _held).
    hold_dir: str | None = None

    @classmethod
    def from_route(cls, route: Route) -> SimOptions:
        """This route's sim options; its other keys are not the sim's to read."""
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in route.options.items() if k in known})


@dataclass(frozen=True, slots=True)
class _Prefix:
    key: str  # the provider-side prompt cache key
    cache_tokens: int  # what a cache read or write of this prefix counts
    prompt_tokens: int  # its share of a prompt's input tokens


_NAME = operator.attrgetter("name")  # a tool's name, read without a Python call


@functools.lru_cache(maxsize=64)
def _prefix(system: str, tool_names: tuple[str, ...]) -> _Prefix:
    """A prompt's shared prefix, the system prompt and tool schemas; a route's children share it."""
    text = system + json.dumps(list(tool_names))
    return _Prefix(
        hashlib.blake2b(text.encode(), digest_size=8).hexdigest(),
        _tokens(text) + 60 * len(tool_names),
        _tokens(system) + 60 * len(tool_names),
    )


class SimProvider:
    """A simulated streaming chat model; one instance per route, shared by its children."""

    name = "sim"
    secrets: tuple[str, ...] = ()  # no key

    def __init__(self, route: Route) -> None:
        self.model = route.model
        self.options = SimOptions.from_route(route)
        self._lock = threading.Lock()
        self._opens: dict[str, int] = {}
        self._prefix_ready: dict[str, threading.Event] = {}

    def close(self) -> None:
        """Nothing to release: no connections."""

    def _random(self, request: TurnRequest) -> tuple[int, random.Random]:
        """This call's number for its child (from 0, retries counted) and its draws."""
        with self._lock:
            turn = self._opens.get(request.child_id, 0)
            self._opens[request.child_id] = turn + 1
        return turn, turn_random(self.options.seed, request.child_id, turn)

    def _cache_split(self, prefix: _Prefix) -> tuple[int, int, threading.Event | None]:
        """(cache_read, cache_write) prefix tokens and the event this response must set."""
        if not self.options.cache:
            return 0, 0, None
        size = prefix.cache_tokens
        ready = self._prefix_ready.get(prefix.key)  # once made, read without the lock
        if ready is None:
            with self._lock:
                ready = self._prefix_ready.get(prefix.key)
                if ready is None:
                    self._prefix_ready[prefix.key] = ready = threading.Event()
                    return 0, size, ready
        if ready.is_set():
            return size, 0, None
        # Written by a response that has not started streaming yet: a miss, written again.
        return 0, size, None

    def open(self, request: TurnRequest) -> SimStream:
        """Start a simulated turn, or raise the error this turn draws."""
        call, rng = self._random(request)
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
        return SimStream(self, request, rng, stall, call)


HOLD_POLL_S = 0.01  # how often a held call looks for the file that releases it


class SimStream:
    """One simulated streamed response; `close()` from any thread ends it within one tick."""

    def __init__(
        self,
        provider: SimProvider,
        request: TurnRequest,
        rng: random.Random,
        stall: bool,
        call: int = 0,
    ) -> None:
        self._p = provider
        self._req = request
        self._rng = rng
        self._stall = stall
        self._call = call
        # Its Event is made only if a thread waits on it: an instant stream never does.
        self._closed = Interrupt()

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

    def _held(self) -> None:
        """With `hold_dir`: wait, before the first token, until a file there releases this call
        (`all`, the child's id, or `<id>@<call>`), so a test holds a child running for as long
        as it needs, in this process or another, instead of making it "long enough"."""
        folder = self._p.options.hold_dir
        if folder is None:
            return
        child = self._req.child_id
        names = [Path(folder, name) for name in ("all", child, f"{child}@{self._call}")]
        # Said with a file, so a test can wait until the call has got here: past its cache
        # read, which a call counted as made but not yet here has still to do.
        Path(folder, f"{child}@{self._call}.held").touch()
        while not any(path.exists() for path in names):
            if self._closed.wait(HOLD_POLL_S):
                raise Interrupted

    def __iter__(self) -> Iterator[StreamEvent]:
        o = self._p.options
        text, calls = _plan(self._req, self._rng, o)
        prefix = _prefix(self._req.system, tuple(map(_NAME, self._req.tools)))
        cache_read, cache_write, writes = self._p._cache_split(prefix)
        prompt = prefix.prompt_tokens
        for m in self._req.messages:
            prompt += _tokens(m.content)
            for c in m.tool_calls:
                prompt += _tokens(json.dumps(dict(c.arguments)))
        usage_in = max(1, prompt - cache_read - cache_write)
        per_token = o.time_scale / o.tokens_per_s
        # Emit a few tokens per chunk; coarser when the delay per chunk would be negligible.
        chunk_chars = 16 if per_token * 4 >= 0.002 else 4096
        sent = 0
        try:
            self._held()  # like a server slow to answer: the prompt is read, nothing written
            # The prompt is read while the first token waits: a stop then still pays for it.
            self._wait(o.latency_ms / 1000.0 * o.time_scale * self._rng.uniform(0.6, 1.4))
            if writes is not None:
                writes.set()  # the prefix is readable once the writing response streams
            for start in range(0, len(text), chunk_chars):
                piece = text[start : start + chunk_chars]
                tokens = _tokens(piece)
                self._wait(per_token * tokens)
                sent += tokens
                yield TextDelta(piece)
                if self._stall and start >= len(text) // 3:
                    # Hang like a server that stopped sending; the read timeout breaks it.
                    self._wait(o.read_timeout_s * o.time_scale)
                    yield UsageEvent(Usage(usage_in, sent, cache_read, cache_write))
                    raise TransientError("sim: stream stalled past the read timeout")
            for call in calls:
                size = _tokens(json.dumps(dict(call.arguments)))
                self._wait(per_token * size)
                sent += size + 8
                yield ToolCallEvent(call)
        except Interrupted:
            # Closed by a stop or a steer --now: the server has read the prompt and written
            # `sent` tokens, and bills them like a real one would.
            yield UsageEvent(Usage(usage_in, sent, cache_read, cache_write))
            raise
        # Everything is sent: `sent` is the text's tokens (every chunk but the last is a whole
        # number of tokens, 4 or 4,096 characters) and the calls'.
        yield UsageEvent(Usage(usage_in, sent, cache_read, cache_write))


# Goal markers that make a sim child loop on purpose, for tests and demos: it lists the same
# folder every turn. `[sim:loop]` stops once an operator message reaches it and answers;
# `[sim:loop!]` goes on regardless, until its turns run out or it is stopped.
LOOP_MARKER = "[sim:loop]"
STUBBORN_LOOP_MARKER = "[sim:loop!]"
# A goal marker that makes a sim child ask the operator first (when its route offers
# `ask_operator`), then answer with what the operator said.
ASK_MARKER = "[sim:ask]"


def _loops(req: TurnRequest, goal: str) -> bool:
    """Whether this turn of a child made to loop repeats its call."""
    if STUBBORN_LOOP_MARKER in goal:
        return True
    if LOOP_MARKER not in goal:
        return False
    return not any(m.role == "user" and m.content.startswith("[operator]") for m in req.messages)


def _plan(req: TurnRequest, rng: random.Random, o: SimOptions) -> tuple[str, tuple[ToolCall, ...]]:
    """Decide this turn's text and tool calls from the conversation so far."""
    tool_turns = o.tool_turns
    goal = "the task"
    for m in req.messages:
        if m.role == "user":
            goal = m.content
            break
    goal_line = goal.splitlines()[0][:120] if goal else "the task"
    if tool_turns is None:
        digest = hashlib.blake2b(goal.encode(), digest_size=2).digest()
        tool_turns = 1 + digest[0] % 3
    last = req.messages[-1] if req.messages else None
    preface = ""
    if last is not None and last.role == "user" and last.content.startswith("[operator]"):
        preface = f"Understood — {last.content.removeprefix('[operator]').strip()[:200]}. "
    offered = (  # on its first turn (no reply yet), when the route offers `delegate`
        o.delegate_rate
        and any(t.name == "delegate" for t in req.tools)
        and not any(m.role == "assistant" for m in req.messages)
    )
    if offered and rng.random() < o.delegate_rate:
        parts = [
            {"goal": f"Part {i} of {o.delegates} of: {goal_line}"}
            for i in range(1, o.delegates + 1)
        ]
        split = ToolCall(f"call_{rng.getrandbits(40):010x}", "delegate", {"tasks": parts})
        return preface + "This splits into parts; delegating them.\n", (split,)
    if ASK_MARKER in goal and any(t.name == ASK_TOOL for t in req.tools):
        return _ask_plan(req, rng, goal_line, preface)
    marked = LOOP_MARKER in goal or STUBBORN_LOOP_MARKER in goal
    if marked and any(t.name == "list_dir" for t in req.tools):
        if _loops(req, goal):
            again = ToolCall(f"call_{rng.getrandbits(40):010x}", "list_dir", {"path": "."})
            return preface + _sentence(rng) + "\n", (again,)
        return f"{preface}Result for: {goal_line}\n{_body(rng)}\n", ()
    if tool_turns and req.tools:
        done_tool_turns = sum(1 for m in req.messages if m.role == "assistant" and m.tool_calls)
        if done_tool_turns < tool_turns:
            call = _next_tool(req, rng, done_tool_turns, {t.name for t in req.tools})
            if call is not None:
                return preface + _sentence(rng) + "\n", (call,)
    return f"{preface}Result for: {goal_line}\n{_body(rng)}\n", ()


def _ask_plan(
    req: TurnRequest, rng: random.Random, goal_line: str, preface: str
) -> tuple[str, tuple[ToolCall, ...]]:
    """A child made to ask: the question first; once answered, its result quotes the answer."""
    answers = [m.content for m in req.messages if m.role == "tool" and m.name == ASK_TOOL]
    goal_line = goal_line.replace(ASK_MARKER, "").strip()
    if not answers:
        question = f"Before I start: should I go ahead with {goal_line!r}?"
        ask = ToolCall(f"call_{rng.getrandbits(40):010x}", ASK_TOOL, {"question": question})
        return preface + "I need the operator's decision first.\n", (ask,)
    return f"{preface}Result for: {goal_line}\n{answers[-1]}\n", ()


def _next_tool(req: TurnRequest, rng: random.Random, turn: int, names: set[str]) -> ToolCall | None:
    call_id = f"call_{rng.getrandbits(40):010x}"
    if turn == 0 and "list_dir" in names:
        return ToolCall(call_id, "list_dir", {"path": "."})
    listing = [m.content for m in req.messages if m.role == "tool" and m.name == "list_dir"]
    files = [
        name
        for text in listing[-1:]
        for line in text.splitlines()
        if (name := line.strip()) and not _not_a_file(name)
    ]
    if files and "read_file" in names:
        return ToolCall(call_id, "read_file", {"path": rng.choice(files)})
    if "list_dir" in names:
        # Nothing listed to read (an empty workspace): it looks again, so a route's
        # `tool_turns` still means that many tool turns.
        return ToolCall(call_id, "list_dir", {"path": "."})
    return None


def _not_a_file(line: str) -> bool:
    """A line of `list_dir`'s answer that names no file: a folder, an empty folder's
    `(empty)`, the `… N more` of a long one, or an error."""
    return line.endswith("/") or line == "(empty)" or line.startswith(("… ", "error: "))


def _make_sentences() -> tuple[str, ...]:
    """A fixed pool of sentences, made once, that a turn's text is drawn from."""
    rng = random.Random(0)
    out = []
    for _ in range(64):
        start = rng.randrange(len(_WORDS))
        n = rng.randint(8, 20)
        words = [_WORDS[(start + i) % len(_WORDS)] for i in range(n)]
        out.append(" ".join(words).capitalize().rstrip(";,") + ".")
    return tuple(out)


_SENTENCES = _make_sentences()
_RING = _SENTENCES + _SENTENCES  # the pool as a ring: any run of it is one slice


def _sentence(rng: random.Random) -> str:
    return rng.choice(_SENTENCES)


def _body(rng: random.Random) -> str:
    """Three to nine consecutive sentences of the pool, taken as a ring."""
    start = rng.randrange(len(_SENTENCES))
    count = rng.randint(3, 9)
    return " ".join(_RING[start : start + count])
