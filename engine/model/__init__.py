"""Value types shared by the engine, the CLI and the UI.

Everything here is immutable so it can cross threads freely: engine threads build these values
and readers (the TUI timer, the headless printer, tests) only ever see finished objects.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import field
from decimal import Decimal
from enum import StrEnum
from typing import Literal

from flightdeck.engine.model.record import record as record
from flightdeck.engine.model.routes import Limits as Limits
from flightdeck.engine.model.routes import RouteCaps as RouteCaps
from flightdeck.engine.model.routes import RouteHeadroom as RouteHeadroom
from flightdeck.engine.model.routes import RouteLimit as RouteLimit
from flightdeck.engine.model.status import BatchStatus as BatchStatus
from flightdeck.engine.model.status import ChildStatus as ChildStatus
from flightdeck.engine.model.status import SteerState as SteerState
from flightdeck.engine.model.status import batch_ended as batch_ended
from flightdeck.engine.model.usage import CHARS_PER_TOKEN as CHARS_PER_TOKEN
from flightdeck.engine.model.usage import Usage as Usage
from flightdeck.engine.model.waiting import ASK_TOOL as ASK_TOOL
from flightdeck.engine.model.waiting import DELEGATE_TOOL as DELEGATE_TOOL
from flightdeck.engine.model.waiting import PAUSING as PAUSING
from flightdeck.engine.model.waiting import pausing_text as pausing_text
from flightdeck.engine.review.values import Changes


@record
class Activity:
    """What a child is doing right now: its counters, current tool, last activity and a short
    text; `retrying` while it waits to retry a failed call."""

    api_calls: int = 0
    tool_calls: int = 0
    retries: int = 0
    turns: int = 0
    current_tool: str | None = None
    tool_started_ts: float | None = None
    last_activity_ts: float | None = None
    text: str = ""
    retrying: bool = False  # waiting to retry a failed call (a 429, a 5xx)
    last_turn: bool = False  # on the last turn `max_turns` allows: a steer after it is missed
    # The retry notice of the failure it is retrying after, until a reply streams again: what it
    # is failing with, steady while `text` turns to "route paused" and back. Not stored.
    retry_reason: str | None = None
    # An agent CLI's turn under way has reported no usage yet (Codex reports at its end), so
    # its cost has more to come. Not stored.
    unreported: bool = False


@record
class SteerReceipt:
    """An operator message for one child and what became of it."""

    id: int
    child_id: str
    message: str
    now: bool
    state: SteerState
    created_ts: float
    settled_ts: float | None = None
    # Who sent it: the operator, or a route's loop policy acting on its own (not stored in
    # the controls table: the policy's "loop_policy" event names its receipt).
    by: Literal["operator", "policy"] = "operator"
    # How it was delivered, where the child says: "into the running turn" (an agent CLI
    # that folds it into the turn under way), "as a new turn", "by resuming the session";
    # or why it was missed, where that is known ("this route cannot be steered").
    how: str | None = None


@record
class StopRecord:
    """A stop the store recorded: the child (None: the batch's schedules), when, and why."""

    child_id: str | None
    ts: float
    reason: str


@record
class LoopEvidence:
    """Why a child was judged to be looping: what kind of loop, a one-line summary for the table
    and the steer, and the calls themselves for the detail pane to show side by side."""

    kind: Literal["repeat", "no_output", "no_change"]
    summary: str  # "read_file(path='a.py') called 5 times with the same arguments"
    calls: tuple[str, ...]  # the repeated calls (or turns), oldest first, each one line
    ts: float  # when it was flagged


@record
class Question:
    """What a child asked the operator (its `ask_operator` call), not answered yet."""

    text: str
    ts: float


@record
class Denial:
    """A tool call an agent CLI's permissions denied (Claude Code's `permission_denials`)."""

    tool: str
    input: str  # its input, as one line of JSON
    ts: float


@record
class ChildRow:
    """One child as a reader sees it."""

    id: str
    seq: int
    goal: str
    group: str | None
    route: str
    model: str
    status: ChildStatus
    activity: Activity
    usage: Usage
    cost_usd: Decimal | None  # None: price unknown, never guessed
    queued_ts: float
    started_ts: float | None
    finished_ts: float | None
    error: str | None
    result: str | None
    transcript: str
    steers: tuple[SteerReceipt, ...] = ()
    # The call in progress, estimated from its prompt and what has streamed, until its real
    # usage is billed; never stored. `usage` and `cost_usd` are what has been billed.
    in_flight: Usage = field(default_factory=Usage)
    in_flight_cost_usd: Decimal | None = Decimal(0)
    # False for a command route that takes no steer: a steer is `missed` at once, and the TUI
    # says so before the operator types one. Not stored (an attached view assumes True).
    steerable: bool = True
    # What its cache reads saved against the uncached input price (None: price unknown).
    cache_saved_usd: Decimal | None = Decimal(0)
    parent: str | None = None  # the child that delegated it (None: one of the batch's tasks)
    depth: int = 0
    loop: LoopEvidence | None = None  # flagged as looping (cleared when it makes progress)
    looped_ts: float | None = None  # when it was last flagged, kept once the flag clears
    question: Question | None = None  # it asks the operator and waits for the answer
    denial: Denial | None = None  # the latest tool call its CLI's permissions denied
    dismissed_ts: float | None = None  # when the operator last cleared what it needed of them
    node: str | None = None  # the cluster node its work ran on (None: in the owner process)
    attempt: int = 1  # 2 and on: the operator retried it (the earlier attempts' spend included)
    changes: Changes | None = None  # what it changed in its own worktree or copy (None: nothing)
    superseded: bool = False  # a delegate of its parent's earlier attempt: history, not outcome
    # Of a child whose cost is unknown, the part that is known: what its agent CLI's turns
    # reported before one never did (a stop mid-turn). Spent all the same: `$0.42+?`.
    cost_floor_usd: Decimal = Decimal(0)
    # An earlier attempt (lost, or retried) cost an unknown sum, carried into this one: a row
    # queued again reads as a fresh one otherwise when that attempt counted no token. Not
    # stored: its `retry` and `lost_attempt` events say so (records/attempts.py).
    carried_unknown: bool = False

    @property
    def pausing(self) -> bool:
        """The operator paused it and it has not taken the pause yet: still running, to its
        turn's end or until its delegates return (counted and continued as paused)."""
        return self.status is ChildStatus.RUNNING and self.activity.text.startswith(PAUSING)

    @property
    def waits_on_delegates(self) -> bool:
        """Running, inside its `delegate` call: it holds no slot until its delegates end."""
        return self.status is ChildStatus.RUNNING and self.activity.current_tool == DELEGATE_TOOL

    @property
    def live_usage(self) -> Usage:
        """Billed usage plus the estimate of the call in progress."""
        return self.usage + self.in_flight

    @property
    def tokens_unknown(self) -> bool:
        """It ran, but nobody counted its tokens (a command whose CLI reports no usage): shown
        as `?`, never as 0. Its cost is unknown too; a model child always has a count. One that
        ended before this attempt started costs what earlier attempts carried into it: unknown
        only if one of them ran (whose calls were that attempt's, not this one's)."""
        if self.cost_usd is not None or self.live_usage.total:
            return False
        return self.activity.api_calls > 0 or (self.status.terminal and self.started_ts is None)

    @property
    def cost_pending(self) -> bool:
        """Its agent CLI's turn under way has reported no usage yet: more to come (`$0.42+?`).
        Only of a live child whose cost is known (an unknown one is counted unknown already);
        an ended child has no turn under way, whatever figures its worker sent after."""
        return self.activity.unreported and self.cost_usd is not None and self.status.live

    @property
    def cost_known_usd(self) -> Decimal:
        """What is known of its cost: all of it, or, where that is unknown, the part known."""
        return self.cost_floor_usd if self.cost_usd is None else self.cost_usd

    @property
    def live_cost_usd(self) -> Decimal | None:
        """Billed cost plus the estimate of the call in progress; None if the price is unknown."""
        if self.cost_usd is None or self.in_flight_cost_usd is None:
            return None
        return self.cost_usd + self.in_flight_cost_usd

    @property
    def live_known_usd(self) -> Decimal | None:
        """What is known of its live cost: all of it, or where the rest is unknown the part
        known (`cost_floor_usd`, `$0.42+?`); None when nothing is."""
        live = self.live_cost_usd
        if live is None and self.cost_floor_usd:
            return self.cost_floor_usd
        return live

    @property
    def duration_s(self) -> float | None:
        """Seconds from start to end (or to the last activity while running); None if unstarted."""
        if self.started_ts is None:
            return None
        end = self.finished_ts if self.finished_ts is not None else self.activity.last_activity_ts
        return None if end is None else max(0.0, end - self.started_ts)


@record
class Totals:
    """Counts, usage and cost summed over a batch (or one route of it)."""

    children: int = 0
    queued: int = 0
    running: int = 0
    completed: int = 0
    failed: int = 0  # failed, timed out or stalled (or unknown, after a crash)
    stopped: int = 0  # stopped by the operator, a budget or a signal
    superseded: int = 0  # ended delegates of their parents' earlier attempts, however they ended
    paused: int = 0  # paused by the operator (live: neither queued nor running)
    pausing: int = 0  # running, their operator's pause pending (`ChildRow.pausing`)
    usage: Usage = field(default_factory=Usage)
    cost_usd: Decimal = Decimal(0)
    cost_unknown: int = 0  # children whose price is unknown
    # Calls in progress, estimated (`ChildRow.in_flight`): zero in anything read from the store.
    in_flight: Usage = field(default_factory=Usage)
    in_flight_cost_usd: Decimal = Decimal(0)
    cache_saved_usd: Decimal = Decimal(0)  # cache reads against the uncached price (known ones)
    # Children whose saving is unknown: a price unknown, or tokens nobody counted.
    saved_unknown: int = 0
    tokens_unknown: int = 0  # children that ran whose tokens nobody counted (`?`, never 0)
    pending: int = 0  # children whose turn under way has reported no usage yet (`cost_pending`)

    @property
    def live_usage(self) -> Usage:
        """Billed usage plus the estimate of the calls in progress."""
        return self.usage + self.in_flight

    @property
    def live_cost_usd(self) -> Decimal:
        """Known billed cost plus the estimate of the calls in progress."""
        return self.cost_usd + self.in_flight_cost_usd

    @property
    def done(self) -> int:
        """Children that have ended, however."""
        return self.completed + self.failed + self.stopped + self.superseded


@record
class RouteTotals:
    """One route's share of a batch (`route_totals` in meter.py)."""

    route: str
    model: str
    totals: Totals


# `Snapshot.held` while the operator has paused the batch's admission (with any other hold).
OPERATOR_HOLD = "paused by the operator"
# A paused child's activity; once continued with no slot free yet, while it waits (still paused).
PAUSED_SHOWS = "paused by the operator"
CONTINUED_WAITING = "continued: waiting for a slot"


@record
class Snapshot:
    """An immutable view of a whole batch, cheap to poll."""

    batch_id: str
    status: BatchStatus
    started_ts: float
    now: float
    children: tuple[ChildRow, ...]
    totals: Totals
    pool_size: int
    max_cost_usd: Decimal | None = None
    routes: tuple[RouteHeadroom, ...] = ()
    version: int = 0
    finished_ts: float | None = None  # when the batch ended, as the store records it
    # What attempts lost with an earlier owner, or with a cluster worker, cost (in the totals
    # already: spent is spent); None if one had no price.
    lost_cost_usd: Decimal | None = Decimal(0)
    # What keeps the engine from recording or running as it should (the store cannot commit,
    # say), in a sentence for a banner; None when all is well.
    problem: str | None = None
    # Why admission is held (the operator paused the batch, the soft budget was reached), in a
    # sentence; None while new children may start.
    held: str | None = None
    # The live limits (pool size, route caps, soft budget); None where unknown.
    limits: Limits | None = None
    # The batch's own tasks' ids, the same set every snapshot (model/units.py: who is in which
    # completion unit); None: not known (a snapshot made by hand: every task counts as one).
    own: frozenset[str] | None = None
    # A schedule may still start waves: with no child live, stop all and quit act on the batch.
    scheduled: bool = False

    def child(self, child_id: str) -> ChildRow | None:
        """The row of `child_id`; None if the batch has no such child."""
        for row in self.children:
            if row.id == child_id:
                return row
        return None


# Discrete facts the engine publishes, named in the past tense. Delivered to subscribers
# from the coordinator thread, in the order they happened.


@record
class ChildStarted:
    """A child was admitted and holds a slot."""

    child_id: str
    ts: float


@record
class ChildFinished:
    """A child ended and its final row is committed to the store."""

    row: ChildRow
    done: int  # children finished so far, this one included
    total: int


@record
class SteerSettled:
    """A steer was delivered, or missed because its child had ended."""

    receipt: SteerReceipt


class UnitStatus(StrEnum):
    """How a completion unit (the tasks sharing a `group`) ended."""

    COMPLETED = "completed"  # every member completed
    PARTIAL = "partial"  # some did, some did not
    STOPPED = "stopped"  # none did, and every member was stopped (as a batch reads stopped)
    FAILED = "failed"  # none did, and one failed, timed out, stalled or is unknown


@record
class GroupFinished:
    """Every child of a group ended (and is committed): the unit's result, members in batch
    order, then the delegates they made (they belong to their parent's group). The status is
    the members'; `cost_usd` and the duration count the delegates too. `cost_usd` is None when
    a cost is unknown, never a partial sum: `cost_floor_usd` is then the part known."""

    group: str
    status: UnitStatus
    members: tuple[ChildRow, ...]
    cost_usd: Decimal | None
    duration_s: float  # from the first start to the last end
    delegates: tuple[ChildRow, ...] = ()
    cost_floor_usd: Decimal = Decimal(0)  # of an unknown cost, its known part (`$0.42+?`)

    @property
    def cost_known_usd(self) -> Decimal:
        """What is known of its cost: all of it, or, where that is unknown, the part known."""
        return self.cost_floor_usd if self.cost_usd is None else self.cost_usd

    @classmethod
    def of(cls, group: str, rows: Sequence[ChildRow]) -> GroupFinished:
        """The result of a unit whose rows (in batch order) have all ended."""
        members = tuple(r for r in rows if r.parent is None)
        delegates = tuple(r for r in rows if r.parent is not None)
        completed = sum(m.status is ChildStatus.COMPLETED for m in members)
        if completed == len(members):
            status = UnitStatus.COMPLETED
        elif all(m.status is ChildStatus.STOPPED for m in members):
            # A stop is nobody's failure: a unit the operator (or a budget) stopped whole
            # reads as its batch would, not `failed`.
            status = UnitStatus.STOPPED
        elif completed == 0:
            status = UnitStatus.FAILED
        else:
            status = UnitStatus.PARTIAL
        known = sum((r.cost_known_usd for r in rows), Decimal(0))
        if any(r.cost_usd is None for r in rows):
            cost, floor = None, known
        else:
            cost, floor = known, Decimal(0)
        starts = [r.started_ts for r in rows if r.started_ts is not None]
        ends = [r.finished_ts for r in rows if r.finished_ts is not None]
        duration = max(0.0, max(ends) - min(starts)) if starts and ends else 0.0
        return cls(group, status, members, cost, duration, delegates, floor)


@record
class BatchFinished:
    """Every child of the batch is final."""

    batch_id: str
    status: BatchStatus


EngineEvent = ChildStarted | ChildFinished | GroupFinished | SteerSettled | BatchFinished
