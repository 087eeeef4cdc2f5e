"""One child's agent loop, run on a worker thread: turns, tools, steers, retries and usage."""

from __future__ import annotations

import functools
import hashlib
import json
import traceback
from collections.abc import Callable, Mapping
from typing import Any

from flightdeck.engine.child.activity import InFlight
from flightdeck.engine.child.delegate import (
    DELEGATE_SPEC,
    DelegateCall,
    Delegation,
    parse_call,
    result_text,
)
from flightdeck.engine.child.facts import (
    ChildDone,
    ChildPaused,
    Delegated,
    FirstChunk,
    HeadroomSeen,
)
from flightdeck.engine.child.policy import RetryNotice, StopRequested
from flightdeck.engine.child.state import ChildState
from flightdeck.engine.errors import ProviderError, ToolError
from flightdeck.engine.model import ChildStatus, SteerState, Usage
from flightdeck.engine.providers.base import (
    HeadroomEvent,
    Interrupted,
    Message,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolSpec,
    TurnRequest,
    TurnResult,
    UsageEvent,
)
from flightdeck.engine.providers.tokens import estimate_tokens, prompt_tokens_estimate
from flightdeck.engine.records.meter import cache_saving
from flightdeck.engine.records.transcripts import TranscriptWriter

__all__ = ["SYSTEM_PROMPT", "TRANSCRIPT_TOOL_CHARS", "Child", "TranscriptWriter"]

SYSTEM_PROMPT = (
    "You are a worker agent supervised by flightdeck. Use the tools to inspect the workspace "
    "when it helps. Messages that start with [operator] come from the human supervising you: "
    "follow them. When you are done, answer with your final result and call no tool."
)
TRANSCRIPT_TOOL_CHARS = 2000


def estimated_note(usage: Usage) -> str:
    """The transcript's line for usage billed as an estimate, not the server's count."""
    return (
        f"call cut short: {usage.input_tokens} input and {usage.output_tokens} output tokens "
        "billed as an estimate (the server's count never came)"
    )


