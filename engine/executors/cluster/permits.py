"""A route's rate limits held fleet-wide: every call on any worker draws its permit from the
owner's buckets, so N nodes never send N times the rate.

On a worker, `RelayThrottle` stands in for the route's throttle: a call asks the owner for a
permit and waits for it (a stop cancels the ask); the call's usage settles it there, a 429 and
the headers that state the route's limits reach the owner's throttle too. Whether a route is
paced at all is mirrored from the owner, so an unlimited route asks nothing. The route-wide
pause a 429 puts on the route is applied where it happened and sent to every worker; the
concurrency adapted to 429s on a route with no known limit is each worker's own.

At home, `PermitDesk` takes the asks: each waits on the owner's buckets on a thread of its own
(`RouteThrottle.admit`, as a local child would), and its answer goes back to the worker.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from flightdeck.engine.child.policy import StopRequested
from flightdeck.engine.control.throttle import Lease, OnWait, RouteThrottle
from flightdeck.engine.control.workers import WorkerPool
from flightdeck.engine.executors.cluster.wire import (
    Ask,
    Cancel,
    FromWorker,
    Granted,
    Held,
    RateLimited,
    Refused,
    Settle,
    ToWorker,
)
from flightdeck.engine.inputs.settings import Route
from flightdeck.engine.interrupt import Interruptible

log = logging.getLogger(__name__)

POLL_S = 0.05  # how often a call waiting for its permit looks at its stop event


@dataclass
class _Waiting:
    """One ask for a permit, until it is answered."""

    answered: threading.Event = field(default_factory=threading.Event)
    lease: int | None = None
    waited_s: float = 0.0
    held: tuple[float, str] | None = None  # the owner says how long, and why


class _RemoteLease:
    """A permit granted by the owner; settling it tells the owner what the call used."""

    def __init__(self, number: int, waited_s: float, send: Callable[[FromWorker], None]) -> None:
        self.waited_s = waited_s
        self._number = number
        self._send = send
        self._settled = False

    def settle(self, actual_tokens: int) -> None:
        if not self._settled:
            self._settled = True
            self._send(Settle(self._number, actual_tokens))


class RelayThrottle(RouteThrottle):
    """A route's throttle on a worker: permits from the owner's buckets (see the module)."""

    def __init__(self, route: Route, send: Callable[[FromWorker], None]) -> None:
        super().__init__()
        self._send = send
        self._paced = (route.rpm is not None, route.tpm is not None)
        self._asks: dict[int, _Waiting] = {}
        self._numbers = itertools.count(1)
        self._asks_lock = threading.Lock()

    def limited(self, route: Route) -> tuple[bool, bool]:
        """As the owner's throttle says (configured or learned), mirrored here."""
        self._limiter(route)  # the local parts (pause, concurrency) exist from the first call
        return self._paced

    def paced(self, requests: bool, tokens: bool) -> None:
        """The owner's word on whether the route is paced by requests, and by tokens."""
        self._paced = (requests, tokens)

    def admit(
        self, route: Route, tokens: int, interrupt: Interruptible, on_wait: OnWait | None = None
    ) -> Lease:
        """Ask the owner for a permit and wait for it; StopRequested if stopped meanwhile."""
        with self._asks_lock:
            number = next(self._numbers)
            waiting = self._asks[number] = _Waiting()
        self._send(Ask(number, route.name, tokens, route.max_tokens))
        try:
            told = None
            while not waiting.answered.wait(POLL_S):
                if interrupt.is_set():
                    self._send(Cancel(number))
                    raise StopRequested
                if waiting.held is not None and waiting.held is not told and on_wait:
                    told = waiting.held
                    on_wait(*told)
            if waiting.lease is None:  # refused: its child is stopping
                raise StopRequested
            lease = _RemoteLease(waiting.lease, waiting.waited_s, self._send)
            return lease  # type: ignore[return-value]  # settles like a Lease
        finally:
            with self._asks_lock:
                self._asks.pop(number, None)

    def answer(self, message: ToWorker) -> None:
        """The owner's answer to an ask (granted, held, refused)."""
        with self._asks_lock:
            ask = getattr(message, "ask", None)
            waiting = self._asks.get(ask) if isinstance(ask, int) else None
        if waiting is None:
            return
        match message:
            case Granted(_, lease, waited_s):
                waiting.lease, waiting.waited_s = lease, waited_s
                waiting.answered.set()
            case Held(_, seconds, why):
                waiting.held = (seconds, why)
            case Refused():
                waiting.answered.set()

    def rate_limited(
        self, route: Route, started: float, retry_after: float | None, *, overloaded: bool = False
    ) -> None:
        """As `RouteThrottle.rate_limited` here, and the owner's buckets hear it."""
        super().rate_limited(route, started, retry_after, overloaded=overloaded)
        self._send(RateLimited(route.name, retry_after, overloaded))


class PermitDesk:
    """The owner's side: asks from every worker, answered from the owner's buckets."""

    def __init__(
        self, routes: Mapping[str, Route], throttles: Mapping[str, RouteThrottle], threads: int
    ) -> None:
        self._routes = routes
        self._throttles = throttles
        self._pool = WorkerPool(threads, name="flightdeck-permits")
        self._lock = threading.Lock()
        self._cancels: dict[tuple[object, int], threading.Event] = {}
        self._leases: dict[int, Lease] = {}
        self._numbers = itertools.count(1)

    def take(
        self, worker: object, item: Ask | Cancel | Settle, reply: Callable[[ToWorker], None]
    ) -> None:
        """One ask, cancel or settle from `worker` (`reply` answers it there)."""
        match item:
            case Ask():
                cancel = threading.Event()
                with self._lock:
                    self._cancels[(worker, item.ask)] = cancel
                self._pool.submit(lambda: self._admit(worker, item, cancel, reply))
            case Cancel(ask):
                with self._lock:
                    found = self._cancels.get((worker, ask))
                if found is not None:
                    found.set()
            case Settle(number, tokens):
                with self._lock:
                    lease = self._leases.pop(number, None)
                if lease is not None:
                    lease.settle(tokens)

    def _admit(
        self, worker: object, ask: Ask, cancel: threading.Event, reply: Callable[[ToWorker], None]
    ) -> None:
        route = self._routes[ask.route]
        try:
            lease = self._throttles[ask.route].admit(
                route, ask.tokens, cancel, lambda s, why: reply(Held(ask.ask, s, why))
            )
        except StopRequested:
            reply(Refused(ask.ask))
            return
        finally:
            with self._lock:
                self._cancels.pop((worker, ask.ask), None)
        with self._lock:
            number = next(self._numbers)
            self._leases[number] = lease
        reply(Granted(ask.ask, number, lease.waited_s))

    def shutdown(self) -> None:
        """Waiting asks are abandoned (their workers are going too)."""
        self._pool.shutdown()
