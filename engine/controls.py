"""Sending the operator's commands to a started batch, from this process (`Engine.send`) or as a
client's request the owner read from the store: checked here, on the sender's thread, against
the batch as the coordinator has it, then handed to the coordinator thread, which applies it
(control/controls.py) and settles the request.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping

from flightdeck.engine.commands import Command, CommandError, Context
from flightdeck.engine.control.coordinator import Coordinator
from flightdeck.engine.control.inbox import Order
from flightdeck.engine.model import ChildRow
from flightdeck.engine.records.requests import RequestState
from flightdeck.engine.records.store import Store


class Controls:
    """One started batch's commands: its coordinator, its store, the rows a resume carried."""

    def __init__(
        self,
        coordinator: Coordinator,
        store: Store,
        batch_id: str,
        *,
        clock: Callable[[], float],
        carried: tuple[ChildRow, ...],  # final rows an earlier owner left (a resumed batch)
        max_chars: int,  # `[engine] max_task_chars`: a steer joins the prompt as a goal does
    ) -> None:
        self._co = coordinator
        self._store = store
        self._batch_id = batch_id
        self._clock = clock
        self._known = _Known(coordinator.by_id, frozenset(r.id for r in carried))
        self._max_chars = max_chars

    def context(self) -> Context:
        """The batch as the coordinator has it now, for checking a command."""
        return Context(self._batch_id, self._known, lambda: self._max_chars, self._co.limits)

    def send(self, command: Command, request_id: int | None = None) -> tuple[int, ...]:
        """Check `command` (CommandError, nothing sent) and queue it for the coordinator; the
        receipt ids of a steer (one per child, in order)."""
        command.check(self.context())
        co = self._co
        receipts = tuple(co.next_receipt_id() for _ in command.targets) if command.receipted else ()
        co.command(Order(command, receipts, request_id))
        return receipts

    def apply_request(self, request_id: int, command: Command | CommandError) -> None:
        """A client's command (the owner's duties thread), or why it could not be read: sent as
        one from this process is, or refused with the reason."""
        try:
            if isinstance(command, CommandError):
                raise command
            self.send(command, request_id)
        except CommandError as exc:
            self.refuse(request_id, str(exc))

    def refuse(self, request_id: int, reason: str) -> None:
        """Settle a client's request as refused, saying why."""
        self._store.settle_request(
            self._batch_id, request_id, RequestState.REFUSED, self._clock(), reason=reason
        )

    def settled(self, request_id: int, receipts: tuple[int, ...], refused: str | None) -> None:
        """The coordinator applied a client's request (with the steer receipts it made), or
        found it could not: settled in the store after what it made."""
        if refused is not None:
            self.refuse(request_id, refused)
            return
        self._store.settle_request(
            self._batch_id,
            request_id,
            RequestState.APPLIED,
            self._clock(),
            control_ids=receipts,
        )


class _Known:
    """The ids of the batch's children: running here (delegates join as they come), or
    carried from before a resume."""

    def __init__(self, running: Mapping[str, object], carried: Collection[str]) -> None:
        self._running = running
        self._carried = carried

    def __contains__(self, child_id: object) -> bool:
        return child_id in self._running or child_id in self._carried
