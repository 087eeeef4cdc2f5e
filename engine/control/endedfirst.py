"""A stop, pause or continue that came after every child it names had ended on its own (after its
sender read the batch, before the coordinator took it): it does nothing, and is refused with
AlreadyEnded, which is no failure: its request is recorded refused as `ended` (records/requests.py
`Refusal`), which its client says as a notice (engine/attached's `ended_first`). It is settled
once the store has those children's final rows, so that a client reading them after the refusal
finds them ended, as it says: a child whose thread has ended may not have been finished
(recorded) yet."""

from __future__ import annotations

from collections.abc import Iterable

from flightdeck.engine.control.inbox import Order
from flightdeck.engine.control.slots import Slots
from flightdeck.engine.errors import AlreadyEnded
from flightdeck.engine.sanitize import one_line


class EndedFirst:
    """The check of such a command, its words, and its refusal held for final rows."""

    def __init__(self, slots: Slots) -> None:
        self._slots = slots
        # Refusals, each with the children whose final rows it waits for, in order.
        self._held: list[tuple[Order, str, set[str]]] = []

    def check(self, ids: tuple[str, ...], verb: str, done: str) -> None:
        """AlreadyEnded if none of these children is live: then the command would do nothing."""
        children = (self._slots.by_id.get(i) for i in ids)  # else an earlier owner's: ended
        if not any(c is not None and not c.status.terminal for c in children):
            raise self.refusal(ids, verb, done)

    def refusal(self, ids: tuple[str, ...], verb: str, done: str) -> AlreadyEnded:
        """`c1 had already ended (completed) when the stop arrived: not stopped`."""
        slots = self._slots
        said = []
        for child_id in dict.fromkeys(ids):
            child = slots.by_id.get(child_id)  # else a final row an earlier owner left
            known = child if child is not None else slots.carried.get(child_id)
            status = known.status.value if known is not None else "ended"
            said.append((one_line(child_id, 60), status))
        if len(said) == 1:
            ended = f"{said[0][0]} had already ended ({said[0][1]})"
        else:
            ended = ", ".join(f"{i} ({s})" for i, s in said[:5]) + " had already ended"
        return AlreadyEnded(f"{ended} when the {verb} arrived: not {done}")

    def hold(self, order: Order, reason: str, ids: Iterable[str]) -> bool:
        """Keep the refusal until the final rows of these children not finished yet are handed
        to the store; False if none is left to wait for (settle it now)."""
        waiting = {i for i in ids if i in self._slots.alive}
        if waiting:
            self._held.append((order, reason, waiting))
        return bool(waiting)

    def finished(self, child_id: str) -> list[tuple[Order, str]]:
        """The refusals due now that this child's final row has been handed to the store."""
        due: list[tuple[Order, str]] = []
        kept: list[tuple[Order, str, set[str]]] = []
        for order, reason, waiting in self._held:
            waiting.discard(child_id)
            if waiting:
                kept.append((order, reason, waiting))
            else:
                due.append((order, reason))
        self._held = kept
        return due
