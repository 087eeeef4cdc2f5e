"""A child's live figures as its runner changes them: activity, usage and cost, the call in
flight, the model it reports. One lock guards them; `version` lets readers skip a child whose
figures have not changed."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from decimal import Decimal

from flightdeck.engine.child.activity import ActivityState, InFlight
from flightdeck.engine.model import Activity, Usage, record
from flightdeck.engine.model.usage import NO_USAGE
from flightdeck.engine.money import ZERO_USD


@record
class Figures:
    """The live figures at one moment, as the child's row shows them."""

    activity: Activity
    usage: Usage
    cost_usd: Decimal | None
    known_usd: Decimal  # what is known of the cost: all of it, unless `cost_usd` is None
    saved_usd: Decimal | None
    in_flight: Usage
    model: str | None  # the model the runner reported (an agent CLI's), if any
    carried_unknown: bool  # an earlier attempt's cost, carried into this one, is unknown


@record
class Mirror:
    """Everything a `Progress` holds, copied: what a child running elsewhere sends home."""

    activity: ActivityState
    usage: Usage
    cost: Decimal | None
    known: Decimal
    saved: Decimal | None
    in_flight: InFlight
    model: str | None
    bills: int  # how many bills the figures count (`bill_elsewhere`)


class Progress:
    """What a runner changes as a child works; safe from any thread."""

    __slots__ = (  # one per child, kept to the batch's end: no instance dict
        "_activity",
        "_bills",
        "_carried_known",
        "_clock",
        "_cost",
        "_in_flight",
        "_known",
        "_lock",
        "_model",
        "_saved",
        "_usage",
        "carried_cost",
        "version",
    )

    def __init__(self, clock: Callable[[], float], *, cost_known: bool = True) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self.version = 0
        self._activity = ActivityState()
        self._usage = NO_USAGE
        # None once any usage has an unknown price (an agent CLI's: until it reports its cost).
        self._cost: Decimal | None = ZERO_USD if cost_known else None
        # What is known of it: all of it while it is known, else the part that was (a CLI's
        # turns reported before one went unreported), spent all the same.
        self._known = ZERO_USD
        self._saved: Decimal | None = ZERO_USD  # by cache reads; None: price unknown
        self._in_flight = InFlight()
        self._model: str | None = None
        self._bills = 0  # how many times usage was billed (`bill`)
        # What earlier attempts carried into this one (in the cost above; None: unknown), so an
        # attempt lost in its turn is known to have cost the rest.
        self.carried_cost: Decimal | None = ZERO_USD
        self._carried_known = ZERO_USD

    # --- read -------------------------------------------------------------------------------

    def figures(self) -> Figures:
        """A frozen copy of the figures."""
        with self._lock:
            return Figures(
                self._activity.frozen(),
                self._usage,
                self._cost,
                self._known,
                self._saved,
                self._in_flight.usage(),
                self._model,
                self.carried_cost is None,
            )

    def mirror(self) -> Mirror:
        """A copy of every figure (`follow` sets another Progress to it)."""
        with self._lock:
            return Mirror(
                dataclasses.replace(self._activity),
                self._usage,
                self._cost,
                self._known,
                self._saved,
                dataclasses.replace(self._in_flight),
                self._model,
                self._bills,
            )

    def follow(self, mirror: Mirror) -> None:
        """Take every figure from `mirror`: the child's work runs elsewhere, and this is it."""
        with self._lock:
            self._activity = dataclasses.replace(mirror.activity)
            self._usage, self._cost, self._saved = mirror.usage, mirror.cost, mirror.saved
            self._known = mirror.known
            self._in_flight = dataclasses.replace(mirror.in_flight)
            self._model = mirror.model
            self._bills = mirror.bills
            self.version += 1

    @property
    def last_activity(self) -> float | None:
        """When the child last showed activity (a chunk, a tool transition, a call)."""
        return self._activity.last_activity_ts

    @property
    def current_tool(self) -> str | None:
        """The tool it runs now, if any."""
        return self._activity.current_tool

    @property
    def held(self) -> bool:
        """Waiting on limits (a backoff, the route's buckets), which is never a stall."""
        return self._activity.held

    @property
    def model(self) -> str | None:
        """The model its agent CLI says it runs, once it has."""
        return self._model

    @property
    def turns(self) -> int:
        """Turns begun so far."""
        return self._activity.turns

    @property
    def usage_total(self) -> int:
        """Every token billed so far."""
        return self._usage.total

    # --- the child's lifecycle ----------------------------------------------------------------

    def started(self) -> None:
        """Its run began."""
        with self._lock:
            self._activity.started(self._clock())
            self.version += 1

    def ended(self, text: str, *, ran: bool = True) -> None:
        """It is final: `text` (its status) is what it shows. Ended before this attempt `ran`,
        it spent what earlier attempts carried into it and nothing more: a known sum even on a
        route whose CLI may report no usage."""
        with self._lock:
            self._activity.ended(text)
            if not ran:
                self._cost, self._known = self.carried_cost, self._carried_known
            self.version += 1

    # --- activity -----------------------------------------------------------------------------

    def show(self, text: str) -> None:
        """What it waits for, without counting as activity (it is held, not idle)."""
        with self._lock:
            self._activity.text = text
            self.version += 1

    def stopping(self, text: str) -> None:
        """It is being stopped: `text` is what it shows until it has ended (its tool, which the
        stop ends, and what its process prints meanwhile do not replace it)."""
        with self._lock:
            self._activity.stop_shown(text)
            self.version += 1

    def wait_on_operator(self, text: str) -> None:
        """It waits for the operator (`text` says on what): held, never a stall."""
        with self._lock:
            self._activity.text = text
            self._activity.held = True
            self.version += 1

    def tick(self, text: str) -> None:
        """Activity: a chunk streamed, a tool call announced, a line of output."""
        with self._lock:
            self._activity.tick(text, self._clock())
            self.version += 1

    def touch(self) -> None:
        """Activity that changes nothing shown (output inside a tool, while stopping)."""
        with self._lock:
            self._activity.last_activity_ts = self._clock()
            self.version += 1

    def hold(self, turn: int, *, last: bool = False) -> None:
        """A call of `turn` is about to be made and waits on the route until it starts."""
        with self._lock:
            self._activity.hold(turn, last=last)
            self.version += 1

    def call_started(self, call: InFlight | None = None) -> None:
        """A request goes out (`call`: its estimate, counted until it is billed)."""
        with self._lock:
            self._activity.call_started(self._clock())
            if call is not None:
                self._in_flight = call
            self.version += 1

    def call_estimated(self, call: InFlight) -> None:
        """The request going out was made again, a steer --now in it: its estimate, in place of
        the one `call_started` took (no call more)."""
        with self._lock:
            self._in_flight = call
            self.version += 1

    def streamed(self, text: str) -> None:
        """A chunk of the reply streamed: activity, and output counted before it is billed."""
        with self._lock:
            self._in_flight.streamed_chars += len(text)
            self._activity.streamed(self._clock())
            self.version += 1

    def call_ended(self) -> None:
        """The call is over: what it used is billed, or never will be."""
        with self._lock:
            self._in_flight = InFlight()
            self.version += 1

    def retry(self, text: str) -> None:
        """A retry is scheduled: held again, and `text` says why."""
        with self._lock:
            self._activity.retry(text, self._clock())
            self.version += 1

    def tool_started(self, name: str, call: bool = True) -> None:
        """A tool call began (one still running, in an agent CLI, has ended); not a `call`:
        work the CLI waits on as on a tool (a background command), not counted."""
        with self._lock:
            now = self._clock()
            if self._activity.current_tool is not None:
                self._activity.tool_ended(now)
            self._activity.tool_started(name, now, call)
            self.version += 1

    def tool_since(self, name: str, ts: float) -> None:
        """The running tool, if it is `name`, began at `ts` (an adopted process's, as its
        dead owner saw it begin) rather than when its output was read again."""
        with self._lock:
            started = self._activity.tool_started_ts
            if self._activity.current_tool == name and started is not None and ts < started:
                self._activity.tool_started_ts = ts
                self.version += 1

    def tool_ended(self) -> None:
        """The running tool call returned (nothing, if none runs)."""
        with self._lock:
            if self._activity.current_tool is not None:
                self._activity.tool_ended(self._clock())
                self.version += 1

    def working(self, calls: int) -> None:
        """An agent CLI's call streams (a retry it waited on is over); `calls`: its API calls
        so far."""
        with self._lock:
            activity = self._activity
            activity.held = activity.retrying = False
            activity.retry_reason = None
            activity.api_calls = max(activity.api_calls, calls)
            activity.last_activity_ts = self._clock()
            self.version += 1

    def reported_model(self, model: str) -> None:
        """The model its agent CLI says it runs (shown instead of the route's)."""
        with self._lock:
            self._model = model
            self.version += 1

    # --- money --------------------------------------------------------------------------------

    @property
    def bills(self) -> int:
        """How many times usage was billed into these figures."""
        return self._bills

    def bill(self, usage: Usage, cost: Decimal | None, saved: Decimal | None) -> None:
        """Usage billed by the provider: `cost` None makes the child's cost unknown for good."""
        with self._lock:
            self._bill(usage, cost, saved)
            self._bills += 1

    def bill_elsewhere(
        self, count: int, usage: Usage, cost: Decimal | None, saved: Decimal | None
    ) -> None:
        """The `count`th bill of these figures, as the child running elsewhere sends it home
        ahead of them: taken, unless figures that count it came first."""
        with self._lock:
            if count > self._bills:
                self._bill(usage, cost, saved)
                self._bills = count

    def _bill(self, usage: Usage, cost: Decimal | None, saved: Decimal | None) -> None:
        self._saved = None if saved is None or self._saved is None else self._saved + saved
        self._usage += usage
        self._in_flight.billed += usage  # what its call in flight has been billed already
        # While every cost was known, the two sums are the same additions: one Decimal (about
        # 100 bytes, kept per child) serves both.
        shared = self._known is self._cost
        self._cost = None if cost is None or self._cost is None else self._cost + cost
        if cost is not None:
            self._known = self._cost if shared and self._cost is not None else self._known + cost
        self.version += 1

    def not_billed(self) -> Usage:
        """The estimate of the call in flight not billed yet (a call cut short)."""
        with self._lock:
            return self._in_flight.usage()

    def spend(
        self, usage: Usage, cost: Decimal | None, known: Decimal, *, pending: bool = False
    ) -> None:
        """An agent CLI's tally, replacing the one before (`cost` None: unknown, `known` what
        is known of it; `pending`: its turn under way has reported no usage yet)."""
        with self._lock:
            self._usage, self._cost, self._known = usage, cost, known
            self._activity.unreported = pending
            self.version += 1

    def carry(
        self, usage: Usage, cost: Decimal | None, known: Decimal, saved: Decimal | None
    ) -> None:
        """What an earlier attempt, lost with its owner process, was billed (`known`: what is
        known of its `cost`; and what its cache reads saved): spent is spent."""
        with self._lock:
            self._usage += usage
            self._cost = None if cost is None or self._cost is None else self._cost + cost
            self._known += known
            self._carried_known += known
            self._saved = None if saved is None or self._saved is None else self._saved + saved
            carried = self.carried_cost
            self.carried_cost = None if cost is None or carried is None else carried + cost
            self.version += 1
