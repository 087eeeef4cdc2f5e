"""`resume`'s part in a dead owner's processes (agent CLIs): adopted by their children, or
ended, whole trees, all at once, before their tasks run again."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

from flightdeck.engine.agents import tree
from flightdeck.engine.agents.adopt import end_trees
from flightdeck.engine.agents.book import record_of
from flightdeck.engine.agents.gate import never_ran, still_held
from flightdeck.engine.agents.process import Record
from flightdeck.engine.child.command import Adoption, ProcessRunner
from flightdeck.engine.child.state import Child
from flightdeck.engine.model import ChildRow, ChildStatus
from flightdeck.engine.owner.lostrun import owner_died
from flightdeck.engine.records.meter import Meter
from flightdeck.engine.records.processes import ProcessLog, ProcessRow
from flightdeck.engine.records.store import Store

UNRUN = "its owner died before letting it start"


@dataclasses.dataclass(slots=True)
class Taken:
    """The children whose processes were adopted, those whose process trees were ended
    (running still when found), and those whose process never ran (held when its owner died)."""

    adopted: list[str] = dataclasses.field(default_factory=list)
    ended: list[str] = dataclasses.field(default_factory=list)
    unrun: list[str] = dataclasses.field(default_factory=list)


def take_processes(
    children: Sequence[Child],
    rows: Mapping[str, ChildRow],
    running: Sequence[ProcessRow],
    batch_id: str,
    store: Store,
    meter: Meter,
    pid: int,
    clock: Callable[[], float],
) -> Taken:
    """The dead owner's processes: each one still running is adopted by its child if it can
    be, or ended with its whole tree before its task runs again."""
    by_id = {c.task.id: c for c in children}
    log = ProcessLog(store, batch_id)
    out = Taken()
    # Not adopted: why, whether it still ran; its tree, ended with the others' at once.
    ending: list[tuple[ProcessRow, str, bool]] = []
    trees: list[tuple[Record, float]] = []
    for process in running:
        child, row = by_id.get(process.child_id), rows.get(process.child_id)
        record = record_of(process)
        runs = tree.alive(record.root)  # or it ended since: adopted all the same, read to its end
        # Its owner died after recording it, before letting it run: nothing to adopt, its task
        # runs again (an agent CLI's would otherwise read as one that ended without a result).
        # Found alive, it is at its pipe's end, not yet exited (ended with its tree, as one not
        # adopted is), or its owner let it go as it died, after this look (adopted): stopped
        # first, so that the marker, read again, tells which.
        unrun = never_ran(record.files.held, record.root)
        if unrun and runs:
            unrun = still_held(record.files.held, record.root)
            runs = tree.alive(record.root)
        live = row is not None and not row.status.terminal and child is not None
        runner = child.runner if child is not None else None
        why = "its child had ended" if not live else "it does not run a command"
        if unrun:
            why = UNRUN
        # Suspended by its dead owner for the operator's pause: it stays so until continued.
        stopped = row is not None and row.status is ChildStatus.PAUSED
        if live and isinstance(runner, ProcessRunner) and not unrun:
            act = row.activity if row is not None else None
            tool = None  # the tool the dead owner last recorded it in, and since when
            if act is not None and act.current_tool and act.tool_started_ts is not None:
                tool = (act.current_tool, act.tool_started_ts)
            adoption = Adoption(
                record,
                process.usage,
                process.cost_usd,
                process.known_usd,
                process.thread,
                tool,
                stopped,
            )
            why = runner.adopt(adoption) or ""
        if child is not None and live and not why:
            out.adopted.append(process.child_id)
            meter.add_spent(process.usage, process.cost_usd, process.known_usd)
            child.carry(process.usage, process.cost_usd, process.known_usd)
            paused = stopped or (row is not None and row.pausing)
            child.adopted(row.started_ts if row is not None else None, paused)
            state = "still runs" if runs else "has ended since"
            child.transcript.write(
                "engine", f"{owner_died(pid)}; its process {process.pid} {state}: adopted"
            )
            store.record_event(batch_id, process.child_id, clock(), "adopted", str(process.pid))
            continue
        ending.append((process, why, runs))
        trees.append((record, runner.stop_grace_s if runner is not None else 5.0))
    for (process, why, runs), end in zip(ending, end_trees(trees), strict=True):
        log.ended(process.child_id)
        note = f"its process {process.pid} was not adopted ({why}): its tree was ended"
        if why == UNRUN and end.never_ran:  # looked at once ended
            note = f"its process {process.pid} never ran: {UNRUN}"
            out.unrun.append(process.child_id)
        elif why == UNRUN:  # let go as its owner died, and not stopped in time (`still_held`)
            note = f"its process {process.pid} was let start as its owner died: its tree was ended"
        if end.left:
            note += f", but {len(end.left)} process(es) could not be killed"
        if (child := by_id.get(process.child_id)) is not None:
            child.transcript.write("engine", note)
        if runs:
            out.ended.append(process.child_id)
            store.record_event(batch_id, process.child_id, clock(), "process_ended", note)
    return out