def prefix_digest(system: str, tools: tuple[ToolSpec, ...]) -> str:
    """A digest of a prompt's shared prefix: the system prompt and the tool schemas."""
    schemas = [(t.name, t.description, dict(t.parameters)) for t in tools]
    text = system + json.dumps(schemas, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


class _Paused(Exception):
    """The operator's pause, taken at a turn boundary: the run returns, its messages kept."""


class Child(ChildState):
    """A running (or queued) child; the coordinator owns it, one worker thread runs it.

    A pause at a turn boundary ends the run (the thread goes back to the pool) and keeps the
    conversation and the turn reached; `run` called again (the operator's continue) goes on
    from there with its context intact."""

    _messages: list[Message] | None = None  # the conversation so far (set once it has begun)
    _next_turn = 1

    @functools.cached_property
    def prefix_key(self) -> tuple[str, str]:
        """What its requests share with its siblings' ahead of the goal: the route, the system
        prompt and the tools. Children with one key read one provider-side cache entry."""
        return self.route.name, prefix_digest(SYSTEM_PROMPT, self.tool_specs)

    @functools.cached_property
    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """The tools its model is offered: the workspace's, and `delegate` if it may."""
        return self._tools.specs + ((DELEGATE_SPEC,) if self.delegation else ())

    def run(self) -> None:
        """The agent loop; never raises."""
        done: ChildDone | ChildPaused = ChildDone(self)
        try:
            if not self.mark_running():
                return  # it ended while it waited for a worker thread (stopped, abandoned)
            if self._messages is None:
                self.transcript.write("system", SYSTEM_PROMPT)
            else:
                self.transcript.write("engine", f"continued at turn {self._next_turn}")
            self._loop()
        except _Paused:
            done = ChildPaused(self)
        except (StopRequested, Interrupted):
            self.finalize(self._stop_status or ChildStatus.STOPPED, self._stop_reason)
        except ProviderError as exc:
            self.finalize(ChildStatus.FAILED, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # a bug must fail one child, not the batch
            self.transcript.write("error", traceback.format_exc())
            self.finalize(ChildStatus.FAILED, f"internal error: {exc!r}")
        finally:
            self._report(done)

    def _loop(self) -> None:
        messages = self._messages
        if messages is None:
            goal = self.task.goal
            if self.task.context:
                goal += "\n\nContext:\n" + self.task.context
            self.transcript.write("user", goal)
            messages = self._messages = [Message("user", goal)]
        for turn in range(self._next_turn, self.task.max_turns + 1):
            self._next_turn = turn
            self._check_stop()
            if self._take_pause():
                self.transcript.write("engine", f"paused before turn {turn}; its slot is free")
                raise _Paused
            self._deliver_steers(messages)
            self._hold(turn)
            result = self._turn(messages)
            messages.append(Message("assistant", result.text, result.tool_calls))
            if not result.tool_calls:
                self._answered()
                if turn < self.task.max_turns and not self._steering.close_unless_waiting():
                    # A steer came while it wrote its final answer: one more turn takes it.
                    continue
                self.finalize(ChildStatus.COMPLETED, result=result.text, missed=self._no_turns())
                return
            if turn == self.task.max_turns:
                # No turn is left to read their results: running them would only leave side
                # effects (a file written) that nothing follows up.
                self.transcript.write(
                    "engine", f"{len(result.tool_calls)} tool call(s) not run: no turns left"
                )
                break
            for call in result.tool_calls:
                self._check_stop()
                messages.append(self._run_tool(call))
            self._tool_turn_ended(self._tools.root)
        self.finalize(
            ChildStatus.FAILED,
            f"max_turns ({self.task.max_turns}) reached without a final answer",
            missed=self._no_turns(),
        )

    def _no_turns(self) -> str:
        """Why a steer left in the inbox when its last allowed turn ended was missed."""
        return f"max_turns ({self.task.max_turns}) used up"

    def _hold(self, turn: int) -> None:
        """A call is about to be made: until it starts, the child waits on its route (a pause
        after a 429, the rpm/tpm buckets), which is not a stall."""
        with self._lock:
            self._activity.hold(turn, last=turn >= self.task.max_turns)
            self._version += 1

    def _check_stop(self) -> None:
        if self.interrupt.is_set():
            raise StopRequested

    def _turn(self, messages: list[Message]) -> TurnResult:
        while True:
            try:
                return self._retry.call(
                    self._stream_once,
                    messages,
                    interrupt=self.interrupt,
                    on_retry=self._on_retry,
                    on_pause=self._on_pause,
                    on_wait=self._on_rate_wait,
                )
            except Interrupted:
                self._check_stop()
                # steer --now: the partial response is dropped and the turn restarts with it
                who = self._steering.now_by
                self.transcript.write("engine", f"response interrupted by {who}")
                self._deliver_steers(messages)
                self._hold(self._activity.turns)  # the restarted call waits on the route again

    def _stream_once(self, messages: list[Message]) -> TurnResult:
        if self._steering.now_pending:
            # steer --now during a backoff: it waited the backoff out (the server asked for
            # it), and this attempt carries the message instead of going without it.
            self._deliver_steers(messages)
        request = self._request(messages)
        # The route's rpm/tpm buckets, configured or learned (its pause was waited out before
        # this attempt); the token estimate is reconciled with usage below.
        lease = None
        by_requests, by_tokens = self._retry.limited(self.route)
        if by_requests or by_tokens:
            tokens = estimate_tokens(request) if by_tokens else 0
            lease = self._retry.admit(self.route, tokens, self.interrupt, self._on_rate_wait)
        if self._steering.now_pending:
            # ... or while it waited for the rate limit: the request it waited (and paid) for
            # goes out with the message, rather than queueing again behind other children.
            self._deliver_steers(messages)
            request = self._request(messages)
        call = InFlight(prompt_tokens_estimate(request))
        with self._lock:
            self._activity.call_started(self._clock())
            self._in_flight = call
            self._version += 1
        text: list[str] = []
        calls: list[ToolCall] = []
        usage = estimated = Usage()
        transcript = self.transcript
        sent = False
        try:
            stream = self._provider.open(request)
            with self._lock:
                if self._closing():
                    stream.close()
                    raise Interrupted
                self._stream = stream
            sent = True  # the prompt goes out as the stream is read (the SDKs' request is lazy)
            for event in stream:
                if self.leads_gate:  # its siblings wait for this: the cache entry is readable
                    self.leads_gate = False
                    self._report(FirstChunk(self))
                if isinstance(event, TextDelta):
                    text.append(event.text)
                    transcript.stream(event.text)
                    self._streamed(event.text)
                elif isinstance(event, ToolCallEvent):
                    calls.append(event.call)
                    self._tick(self._clean(f"calling {event.call.name}"))
                elif isinstance(event, UsageEvent):
                    usage += event.usage
                    if event.estimated:
                        estimated += event.usage
                    self._bill(event.usage)  # billed tokens count even if the turn is dropped
                elif isinstance(event, HeadroomEvent):
                    self._retry.saw_headroom(self.route, event)  # the route paces to it now
                    self._report(HeadroomSeen(self.route.name, event))
        except ProviderError:
            # A stream we closed ourselves (stop, steer --now) breaks like a network error:
            # that is an interruption, not something to back off and retry.
            with self._lock:
                if self._closing():
                    raise Interrupted from None
            raise
        finally:
            with self._lock:
                self._stream = None
                closed = self._closing()
            rest = self._bill_cut_short() if closed and sent else Usage()
            usage += rest
            estimated += rest
            self._call_ended()
            transcript.end_stream(interrupted=closed)
            if estimated.total:  # after the reply's line, which it would otherwise break
                transcript.write("engine", estimated_note(estimated))
            if lease is not None:
                lease.settle(usage.total)
        if closed:
            raise Interrupted  # the stream was closed under us and ended quietly
        return TurnResult("".join(text), tuple(calls), usage)

    def _closing(self) -> bool:
        """True when the open response is to be dropped (a stop, or a steer --now)."""
        return self.interrupt.is_set() or self._steering.now_pending

    def _request(self, messages: list[Message]) -> TurnRequest:
        return TurnRequest(
            system=SYSTEM_PROMPT,
            messages=tuple(messages),
            tools=self.tool_specs,
            max_tokens=self.route.max_tokens,
            child_id=self.task.id,
        )

    def _run_tool(self, call: ToolCall) -> Message:
        # Redacted before JSON escapes ESC as `\u001b`, text that no later redaction could see.
        cleaned = _each_string(dict(call.arguments), self._clean)
        args = json.dumps(cleaned, ensure_ascii=False)
        self.transcript.write("tool-call", f"{call.name} {args}")
        name = self._clean(call.name)  # the model's text, shown on screen
        with self._lock:
            self._activity.tool_started(name, self._clock())
            self._version += 1
        try:
            if call.name == DELEGATE_SPEC.name and self.delegation is not None:
                output = self._delegate(call.arguments, self.delegation)
            else:
                output = self._tools.run(call.name, call.arguments)
        except ToolError as exc:
            output = f"error: {exc}"
        # Redacted before it is cut: the cut could leave the start of a key the transcript's
        # own redaction would no longer recognise.
        shown = self._clean(output)
        more = max(0, len(shown) - TRANSCRIPT_TOOL_CHARS)
        shown = shown[:TRANSCRIPT_TOOL_CHARS]
        self.transcript.write("tool", shown + (f"\n… ({more} more characters)" if more else ""))
        self._loops.call(name, cleaned if isinstance(cleaned, dict) else args, output)
        with self._lock:
            self._activity.tool_ended(self._clock())
            self._version += 1
        return Message("tool", output, tool_call_id=call.id, name=call.name)

    def _delegate(self, arguments: Mapping[str, Any], rules: Delegation) -> str:
        """Hand the sub-tasks to the coordinator and wait (holding no slot) until all end."""
        call = DelegateCall(self.task.id, parse_call(arguments, rules))
        self._show(f"waiting for {len(call.tasks)} delegate(s)")
        self._report(Delegated(self, call))
        while not call.done.wait(0.05):
            self._check_stop()  # a stop ends the parent; the coordinator stops its subtree
        self._check_stop()
        if call.refused is not None:
            raise ToolError(call.refused)
        return result_text(call.results)

    def _deliver_steers(self, messages: list[Message]) -> None:
        if not self._steering.waiting:
            return
        for receipt in self._steering.take():
            messages.append(Message("user", f"[operator] {receipt.message}"))
            if receipt.by == "policy":
                self.transcript.write("engine", f"loop policy: delivered: {receipt.message}")
                self._loops.steered()  # its next step needs evidence from here on
            else:
                self.transcript.write("operator", f"delivered: {receipt.message}")
            self._settle(receipt, SteerState.DELIVERED)

    def _bill(self, usage: Usage) -> None:
        cost = self._meter.add(self.route, usage)
        saved = cache_saving(usage, self.route)
        with self._lock:
            if saved is None or self._saved is None:
                self._saved = None
            else:
                self._saved += saved
            self._usage += usage
            self._in_flight.billed += usage
            self._cost = None if cost is None or self._cost is None else self._cost + cost
            self._version += 1

    def _bill_cut_short(self) -> Usage:
        """A call closed by a stop or steer --now: bill the estimate of what the server read
        and wrote beyond what it counted (the prompt, and what streamed)."""
        # However the stream ended (an error, Interrupted, or quietly), the server had the
        # prompt and wrote what streamed; its usage chunk may never come.
        with self._lock:
            rest = self._in_flight.usage()
        if rest.total:
            self._bill(rest)
        return rest

    def _on_rate_wait(self, seconds: float, why: str) -> None:
        # why: "rpm 240 learned", "tpm 40000 configured", "concurrency 8 adapted to 429s"
        self._show(f"{why}: next slot in {seconds:.1f}s" if seconds else f"{why}: waiting")

    def _on_pause(self, seconds: float) -> None:
        self._show(f"route paused {seconds:.1f}s")

    def _on_retry(self, notice: RetryNotice) -> None:
        self.transcript.write("engine", notice.text)
        with self._lock:
            self._activity.retry(self._clean(notice.text), self._clock())
            self._version += 1


def _each_string(value: object, clean: Callable[[str], str]) -> object:
    """A tool call's JSON arguments with `clean` applied to every string in them."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, dict):
        return {clean(str(k)): _each_string(v, clean) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_each_string(v, clean) for v in value]
    return value
