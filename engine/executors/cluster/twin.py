"""A child on a worker: the `Child` its runner runs against there, and what carries each change
home. Transcript lines, money billed, facts, its pause and its end go into the worker's outbox in
order; its figures are copied whole when the owner pulls (`Worker.pull`).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from decimal import Decimal

from flightdeck.engine.child.ask import AskCall
from flightdeck.engine.child.delegate import DelegateCall
from flightdeck.engine.child.facts import Asked, ChildDone, ChildFact, Delegated
from flightdeck.engine.child.port import Runner
from flightdeck.engine.child.progress import Progress
from flightdeck.engine.child.state import Child
from flightdeck.engine.executors.cluster.wire import (
    Asking,
    Billed,
    Delegating,
    Done,
    Fact,
    Figures,
    FromWorker,
    Lines,
    PauseTaken,
    Running,
)
from flightdeck.engine.inputs.settings import Route
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.model import ChildStatus, Usage
from flightdeck.engine.records.events import EndStream, Release, Stream, Write
from flightdeck.engine.records.meter import Meter

MAX_PULL_CHARS = 48_000  # of text in one reply: it stays small, inline in Ray's reply
GATHER_S = 0.02  # once something is waiting, how long more is gathered into the reply


class Outbox:
    """What a worker's children did, in order, until the owner pulls it; thread-safe.

    Transcript lines, figures and money wait GATHER_S for more to join them in one reply; what
    someone waits on (a child's end frees a slot, a permit asked for, a fact) goes at once.
    """

    def __init__(self) -> None:
        self._items: deque[FromWorker] = deque()
        self._ready = threading.Condition()
        self._urgent = False

    def put(self, item: FromWorker) -> None:
        """Queue one item (any thread); the pull waiting wakes. A child's transcript events
        following its last ones join them: one item, however many lines."""
        with self._ready:
            items = self._items
            if isinstance(item, Lines) and items:
                last = items[-1]
                if isinstance(last, Lines) and last.child_id == item.child_id:
                    items[-1] = Lines(item.child_id, last.events + item.events)
                    return
            items.append(item)
            if not isinstance(item, Lines | Figures | Billed):
                self._urgent = True
                self._ready.notify()
            elif len(items) == 1:
                self._ready.notify()

    def take(self, wait: float) -> list[FromWorker]:
        """What is waiting (after up to `wait` seconds for something), at most about
        MAX_PULL_CHARS of text: the rest goes in the next reply."""
        with self._ready:
            if not self._items and not self._ready.wait_for(lambda: bool(self._items), wait):
                return []
            # A burst of lines goes home in one reply, unless something is waited on.
            self._ready.wait_for(lambda: self._urgent, GATHER_S)
            self._urgent = False
            out: list[FromWorker] = []
            size = 0
            while self._items and size < MAX_PULL_CHARS:
                item = self._items.popleft()
                size += _chars(item)
                out.append(item)
            return out


def _chars(item: FromWorker) -> int:
    if isinstance(item, Lines):
        return sum(len(getattr(e, "text", "") or getattr(e, "chunk", "")) for e in item.events)
    if isinstance(item, Done):
        return len(item.result or "") + len(item.error or "")
    return 64


class RelayTranscript:
    """A child's transcript on a worker: each event goes home, stamped on the owner's clock,
    where the child's own transcript writer formats, redacts and writes it."""

    def __init__(self, child_id: str, outbox: Outbox, clock: Callable[[], float]) -> None:
        self._id = child_id
        self._outbox = outbox
        self._clock = clock

    def _send(self, *events: Write | Stream | EndStream | Release) -> None:
        self._outbox.put(Lines(self._id, events))

    def write(self, role: str, text: str, ts: float | None = None) -> None:
        """One event, as `TranscriptWriter.write`."""
        self._send(Write(self._id, self._clock() if ts is None else ts, role, text))

    def stream(self, chunk: str, ts: float | None = None) -> None:
        """Streamed text, as `TranscriptWriter.stream`."""
        self._send(Stream(self._id, self._clock() if ts is None else ts, chunk))

    def end_stream(self, *, interrupted: bool = False, ts: float | None = None) -> None:
        """The stream's end, as `TranscriptWriter.end_stream`."""
        self._send(EndStream(self._id, self._clock() if ts is None else ts, interrupted))

    def close(self, role: str | None = None, text: str = "", ts: float | None = None) -> None:
        """The end, and a last line, as `TranscriptWriter.close`."""
        ts = self._clock() if ts is None else ts
        last = (Write(self._id, ts, role, text),) if role is not None else ()
        self._send(EndStream(self._id, ts), *last, Release(self._id, ts))


class RelayMeter(Meter):
    """A child's meter on a worker: what it is billed also goes home at once, to the owner's
    meter (which budgets read) and its figures there, priced here exactly as there."""

    def __init__(self, outbox: Outbox, child_id: str) -> None:
        super().__init__()
        self._outbox = outbox
        self._id = child_id
        self.progress: Progress | None = None  # its twin's figures, once it is made

    def add_unpriced(self, usage: Usage) -> None:
        """As `Meter.add_unpriced`."""
        super().add_unpriced(usage)
        self._send(usage, None)

    def add_cost(self, usage: Usage, cost: Decimal) -> None:
        """As `Meter.add_cost`."""
        super().add_cost(usage, cost)
        self._send(usage, cost)

    def _send(self, usage: Usage, cost: Decimal | None) -> None:
        # Its figures go home only every FIGURES_EVERY_S (worker.py): a worker lost before the
        # next ones left the owner's copy showing a billed call in flight, whose estimate was
        # then billed again. A model child's bill is in its figures already (billing.bill):
        # sent with its count, the owner's copy takes it unless figures counting it came first.
        count = self.progress.bills if self.progress is not None else 0
        self._outbox.put(Billed(self._id, usage, cost, count))


class Twin(Child):
    """A child as it runs on a worker; the owner's `Elsewhere` child follows it."""

    def __init__(
        self,
        task: Task,
        route: Route,
        runner: Runner,
        transcript_path: str,
        clock: Callable[[], float],
        queued_ts: float,
        outbox: Outbox,
        *,
        cost_known: bool,
        secrets: tuple[str, ...] | None = None,
    ) -> None:
        self._outbox = outbox
        self.calls: dict[int, DelegateCall] = {}  # `delegate` calls waiting on the owner
        self.asks: dict[int, AskCall] = {}  # `ask_operator` calls waiting on the owner
        self._sent_version = -1
        super().__init__(
            task,
            route,
            runner,
            transcript_path,
            clock,
            self._relay,
            queued_ts,
            cost_known=cost_known,
            open_transcript=lambda: RelayTranscript(task.id, outbox, clock),
            secrets=secrets,
        )

    def figures(self) -> Figures | None:
        """Its figures, if they changed since they last went home."""
        version = self.progress.version
        if version == self._sent_version:
            return None
        self._sent_version = version
        return Figures(self.task.id, self.progress.mirror())

    def take_pause(self) -> bool:
        """As `Child.take_pause`; a pause taken goes home."""
        taken = super().take_pause()
        if taken:
            self._outbox.put(PauseTaken(self.task.id))
        return taken

    def mark_running(self) -> bool:
        """As `Child.mark_running`; a pause ended here (a process continued) goes home."""
        paused = self.status is ChildStatus.PAUSED
        running = super().mark_running()
        if running and paused:
            self._outbox.put(Running(self.task.id))
        return running

    def _relay(self, fact: ChildFact) -> None:
        child_id = self.task.id
        match fact:
            case ChildDone():
                self._sent_version = -1
                if (figures := self.figures()) is not None:
                    self._outbox.put(figures)
                row = self.row()
                self._outbox.put(Done(child_id, row.status, row.error, row.result))
            case Delegated(_, call):
                number = id(call)
                self.calls[number] = call
                tasks = tuple((t.goal, t.context) for t in call.tasks)
                self._outbox.put(Delegating(child_id, number, tasks))
            case Asked(_, call):  # the call (an Event inside) stays here; its question goes
                self.asks[id(call)] = call
                self._outbox.put(Asking(child_id, id(call), call.question))
            case _:
                self._outbox.put(Fact(fact))
