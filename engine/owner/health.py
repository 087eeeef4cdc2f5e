"""What keeps the engine from recording or running as it should, in a sentence for the
operator (`Snapshot.problem`): the batch failing as a whole, a store that cannot commit, final
rows it gave up on."""

from __future__ import annotations

from time import monotonic

from flightdeck.engine.control.coordinator import Coordinator
from flightdeck.engine.records.faults import StoreTrouble


def problem(c: Coordinator, trouble: StoreTrouble | None, retry_s: float) -> str | None:
    """The sentence, or None when all is well (`retry_s`: `[engine] store_retry_s`)."""
    lost = c.unrecorded
    if c.failure is not None:
        text = f"the batch fails: {c.failure}"
        if lost or trouble is not None:
            text += f"; {_unrecorded(lost, c.unrecorded_unstarted)}"
        return text
    if trouble is not None:
        left = max(0.0, trouble.since + retry_s - monotonic())
        return (
            f"cannot write to the store ({trouble.reason}): {_children(c.held)} held in "
            f"memory, trying again for up to {left:.0f}s; no new child starts"
        )
    if lost:
        return _unrecorded(lost, c.unrecorded_unstarted)
    return None


def _unrecorded(lost: int, unstarted: int) -> str:
    """How many children's ends the store gave up on; those that never started said apart,
    not counted as finished work that was lost."""
    if not unstarted:
        return f"{_children(lost)} could not be recorded"
    ends = "child's end" if lost == 1 else "children's ends"
    return (
        f"{lost} {ends} could not be recorded: {lost - unstarted} finished, "
        f"{unstarted} never started"
    )


def _children(n: int) -> str:
    return f"{n} finished child" + ("" if n == 1 else "ren")
