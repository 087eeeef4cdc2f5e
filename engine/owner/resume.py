"""`resume`: a batch whose owner died, picked up from the store alone and run to the end.

What the store says of each child decides what becomes of it: a final row is kept and never
run again; a command child whose process still runs is adopted (watched on from where its
output was read, never run twice); a process that cannot be adopted is ended, its whole tree,
before its task runs again; any other child that was running when the owner died is marked
`unknown` with what was recorded (usage, transcript) and runs again from the start (unless
`--no-rerun`); a queued one runs in its original order. Spend before the crash counts in the
totals and against the budget; steers queued and never delivered go to the re-run child or are
marked missed.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

from flightdeck.engine.child.state import Child
from flightdeck.engine.child.steering import missed_note
from flightdeck.engine.errors import ConfigError, InputError
from flightdeck.engine.inputs.settings import Route, Settings
from flightdeck.engine.inputs.settings.stored import settings_from_json, unkept_headers
from flightdeck.engine.inputs.tasks import Batch
from flightdeck.engine.model import BatchStatus, ChildRow, ChildStatus, SteerReceipt, SteerState
from flightdeck.engine.model.units import units_told
from flightdeck.engine.owner import assembly
from flightdeck.engine.owner.lostrun import (
    OWNER_LOST,
    append_line,
    keep_pause,
    lost_end,
    lost_event,
    owner_died,
    settle_left,
    settle_lost,
)
from flightdeck.engine.records.attempts import SUPERSEDED, delegates_of, earlier_delegates
from flightdeck.engine.records.forecast import LostAttempts, lost_attempts
from flightdeck.engine.records.liveness import claim_batch
from flightdeck.engine.records.meter import Meter, cache_saving
from flightdeck.engine.records.processes import ProcessRow, processes
from flightdeck.engine.records.reader import StoreReader, no_batch, with_lineage
from flightdeck.engine.records.requests import refuse_pending
from flightdeck.engine.records.rows import BatchInfo, process_start_time
from flightdeck.engine.records.store import Event, Store

__all__ = [
    "OWNER_LOST",
    "NothingToResume",
    "ResumeError",
    "Resumed",
    "Stored",
    "claim",
    "load",
    "settle",
    "take_over",
]


class ResumeError(InputError):
    """A batch that cannot be resumed from this state folder (unknown, too old)."""


class NothingToResume(Exception):
    """The batch has already finished: there is nothing to do."""

    def __init__(self, batch_id: str, status: str) -> None:
        super().__init__(f"batch {batch_id} has already finished ({status}): nothing to do")
        self.status = status


@dataclass(frozen=True, slots=True)
class Stored:
    """A batch as its row keeps it: enough to build its Engine again."""

    info: BatchInfo
    batch: Batch
    settings: Settings


@dataclass(slots=True)
class Resumed:
    """What `settle` made of the stored children."""

    live: list[Child]  # to run, in their original order (re-runs and queued)
    carried: list[ChildRow]  # final rows kept from before; never run again
    rerun: int = 0  # children that were running when the owner died, run again
    lost: int = 0  # of those, left `unknown` (--no-rerun)
    # This resume's lost attempts, each its own cost (not what earlier attempts carried in).
    attempts_lost: LostAttempts = dataclasses.field(default_factory=LostAttempts)
    superseded: set[str] = dataclasses.field(default_factory=set)  # re-run parents' delegates
    first_receipt_id: int = 1
    runs: int = 0  # the runs earlier owners made, retries included (a lost one is run again)
    adopted: list[str] = dataclasses.field(default_factory=list)  # processes watched on
    ended: list[str] = dataclasses.field(default_factory=list)  # process trees ended first
    # Each unit an owner announced, with its members' attempts then (model/units.py).
    units_told: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def lost_cost_usd(self) -> Decimal:
        """What the attempts this resume found lost were billed (known prices)."""
        return self.attempts_lost.cost_usd

    @property
    def lost_cost_unknown(self) -> int:
        """Lost attempts with no price."""
        return self.attempts_lost.unknown


def load(state_dir: Path, batch_id: str, *, reopen: bool = False) -> Stored:
    """The batch's row and what it was started with; one clear error if it cannot resume
    (`reopen`: a batch that has finished too, to run children the operator retried)."""
    db = state_dir / "flightdeck.db"
    if not db.is_file():
        raise ResumeError(db, None, None, "no flightdeck state here (run a batch first)")
    if not os.access(state_dir, os.W_OK) or not os.access(db, os.W_OK):
        raise ConfigError(None, None, "state_dir", f"cannot use {state_dir}: not writable")
    with StoreReader(db) as reader:
        info = reader.batch(batch_id)
        # Schedules a stop-all (or a budget, a cron) ended stay ended: else a resume, or a
        # retry that reopens the batch, fired waves for ever after the operator's stop-all.
        schedules_ended = reader.schedules_ended(batch_id)
    if info is None:
        raise ResumeError(None, None, "batch_id", no_batch(batch_id, state_dir))
    for folder in (state_dir / "batches", state_dir / "batches" / batch_id):
        # Checked before the batch is claimed: a folder it cannot write to (one mounted
        # read-only) leaves the claim recorded and the batch unresumed.
        if folder.exists() and not os.access(folder, os.W_OK):
            raise ConfigError(
                None, None, "state_dir", f"cannot use {state_dir}: {folder} is not writable"
            )
    if info.status not in (BatchStatus.RUNNING, BatchStatus.ABANDONED) and not reopen:
        # Nothing is left pending for ever: the owner that would have applied it has gone.
        refuse_pending(db, batch_id, f"the batch had finished ({info.status.value})")
        raise NothingToResume(batch_id, info.status.value)
    if info.settings_json is None:
        raise ResumeError(
            db,
            None,
            "batch_id",
            f"batch {batch_id} was started by an older flightdeck that kept no settings: "
            "it cannot be resumed",
        )
    settings = settings_from_json(info.settings_json)
    if routes := unkept_headers(settings):
        names = ", ".join(repr(r) for r in routes)
        raise ResumeError(
            db,
            None,
            "batch_id",
            f"route(s) {names} send headers, whose values are not kept in the store (they may "
            "hold keys): this batch cannot be resumed",
        )
    batch = assembly.batch_from_store(info.name, info.spec_json, info.source, info.workspace)
    if schedules_ended:
        batch = dataclasses.replace(batch, schedules=())
    return Stored(info, batch, settings)


def settle(
    children: Sequence[Child],
    stored: Collection[str],
    rows: Sequence[ChildRow],
    receipts: Sequence[SteerReceipt],
    *,
    batch_id: str,
    store: Store,
    meter: Meter,
    rerun: bool,
    lost_owner: int,
    lost_ts: float,
    clock: Callable[[], float],
    running: Sequence[ProcessRow] = (),
    spent_before: Mapping[str, Decimal | None] | None = None,
    routes: Mapping[str, Route] | None = None,
) -> Resumed:
    """Decide each child's fate from its stored row, and record what that changes.

    `stored` holds the ids of every child in the store, `rows` the rows of those that had
    started (a queued child needs no row built: most of a big batch, often); `running` the
    processes the dead owner recorded as running."""
    # Here: adopting brings the command children's code, which a batch not resumed never uses.
    from flightdeck.engine.owner.adopting import take_processes

    by_id = {r.id: r for r in rows}
    kids = delegates_of((r.id, r.parent) for r in rows if not r.superseded)  # not history yet
    # What each child's earlier attempts carried into the one lost now (retries, lost owners).
    before = spent_before or {}
    out = Resumed(live=[], carried=[], attempts_lost=LostAttempts(carried=dict(before)))
    taken = take_processes(children, by_id, running, batch_id, store, meter, lost_owner, clock)
    out.adopted, out.ended, adopted = taken.adopted, taken.ended, set(taken.adopted)
    unrun = set(taken.unrun)
    missing = []
    for child in children:
        if child.task.id in adopted:
            continue
        row = by_id.get(child.task.id)
        # Paused before it started: nothing was lost (it stays paused).
        unstarted = row is not None and row.status is ChildStatus.PAUSED and not row.started_ts
        if row is None or row.status == ChildStatus.QUEUED or unstarted:
            if child.task.id not in stored:  # the owner died before it was committed
                missing.append(child)
            elif row is not None and (row.usage.total or row.cost_known_usd or row.id in before):
                # Queued again after earlier attempts (a retry, a re-run after a lost owner):
                # their spend is its own still. Their events tell it from a fresh row: one that
                # counted no token and cost an unknown sum reads as a fresh one would.
                meter.add_spent(row.usage, row.cost_usd, row.cost_floor_usd, child.route)
                child.carry(row.usage, row.cost_usd, row.cost_known_usd)
            keep_pause(child, row)
            out.live.append(child)
        elif row.status.terminal:
            meter.add_spent(row.usage, row.cost_usd, row.cost_floor_usd, child.route)
            out.carried.append(row)
        else:  # running, gated or paused when its owner died: its context died with it
            out.attempts_lost.add(row.id, row.cost_usd)
            meter.add_spent(row.usage, row.cost_usd, row.cost_floor_usd, child.route)
            if rerun:  # before `_lost` records it queued again; what it delegated is history
                child.carry(row.usage, row.cost_usd, row.cost_known_usd)
                child.kept.run_in_place()
                keep_pause(child, row)
                for kid in earlier_delegates(row.id, kids):
                    out.superseded.add(kid)
                    store.record_event(batch_id, kid, lost_ts, SUPERSEDED, row.id)
            ran = child.task.id not in unrun
            settle_lost(child, row, batch_id, store, lost_owner, lost_ts, rerun, ran)
            if rerun:
                out.live.append(child)
                out.rerun += 1
            else:
                out.lost += 1
                out.carried.append(
                    dataclasses.replace(
                        row,
                        status=ChildStatus.UNKNOWN,
                        finished_ts=lost_end(row, lost_ts),
                        error=owner_died(lost_owner, ran),
                    )
                )
    out.live = [c for c in children if c.task.id in adopted] + out.live  # they hold slots
    if missing:
        store.add_queued(batch_id, assembly.queued_rows(missing))
    # Every route the batch has, not only its tasks' (a batch of schedules alone has none).
    routes = {**(routes or {}), **{c.route.name: c.route for c in children}}
    _settle_made(children, rows, out, batch_id, store, meter, lost_owner, lost_ts, clock, routes)
    # The runs made so far (max_runs counts them): each ended child's attempts (its last only if
    # it started), and those before its own of one to run (again).
    out.runs = sum(r.attempt - (r.started_ts is None) for r in out.carried) + sum(
        by_id[c.task.id].attempt - 1 for c in out.live if c.task.id in by_id
    )
    live = {c.task.id: c for c in out.live}
    for receipt in receipts:
        out.first_receipt_id = max(out.first_receipt_id, receipt.id + 1)
        if receipt.state != SteerState.QUEUED:
            continue
        target = live.get(receipt.child_id)
        if target is not None and target.add_steer(receipt):
            continue  # delivered at its first turn boundary
        missed = dataclasses.replace(receipt, state=SteerState.MISSED, settled_ts=clock())
        store.record_control(batch_id, missed, "steer", reason=OWNER_LOST)
        path = by_id[receipt.child_id].transcript if receipt.child_id in by_id else None
        if path is not None:
            append_line(path, "operator", missed_note(receipt.message, OWNER_LOST), clock)
    return out


def claim(store: Store, batch_id: str, clock: Callable[[], float], *, reopen: bool = False) -> None:
    """Become the batch's owner, atomically: one that still lives keeps it (OwnerAlive);
    `reopen`: a finished batch runs again."""
    pid, start = os.getpid(), process_start_time()
    status = claim_batch(store.path, batch_id, pid, start, clock(), reopen=reopen)
    if status != BatchStatus.RUNNING:  # finished since `resume` looked
        raise NothingToResume(batch_id, status)


def take_over(
    stored: Stored,
    children: list[Child],
    *,
    rerun: bool,
    batch_id: str,
    store: Store,
    meter: Meter,
    clock: Callable[[], float],
) -> tuple[Resumed, Decimal | None]:
    """Settle what the owner that died left (`settle`), from the store, and record that this
    one resumed it; returns what was found and what attempts lost with owners cost in all
    (None: unknown)."""
    info = stored.info
    with StoreReader(store.path) as reader:
        stored_ids = reader.child_ids(batch_id)
        rows = reader.children(batch_id, results=False, started=True)
        events, live = reader.events(batch_id), reader.live(batch_id)
        earlier = lost_attempts(events)  # earlier resumes' losses
        # Queued children the batch made as it ran (delegates, waves): not in its spec; and
        # those queued again whose earlier attempts counted no token at an unknown cost: only
        # their events say they ran.
        spec, started = {c.task.id for c in children}, {r.id for r in rows}
        unread = [
            i for i in stored_ids if i not in started and (i not in spec or i in earlier.carried)
        ]
        rows += [r for i in unread if (r := reader.child(batch_id, i)) is not None]
        receipts = reader.controls(batch_id, kind="steer")
    # Queued delegates were read one by one: their parents too (a re-run parent's are history).
    rows = with_lineage(rows, {c: d for _, c, kind, d in events if kind == "delegate" and c})
    running = processes(store.path, batch_id)
    lost_ts = info.finished_ts or info.heartbeat_ts or info.created_ts  # frozen: abandoned
    procs = {p.child_id for p in running}
    rows = settle_left(rows, events, live, procs, batch_id, store, info.owner_pid, lost_ts, clock)
    found = settle(
        children,
        stored_ids,
        rows,
        receipts,
        batch_id=batch_id,
        store=store,
        meter=meter,
        rerun=rerun,
        lost_owner=info.owner_pid,
        lost_ts=lost_ts,
        clock=clock,
        running=running,
        spent_before=earlier.carried,
        routes=stored.settings.routes,
    )
    found.units_told = units_told(events)
    lost: Decimal | None = None
    if not earlier.unknown and not found.lost_cost_unknown:
        lost = earlier.cost_usd + found.lost_cost_usd
    store.record_event(
        batch_id,
        None,
        clock(),
        "resumed",
        json.dumps(
            {
                "owner_lost": info.owner_pid,
                "rerun": found.rerun,
                "lost": found.lost,
                "lost_cost_usd": str(found.lost_cost_usd),
                "adopted": found.adopted,
                "ended": found.ended,
                # a batch that had ended, run again for a retry: no owner was lost
                "reopened": info.status not in (BatchStatus.RUNNING, BatchStatus.ABANDONED),
            }
        ),
    )
    return found, lost


def _with_saving(row: ChildRow, route: Route | None, superseded: bool) -> ChildRow:
    """`row` with what its cache reads saved (None: its route or price unknown), superseded."""
    row = dataclasses.replace(row, superseded=True) if superseded else row
    if not row.usage.cache_read_tokens:
        return row
    saved = cache_saving(row.usage, route) if route is not None else None
    return dataclasses.replace(row, cache_saved_usd=saved)


def _settle_made(
    children: Sequence[Child],
    rows: Sequence[ChildRow],
    out: Resumed,
    batch_id: str,
    store: Store,
    meter: Meter,
    pid: int,
    ts: float,
    clock: Callable[[], float],
    routes: Mapping[str, Route],
) -> None:
    """Children the batch made as it ran (a child's delegates, a schedule's waves): not in its
    spec, so never run again here. An ended one is kept; one still live is left `unknown`
    (its parent, re-run, delegates afresh; its schedule fires again)."""
    spec = {c.task.id for c in children}
    for row in rows:
        if row.id in spec:
            continue
        if row.status.terminal:
            out.carried.append(row)
            continue
        never = row.status is ChildStatus.PAUSED and not row.started_ts  # paused unstarted
        events: list[Event] = []
        if row.status is ChildStatus.QUEUED or never:  # never started: nothing was lost
            ended = dataclasses.replace(
                row, status=ChildStatus.STOPPED, finished_ts=ts, error=f"not started: {OWNER_LOST}"
            )
        else:
            ended = dataclasses.replace(
                row,
                status=ChildStatus.UNKNOWN,
                finished_ts=lost_end(row, ts),
                error=owner_died(pid),
            )
            out.lost += 1
            out.attempts_lost.add(row.id, row.cost_usd)
            events.append(lost_event(row, ts, rerun=False))  # as the report counts it
            append_line(row.transcript, "engine", f"{owner_died(pid)}; it is not run again", clock)
        store.update_child(batch_id, ended, events=events)
        out.carried.append(ended)
    # The store keeps no saving: priced again, as the report and attached views do.
    history = out.superseded
    out.carried = [_with_saving(r, routes.get(r.route), r.id in history) for r in out.carried]
    for row in out.carried:  # their spend counts in the totals and against the budget
        if row.id in spec:
            continue
        meter.add_spent(row.usage, row.cost_usd, row.cost_floor_usd, routes.get(row.route))
