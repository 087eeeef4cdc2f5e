"""`Flag`: a set-once wake-up signal that allocates nothing until somebody waits on it.

Every child and every simulated stream owns one (stop, close), yet nearly all of them end
without anyone ever sleeping on it. A `threading.Event` costs a Condition and two locks up front;
at thousands of short children a second that was a tenth of the engine's time.
"""

from __future__ import annotations

import threading
from typing import Protocol


class Waitable(Protocol):
    """What the engine's sleeps need of a stop signal; `threading.Event` also fits."""

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


# One lock for every flag: it is only taken to set a flag or to start waiting on one.
_LOCK = threading.Lock()


class Flag:
    """Like `threading.Event` without `clear()`: `set()` from any thread wakes every waiter."""

    __slots__ = ("_event", "_set")

    def __init__(self) -> None:
        self._set = False
        self._event: threading.Event | None = None

    def is_set(self) -> bool:
        return self._set  # a bool read is atomic under the GIL

    def set(self) -> None:
        with _LOCK:
            self._set = True
            event = self._event
        if event is not None:
            event.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until set or `timeout` passes; True if set."""
        if self._set:
            return True
        with _LOCK:
            if self._event is None:
                self._event = threading.Event()
            event = self._event
            if self._set:  # set between the check above and the lock
                return True
        return event.wait(timeout)
