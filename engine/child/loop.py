"""The model runner: a child's agent loop on a worker thread, turns through a provider, tools,
steers, retries and usage. It touches the child only through its port (port.py)."""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from flightdeck.engine.agents.workspace import Workspace, WorkspaceError
from flightdeck.engine.child.activity import InFlight
from flightdeck.engine.child.ask import (
    ASK_SPEC,
    AskCall,
    answer_text,
    parse_question,
    wait_settled,
)
from flightdeck.engine.child.billing import bill, bill_cut_short, estimated_note
from flightdeck.engine.child.delegate import (
    DELEGATE_SPEC,
    DelegateCall,
    Delegation,
    parse_call,
    result_text,
)
from flightdeck.engine.child.facts import Asked, Delegated, FirstChunk, HeadroomSeen
from flightdeck.engine.child.policy import CallPolicy, RetryNotice, StopRequested
from flightdeck.engine.child.port import PAUSED, ChildPort, Ended, Paused
from flightdeck.engine.child.tools import Toolbox
from flightdeck.engine.errors import ProviderError, ToolError
from flightdeck.engine.model import ChildStatus, SteerReceipt, SteerState, Usage
from flightdeck.engine.model.usage import NO_USAGE
from flightdeck.engine.providers.base import (
    HeadroomEvent,
    Interrupted,
    Message,
    Provider,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    ToolSpec,
    TurnRequest,
    TurnResult,
    UsageEvent,
)
from flightdeck.engine.providers.tokens import estimate_tokens, prompt_tokens_estimate
from flightdeck.engine.records.meter import Meter
from flightdeck.engine.sanitize import each_string, one_line, valid_text

__all__ = ["SYSTEM_PROMPT", "TRANSCRIPT_TOOL_CHARS", "ModelRunner"]

SYSTEM_PROMPT = (
    "You are a worker agent supervised by flightdeck. Use the tools to inspect the workspace "
    "when it helps. Messages that start with [operator] come from the human supervising you: "
    "follow them. When you are done, answer with your final result and call no tool."
)
TRANSCRIPT_TOOL_CHARS = 2000


