"""The owner's end of one worker: a sender thread and a puller thread.

The sender hands the worker what the owner says (children to run, the operator's commands,
permits, the routes' limits), in order, one call at a time. The puller asks the worker what its
children did and applies it to the children here (`Elsewhere`), which the coordinator, the store
and the transcripts see as if they had run here. When either call fails, the worker is gone:
`lost` hears which children it held.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from flightdeck.engine.child.ask import AskCall, Settled
from flightdeck.engine.child.delegate import DelegateCall, SubTask
from flightdeck.engine.child.elsewhere import Elsewhere
from flightdeck.engine.child.facts import (
    Asked,
    ChildDone,
    Delegated,
    FirstChunk,
    HeadroomSeen,
    LoopFlagged,
    ReceiptSettled,
    Report,
)
from flightdeck.engine.control.throttle import RouteThrottle
from flightdeck.engine.executors.cluster.permits import PermitDesk
from flightdeck.engine.executors.cluster.wire import (
    Ask,
    AskEnded,
    Asking,
    Billed,
    Cancel,
    DelegatesEnded,
    Delegating,
    Done,
    Fact,
    Figures,
    FromWorker,
    Limited,
    Lines,
    Pause,
    PauseTaken,
    RateLimited,
    RoutePaused,
    Running,
    Settle,
    Steer,
    Stop,
    ToWorker,
    pack_to,
    unpack_from,
)
from flightdeck.engine.inputs.settings import Route
from flightdeck.engine.model import ChildStatus, SteerReceipt
from flightdeck.engine.records.events import EndStream, Release, Stream, Write
from flightdeck.engine.records.meter import Meter, cache_saving

log = logging.getLogger(__name__)
C = TypeVar("C", bound=Settled)

SEND_EVERY_S = 0.05  # the sender looks at the routes' limits and settled calls this often


@dataclass(frozen=True, slots=True)
class Home:
    """What every worker's end applies things to: the owner's parts."""

    known: dict[str, Elsewhere]  # every child sent to a worker, by id
    report: Report
    meter: Meter
    routes: Mapping[str, Route]
    throttles: Mapping[str, RouteThrottle]
    desk: PermitDesk
    broadcast: Callable[[ToWorker], None]  # to every worker
    clock: Callable[[], float]


class ChildRelay:
    """A child's commands, to its worker (child/port.py's `Relay`)."""

    def __init__(self, link: Link, child_id: str) -> None:
        self._link = link
        self._id = child_id

    def steer(self, receipt: SteerReceipt) -> None:
        self._link.send(Steer(self._id, receipt))

    def stop(self, status: ChildStatus, reason: str) -> None:
        self._link.send(Stop(self._id, status, reason))

    def pause(self, wanted: bool) -> None:
        self._link.send(Pause(self._id, wanted))


class Link:
    """One worker actor, as the owner reaches it."""

    def __init__(
        self,
        actor: Any,
        name: str,
        node_id: str,
        home: Home,
        lost: Callable[[Link, str], None],
        get: Callable[[Any], Any],
    ) -> None:
        self.actor = actor
        self.name = name  # the node, as the TUI and the records show it
        self.node_id = node_id
        self.children: dict[str, Elsewhere] = {}  # placed here and not ended
        self.alive = True
        self._home = home
        self._lost = lost
        self._get = get  # ray.get
        self._out: queue.SimpleQueue[ToWorker | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._paced: dict[str, tuple[bool, bool]] = {}
        self._calls: dict[int, DelegateCall] = {}  # `delegate` calls the owner settles
        self._asks: dict[int, AskCall] = {}  # `ask_operator` calls, answered by the operator
        self._sender = threading.Thread(target=self._send_loop, name=f"flightdeck-to-{name}")
        self._puller = threading.Thread(target=self._pull_loop, name=f"flightdeck-from-{name}")
        self._sender.daemon = self._puller.daemon = True

    def start(self) -> None:
        self._sender.start()
        self._puller.start()

    def send(self, message: ToWorker) -> None:
        """Queue a message for the worker (any thread)."""
        self._out.put(message)

    def stop(self) -> None:
        """Stop both threads (the worker is closed or gone)."""
        self.alive = False
        self._out.put(None)

    # --- the sender ----------------------------------------------------------------------------

    def _send_loop(self) -> None:
        closing = False
        looked = 0.0
        while not closing:
            batch: list[ToWorker] = []
            if (now := time.monotonic()) - looked >= SEND_EVERY_S:
                looked = now
                batch += self._limits() + self._settled()
            try:
                item = self._out.get(timeout=SEND_EVERY_S)
                while item is not None:
                    batch.append(item)
                    item = self._out.get_nowait()
                closing = True  # what was queued before the close goes first
            except queue.Empty:
                pass
            if batch:
                try:
                    self._get(self.actor.send.remote(pack_to(batch)))
                except Exception as exc:
                    self._gone(exc)
                    return

    def _limits(self) -> list[ToWorker]:
        """Whether each route is paced (configured or learned), when it changed."""
        out: list[ToWorker] = []
        for name, route in self._home.routes.items():
            if route.command is not None:
                continue
            paced = self._home.throttles[name].limited(route)
            if self._paced.get(name) != paced:
                self._paced[name] = paced
                out.append(Limited(name, *paced))
        return out

    def _settled(self) -> list[ToWorker]:
        """`delegate` and `ask_operator` calls the owner has settled."""
        with self._lock:
            delegates, asks = _take_done(self._calls), _take_done(self._asks)
        out: list[ToWorker] = [DelegatesEnded(n, c.results, c.refused) for n, c in delegates]
        return out + [AskEnded(n, c.answer, c.refused) for n, c in asks]

    # --- the puller ----------------------------------------------------------------------------

    def _pull_loop(self) -> None:
        while self.alive:
            try:
                items = unpack_from(self._get(self.actor.pull.remote()))
            except Exception as exc:
                self._gone(exc)
                return
            for item in items:
                try:
                    self._apply(item)
                except Exception:  # a bug costs this item, never the worker's children
                    log.exception("applying %s from %s failed", type(item), self.name)

    def _gone(self, exc: BaseException) -> None:
        if not self.alive:
            return  # closed by the owner
        self.alive = False
        self._out.put(None)
        self._lost(self, f"{type(exc).__name__}")

    def _apply(self, item: FromWorker) -> None:
        home = self._home
        # Only a child this worker still holds: once it was lost, the child runs again from the
        # start (perhaps elsewhere), and what the lost attempt sent late (its figures, its end)
        # is not the new attempt's.
        child = self.children.get(getattr(item, "child_id", ""))
        match item:
            case Lines(_, events) if child is not None:
                replay(child, events)
            case Figures(_, mirror) if child is not None:
                child.progress.follow(mirror)
            case Billed(child_id, usage, cost, count):
                home.meter.add_priced(usage, cost)  # spent is spent, lost or not
                if child is not None:
                    saved = cache_saving(usage, child.route)
                    child.progress.bill_elsewhere(count, usage, cost, saved)
            case Fact(fact):
                self._fact(fact)
            case PauseTaken() if child is not None:
                child.take_pause()
            case Running() if child is not None:
                child.mark_running()
            case Done(child_id, status, error, result) if child is not None:
                child.ended_elsewhere(status, error, result)
                child.relay = None
                self.children.pop(child_id, None)
                home.report(ChildDone(child_id))
            case Ask() | Cancel() | Settle():
                home.desk.take(self, item, self.send)
            case RateLimited(route, retry_after, overloaded) if route in home.routes:
                throttle = home.throttles[route]
                throttle.rate_limited(
                    home.routes[route], throttle.now(), retry_after, overloaded=overloaded
                )
                if retry_after:
                    home.broadcast(RoutePaused(route, retry_after))
            case Delegating(child_id, number, tasks):
                call = DelegateCall(child_id, tuple(SubTask(g, c) for g, c in tasks))
                with self._lock:
                    self._calls[number] = call
                home.report(Delegated(child_id, call))
            case Asking(child_id, number, question):
                ask = AskCall(child_id, question)
                with self._lock:
                    self._asks[number] = ask
                home.report(Asked(child_id, ask))

    def _fact(self, fact: object) -> None:
        home = self._home
        child = home.known.get(getattr(fact, "child_id", ""))
        match fact:
            case ReceiptSettled(receipt):
                found = home.known.get(receipt.child_id)
                if found is not None and found.settled_elsewhere(receipt):
                    home.report(fact)
            case HeadroomSeen(route, event) if route in home.routes:
                home.throttles[route].learn(home.routes[route], event)
                home.report(fact)
            case FirstChunk() if child is not None:
                child.leads_gate = False
                home.report(fact)
            case LoopFlagged(_, evidence) if child is not None:
                child.loops.follow(evidence)
                home.report(fact)
            case _:
                home.report(fact)  # type: ignore[arg-type]


def replay(child: Elsewhere, events: tuple[Write | Stream | EndStream | Release, ...]) -> None:
    """A child's transcript events from its worker, written by its transcript here."""
    transcript = child.transcript
    for event in events:
        match event:
            case Write(_, ts, role, text):
                transcript.write(role, text, ts)
            case Stream(_, ts, chunk):
                transcript.stream(chunk, ts)
            case EndStream(_, ts, interrupted):
                transcript.end_stream(interrupted=interrupted, ts=ts)
            case Release(_, ts):
                transcript.close(ts=ts)


def _take_done(calls: dict[int, C]) -> list[tuple[int, C]]:
    """The calls settled, taken out of `calls` (under the link's lock)."""
    done = [(n, c) for n, c in calls.items() if c.done.is_set()]
    for number, _ in done:
        del calls[number]
    return done
