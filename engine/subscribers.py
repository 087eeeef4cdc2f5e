"""Engine events handed to their subscribers, on the coordinator thread (`Engine.subscribe`)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from flightdeck.engine.model import EngineEvent

log = logging.getLogger("flightdeck.engine")  # the engine's own voice, as api.py's

Subscriber = Callable[[EngineEvent], None]


class Subscribers:
    """Who listens; a broken subscriber is logged, and never stops the batch."""

    def __init__(self) -> None:
        # Replaced, never mutated, under the lock: publishing reads it without one.
        self._fns: tuple[Subscriber, ...] = ()
        self._lock = threading.Lock()

    def add(self, fn: Subscriber) -> Callable[[], None]:
        """Subscribe `fn`; returns what unsubscribes it."""
        if not callable(fn):  # else it fails on every event, on the coordinator thread
            raise TypeError(f"expected a function of one event, got {type(fn).__name__}")
        with self._lock:
            self._fns = (*self._fns, fn)

        def unsubscribe() -> None:
            with self._lock:
                fns = list(self._fns)
                if fn in fns:
                    fns.remove(fn)
                    self._fns = tuple(fns)

        return unsubscribe

    def publish(self, event: EngineEvent) -> None:
        for fn in self._fns:  # two events per child: no lock, no copy
            try:
                fn(event)
            # A broken subscriber must not stop the batch. SystemExit too: on this thread it
            # would end the coordinator in silence, not the program.
            except (Exception, SystemExit):
                log.exception("engine subscriber failed on %s", type(event).__name__)
