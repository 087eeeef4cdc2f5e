"""A child whose work runs elsewhere (an executor's worker on a cluster), as its owner keeps it.

The owner still decides everything about it (admission, its slot, stop, pause, budgets) and
records everything; only its runner runs on the worker, through a twin of this child there. The
operator's commands go to the twin through its `relay`; what the twin does comes back and is
followed here: its figures, its transcript lines, its steers settled, its pause, its end.
"""

from __future__ import annotations

import dataclasses

from flightdeck.engine.child.port import Relay
from flightdeck.engine.child.progress import Progress
from flightdeck.engine.child.state import Child
from flightdeck.engine.model import ChildRow, ChildStatus, SteerReceipt


class Elsewhere(Child):
    """A Child whose runner runs on a worker; `relay` reaches it there while it is placed."""

    relay: Relay | None = None

    # --- the operator's commands, applied here and relayed ------------------------------------

    def request_stop(self, status: ChildStatus, reason: str) -> None:
        """As a local stop; the twin hears it too."""
        super().request_stop(status, reason)
        if (relay := self.relay) is not None:
            relay.stop(status, reason)

    def add_steer(self, receipt: SteerReceipt) -> bool:
        """Queued here (where the receipt is kept) and in the twin's inbox, which delivers it;
        once relayed, the twin settles it, whatever happens there."""
        queued = super().add_steer(receipt)
        relay = self.relay
        if queued and relay is not None and receipt in self.steering.pending():
            relay.steer(receipt)
        return queued

    def request_pause(self) -> None:
        """As a local pause; the twin takes it at its next turn boundary."""
        super().request_pause()
        if (relay := self.relay) is not None:
            relay.pause(True)

    def cancel_pause(self) -> None:
        """As a local continue; a suspended process goes on there."""
        super().cancel_pause()
        if (relay := self.relay) is not None:
            relay.pause(False)

    # --- what the twin did ---------------------------------------------------------------------

    def settled_elsewhere(self, receipt: SteerReceipt) -> bool:
        """The twin delivered or missed a steer; False if it was settled here first (the child
        was ended here meanwhile)."""
        return self.steering.settled_elsewhere(receipt)

    def ended_elsewhere(self, status: ChildStatus, error: str | None, result: str | None) -> bool:
        """The twin is final (its transcript closed, its leftover steers settled there); False
        if this child had been ended here already (the first end wins, as with `finalize`)."""
        if self._secrets:  # cleaned there; cleaned here too, with the keys this process knows
            error = None if error is None else self.clean(error)
            result = None if result is None else self.clean(result)
        with self._lock:
            if self.status.terminal or self._finalizing:
                return False
            self._finalizing = True
            self.steering.close()  # a steer relayed and not settled yet is the twin's to settle
            self.status = status
            self.finished_ts = self._clock()
            self._error, self._result = error, result
            self._version += 1
        return True

    def restart(self, why: str) -> ChildRow:
        """Its worker was lost with the twin: queued again (paused again, if it was), from the
        start, keeping what the lost attempt was billed and the steers not delivered yet.
        Returns the row of the lost attempt, `unknown`, as `resume` records one."""
        lost = dataclasses.replace(
            self.row(), status=ChildStatus.UNKNOWN, finished_ts=self._clock(), error=why
        )
        old = self.progress
        figures = old.figures()
        progress = Progress(self._clock, cost_known=figures.cost_usd is not None)
        progress.carry(figures.usage, figures.cost_usd, figures.known_usd, figures.saved_usd)
        with self._lock:
            self.relay = None
            self.node = None
            self.leads_gate = False
            self.progress = progress
            self.status = ChildStatus.QUEUED
            self.started_ts = self.finished_ts = None
            self._version += 1 + old.version  # the row's version never goes back
            if self.pause_wanted:  # paused before it starts again
                self._apply(self.halt.paused(self._clock()))
        self.loops.follow(None)  # a loop the lost attempt was in is not the new one's
        self.transcript.write("engine", f"{why}; it restarts from the start")
        return lost
