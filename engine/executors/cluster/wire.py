"""What the owner and its cluster's workers say to each other: small frozen values.

To a worker (`Worker.send`, in order): its setup, a child to run, the operator's commands for a
child, permits of a route's rate limits, delegates ended, and the routes' limits. From a worker
(`Worker.pull`, in order): what each child did (transcript events, figures, facts, its end),
what it was billed, and its asks for permits.
"""

from __future__ import annotations

import dataclasses
import operator
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

from flightdeck.engine.child.activity import ActivityState, InFlight
from flightdeck.engine.child.facts import ChildFact
from flightdeck.engine.child.progress import Mirror
from flightdeck.engine.inputs.settings import Settings
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.model import ChildRow, ChildStatus, SteerReceipt, Usage
from flightdeck.engine.records.events import EndStream, Release, Stream, Write

# --- to a worker --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Setup:
    """What every child of the batch is built from on a worker (no key: each worker reads the
    routes' keys from its own environment)."""

    settings: Settings
    batch_id: str
    batch_dir: Path
    workspace: Path
    delegate: bool
    owner_now: float  # the owner's clock, so stamps made there read as the owner's
    private: bool = False  # the batch's own workspace: what tools write there is 0600/0700
    probes: tuple[tuple[Path, str], ...] = ()  # files a worker must read as written (shared?)


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Run this child (a paused model child known there already: run it again)."""

    task: Task
    transcript: str
    queued_ts: float
    figures: Mirror | None  # what it has spent so far (a re-run's lost attempts), if anything
    steers: tuple[SteerReceipt, ...]  # waiting in its inbox
    pause_wanted: bool
    leads_gate: bool


@dataclass(frozen=True, slots=True)
class Steer:
    child_id: str
    receipt: SteerReceipt


@dataclass(frozen=True, slots=True)
class Stop:
    child_id: str
    status: ChildStatus
    reason: str


@dataclass(frozen=True, slots=True)
class Pause:
    child_id: str
    wanted: bool  # False: continue


@dataclass(frozen=True, slots=True)
class Granted:
    """A permit asked for is granted (`lease` settles it); `waited_s` throttled."""

    ask: int
    lease: int
    waited_s: float


@dataclass(frozen=True, slots=True)
class Held:
    """A permit asked for waits `seconds` on the route's limit `why`."""

    ask: int
    seconds: float
    why: str


@dataclass(frozen=True, slots=True)
class Refused:
    """A permit asked for was cancelled (its child stopped)."""

    ask: int


@dataclass(frozen=True, slots=True)
class Limited:
    """Whether a route's calls are paced by requests and by tokens (configured or learned)."""

    route: str
    requests: bool
    tokens: bool


@dataclass(frozen=True, slots=True)
class RoutePaused:
    """A 429 somewhere held the whole route for `seconds`."""

    route: str
    seconds: float


@dataclass(frozen=True, slots=True)
class DelegatesEnded:
    """A `delegate` call settled by the owner: its sub-tasks' rows, or why it was refused."""

    call: int
    results: tuple[ChildRow, ...]
    refused: str | None


@dataclass(frozen=True, slots=True)
class AskEnded:
    """An `ask_operator` call settled by the owner: the operator's answer, or why it was
    refused (the child ended)."""

    call: int
    answer: str | None
    refused: str | None


ToWorker = (Dispatch | Steer | Stop | Pause | Granted | Held | Refused | Limited | RoutePaused) | (
    DelegatesEnded | AskEnded
)

# --- from a worker ------------------------------------------------------------------------------

Line = Write | Stream | EndStream | Release  # `path` holds the child's id


@dataclass(frozen=True, slots=True)
class Lines:
    """Transcript events of one child, in order, stamped on the owner's clock."""

    child_id: str
    events: tuple[Line, ...]


@dataclass(frozen=True, slots=True)
class Figures:
    child_id: str
    mirror: Mirror


@dataclass(frozen=True, slots=True)
class Billed:
    """Usage billed to a child on a worker (`cost` None: unpriced), for the owner's meter and
    the child's figures there, which it reaches before they do: the `count`th bill of its
    figures (0: of its tally, which they carry whole)."""

    child_id: str
    usage: Usage
    cost: Decimal | None
    count: int


@dataclass(frozen=True, slots=True)
class Fact:
    """A child's fact for the coordinator (never `Delegated` nor `ChildDone`: see below)."""

    fact: ChildFact


@dataclass(frozen=True, slots=True)
class PauseTaken:
    child_id: str


@dataclass(frozen=True, slots=True)
class Running:
    """A child paused there runs again (a suspended process continued)."""

    child_id: str


@dataclass(frozen=True, slots=True)
class Done:
    """A child's run returned final (its transcript closed, its figures sent just before)."""

    child_id: str
    status: ChildStatus
    error: str | None
    result: str | None


@dataclass(frozen=True, slots=True)
class Ask:
    """A permit of the route's rate limits for one call of `tokens` (`spare`: its max_tokens)."""

    ask: int
    route: str
    tokens: int
    spare: int


@dataclass(frozen=True, slots=True)
class Cancel:
    ask: int


@dataclass(frozen=True, slots=True)
class Settle:
    """A granted permit's call used `tokens`."""

    lease: int
    tokens: int


@dataclass(frozen=True, slots=True)
class RateLimited:
    """A call of the route drew a 429 (or a 529, `overloaded`)."""

    route: str
    retry_after: float | None
    overloaded: bool


