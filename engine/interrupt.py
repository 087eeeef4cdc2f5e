"""A child's stop signal (and a `sim` stream's close): `threading.Event`'s `is_set`, `set` and
`wait`, with the Event made only when a thread first waits on it.

Every child has one, and most never wait on it (a stop is seen between steps; only a retry's
backoff or a throttled call sleeps on it). An Event is about 1.1 KB (a Condition, its lock and
its waiters' deque): 55 MB at 50,000 children, a seventh of what each child costs.
"""

from __future__ import annotations

import threading
from typing import Protocol


class Interruptible(Protocol):
    """What a wait that a stop must cut short needs: `Interrupt`, or a `threading.Event`."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


# One lock for every child's: taken once by a stop and once by a wait, held for a few lines.
_MAKING = threading.Lock()


class Interrupt:
    """Set once by a stop; `wait` returns at once if it is, else sleeps until it is or the time
    is up (True if it was set), as `threading.Event.wait` does."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: threading.Event | None = None

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        with _MAKING:
            self._set = True
            event = self._event
        if event is not None:
            event.set()

    def wait(self, timeout: float | None = None) -> bool:
        with _MAKING:
            if self._set:
                return True
            if self._event is None:
                self._event = threading.Event()
            event = self._event
        return event.wait(timeout)
