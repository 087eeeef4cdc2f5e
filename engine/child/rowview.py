"""A child's frozen row, built from its parts as they are now (state.py caches it per version)."""

from __future__ import annotations

import dataclasses

from flightdeck.engine.child.kept import Kept
from flightdeck.engine.child.loopwatch import LoopWatch
from flightdeck.engine.child.operator import OperatorNeeds
from flightdeck.engine.child.progress import Figures
from flightdeck.engine.inputs.settings import Route
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.model import (
    Activity,
    ChildRow,
    ChildStatus,
    SteerReceipt,
    Usage,
    pausing_text,
)
from flightdeck.engine.money import ZERO_USD
from flightdeck.engine.records.meter import route_cost, starts_known


@dataclasses.dataclass(frozen=True, slots=True)
class Standing:
    """What the child itself holds of its row: status, times, outcome, where it ran."""

    status: ChildStatus
    queued_ts: float
    started_ts: float | None
    finished_ts: float | None
    error: str | None
    result: str | None
    transcript: str
    steerable: bool
    node: str | None
    pausing: bool  # a pause is asked and not taken yet


def build_row(
    task: Task,
    route: Route,
    now: Figures,
    standing: Standing,
    *,
    steers: tuple[SteerReceipt, ...],
    loops: LoopWatch,
    kept: Kept,
    operator: OperatorNeeds,
) -> ChildRow:
    """The row readers see, from the child's figures now and what it holds."""
    in_flight = now.in_flight
    flight_cost = route_cost(in_flight, route) if in_flight.total else ZERO_USD
    activity = now.activity
    if standing.pausing and standing.status is ChildStatus.RUNNING:
        # Said until the pause is taken, whatever it streams or runs meanwhile.
        activity = dataclasses.replace(activity, text=pausing_text(activity.current_tool))
    return ChildRow(
        id=task.id,
        seq=task.seq,
        goal=task.goal,
        group=task.group,
        route=route.name,
        model=now.model or route.model,
        status=standing.status,
        activity=activity,
        usage=now.usage,
        cost_usd=now.cost_usd,
        cost_floor_usd=now.known_usd if now.cost_usd is None else ZERO_USD,
        carried_unknown=now.carried_unknown,
        queued_ts=standing.queued_ts,
        started_ts=standing.started_ts,
        finished_ts=standing.finished_ts,
        error=standing.error,
        result=standing.result,
        transcript=standing.transcript,
        steers=steers,
        in_flight=in_flight,
        in_flight_cost_usd=flight_cost,
        steerable=standing.steerable,
        cache_saved_usd=now.saved_usd,
        parent=task.parent,
        depth=task.depth,
        loop=loops.evidence,
        looped_ts=loops.looped_ts,
        # Only a live child waits on an answer: an ended one's question is cleared a moment
        # after its end, and no row in between says it still asks.
        question=operator.question if standing.status.live else None,
        denial=operator.denial,
        dismissed_ts=operator.dismissed_ts,
        node=standing.node,
        attempt=kept.attempt,
        changes=kept.changes,
        superseded=kept.superseded,
    )


def queued_row(task: Task, route: Route, transcript: str, queued_ts: float) -> ChildRow:
    """A task's row before its child is made: queued, nothing spent (a snapshot before start)."""
    return ChildRow(
        id=task.id,
        seq=task.seq,
        goal=task.goal,
        group=task.group,
        route=route.name,
        model=route.model,
        status=ChildStatus.QUEUED,
        activity=Activity(),
        usage=Usage(),
        cost_usd=ZERO_USD if starts_known(route) else None,  # as its Child (build_child)
        queued_ts=queued_ts,
        started_ts=None,
        finished_ts=None,
        error=None,
        result=None,
        transcript=transcript,
        steerable=route.command is None or route.command.steer != "none",
        parent=task.parent,
        depth=task.depth,
    )
