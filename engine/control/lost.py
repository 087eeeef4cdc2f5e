"""A child whose work ran elsewhere and was lost with its worker (or node): run it again.

As `resume` does for an owner that died: the lost attempt is recorded `unknown` with what it was
billed (a `lost_attempt` event), and the child runs again from the start, keeping that spend and
the steers not delivered yet; a child the operator stopped ends stopped, one paused stays paused.
Run on the coordinator thread.
"""

from __future__ import annotations

from decimal import Decimal

from flightdeck.engine.child.billing import bill_cut_short, estimated_note
from flightdeck.engine.child.elsewhere import Elsewhere
from flightdeck.engine.child.state import Child
from flightdeck.engine.control.pauses import Pauses
from flightdeck.engine.control.recorder import Recorder
from flightdeck.engine.control.slots import Ends, Slots
from flightdeck.engine.model import ChildStatus
from flightdeck.engine.records.attempts import SUPERSEDED
from flightdeck.engine.records.forecast import lost_attempt_json
from flightdeck.engine.records.meter import Meter


def rerun_lost(
    slots: Slots,
    ends: Ends,
    pauses: Pauses,
    recorder: Recorder,
    meter: Meter,
    child: Child,
    why: str,
) -> Decimal | None:
    """Free what the lost attempt held and queue the child again (or end it, if stopping);
    what the attempt lost cost (beyond what earlier ones carried into it; None: unknown)."""
    if child.status.terminal or not isinstance(child, Elsewhere):
        return Decimal(0)  # ended here meanwhile (the watchdog, a stop while paused)
    _bill_cut_short(child, meter)
    child_id = child.task.id
    if child_id in slots.alive:
        ends.release(child)
    # Nothing of it stays paused, nor waits on a stop.
    pauses.ended(child)
    slots.stop_requested.pop(child_id, None)
    if child.stop_status is not None:  # stopped before it was lost: it ends as asked
        if child.finalize(child.stop_status, f"{child.stop_reason or 'stopped'} ({why})"):
            ends.finish(child)
        return Decimal(0)  # it ends with what it spent: no attempt runs again
    for kid in slots.supersede(child_id):  # it delegates afresh: those it made are history
        recorder.record_event(kid, SUPERSEDED, child_id)
    carried = child.progress.carried_cost
    lost = child.restart(why)
    if child.status is ChildStatus.PAUSED:
        pauses.parked[child_id] = child  # a paused child that holds nothing waits to be continued
    else:
        slots.queues.requeue([child])
    # The lost attempt's event in the transaction that queues it again: apart, a dead owner
    # could leave the queued row (its spend carried) with no event to say it ran, and a resume
    # would count a carried unknown cost as a known $0 (as owner/lostrun.py's settle_lost).
    recorder.record(child.row(), [("lost_attempt", lost_attempt_json(lost, True, why))])
    if lost.cost_usd is None or carried is None:
        return None
    return lost.cost_usd - carried


def _bill_cut_short(child: Child, meter: Meter) -> None:
    """The call in flight when its worker was lost: the server read its prompt and wrote what
    streamed, so it is billed its estimate, as a call a stop cuts short is, into the lost
    attempt's spend and the budget's meter."""
    rest = bill_cut_short(child.progress, meter, child.route)
    if rest.total:
        child.transcript.write("engine", estimated_note(rest))
