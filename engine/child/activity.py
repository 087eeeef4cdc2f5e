"""A child's activity as it changes, and the estimate of its call in progress; `Child` guards
both with its lock."""

from __future__ import annotations

import math
from dataclasses import dataclass

from flightdeck.engine.model import CHARS_PER_TOKEN, Activity, Usage
from flightdeck.engine.model.usage import NO_USAGE


@dataclass(slots=True)  # one per child, kept to the batch's end: no instance dict
class ActivityState:
    """The mutable counterpart of `model.Activity`; every change stamps the activity time."""

    api_calls: int = 0
    tool_calls: int = 0
    retries: int = 0
    turns: int = 0
    current_tool: str | None = None
    tool_started_ts: float | None = None
    last_activity_ts: float | None = None
    text: str = ""
    # Waiting on our own limits (backoff, route pause, rpm/tpm), not on the model: never a stall.
    held: bool = False
    retrying: bool = False
    last_turn: bool = False  # the turn under way is the last `max_turns` allows
    retry_reason: str | None = None  # the notice of the failure retried, until a reply streams
    unreported: bool = False  # an agent CLI's turn under way has reported no usage yet
    # Being stopped: what it shows until it ends, whatever its process prints meanwhile (the
    # tool its SIGTERM ended, the CLI's last events).
    stopping: str | None = None

    def frozen(self) -> Activity:
        """The current state as an immutable value."""
        return Activity(
            api_calls=self.api_calls,
            tool_calls=self.tool_calls,
            retries=self.retries,
            turns=self.turns,
            current_tool=self.current_tool,
            tool_started_ts=self.tool_started_ts,
            last_activity_ts=self.last_activity_ts,
            text=self.text,
            retrying=self.retrying,
            last_turn=self.last_turn,
            retry_reason=self.retry_reason,
            unreported=self.unreported,
        )

    def started(self, now: float) -> None:
        """The child's run began."""
        self.last_activity_ts = now
        self.text = "starting"

    def hold(self, turn: int, *, last: bool = False) -> None:
        """A call of `turn` (`last`: the last allowed) is about to be made and waits on the
        route until it starts."""
        self.turns = turn
        self.last_turn = last
        self.held = True

    def call_started(self, now: float) -> None:
        """A request goes out: no longer held, no longer retrying."""
        self.api_calls += 1
        self.held = self.retrying = False
        self.tick("waiting for model", now)

    def retry(self, text: str, now: float) -> None:
        """A retry is scheduled: held again (the backoff, then the route's limits)."""
        self.retries += 1
        self.held = self.retrying = True
        self.retry_reason = text
        self.tick(text, now)

    def streamed(self, now: float) -> None:
        """A chunk of a reply streamed: the call works, whatever failed before."""
        self.retry_reason = None
        self.tick("streaming", now)

    def tick(self, text: str, now: float) -> None:
        """Something happened (a chunk streamed, a tool call announced)."""
        self.text = self.stopping or text
        self.last_activity_ts = now

    def stop_shown(self, text: str) -> None:
        """It is being stopped: `text` is shown from now on, in place of its tool too."""
        self.stopping = self.text = text
        self.current_tool = self.tool_started_ts = None

    def tool_started(self, name: str, now: float, call: bool = True) -> None:
        """A tool call (`call`: else work a CLI waits on, as on a tool) began running."""
        self.tool_calls += call
        if self.stopping:  # counted, not shown: it is being stopped
            self.last_activity_ts = now
            return
        self.current_tool = name
        self.tool_started_ts = now
        self.tick(f"tool: {name}", now)

    def tool_ended(self, now: float) -> None:
        """The running tool call returned."""
        self.current_tool = self.tool_started_ts = None
        self.tick("thinking", now)

    def ended(self, text: str) -> None:
        """The child is final: no tool runs and nothing is retried any more."""
        self.current_tool = self.tool_started_ts = None
        self.retrying = self.unreported = False
        self.retry_reason = self.stopping = None
        self.text = text


_NOTHING_BILLED = NO_USAGE  # a value, never changed in place: shared, not made per call


@dataclass(slots=True)
class InFlight:
    """The call in progress: its prompt and what has streamed, counted until it is billed."""

    prompt_tokens: int = 0
    streamed_chars: int = 0
    billed: Usage = _NOTHING_BILLED
    # Of the prompt, what the child's previous call read from the server's cache or wrote to
    # it: estimated as read from the cache, at its price. Priced as fresh input, the live cost
    # fell when the call was billed.
    cached: int = 0

    def usage(self) -> Usage:
        """The estimated usage not billed yet (zero with no call open)."""
        if not self.prompt_tokens and not self.streamed_chars:
            return _NOTHING_BILLED  # no call open: the one zero, not one more a row keeps
        # Once the server has counted the prompt (Anthropic does at the start, OpenAI at the
        # end), its figures replace the estimate; output is topped up to what has streamed.
        counted = self.billed.input_tokens + self.billed.cache_read_tokens
        counted += self.billed.cache_write_tokens
        cached = 0 if counted else min(self.cached, self.prompt_tokens)
        written = math.ceil(self.streamed_chars / CHARS_PER_TOKEN)
        return Usage(
            input_tokens=0 if counted else self.prompt_tokens - cached,
            output_tokens=max(0, written - self.billed.output_tokens),
            cache_read_tokens=cached,
        )
