"""One child's agent loop: turns, tools, steer inbox, interrupt, activity and usage.

`Child.run` executes on a worker thread. Everything else here may be called from the coordinator
thread; shared fields are guarded by one lock and readers get frozen `ChildRow` values.
"""

from __future__ import annotations

import dataclasses
import json
import threading
import traceback
from collections.abc import Callable, Mapping
from decimal import Decimal
from types import MappingProxyType

from flightdeck.engine.child.tools import Toolbox, ToolError
from flightdeck.engine.control.flag import Flag
from flightdeck.engine.control.limits import RetryNotice, RetryPolicy, StopRequested
from flightdeck.engine.control.ratelimit import estimate_tokens
from flightdeck.engine.inputs.settings import Route
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.model import Activity, ChildRow, ChildStatus, SteerReceipt, SteerState, Usage
from flightdeck.engine.providers.base import (
    HeadroomEvent,
    Interrupted,
    Message,
    Provider,
    ProviderError,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    TurnRequest,
    TurnResult,
    TurnStream,
    UsageEvent,
)
from flightdeck.engine.records.meter import Meter
from flightdeck.engine.records.sink import TranscriptSink
from flightdeck.engine.records.transcripts import TranscriptWriter
from flightdeck.engine.sanitize import redact

SYSTEM_PROMPT = (
    "You are a worker agent supervised by flightdeck. Use the tools to inspect the workspace "
    "when it helps. Messages that start with [operator] come from the human supervising you: "
    "follow them. When you are done, answer with your final result and call no tool."
)
TRANSCRIPT_TOOL_CHARS = 2000
_KEEP = object()  # `_tick(tool=...)` left out: the current tool is unchanged
_NO_USAGE = Usage()  # immutable: one shared empty usage for every child and turn

Fact = Callable[[object], None]


def _plus(total: Usage, usage: Usage) -> Usage:
    """`total + usage`, without building a new value when `total` is still the empty one."""
    return usage if total is _NO_USAGE else total + usage


