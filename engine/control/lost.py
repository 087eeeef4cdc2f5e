"""A child whose work ran elsewhere and was lost with its worker (or node): run it again.

As `resume` does for an owner that died: the lost attempt is recorded `unknown` with what it was
billed (a `lost_attempt` event), and the child runs again from the start, keeping that spend and
the steers not delivered yet; a child the operator stopped ends stopped, one paused stays paused.
Run on the coordinator thread.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Protocol

from flightdeck.engine.child.elsewhere import Elsewhere
from flightdeck.engine.child.state import Child
from flightdeck.engine.control.queues import RouteQueues
from flightdeck.engine.model import ChildRow, ChildStatus


class Slots(Protocol):
    """What it needs of the coordinator (which passes itself)."""

    alive: dict[str, Child]
    queues: RouteQueues

    def release(self, child: Child) -> None: ...

    def forget(self, child: Child) -> None: ...

    def finish(self, child: Child) -> None: ...

    def park(self, child: Child) -> None: ...

    def record(self, row: ChildRow) -> None: ...

    def record_event(self, child_id: str | None, kind: str, detail: str) -> None: ...


def rerun_lost(co: Slots, child: Child, why: str) -> None:
    """Free what the lost attempt held and queue the child again (or end it, if stopping)."""
    if child.status.terminal or not isinstance(child, Elsewhere):
        return  # ended here meanwhile (the watchdog, a stop while paused)
    child_id = child.task.id
    if child_id in co.alive:
        co.release(child)
    co.forget(child)
    if child.stop_status is not None:  # stopped before it was lost: it ends as asked
        if child.finalize(child.stop_status, f"{child.stop_reason or 'stopped'} ({why})"):
            co.finish(child)
        return
    lost = child.restart(why)
    co.record(lost)
    detail = {
        "usage": dataclasses.asdict(lost.usage),
        "cost_usd": None if lost.cost_usd is None else str(lost.cost_usd),
        "rerun": True,
        "why": why,
    }
    co.record_event(child_id, "lost_attempt", json.dumps(detail))
    if child.status is ChildStatus.PAUSED:
        co.park(child)
    else:
        co.queues.requeue([child])
    co.record(child.row())
