"""A child's stop and pause: what was asked, the call a stop closes, the time spent paused.

`Halt` holds that state and decides what each request changes; the child (state.py) calls it
under its own lock, with its status as a value, and applies the `Move` it returns. Nothing here
reads or writes the child.
"""

from __future__ import annotations

from dataclasses import dataclass

from flightdeck.engine.child.port import Closable
from flightdeck.engine.model import CONTINUED_WAITING, PAUSED_SHOWS, ChildStatus


@dataclass(frozen=True, slots=True)
class Move:
    """What the child's row changes to: its status (None: kept) and the activity it shows
    (None: kept); `ticks`: that text counts as activity (the stall clock starts again)."""

    status: ChildStatus | None = None
    shows: str | None = None
    ticks: bool = False


STAYS = Move()  # the status and activity are kept; the row changes all the same (`pausing`)


class Halt:
    """One child's stop (the first request wins) and the operator's pause; guarded by the
    child's lock."""

    __slots__ = ("_paused_at", "call", "pause_wanted", "paused_s", "stop_reason", "stop_status")

    def __init__(self) -> None:
        self.stop_status: ChildStatus | None = None  # the status a requested stop ends in
        self.stop_reason: str | None = None
        self.call: Closable | None = None  # the open call a stop or a steer --now closes
        # Wanted: set on the coordinator thread, read by the worker at each turn boundary.
        self.pause_wanted = False
        self._paused_at: float | None = None
        self.paused_s = 0.0  # seconds spent paused, which no timeout counts

    def stop(self, status: ChildStatus, reason: str) -> Closable | None:
        """A stop was asked; returns the open call, to be closed once the lock is let go."""
        if self.stop_status is None:
            self.stop_status, self.stop_reason = status, reason
        return self.call

    def open(self, call: Closable, closing: bool) -> bool:
        """`call` is the one a stop or a steer --now closes; False if one came first
        (`closing`): the caller closes it."""
        if closing:
            return False
        self.call = call
        return True

    def pause(self, status: ChildStatus, ending: bool, now: float) -> Move | None:
        """The operator's pause: a queued child is paused now (it will not start), a running
        one at its next turn boundary (`take`); None for a child ending or ended."""
        if ending or status.terminal:
            return None
        self.pause_wanted = True
        return self.paused(now) if status is ChildStatus.QUEUED else STAYS

    def cancel(self, status: ChildStatus, started: bool, ending: bool) -> Move | None:
        """The operator's continue: a pause not taken yet is dropped, a queued child paused is
        queued again; one paused at a turn boundary runs again once `continued`."""
        self.pause_wanted = False
        if ending:
            return None
        if status is ChildStatus.PAUSED and not started:
            return Move(ChildStatus.QUEUED, "")
        if status is ChildStatus.RUNNING:
            return Move(shows="continued")
        return STAYS

    def take(self, ending: bool, now: float) -> Move | None:
        """At a turn boundary: paused now if a pause is wanted and the child is not ending (a
        stop came first); None: it goes on."""
        if not self.pause_wanted or ending:
            return None
        return self.paused(now)

    def waiting(self, status: ChildStatus, waiting: bool) -> Move | None:
        """A paused child continued with no slot free (`waiting`), or paused again before it
        got one: what its row says meanwhile (its status stays paused)."""
        if status is not ChildStatus.PAUSED:
            return None
        return Move(shows=CONTINUED_WAITING if waiting else PAUSED_SHOWS)

    def paused(self, now: float) -> Move:
        """Paused from `now`."""
        self._paused_at = now
        return Move(ChildStatus.PAUSED, PAUSED_SHOWS)

    def continued(self, now: float) -> Move:
        """Running again after a pause taken: the time paused counts toward no timeout, and
        the stall clock starts again now (the pause was not a stall)."""
        if self._paused_at is not None:
            self.paused_s += max(0.0, now - self._paused_at)
            self._paused_at = None
        return Move(ChildStatus.RUNNING, "continued", ticks=True)
