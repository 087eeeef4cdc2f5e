"""What the watchdog finds wrong with a running child: a timeout, a stall, an ignored stop."""

from __future__ import annotations

from dataclasses import dataclass

from flightdeck.engine.child.state import Child
from flightdeck.engine.inputs.settings import EngineSettings
from flightdeck.engine.model import ChildStatus


@dataclass(frozen=True, slots=True)
class Overdue:
    """The child is to end with `status`; `abandon`: it ignored a stop, so it is final now and
    its thread is left behind, else it is interrupted."""

    status: ChildStatus
    reason: str
    abandon: bool = False


def overdue(
    child: Child, now: float, settings: EngineSettings, stop_asked: float | None
) -> Overdue | None:
    """Whether a running child must be stopped (or given up on) now; None if all is well."""
    if stop_asked is not None:
        grace = settings.stall_grace_s + child.runner.stop_grace_s
        if now - stop_asked > grace:
            status = child.stop_status or ChildStatus.STALLED
            return Overdue(status, f"did not stop within {grace:g}s; abandoned", abandon=True)
        return None
    if child.status is ChildStatus.PAUSED:
        return None  # the operator's pause (a suspended process): neither a stall nor late
    started, timeout = child.started_ts, child.task.timeout_s
    # The time it spent paused counts toward no timeout.
    if started is not None and timeout is not None and now - started - child.paused_s > timeout:
        return Overdue(ChildStatus.TIMED_OUT, f"timed out after {timeout:g}s")
    last = child.last_activity
    if last is None or child.held:
        return None
    limit = settings.tool_stall_after_s if child.in_tool else settings.stall_after_s
    if now - last > limit:
        return Overdue(ChildStatus.STALLED, f"no activity for {limit:g}s")
    return None
