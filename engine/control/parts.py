"""The coordinator's parts, built once and wired to each other.

Each part gets the state it shares (slots.py), where to record (recorder.py) and what only the
coordinator does, as `Duties` (its `Ends` and a few callables): never the coordinator itself, so
neither this module nor a part imports it back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from flightdeck.engine.child.state import Child
from flightdeck.engine.control.admission import Admission
from flightdeck.engine.control.arrivals import Arrivals
from flightdeck.engine.control.attempts import Attempts, ChangesTold, Rework
from flightdeck.engine.control.controls import Controls
from flightdeck.engine.control.finals import Finals
from flightdeck.engine.control.inbox import Message, ReceiptIds
from flightdeck.engine.control.liverows import LiveRows
from flightdeck.engine.control.pauses import Pauses
from flightdeck.engine.control.questions import Questions
from flightdeck.engine.control.recorder import Recorder
from flightdeck.engine.control.reviews import ReviewDesk
from flightdeck.engine.control.slots import Carried, Ends, Slots
from flightdeck.engine.control.softbudget import SoftBudget
from flightdeck.engine.control.throttle import RouteThrottle
from flightdeck.engine.executors.base import Executor
from flightdeck.engine.inputs.settings import Route, Settings
from flightdeck.engine.inputs.tasks import Schedule, Task
from flightdeck.engine.model import BatchStatus, ChildRow, EngineEvent, Limits
from flightdeck.engine.records.meter import Meter


class Duties(Ends, Protocol):
    """What the parts ask of the coordinator beyond `Ends`: called once they are built, on its
    thread (but `report`, which any thread may call)."""

    def report(self, fact: Message) -> None:
        """Hand a fact to the coordinator's inbox (thread-safe)."""

    def limits(self) -> Limits:
        """The live limits in force."""

    @property
    def hold(self) -> str | None:
        """Why admission is held now, every hold in one sentence; None: it is not."""

    def announce_limits(self) -> None:
        """The live limits changed, or a hold began or ended: told to attached views."""

    def reopen_ended(self) -> None:
        """A retry came: a batch that had ended runs again."""


@dataclass(frozen=True, slots=True)
class Parts:
    """The coordinator's parts; each is used on the coordinator thread only (but `receipt_ids`:
    any thread numbers the steers it sends)."""

    slots: Slots
    receipt_ids: ReceiptIds
    finals: Finals
    soft: SoftBudget
    live_rows: LiveRows
    pauses: Pauses
    arrivals: Arrivals
    questions: Questions
    admission: Admission
    controls: Controls
    told: ChangesTold


@dataclass(frozen=True, slots=True)
class Setup:
    """What a coordinator is made of: its children and routes, where their work runs, what it
    records and publishes through, and a resumed batch's carried state."""

    children: list[Child]  # grows with delegates and waves
    routes: Mapping[str, Route]
    pool: Executor
    pool_size: int
    settings: Settings  # its [engine] part, budget and canned steers
    meter: Meter
    clock: Callable[[], float]
    recorder: Recorder  # rows, receipts, events and live limits to the owner's store
    publish: Callable[[EngineEvent], None]
    on_finished: Callable[[BatchStatus], EngineEvent]  # the batch ended: its event
    throttles: Mapping[str, RouteThrottle] = field(default_factory=dict)
    # Cheap work that must not wait for another thread (framing transcript lines).
    between_facts: Callable[[], None] = lambda: None
    carried: Carried = field(default_factory=Carried)  # a resumed batch's
    spawn: Callable[[Task], Child] | None = None
    schedules: tuple[Schedule, ...] = ()
    # Every LIVE_EVERY_S: the latest rows of the children alive (for attached views).
    publish_live: Callable[[tuple[ChildRow, ...]], None] = lambda rows: None
    rework: Rework | None = None  # retries, accepts and discards (None: refused)


def build_parts(setup: Setup, duties: Duties) -> Parts:
    """The parts of a coordinator made of `setup`, whose duties are `duties`, wired together."""
    s = setup
    carried, recorder, clock, publish = s.carried, s.recorder, s.clock, s.publish
    slots = Slots(
        s.children, s.routes, pool=s.pool, pool_size=s.pool_size, clock=clock, carried=carried.rows
    )
    finals = Finals(
        s.children,
        carried=lambda: slots.carried.values(),
        own=carried.tasks,
        record_final=recorder.record_final,
        record_unit=recorder.record_unit,
        report=duties.report,
        publish=publish,
        told=carried.units_told,
    )
    soft = SoftBudget(
        s.settings.budget.soft_cost_usd,
        clock=clock,
        meter=s.meter,
        # all the batch's rows (a resumed one's too) count in the projection
        rows=lambda: list(slots.all_rows().values()),
        record_event=recorder.record_event,
        announce=duties.announce_limits,
    )
    live_rows = LiveRows(recorder, s.publish_live)
    pauses = Pauses(slots, duties, recorder)
    pauses.admission = carried.admission_paused
    if soft.cost is not None:  # dropped since (`limits --soft-cost off`): it holds nothing
        soft.held = carried.soft_held
    arrivals = Arrivals(
        slots,
        spawn=s.spawn,
        schedules=s.schedules,
        taken_ids=frozenset(r.id for r in carried.rows),
        clock=clock,
        exhausted=lambda: admission.budget_exhausted(),
        record_event=recorder.record_event,
    )
    questions = Questions(slots, recorder, clock)  # what children ask of the operator
    admission = Admission(
        slots,
        duties,
        pauses=pauses,
        questions=questions,
        arrivals=arrivals,
        budget=s.settings.budget,
        meter=s.meter,
        clock=clock,
        recorder=recorder,
        publish=publish,
        started=carried.runs,
    )
    receipt_ids = ReceiptIds(carried.first_receipt_id)
    reviewer = s.rework.reviewer if s.rework is not None else None
    controls = Controls(
        slots,
        duties,
        recorder=recorder,
        receipt_ids=receipt_ids,
        clock=clock,
        canned=s.settings.canned,
        throttles=s.throttles,
        soft=soft,
        pauses=pauses,
        arrivals=arrivals,
        questions=questions,
        attempts=Attempts(
            slots,
            finals,
            recorder,
            s.rework,
            room=admission.room,
            forget=live_rows.forget,
            reopen=duties.reopen_ended,
        ),
        desk=ReviewDesk(reviewer, duties.report) if reviewer is not None else None,
        publish=publish,
        limits=duties.limits,
        hold=lambda: duties.hold,
        announce=duties.announce_limits,
    )
    told = ChangesTold(recorder.record_event)
    return Parts(
        slots,
        receipt_ids,
        finals,
        soft,
        live_rows,
        pauses,
        arrivals,
        questions,
        admission,
        controls,
        told,
    )
