"""A child's steer inbox and the receipts of every steer it was sent."""

from __future__ import annotations

import threading

from flightdeck.engine.model import SteerReceipt, SteerState


class Steering:
    """Steers not yet delivered, and every receipt by id; thread-safe.

    Once `close()` has emptied the inbox for the last time (the child is ending), `add` refuses,
    so no steer is queued where nothing would ever deliver it.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inbox: list[SteerReceipt] = []  # oldest first
        self._receipts: dict[int, SteerReceipt] = {}
        self._closed = False
        self.closed_why: str | None = None  # why it closed while the child still runs, if said
        self.now_pending = False  # a steer --now waits: the current response is to be dropped
        self.version = 0  # bumped on every change, so readers can skip an unchanged child

    def add(self, receipt: SteerReceipt) -> bool:
        """Queue a steer; False (nothing queued) once the inbox is closed."""
        with self._lock:
            if self._closed:
                return False
            self._inbox.append(receipt)
            self._keep(receipt)
            if receipt.now:
                self.now_pending = True
            return True

    def keep(self, receipt: SteerReceipt) -> None:
        """Record a receipt (new or settled) under its id."""
        with self._lock:
            self._keep(receipt)

    def settled_elsewhere(self, receipt: SteerReceipt) -> bool:
        """A steer settled where the child runs (another machine): kept, and out of the inbox
        mirrored here; False (nothing changed) if it was settled here already."""
        with self._lock:
            known = self._receipts.get(receipt.id)
            if known is not None and known.state is not SteerState.QUEUED:
                return False
            self._inbox = [r for r in self._inbox if r.id != receipt.id]
            self._keep(receipt)
            return True

    def pending(self) -> tuple[SteerReceipt, ...]:
        """The steers waiting in the inbox, oldest first (left there)."""
        with self._lock:
            return tuple(self._inbox)

    def _keep(self, receipt: SteerReceipt) -> None:
        self._receipts[receipt.id] = receipt
        self.version += 1

    @property
    def waiting(self) -> bool:
        """True when there is something to deliver (a steer, or a --now to honour)."""
        return bool(self._inbox) or self.now_pending

    @property
    def now_by(self) -> str:
        """Whose steer --now interrupts: the operator's, unless each one waiting is the policy's."""
        with self._lock:
            nows = [r for r in self._inbox if r.now]
        return "the loop policy" if nows and all(r.by == "policy" for r in nows) else "the operator"

    def take(self) -> list[SteerReceipt]:
        """The steers to deliver now, oldest first; the inbox is left empty."""
        with self._lock:
            pending, self._inbox = self._inbox, []
            self.now_pending = False
            return pending

    def withdraw(self, ids: set[int]) -> None:
        """Take these steers out of the inbox: delivered already (a dead owner wrote them)."""
        with self._lock:
            self._inbox = [r for r in self._inbox if r.id not in ids]
            self.now_pending = any(r.now for r in self._inbox)
            self.version += 1

    def close_unless_waiting(self, why: str | None = None) -> bool:
        """Close the inbox if it is empty; False (left open) when a steer waits in it. `why`:
        what a steer sent later is told while the child has not ended yet."""
        with self._lock:
            if self._inbox:
                return False
            self._closed = True
            self.closed_why = why
            return True

    def close(self) -> list[SteerReceipt]:
        """Empty the inbox for the last time; returns the steers that will never be delivered."""
        with self._lock:
            self._closed = True
            missed, self._inbox = self._inbox, []
            return missed

    def receipts(self) -> tuple[SteerReceipt, ...]:
        """Every receipt, in the order the steers were sent."""
        with self._lock:
            return tuple(self._receipts.values())


def missed_note(message: str, reason: str) -> str:
    """The transcript's operator line for a steer that was missed."""
    return f"missed: {message} ({reason})"