@dataclass(frozen=True, slots=True)
class Delegating:
    """A child called `delegate`: its sub-tasks, to be queued by the owner."""

    child_id: str
    call: int
    tasks: tuple[tuple[str, str | None], ...]  # (goal, context)


@dataclass(frozen=True, slots=True)
class Asking:
    """A child called `ask_operator`: its question, for the owner to put to the operator (the
    call itself, waited on there, never crosses)."""

    child_id: str
    call: int
    question: str


FromWorker = (
    Lines | Figures | Billed | Fact | PauseTaken | Running | Done | Ask | Cancel | Settle
) | (RateLimited | Delegating | Asking)


# --- on the wire ---------------------------------------------------------------------------------
# Ray pickles what a call takes and returns. A slotted dataclass pickles field by field in Python
# (about 100 µs for what one child sends home, each way); the same values as plain tuples take a
# few µs. So the messages every child sends cross as tuples, made and read only here; the rare
# ones (a steer, a fact, a permit) go as they are.

_ACTIVITY = operator.attrgetter(*(f.name for f in dataclasses.fields(ActivityState)))
_TASK = operator.attrgetter(*(f.name for f in dataclasses.fields(Task)))
_AS_IS = 0


def _usage(u: Usage) -> tuple[int, int, int, int]:
    return (u.input_tokens, u.output_tokens, u.cache_read_tokens, u.cache_write_tokens)


def _money(value: Decimal | None) -> str | None:
    return None if value is None else str(value)


def _decimal(text: str | None) -> Decimal | None:
    return None if text is None else Decimal(text)


def _mirror(m: Mirror) -> tuple[Any, ...]:
    flight = m.in_flight
    return (
        _ACTIVITY(m.activity),
        _usage(m.usage),
        _money(m.cost),
        str(m.known),
        _money(m.saved),
        (flight.prompt_tokens, flight.streamed_chars, _usage(flight.billed), flight.cached),
        m.model,
        m.bills,
    )


def _unmirror(t: tuple[Any, ...]) -> Mirror:
    activity, usage, cost, known, saved, (prompt, streamed, billed, cached), model, bills = t
    flight = InFlight(prompt, streamed, Usage(*billed), cached)
    return Mirror(
        ActivityState(*activity),
        Usage(*usage),
        _decimal(cost),
        Decimal(known),
        _decimal(saved),
        flight,
        model,
        bills,
    )


def _event(e: Line) -> tuple[Any, ...]:
    match e:
        case Write(_, ts, role, text):
            return (0, ts, role, text)
        case Stream(_, ts, chunk):
            return (1, ts, chunk)
        case EndStream(_, ts, interrupted):
            return (2, ts, interrupted)
        case Release(_, ts):
            return (3, ts)


def _line(child_id: str, t: tuple[Any, ...]) -> Line:
    match t[0]:
        case 0:
            return Write(child_id, t[1], t[2], t[3])
        case 1:
            return Stream(child_id, t[1], t[2])
        case 2:
            return EndStream(child_id, t[1], t[2])
        case _:
            return Release(child_id, t[1])


def pack_from(items: list[FromWorker]) -> list[tuple[Any, ...]]:
    """A worker's reply, as it crosses to the owner."""
    out: list[tuple[Any, ...]] = []
    for item in items:
        match item:
            case Lines(child_id, events):
                out.append((1, child_id, tuple(_event(e) for e in events)))
            case Figures(child_id, mirror):
                out.append((2, child_id, _mirror(mirror)))
            case Billed(child_id, usage, cost, count):
                out.append((3, child_id, _usage(usage), _money(cost), count))
            case Done(child_id, status, error, result):
                out.append((4, child_id, status.value, error, result))
            case _:
                out.append((_AS_IS, item))
    return out


def unpack_from(rows: list[tuple[Any, ...]]) -> list[FromWorker]:
    """`pack_from`'s inverse, on the owner."""
    out: list[FromWorker] = []
    for row in rows:
        match row[0]:
            case 1:
                child_id = row[1]
                out.append(Lines(child_id, tuple(_line(child_id, t) for t in row[2])))
            case 2:
                out.append(Figures(row[1], _unmirror(row[2])))
            case 3:
                out.append(Billed(row[1], Usage(*row[2]), _decimal(row[3]), row[4]))
            case 4:
                out.append(Done(row[1], ChildStatus(row[2]), row[3], row[4]))
            case _:
                out.append(row[1])
    return out


def pack_to(messages: list[ToWorker]) -> list[tuple[Any, ...]]:
    """What the owner sends a worker, as it crosses."""
    out: list[tuple[Any, ...]] = []
    for m in messages:
        if isinstance(m, Dispatch):
            figures = None if m.figures is None else _mirror(m.figures)
            where = (m.transcript, m.queued_ts)
            out.append((1, _TASK(m.task), *where, figures, m.steers, m.pause_wanted, m.leads_gate))
        else:
            out.append((_AS_IS, m))
    return out


def unpack_to(rows: list[tuple[Any, ...]]) -> list[ToWorker]:
    """`pack_to`'s inverse, on the worker."""
    out: list[ToWorker] = []
    for row in rows:
        if row[0] == 1:
            _, task, transcript, queued_ts, figures, steers, pause_wanted, leads_gate = row
            mirror = None if figures is None else _unmirror(figures)
            out.append(
                Dispatch(
                    Task(*task), transcript, queued_ts, mirror, steers, pause_wanted, leads_gate
                )
            )
        else:
            out.append(row[1])
    return out
