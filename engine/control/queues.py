"""The queued children, one FIFO queue per route, what each route has running, and its
headroom as the route panel shows it."""

from __future__ import annotations

import dataclasses
import heapq
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from flightdeck.engine.child.state import Child
from flightdeck.engine.control.throttle import RouteThrottle
from flightdeck.engine.inputs.settings import Route
from flightdeck.engine.model import RouteHeadroom
from flightdeck.engine.providers.base import HeadroomEvent


@dataclass
class RouteState:
    """One route's queue, how many of its children are alive, and its headroom last seen."""

    route: Route
    queue: deque[Child] = field(default_factory=deque)
    alive: int = 0
    headroom: RouteHeadroom | None = None

    def next_seq(self) -> int | None:
        """The seq of the route's next task if the route may start one now, else None."""
        while self.queue and self.queue[0].status.terminal:
            self.queue.popleft()  # stopped while queued
        cap = self.route.max_concurrent
        if self.queue and (cap is None or self.alive < cap):
            return self.queue[0].task.seq
        return None


class RouteQueues:
    """First in, first out among the routes below their `max_concurrent`; a task for a capped
    route waits in place while tasks behind it for other routes go ahead."""

    def __init__(self, routes: Mapping[str, Route], children: Iterable[Child]) -> None:
        self.routes = {name: RouteState(route) for name, route in routes.items()}
        for child in children:
            self.routes[child.route.name].queue.append(child)

    def ready(self) -> Iterator[Child]:
        """The children that may start, in order; each is counted alive on its route as it is
        handed out, so stop iterating to leave the rest queued."""
        heads = [
            (seq, name) for name, s in self.routes.items() if (seq := s.next_seq()) is not None
        ]
        heapq.heapify(heads)
        while heads:
            _, name = heapq.heappop(heads)
            state = self.routes[name]
            state.alive += 1
            yield state.queue.popleft()
            if (seq := state.next_seq()) is not None:
                heapq.heappush(heads, (seq, name))

    def heads(self, wanted: Callable[[Child], bool]) -> Iterator[Child]:
        """As `ready`, but only the children at the front of their routes' queues that `wanted`
        keeps (a delegate is queued at the front): under a hold, no scan of the whole queue."""
        for state in self.routes.values():
            while state.next_seq() is not None and wanted(state.queue[0]):
                state.alive += 1
                yield state.queue.popleft()

    def pull(self, wanted: Callable[[Child], bool]) -> list[Child]:
        """Take the queued children `wanted` keeps out of their queues, counted alive on their
        routes whatever their caps (a dead owner's processes, which run already)."""
        out: list[Child] = []
        for state in self.routes.values():
            taken = [c for c in state.queue if wanted(c)]
            if taken:
                state.queue = deque(c for c in state.queue if not wanted(c))
                state.alive += len(taken)
                out += taken
        return out

    def ended(self, child: Child) -> None:
        """An alive child has ended (or was handed out and held back): its route may start
        another."""
        self.routes[child.route.name].alive -= 1

    def take(self, child: Child) -> bool:
        """Count an already started child alive on its route again, if the route's cap allows
        (a parent resuming after its delegates)."""
        state = self.routes[child.route.name]
        cap = state.route.max_concurrent
        if cap is not None and state.alive >= cap:
            return False
        state.alive += 1
        return True

    def add(self, children: list[Child]) -> None:
        """New children (a schedule's wave) at the back of their routes' queues."""
        for child in children:
            self.routes[child.route.name].queue.append(child)

    def requeue(self, children: list[Child]) -> None:
        """Put held-back children at the front of their routes' queues, in batch order: they
        were handed out before everything still queued there."""
        for child in sorted(children, key=lambda c: c.task.seq, reverse=True):
            self.routes[child.route.name].queue.appendleft(child)

    def saw_headroom(self, route: str, event: HeadroomEvent, now: float) -> None:
        """Keep the rate-limit headroom a response of `route` reported."""
        state = self.routes.get(route)
        if state is not None:
            state.headroom = RouteHeadroom(
                route=route,
                remaining_requests=event.remaining_requests,
                remaining_tokens=event.remaining_tokens,
                reset_requests_s=event.reset_requests_s,
                reset_tokens_s=event.reset_tokens_s,
                observed_ts=now,
            )

    def headroom(
        self, throttles: Mapping[str, RouteThrottle], clock: Callable[[], float]
    ) -> tuple[RouteHeadroom, ...]:
        """Per route: provider headroom last seen, a pause a 429 put on the whole route, the
        limits it is paced to, its 429s in the last minute and its children alive."""
        out = []
        for name, state in self.routes.items():
            hr = dataclasses.replace(
                state.headroom or RouteHeadroom(route=name),
                alive=state.alive,
                max_concurrent=state.route.max_concurrent,
            )
            throttle = throttles.get(name)
            pause = throttle.remaining() if throttle is not None else 0.0
            if pause > 0:
                hr = dataclasses.replace(hr, paused_until=clock() + pause)
            if throttle is not None:  # the limits it is paced to: configured or learned
                rpm, tpm, adaptive = throttle.limits(state.route)
                banked_requests, banked_tokens = throttle.banked(state.route)
                hr = dataclasses.replace(
                    hr,
                    rpm=rpm,
                    tpm=tpm,
                    adaptive_concurrency=adaptive,
                    rate_limited_1m=throttle.rate_limited_recently(),
                    banked_requests=banked_requests,
                    banked_tokens=banked_tokens,
                )
            out.append(hr)
        return tuple(out)

    def drain(self) -> Iterator[Child]:
        """Take every queued child off its queue."""
        for state in self.routes.values():
            while state.queue:
                yield state.queue.popleft()
