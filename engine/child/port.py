"""The seam between what a child is and how it runs.

A `Runner` does a child's work: turns through a model provider (loop.py) or a process, such as
an agent CLI (command.py). It is given values when it is made (the task, the route, its
clients) and, to run, a `ChildPort`: the child's side it may touch (its live figures, steer
inbox, transcript, stop and pause), never the coordinator. An executor that runs the work
elsewhere (another machine) hands the runner a port that relays to the child at home.
"""

from __future__ import annotations

from typing import Protocol

from flightdeck.engine.child.facts import ChildFact
from flightdeck.engine.child.kept import Attempt, Kept
from flightdeck.engine.child.loopwatch import LoopWatch
from flightdeck.engine.child.progress import Progress
from flightdeck.engine.child.steering import Steering
from flightdeck.engine.inputs.settings import Route
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.interrupt import Interruptible
from flightdeck.engine.model import ChildStatus, SteerReceipt, SteerState, record
from flightdeck.engine.model.session import CliSession
from flightdeck.engine.review.values import Changes


@record
class Ended:
    """How a run ended: the child's final status, and its reason or answer."""

    status: ChildStatus
    error: str | None = None
    result: str | None = None
    missed: str | None = None  # why steers still waiting were never delivered


class Paused:
    """A run that returned for the operator's pause (a continue runs it again)."""


PAUSED = Paused()


class Closable(Protocol):
    """An open call a stop (or a steer --now) closes from another thread."""

    def close(self) -> None: ...


class Transcript(Protocol):
    """A child's transcript as its runner writes it (records/transcripts.py's writer, or a
    relay to the one at home)."""

    def write(self, role: str, text: str, ts: float | None = None) -> None: ...

    def stream(self, chunk: str, ts: float | None = None) -> None: ...

    def end_stream(self, *, interrupted: bool = False, ts: float | None = None) -> None: ...

    def close(self, role: str | None = None, text: str = "", ts: float | None = None) -> None: ...


class Relay(Protocol):
    """A child whose work runs elsewhere (an executor's worker): the operator's commands, to be
    applied there as they are here."""

    def steer(self, receipt: SteerReceipt) -> None: ...

    def stop(self, status: ChildStatus, reason: str) -> None: ...

    def pause(self, wanted: bool) -> None: ...


class ChildPort(Protocol):
    """The child, as its runner sees it."""

    task: Task
    route: Route
    progress: Progress
    steering: Steering
    loops: LoopWatch
    leads_gate: bool  # it leads a prompt-cache gate: its first chunk is reported
    kept: Kept  # its attempt, its changes, and whether it runs again where a lost one worked

    @property
    def interrupt(self) -> Interruptible:
        """Set by a stop: waits on it are cut short."""
        ...

    @property
    def transcript(self) -> Transcript: ...

    @property
    def pause_wanted(self) -> bool: ...

    @property
    def retrying(self) -> Attempt | None:
        """The operator's retry this run is (None: its first attempt)."""
        ...

    @property
    def stop_status(self) -> ChildStatus | None: ...

    @property
    def stop_reason(self) -> str | None: ...

    def take_pause(self) -> bool:
        """At a boundary: True, and the child is `paused`, if a pause is wanted and no stop
        came first."""
        ...

    def mark_running(self) -> bool:
        """Running again after a pause; False if it ended meanwhile."""
        ...

    def settle(self, receipt: SteerReceipt, state: SteerState, note: str = "") -> None:
        """A steer was delivered or missed (`note`: how, for its receipt)."""
        ...

    def open_call(self, call: Closable) -> bool:
        """The call a stop or a steer --now closes; False (it is closed) if one came first."""
        ...

    def close_call(self) -> bool:
        """The call is over; True when it was closed under the runner (a stop, a steer)."""
        ...

    def closing(self) -> bool:
        """True when the open call is to be dropped (a stop, or a steer --now)."""
        ...

    def report(self, fact: ChildFact) -> None:
        """Hand a fact to the coordinator."""
        ...

    def changed(self, changes: Changes) -> None:
        """At its end: what it changed in its own worktree or copy (kept for review)."""
        ...

    def clean(self, text: str) -> str:
        """`text` without the route's secrets."""
        ...

    def clock(self) -> float:
        """The engine's clock."""
        ...


class Runner(Protocol):
    """How a child's work runs."""

    @property
    def steerable(self) -> bool:
        """Whether a steer can reach it."""
        ...

    @property
    def keeps_thread(self) -> bool:
        """Whether a paused child keeps its thread (a suspended process) or returns."""
        ...

    @property
    def stop_grace_s(self) -> float:
        """Seconds a stop may take beyond the engine's stall grace (a process's kill grace)."""
        ...

    @property
    def secrets(self) -> tuple[str, ...]:
        """Its client's keys (and values passed to a process), redacted wherever shown."""
        ...

    @property
    def prefix_key(self) -> tuple[str, str]:
        """What its requests share with its siblings' ahead of the goal (the cache gate's
        key)."""
        ...

    @property
    def session(self) -> CliSession | None:
        """The CLI session its run reported (a retry that continues resumes it); None."""
        ...

    def refuse_steer(self, child: ChildPort, receipt: SteerReceipt) -> str | None:
        """Why this steer cannot reach the child (it is missed at once); None: it can."""
        ...

    def run(self, child: ChildPort) -> Ended | Paused:
        """Do the work on this thread until the child ends or pauses; may raise the stop."""
        ...