class Child:
    """A running (or queued) child; the coordinator owns it, one worker thread runs it."""

    # State that starts out the same for every child is a class default, assigned on the
    # instance only when it changes: a batch builds all its children up front. All of it is
    # guarded by `_lock`; `version` lets readers skip unchanged children.
    version = 0
    status = ChildStatus.QUEUED
    started_ts: float | None = None
    finished_ts: float | None = None
    _transcript: TranscriptWriter | None = None
    _finalizing = False
    _stream: TurnStream | None = None
    _now_pending = False
    _stop_status: ChildStatus | None = None
    _stop_reason: str | None = None
    # The activity token, as plain fields: ticked several times per turn, it becomes a frozen
    # `Activity` only when a reader asks for a changed row.
    _api_calls = 0
    _tool_calls = 0
    _retries = 0
    _turns = 0
    _current_tool: str | None = None
    _held = False  # waiting on our own limits (backoff, route pause, rpm/tpm), not the model
    _tool_started_ts: float | None = None
    _last_activity_ts: float | None = None
    _text = ""
    _usage = _NO_USAGE
    _cost: Decimal | None = Decimal(0)
    _error: str | None = None
    _result: str | None = None
    _row: ChildRow | None = None
    _row_version = -1
    _secrets: tuple[str, ...] = ()  # the route's API key, redacted from all we record and show
    # Steering is rare: both are replaced, never changed in place, so a child that is never
    # steered shares these empty values and builds no inbox or receipts of its own.
    _inbox: tuple[SteerReceipt, ...] = ()  # steers not yet delivered, oldest first
    _steers: Mapping[int, SteerReceipt] = MappingProxyType({})  # every receipt, by id

    def __init__(
        self,
        task: Task,
        route: Route,
        provider: Provider,
        retry: RetryPolicy,
        toolbox: Toolbox,
        transcript_path: str,
        meter: Meter,
        clock: Callable[[], float],
        report: Fact,
        queued_ts: float,
        sink: TranscriptSink | None = None,
    ) -> None:
        self.task = task
        self.route = route
        self._provider = provider
        self._retry = retry
        self._tools = toolbox
        self.transcript_path = transcript_path
        self._sink = sink
        self._meter = meter
        self._clock = clock
        self._report = report  # hands facts to the coordinator (thread-safe queue)
        if provider.secrets:
            self._secrets = provider.secrets
        self._lock = threading.Lock()
        self.interrupt = Flag()
        self.queued_ts = queued_ts

    @property
    def transcript(self) -> TranscriptWriter:
        """Opened on first use, so a queued child holds no file descriptor."""
        transcript = self._transcript
        if transcript is not None:  # the common case, read without the lock (set only once)
            return transcript
        with self._lock:
            return self._open_transcript()

    def _open_transcript(self) -> TranscriptWriter:
        """The transcript, opened if need be; called with `_lock` held."""
        if self._transcript is None:
            self._transcript = TranscriptWriter(
                self.transcript_path, self._clock, secrets=self._secrets, sink=self._sink
            )
        return self._transcript

    # --- read side -----------------------------------------------------------------------------

    def row(self) -> ChildRow:
        """A frozen view; rebuilt only when something changed since the last call."""
        with self._lock:
            if self._row is not None and self._row_version == self.version:
                return self._row
            row = ChildRow(
                id=self.task.id,
                seq=self.task.seq,
                goal=self.task.goal,
                group=self.task.group,
                route=self.route.name,
                model=self.route.model,
                status=self.status,
                activity=Activity(
                    self._api_calls,
                    self._tool_calls,
                    self._retries,
                    self._turns,
                    self._current_tool,
                    self._tool_started_ts,
                    self._last_activity_ts,
                    self._text,
                ),
                usage=self._usage,
                cost_usd=self._cost,
                queued_ts=self.queued_ts,
                started_ts=self.started_ts,
                finished_ts=self.finished_ts,
                error=self._error,
                result=self._result,
                transcript=self.transcript_path,
                steers=tuple(self._steers.values()),
            )
            self._row, self._row_version = row, self.version
            return row

    @property
    def last_activity(self) -> float | None:
        return self._last_activity_ts

    @property
    def in_tool(self) -> bool:
        return self._current_tool is not None

    @property
    def held(self) -> bool:
        """Waiting on the route's own limits: a wait flightdeck imposes is never a stall."""
        return self._held

    @property
    def stop_status(self) -> ChildStatus | None:
        """The status a requested stop will end in (the first request wins); None if none."""
        return self._stop_status

    # --- control side (coordinator thread) -----------------------------------------------------

    def request_stop(self, status: ChildStatus, reason: str) -> None:
        """Interrupt: wake any sleep, close the open stream. The worker finalizes."""
        with self._lock:
            if self._stop_status is None:
                self._stop_status, self._stop_reason = status, reason
            self.interrupt.set()
            stream = self._stream
        if stream is not None:
            stream.close()

    def add_steer(self, receipt: SteerReceipt) -> bool:
        """Queue an operator message; `now` closes the current response so the turn restarts.

        False when the child is already ending: its inbox has been emptied for the last time,
        and the caller settles the receipt as missed."""
        with self._lock:
            if self._finalizing:
                return False
            self._inbox += (receipt,)
            self._record_receipt(receipt)
            stream = None
            if receipt.now:
                self._now_pending = True
                stream = self._stream
        if stream is not None:
            stream.close()
        return True

    def keep_receipt(self, receipt: SteerReceipt) -> None:
        """Show a receipt settled without reaching the inbox (the child had already ended)."""
        with self._lock:
            self._record_receipt(receipt)

    def finalize(
        self, status: ChildStatus, error: str | None = None, *, result: str | None = None
    ) -> bool:
        """Record the final status (and the final answer) once; False if already final (first
        caller wins: a final answer that loses to the watchdog is not recorded)."""
        with self._lock:
            if self.status.terminal or self._finalizing:
                return False
            self._finalizing = True
            missed, self._inbox = self._inbox, ()
        for receipt in missed:
            self._settle(receipt, SteerState.MISSED)
        if self._secrets:  # a server's error text or the model's answer may echo the key
            error = None if error is None else self._clean(error)
            result = None if result is None else self._clean(result)
        text = str(status)  # a StrEnum's value, without the enum's Python-level property
        self.transcript.close("engine", text + (f": {error}" if error else ""))
        with self._lock:
            self.status = status
            self.finished_ts = self._clock()
            self._error = error
            self._result = result
            self._current_tool = self._tool_started_ts = None
            self._text = text
            self.version += 1
        return True

    # --- worker side ---------------------------------------------------------------------------

    def run(self) -> None:
        """The agent loop; never raises."""
        try:
            if not self._mark_running():
                return  # it ended while it waited for a worker thread (stopped, abandoned)
            self._loop()
        except (StopRequested, Interrupted):
            self.finalize(self._stop_status or ChildStatus.STOPPED, self._stop_reason)
        except ProviderError as exc:
            self.finalize(ChildStatus.FAILED, f"{type(exc).__name__}: {exc}")
        except Exception as exc:  # a bug must fail one child, not the batch
            self.transcript.write("error", traceback.format_exc())
            self.finalize(ChildStatus.FAILED, f"internal error: {exc!r}")
        finally:
            self._report(("done", self))

    def _mark_running(self) -> bool:
        now = self._clock()
        with self._lock:
            if self._finalizing:  # a final status must never turn back into RUNNING
                return False
            self.status = ChildStatus.RUNNING
            self.started_ts = self._last_activity_ts = now
            self._text = "starting"
            self.version += 1
            transcript = self._open_transcript()  # under the lock already taken: one less
        transcript.write("system", SYSTEM_PROMPT)
        return True

    def _loop(self) -> None:
        goal = self.task.goal
        if self.task.context:
            goal += "\n\nContext:\n" + self.task.context
        self.transcript.write("user", goal)
        messages: list[Message] = [Message("user", goal)]
        for turn in range(self.task.max_turns):
            self._check_stop()
            self._deliver_steers(messages)
            self._hold(turn + 1)
            result = self._turn(messages)
            if not result.tool_calls:
                self.finalize(ChildStatus.COMPLETED, result=result.text)
                return
            messages.append(Message("assistant", result.text, result.tool_calls))
            if turn + 1 == self.task.max_turns:
                # No turn is left to read their results: running them would only leave side
                # effects (a file written) that nothing follows up.
                self.transcript.write(
                    "engine", f"{len(result.tool_calls)} tool call(s) not run: no turns left"
                )
                break
            for call in result.tool_calls:
                self._check_stop()
                messages.append(self._run_tool(call))
        self.finalize(
            ChildStatus.FAILED, f"max_turns ({self.task.max_turns}) reached without a final answer"
        )

    def _hold(self, turn: int) -> None:
        """A call is about to be made: until it starts, the child waits on its route (a pause
        after a 429, the rpm/tpm buckets), which is not a stall."""
        with self._lock:  # the call's tick stamps the activity time
            self._turns = turn
            self._held = True
            self.version += 1

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
                )
            except Interrupted:
                self._check_stop()
                # steer --now: the partial response is dropped and the turn restarts with it
                self.transcript.write("engine", "response interrupted by the operator")
                self._deliver_steers(messages)
                self._hold(self._turns)  # the restarted call waits on the route again

    def _stream_once(self, messages: list[Message]) -> TurnResult:
        if self._now_pending:
            # steer --now during a backoff: it waited the backoff out (the server asked for
            # it), and this attempt carries the message instead of going without it.
            self._deliver_steers(messages)
        request = self._request(messages)
        # The route's rpm/tpm buckets (its pause was waited out before this attempt); the token
        # estimate is reconciled with usage below. Without a limit (the throttle would hand
        # out an inert lease) there is nothing to take, estimate or settle.
        route, lease = self.route, None
        if route.rpm or route.tpm:
            tokens = estimate_tokens(request) if route.tpm else 0
            lease = self._retry.admit(route, tokens, self.interrupt, self._on_rate_wait)
        if self._now_pending:
            # ... or while it waited for the rate limit: the request it waited (and paid) for
            # goes out with the message, rather than queueing again behind other children.
            self._deliver_steers(messages)
            request = self._request(messages)
        self._tick("waiting for model", api_call=True)
        text: list[str] = []
        calls: list[ToolCall] = []
        usage = _NO_USAGE
        transcript = self.transcript
        try:
            stream = self._provider.open(request)
            with self._lock:
                if self.interrupt.is_set() or self._now_pending:
                    stream.close()
                    raise Interrupted
                self._stream = stream
            for event in stream:
                if isinstance(event, TextDelta):  # the hot path: hundreds a turn from a model
                    text.append(event.text)
                    transcript.stream(event.text)
                    self._tick("streaming")
                elif isinstance(event, ToolCallEvent):
                    calls.append(event.call)
                    self._tick(self._clean(f"calling {event.call.name}"))
                elif isinstance(event, UsageEvent):
                    usage = _plus(usage, event.usage)
                    self._bill(event.usage)  # billed tokens count even if the turn is dropped
                elif isinstance(event, HeadroomEvent):
                    self._report(("headroom", self.route.name, event))
        except ProviderError:
            # A stream we closed ourselves (stop, steer --now) breaks like a network error:
            # that is an interruption, not something to back off and retry.
            with self._lock:
                if self.interrupt.is_set() or self._now_pending:
                    raise Interrupted from None
            raise
        finally:
            with self._lock:
                self._stream = None
                closed = self.interrupt.is_set() or self._now_pending
            transcript.end_stream()
            if lease is not None:
                lease.settle(usage.total)
        if closed:
            raise Interrupted  # the stream was closed under us and ended quietly
        return TurnResult("".join(text), tuple(calls), usage)

    def _request(self, messages: list[Message]) -> TurnRequest:
        return TurnRequest(
            system=SYSTEM_PROMPT,
            messages=tuple(messages),
            tools=self._tools.specs,
            max_tokens=self.route.max_tokens,
            child_id=self.task.id,
        )

    def _run_tool(self, call: ToolCall) -> Message:
        args = json.dumps(dict(call.arguments), ensure_ascii=False)
        self.transcript.write("tool-call", f"{call.name} {args}")
        name = self._clean(call.name)  # the model's text, shown on screen
        self._tick(f"tool: {name}", tool_call=True, tool=name)
        try:
            output = self._tools.run(call.name, call.arguments)
        except ToolError as exc:
            output = f"error: {exc}"
        # Redacted before it is cut: the cut could leave the start of a key the transcript's
        # own redaction would no longer recognise.
        shown = self._clean(output)
        more = max(0, len(shown) - TRANSCRIPT_TOOL_CHARS)
        shown = shown[:TRANSCRIPT_TOOL_CHARS]
        self.transcript.write("tool", shown + (f"\n… ({more} more characters)" if more else ""))
        self._tick("thinking", tool=None)
        return Message("tool", output, tool_call_id=call.id, name=call.name)

    def _deliver_steers(self, messages: list[Message]) -> None:
        if not self._inbox and not self._now_pending:
            return  # nearly every turn: nothing to deliver (both only ever set under the lock)
        with self._lock:
            pending, self._inbox = self._inbox, ()
            self._now_pending = False
        for receipt in pending:
            text = f"[operator] {receipt.message}"
            messages.append(Message("user", text))
            self.transcript.write("operator", f"delivered: {receipt.message}")
            self._settle(receipt, SteerState.DELIVERED)

    def _settle(self, receipt: SteerReceipt, state: SteerState) -> None:
        settled = dataclasses.replace(receipt, state=state, settled_ts=self._clock())
        with self._lock:
            self._record_receipt(settled)
        self._report(("steer", settled))

    def _record_receipt(self, receipt: SteerReceipt) -> None:
        """Record `receipt` (new or settled) under its id; called with `_lock` held."""
        self._steers = {**self._steers, receipt.id: receipt}
        self.version += 1

    def _bill(self, usage: Usage) -> None:
        cost = self._meter.add(self.route, usage)
        with self._lock:
            self._usage = _plus(self._usage, usage)
            self._cost = None if cost is None or self._cost is None else self._cost + cost
            self.version += 1

    def _on_rate_wait(self, seconds: float) -> None:
        self._show(f"waiting for the route's rate limit ({seconds:.1f}s)")

    def _on_pause(self, seconds: float) -> None:
        self._show(f"route paused after a 429 ({seconds:.1f}s)")

    def _show(self, text: str) -> None:
        """What the child waits for, without counting as activity (it is held, not idle)."""
        with self._lock:
            self._text = text
            self.version += 1

    def _on_retry(self, notice: RetryNotice) -> None:
        self.transcript.write("engine", notice.text)
        # held again: the backoff, then the route's limits
        self._tick(self._clean(notice.text), retry=True)

    def _clean(self, text: str) -> str:
        """`text` without the route's key: a server can echo it in an error or in its output."""
        return redact(text, self._secrets) if self._secrets else text

    def _tick(
        self,
        text: str | None = None,
        *,
        api_call: bool = False,
        tool_call: bool = False,
        retry: bool = False,
        turn: int | None = None,
        tool: str | object | None = _KEEP,
    ) -> None:
        """Update the activity token: bump counters, set what changed, stamp the activity time.

        `tool` is the tool now running (None when it returns); left out, it stays as it was.
        """
        now = self._clock()
        with self._lock:
            self._api_calls += api_call
            self._tool_calls += tool_call
            self._retries += retry
            if api_call or retry:
                self._held = retry
            if turn is not None:
                self._turns = turn
            if tool is not _KEEP:
                self._current_tool = tool  # type: ignore[assignment]
                self._tool_started_ts = None if tool is None else now
            if text is not None:
                self._text = text
            self._last_activity_ts = now
            self.version += 1
