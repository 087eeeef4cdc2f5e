"""What the owner and its cluster's workers say to each other: small frozen values.

To a worker (`Worker.send`, in order): its setup, a child to run, the operator's commands for a
child, permits of a route's rate limits, delegates ended, and the routes' limits. From a worker
(`Worker.pull`, in order): what each child did (transcript events, figures, facts, its end),
what it was billed, and its asks for permits.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

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
    probes: tuple[tuple[Path, str], ...] = ()  # files a worker must read as written (shared?)


@dataclass(frozen=True, slots=True)
class Dispatch:
    """Run this child (a paused model child known there already: run it again)."""

    task: Task
    transcript: str
    queued_ts: float
    figures: Mirror  # what it has spent so far (a re-run's lost attempts)
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


ToWorker = (
    Dispatch | Steer | Stop | Pause | Granted | Held | Refused | Limited | RoutePaused
) | DelegatesEnded

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
    """Usage billed on a worker, for the owner's meter (`cost` None: unpriced)."""

    usage: Usage
    cost: Decimal | None


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


FromWorker = (
    Lines | Figures | Billed | Fact | PauseTaken | Running | Done | Ask | Cancel | Settle
) | (RateLimited | Delegating)
