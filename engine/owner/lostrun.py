"""What `resume` records of a child its dead owner was running: the attempt it lost (an event
the report's recovery counts), the note in its transcript, and the operator's pause or stop of
it kept."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection

from flightdeck.engine.child.billing import estimated_note
from flightdeck.engine.child.state import Child
from flightdeck.engine.model import ChildRow, ChildStatus
from flightdeck.engine.records.forecast import lost_attempt_json
from flightdeck.engine.records.live import live_from_json
from flightdeck.engine.records.loops import evidence_json
from flightdeck.engine.records.store import Event, Store

OWNER_LOST = "owner lost"


def keep_pause(child: Child, row: ChildRow | None) -> None:
    """The operator's pause of a child outlives its owner, as a pause of admission does: it
    waits, queued, to be continued."""
    if row is not None and (row.status is ChildStatus.PAUSED or row.pausing):
        child.request_pause()
        child.transcript.write("engine", "still paused by the operator: continue it to run it")


def lost_end(row: ChildRow, ts: float) -> float:
    """When a child its owner died running ended: the owner's last heartbeat `ts`, or its own
    last sign of life if later (heartbeats are 2 s apart), never before it started."""
    return max(ts, row.started_ts or ts, row.activity.last_activity_ts or ts)


def owner_died(pid: int, ran: bool = True) -> str:
    """Why a child its owner died running was lost (`ran`: False when its command process, held
    until its owner let it go, never ran)."""
    when = "while it ran" if ran else "before its process ran"
    return f"{OWNER_LOST}: its owner process (pid {pid}) died {when}"


def lost_event(row: ChildRow, ts: float, rerun: bool) -> Event:
    """The event of the attempt a dead owner lost (the report's recovery and the forecast's lost
    cost are these), committed with the row that ends or queues it again: apart, an owner killed
    between the two left a row no event told from a fresh one, or an event a second resume
    counted again."""
    return (row.id, ts, "lost_attempt", lost_attempt_json(row, rerun))


def settle_lost(
    child: Child,
    row: ChildRow,
    batch_id: str,
    store: Store,
    pid: int,
    ts: float,
    rerun: bool,
    ran: bool = True,
) -> None:
    """Record the attempt of a child that was running when its owner died as lost, and say so
    in its transcript (`ran`: as `owner_died` says). Re-run, it is recorded queued again, as
    `child` is now, with that attempt's spend carried: `unknown` reads as an end, so had this
    owner died too before the child started, the next resume would never have run it.
    Otherwise it is left `unknown`, with what was recorded of it."""
    events = [lost_event(row, ts, rerun)]
    if rerun:
        # It starts over: a loop its lost attempt was flagged in is not its own now.
        events.append((row.id, ts, "loop", evidence_json(None)))
        store.update_child(batch_id, child.row(), events=events)
    else:
        unknown = dataclasses.replace(
            row,
            status=ChildStatus.UNKNOWN,
            finished_ts=lost_end(row, ts),
            error=owner_died(pid, ran),
        )
        store.update_child(batch_id, unknown, events=events)
    then = "it restarts from the start" if rerun else "it is left unknown (--no-rerun)"
    child.transcript.write("engine", f"{owner_died(pid, ran)}; {then}")
    if not rerun:
        child.transcript.close("engine", f"unknown: {OWNER_LOST}")


def append_line(path: str, role: str, text: str, clock: Callable[[], float]) -> None:
    from flightdeck.engine.records.transcripts import TranscriptWriter

    writer = TranscriptWriter(path, clock)
    try:
        writer.write(role, text)
    finally:
        writer.close()


def settle_left(
    rows: list[ChildRow],
    events: list[tuple[float, str | None, str, str]],
    live: str | None,
    processes: Collection[str],
    batch_id: str,
    store: Store,
    pid: int,
    ts: float,
    clock: Callable[[], float],
) -> list[ChildRow]:
    """`rows` as the dead owner left them, with the calls it had in flight billed (`live`, its
    last live figures; not to children whose process `processes` holds: their CLI's own output
    says what they spent) and the children the operator stopped ended `stopped`."""
    rows = _bill_in_flight(rows, live, processes, clock)
    return _settle_stopping(rows, events, batch_id, store, pid, ts, clock)


def _bill_in_flight(
    rows: list[ChildRow],
    live: str | None,
    processes: Collection[str],
    clock: Callable[[], float],
) -> list[ChildRow]:
    """A call cut short by its owner's death was billed for what the server had read, as one a
    stop cuts short: its tokens and cost as the owner last published them (the server's count
    where it came, else the meter's estimate), kept in its child's spend."""
    flying = live_from_json(live).children if live else {}
    out = []
    for row in rows:
        f = flying.get(row.id)
        if (
            f is not None
            and f.in_flight.total
            and f.billed_tokens == row.usage.total  # not billed since it was published
            and not row.status.terminal
            and row.id not in processes
        ):
            cost = (
                None
                if row.cost_usd is None or f.in_flight_cost_usd is None
                else (row.cost_usd + f.in_flight_cost_usd)
            )
            row = dataclasses.replace(row, usage=row.usage + f.in_flight, cost_usd=cost)
            # As a stop's cut-short call says; the owner's death is the next line's (settle_lost).
            append_line(row.transcript, "engine", estimated_note(f.in_flight), clock)
        out.append(row)
    return out


def _settle_stopping(
    rows: list[ChildRow],
    events: list[tuple[float, str | None, str, str]],
    batch_id: str,
    store: Store,
    pid: int,
    ts: float,
    clock: Callable[[], float],
) -> list[ChildRow]:
    """`rows`, each child the operator stopped in the run its owner died in ended `stopped`
    (recorded, and said in its transcript): the stop was applied, its end never came, and
    running it again would undo the operator's word."""
    started = {r.id: r.started_ts for r in rows if r.started_ts and not r.status.terminal}
    stops = {
        c: why
        for at, c, kind, why in events
        if c in started and at >= started[c] and kind == "stop"
    }
    out = []
    for row in rows:
        if row.id in started and row.id in stops:
            row = dataclasses.replace(
                row, status=ChildStatus.STOPPED, finished_ts=lost_end(row, ts), error=stops[row.id]
            )
            store.update_child(batch_id, row)
            note = f"{owner_died(pid)}, after the operator's stop: it is not run again"
            append_line(row.transcript, "engine", note, clock)
            append_line(row.transcript, "engine", f"stopped: {stops[row.id]}", clock)
        out.append(row)
    return out