def prefix_digest(system: str, tools: tuple[ToolSpec, ...]) -> str:
    """A digest of a prompt's shared prefix: the system prompt and the tool schemas."""
    schemas = [(t.name, t.description, dict(t.parameters)) for t in tools]
    text = system + json.dumps(schemas, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


class _Paused(Exception):
    """The operator's pause, taken at a turn boundary: the run returns, its messages kept."""


class ModelRunner:
    """A model child's work: its turns through the route's provider, and its tools.

    A pause at a turn boundary ends the run (the thread goes back to the pool) and keeps the
    conversation and the turn reached; `run` called again (the operator's continue) goes on
    from there with its context intact."""

    steerable = True
    keeps_thread = False
    stop_grace_s = 0.0

    def __init__(
        self,
        route_name: str,
        provider: Provider,
        retry: CallPolicy,
        toolbox: Toolbox,
        meter: Meter,
        delegation: Delegation | None = None,
        ask_chars: int | None = None,
        workspace: Workspace | None = None,  # its own worktree or copy (None: the batch's)
    ) -> None:
        self._route_name = route_name
        self._provider = provider
        self._retry = retry
        self._tools = toolbox
        self._meter = meter
        # Whether (and how much) it may hand sub-tasks to the engine.
        self.delegation = delegation
        self.ask_chars = ask_chars  # a question's most characters (None: it may not ask)
        self._messages: list[Message] | None = None  # the conversation so far, once begun
        self._next_turn = 1
        self._cached = 0  # what its last call billed read from the cache or wrote to it
        self._port: ChildPort | None = None  # the child it runs, while `run` runs
        self._workspace = workspace

    @property
    def _c(self) -> ChildPort:
        assert self._port is not None, "used outside run()"
        return self._port

    @property
    def secrets(self) -> tuple[str, ...]:
        """The provider's key."""
        return self._provider.secrets

    @functools.cached_property
    def prefix_key(self) -> tuple[str, str]:
        """What its requests share with its siblings' ahead of the goal: the route, the system
        prompt and the tools. Children with one key read one provider-side cache entry."""
        return self._route_name, prefix_digest(SYSTEM_PROMPT, self.tool_specs)

    @property  # not cached: an attribute added after __init__ costs each runner 400 bytes
    def tool_specs(self) -> tuple[ToolSpec, ...]:
        """The tools its model is offered: the workspace's, `delegate`, `ask_operator` if it may."""
        ask = (ASK_SPEC,) if self.ask_chars is not None else ()
        return self._tools.specs + ((DELEGATE_SPEC,) if self.delegation else ()) + ask

    session = None  # a model has no CLI session to resume

    def refuse_steer(self, child: ChildPort, receipt: SteerReceipt) -> str | None:
        """A model takes every steer, at its next turn (or at once, for --now)."""
        return None

    def run(self, child: ChildPort) -> Ended | Paused:
        """The agent loop; a stop or a bug raises (the child finalizes)."""
        self._port = child
        paused = False
        try:
            if self._messages is None:
                failed = self._own_workspace(child)
                if failed is not None:
                    return failed
                child.transcript.write("system", SYSTEM_PROMPT)
            else:
                child.transcript.write("engine", f"continued at turn {self._next_turn}")
            return self._loop()
        except _Paused:
            paused = True
            return PAUSED
        except ProviderError as exc:
            return Ended(ChildStatus.FAILED, f"{type(exc).__name__}: {exc}")
        finally:
            if not paused and self._workspace is not None:
                self._release(child, self._workspace)
            self._port = None
            if not paused:  # it has ended: the batch keeps the child, not its conversation
                self._messages = None

    def _own_workspace(self, c: ChildPort) -> Ended | None:
        """Its tools moved into its own worktree or copy (a retry that continues: the one its
        earlier attempt left); why the child fails if it cannot be made."""
        ws = self._workspace
        if ws is None:
            return None
        resume = (c.retrying is not None and c.retrying.resume) or c.kept.in_place
        try:
            root = ws.reuse() if resume else ws.prepare()
        except WorkspaceError as exc:
            return Ended(ChildStatus.FAILED, f"workspace: {exc}")
        self._tools = self._tools.rooted(root)
        c.transcript.write("engine", f"workspace ({ws.mode}): {root}{ws.note}")
        return None

    def _release(self, c: ChildPort, ws: Workspace) -> None:
        """At its end: its workspace kept with what it changed, or removed."""
        try:
            changes, note = ws.release()
        except Exception as exc:
            changes, note = None, f"workspace not removed: {exc!r}"
        if changes is not None:
            c.changed(changes)
        if note:
            c.transcript.write("engine", note)

    def _loop(self) -> Ended:
        c = self._c
        messages = self._messages
        if messages is None:
            goal = c.task.goal
            if c.task.context:
                goal += "\n\nContext:\n" + c.task.context
            again = c.retrying
            if again is not None and again.resume:
                goal += "\n\n" + again.prompt
            c.transcript.write("user", again.shown(goal) if again is not None else goal)
            messages = self._messages = [Message("user", goal)]
        for turn in range(self._next_turn, c.task.max_turns + 1):
            self._next_turn = turn
            if c.interrupt.is_set():
                raise StopRequested
            if c.pause_wanted and c.take_pause():  # the lock only when one is wanted
                c.transcript.write("engine", f"paused before turn {turn}; its slot is free")
                raise _Paused
            self._deliver_steers(messages)
            self._hold(turn)
            result = self._turn(messages)
            messages.append(Message("assistant", result.text, result.tool_calls))
            if not result.tool_calls:
                c.loops.answered()
                if turn < c.task.max_turns and not c.steering.close_unless_waiting():
                    # A steer came while it wrote its final answer: one more turn takes it.
                    continue
                return Ended(ChildStatus.COMPLETED, result=result.text, missed=self._no_turns())
            if turn == c.task.max_turns:
                # No turn is left to read their results: running them would only leave side
                # effects (a file written) that nothing follows up.
                c.transcript.write(
                    "engine", f"{len(result.tool_calls)} tool call(s) not run: no turns left"
                )
                break
            for call in result.tool_calls:
                self._check_stop()
                messages.append(self._run_tool(call))
            c.loops.turn_ended(self._tools.root)
        return Ended(
            ChildStatus.FAILED,
            f"max_turns ({c.task.max_turns}) reached without a final answer",
            missed=self._no_turns(),
        )

    def _no_turns(self) -> str:
        """Why a steer left in the inbox when its last allowed turn ended was missed."""
        return f"max_turns ({self._c.task.max_turns}) used up"

    def _hold(self, turn: int) -> None:
        """A call is about to be made: until it starts, the child waits on its route (a pause
        after a 429, the rpm/tpm buckets), which is not a stall."""
        c = self._c
        c.progress.hold(turn, last=turn >= c.task.max_turns)

    def _check_stop(self) -> None:
        if self._c.interrupt.is_set():
            raise StopRequested

    def _turn(self, messages: list[Message]) -> TurnResult:
        c = self._c
        while True:
            try:
                return self._retry.call(
                    self._stream_once,
                    messages,
                    interrupt=c.interrupt,
                    on_retry=self._on_retry,
                    on_pause=self._on_pause,
                    on_wait=self._on_rate_wait,
                )
            except Interrupted:
                self._check_stop()
                # steer --now: the partial response is dropped and the turn restarts with it
                who = c.steering.now_by
                c.transcript.write("engine", f"response interrupted by {who}")
                self._deliver_steers(messages)
                self._hold(c.progress.turns)  # the restarted call waits on the route again

    def _stream_once(self, messages: list[Message]) -> TurnResult:
        c = self._c
        route = c.route
        if c.steering.now_pending:
            # steer --now during a backoff: it waited the backoff out (the server asked for
            # it), and this attempt carries the message instead of going without it.
            self._deliver_steers(messages)
        request = self._request(c, messages)
        # The route's rpm/tpm buckets, configured or learned (its pause was waited out before
        # this attempt); the token estimate is reconciled with usage below.
        lease = None
        by_requests, by_tokens = self._retry.limited(route)
        if by_requests or by_tokens:
            tokens = estimate_tokens(request) if by_tokens else 0
            lease = self._retry.admit(route, tokens, c.interrupt, self._on_rate_wait)
        if c.steering.now_pending:
            # ... or while it waited for the rate limit: the request it waited (and paid) for
            # goes out with the message, rather than queueing again behind other children.
            self._deliver_steers(messages)
            request = self._request(c, messages)
        c.progress.call_started(self._in_flight(request))
        text: list[str] = []
        calls: list[ToolCall] = []
        usage = estimated = NO_USAGE
        transcript = c.transcript
        sent = False
        closed = False
        try:
            stream = self._provider.open(request)
            while not c.open_call(stream):
                if c.interrupt.is_set():
                    raise Interrupted
                # A steer --now since the look above: the stream, closed unread, sent nothing,
                # and the slot waited for is spent on the request with the message.
                self._deliver_steers(messages)
                request = self._request(c, messages)
                # What a cut-short call bills and the live cost count: the prompt sent.
                c.progress.call_estimated(self._in_flight(request))
                stream = self._provider.open(request)
            sent = True  # the prompt goes out as the stream is read (the SDKs' request is lazy)
            for event in stream:
                if c.leads_gate:  # its siblings wait for this: the cache entry is readable
                    c.leads_gate = False
                    c.report(FirstChunk(c.task.id))
                if isinstance(event, TextDelta):
                    text.append(event.text)
                    transcript.stream(event.text)
                    c.progress.streamed(event.text)
                elif isinstance(event, ToolCallEvent):
                    calls.append(event.call)
                    c.progress.tick(c.clean(f"calling {event.call.name}"))
                elif isinstance(event, UsageEvent):
                    usage += event.usage
                    if event.estimated:
                        estimated += event.usage
                    # billed tokens count even if the turn is dropped
                    bill(c.progress, self._meter, route, event.usage)
                elif isinstance(event, HeadroomEvent):
                    self._retry.saw_headroom(route, event)  # the route paces to it now
                    c.report(HeadroomSeen(route.name, event))
        except ProviderError:
            # A stream we closed ourselves (stop, steer --now) breaks like a network error:
            # that is an interruption, not something to back off and retry.
            if c.closing():
                raise Interrupted from None
            raise
        finally:
            closed = c.close_call()
            if closed and sent:
                rest = self._bill_cut_short()
                usage += rest
                estimated += rest
            c.progress.call_ended()
            transcript.end_stream(interrupted=closed)
            if estimated.total:  # after the reply's line, which it would otherwise break
                transcript.write("engine", estimated_note(estimated))
            if lease is not None:
                lease.settle(usage.total)
            if usage.total:  # the server's word on its cache, for the next call's estimate
                self._cached = usage.cache_read_tokens + usage.cache_write_tokens
        if closed:
            raise Interrupted  # the stream was closed under us and ended quietly
        # Sent back with every later request, which UTF-8 encodes: a lone surrogate (a JSON
        # escape) in the reply or a call's arguments failed every later call of the child.
        calls = [
            ToolCall(k.id, valid_text(k.name), each_string(k.arguments, valid_text)) for k in calls
        ]
        return TurnResult(valid_text("".join(text)), tuple(calls), usage)

    def _request(self, c: ChildPort, messages: list[Message]) -> TurnRequest:
        return TurnRequest(
            system=SYSTEM_PROMPT,
            messages=tuple(messages),
            tools=self.tool_specs,
            max_tokens=c.route.max_tokens,
            child_id=c.task.id,
        )

    def _run_tool(self, call: ToolCall) -> Message:
        c = self._c
        # Redacted before JSON escapes ESC as `\u001b`, text that no later redaction could see.
        cleaned: dict[str, Any] = each_string(call.arguments, c.clean)
        args = json.dumps(cleaned, ensure_ascii=False)
        c.transcript.write("tool-call", f"{call.name} {args}")
        name = c.clean(call.name)  # the model's text, shown on screen
        c.progress.tool_started(name)
        try:
            # The engine's own tools take the redacted arguments: a sub-task's goal and a
            # question are recorded and shown (store, report, table, needs-you queue).
            if call.name == DELEGATE_SPEC.name and self.delegation is not None:
                output = self._delegate(cleaned, self.delegation)
            elif call.name == ASK_SPEC.name and self.ask_chars is not None:
                output = self._ask(cleaned, self.ask_chars)
            else:
                output = self._tools.run(call.name, call.arguments)
        except ToolError as exc:
            output = f"error: {exc}"
        # Redacted before it is cut: the cut could leave the start of a key the transcript's
        # own redaction would no longer recognise.
        shown = c.clean(output)
        more = max(0, len(shown) - TRANSCRIPT_TOOL_CHARS)
        shown = shown[:TRANSCRIPT_TOOL_CHARS]
        c.transcript.write("tool", shown + (f"\n… ({more} more characters)" if more else ""))
        c.loops.call(name, cleaned, output)
        c.progress.tool_ended()
        return Message("tool", output, tool_call_id=call.id, name=call.name)

    def _delegate(self, arguments: Mapping[str, Any], rules: Delegation) -> str:
        """Hand the sub-tasks to the coordinator and wait (holding no slot) until all end."""
        c = self._c
        call = DelegateCall(c.task.id, parse_call(arguments, rules))
        c.progress.show(f"waiting for {len(call.tasks)} delegate(s)")
        c.report(Delegated(c.task.id, call))
        wait_settled(call, self._check_stop)  # a stop: the coordinator stops its subtree
        return result_text(call.results)

    def _ask(self, arguments: Mapping[str, Any], max_chars: int) -> str:
        """Ask the operator and wait (holding no slot, never a stall) for the answer."""
        c = self._c
        call = AskCall(c.task.id, parse_question(arguments, max_chars))
        c.progress.wait_on_operator(f"asks: {one_line(c.clean(call.question), 80)}")
        c.report(Asked(c.task.id, call))
        wait_settled(call, self._check_stop)
        return answer_text(call.answer or "")  # settled, not refused: answered

    def _in_flight(self, request: TurnRequest) -> InFlight:
        """What a call of `request` is estimated to bill until its usage comes."""
        return InFlight(prompt_tokens_estimate(request), cached=self._cached)

    def _deliver_steers(self, messages: list[Message]) -> None:
        """The steers waiting in its inbox, added to the conversation; none: nothing done."""
        c = self._c
        if not c.steering.waiting:
            return
        for receipt in c.steering.take():
            messages.append(Message("user", f"[operator] {receipt.message}"))
            if receipt.by == "policy":
                c.transcript.write("engine", f"loop policy: delivered: {receipt.message}")
                c.loops.steered()  # its next step needs evidence from here on
            else:
                c.transcript.write("operator", f"delivered: {receipt.message}")
            c.settle(receipt, SteerState.DELIVERED)

    def _bill_cut_short(self) -> Usage:
        """A call closed by a stop or steer --now: see `bill_cut_short`."""
        # However the stream ended (an error, Interrupted, or quietly), the server had the
        # prompt and wrote what streamed; its usage chunk may never come.
        return bill_cut_short(self._c.progress, self._meter, self._c.route)

    def _on_rate_wait(self, seconds: float, why: str) -> None:
        # why: "rpm 240 learned", "tpm 40000 configured", "concurrency 8 adapted to 429s"
        self._c.progress.show(
            f"{why}: next slot in {seconds:.1f}s" if seconds else f"{why}: waiting"
        )

    def _on_pause(self, seconds: float) -> None:
        self._c.progress.show(f"route paused {seconds:.1f}s")

    def _on_retry(self, notice: RetryNotice) -> None:
        c = self._c
        c.transcript.write("engine", notice.text)
        c.progress.retry(c.clean(notice.text))
