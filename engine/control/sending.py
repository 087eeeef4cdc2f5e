"""Sending the operator's commands to a started batch, from this process (`Engine.send`) or as a
client's request the owner read from the store: checked here, on the sender's thread, against
the batch as the coordinator has it, then handed to the coordinator thread, which applies it
(controls.py) and settles the request (recorder.py).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from flightdeck.engine.commands import (
    Accept,
    Answer,
    Command,
    CommandError,
    Context,
    Continue,
    ContinueAdmission,
    Discard,
    Dismiss,
    Pause,
    PauseAdmission,
    Retry,
    SetLimits,
    Steer,
    Stop,
    StopAll,
    child_ids_of,
    flag,
)
from flightdeck.engine.control import inbox
from flightdeck.engine.control.coordinator import Coordinator
from flightdeck.engine.control.inbox import Order
from flightdeck.engine.control.recorder import Recorder
from flightdeck.engine.model import ChildRow, Limits
from flightdeck.engine.model.livelimits import changed
from flightdeck.engine.records.requests import redacted_command

WAIT_SLICE_S = 0.25  # how often a sender waiting on its command looks at the engine


class CommandMethods:
    """The commands by name, for scripts: each sends its value (`Engine.send`)."""

    def send(self, command: Command) -> tuple[int, ...]:
        """Send `command` (the class that runs the batch says how)."""
        raise NotImplementedError

    def limits(self) -> Limits:
        """The live limits."""
        raise NotImplementedError

    def steer(self, child_ids: Iterable[str], message: str, *, now: bool = False) -> list[int]:
        """Queue `message` for each child; returns receipt ids (see SteerReceipt)."""
        return list(self.send(Steer(child_ids_of(child_ids), message, now)))

    def stop(self, child_ids: Iterable[str]) -> None:
        """Interrupt these children (queued ones never start)."""
        self.send(Stop(child_ids_of(child_ids)))

    def stop_all(self) -> None:
        """Stop every child that has not ended; queued ones never start."""
        self.send(StopAll())

    def pause(self, child_ids: Iterable[str]) -> None:
        """Pause these children: a queued one never starts until continued, a running one
        holds at its next turn boundary and gives back its slot."""
        self.send(Pause(child_ids_of(child_ids)))

    def continue_(self, child_ids: Iterable[str]) -> None:
        """Continue these paused children (ahead of new work, with their context intact)."""
        self.send(Continue(child_ids_of(child_ids)))

    def pause_admission(self, on: bool = True) -> None:
        """Pause the batch's admission (`on`), or continue it: while paused no child starts;
        the running go on (pause them to hold them too)."""
        on = flag("pause_admission on", on)  # "no" is truthy: it paused the batch
        self.send(PauseAdmission() if on else ContinueAdmission())

    def answer(self, child_ids: Iterable[str], message: str) -> None:
        """Answer each of these children's question (`ask_operator`): its tool's result."""
        self.send(Answer(child_ids_of(child_ids), message))

    def dismiss(self, child_ids: Iterable[str]) -> None:
        """Clear these children's entries in the "needs you" queue (engine/triage/needs.py)."""
        self.send(Dismiss(child_ids_of(child_ids)))

    def retry(self, child_ids: Iterable[str], *, resume: bool = False) -> None:
        """Run these children that ended again under a new attempt (`resume`: working on from
        where they stopped); returns once queued (a batch that ended is reopened)."""
        self.send(Retry(child_ids_of(child_ids), resume))

    def accept(self, child_ids: Iterable[str], into: str) -> None:
        """Merge these children's changes into branch `into`, all or (a conflict) none;
        returns once done, CommandError saying why if it could not be."""
        self.send(Accept(child_ids_of(child_ids), into))

    def discard(self, child_ids: Iterable[str]) -> None:
        """Remove these children's worktrees and branches; returns once done."""
        self.send(Discard(child_ids_of(child_ids)))

    def set_limits(self, change: Mapping[str, object]) -> Limits:
        """Change the live limits (see model/livelimits.py for `change`); returns the limits it
        makes; LimitError (a CommandError naming the field, nothing changed) for a bad one."""
        after = changed(self.limits(), change)  # checked before `dict(change)` reads it
        self.send(SetLimits(dict(change)))
        return after


class Sender:
    """One started batch's commands sent: its coordinator, its records, the rows a resume
    carried."""

    def __init__(
        self,
        coordinator: Coordinator,
        recorder: Recorder,  # where a client's request is settled
        batch_id: str,
        *,
        carried: tuple[ChildRow, ...],  # final rows an earlier owner left (a resumed batch)
        max_chars: int,  # `[engine] max_task_chars`: a steer joins the prompt as a goal does
        secrets: tuple[str, ...] = (),  # the batch's keys, redacted from steers and answers
    ) -> None:
        self._co = coordinator
        self._recorder = recorder
        self._batch_id = batch_id
        self._known = _Known(coordinator.slots.by_id, frozenset(r.id for r in carried))
        self._max_chars = max_chars
        self._secrets = secrets

    def context(self) -> Context:
        """The batch as the coordinator has it now, for checking a command."""
        co = self._co
        return Context(
            self._batch_id,
            self._known,
            lambda: self._max_chars,
            co.limits,
            asking=lambda: co.questions.pending,
            rows=co.slots.all_rows,
        )

    def send(self, command: Command, request_id: int | None = None) -> tuple[int, ...]:
        """Check `command` (CommandError, nothing sent) and queue it for the coordinator; the
        receipt ids of a steer (one per child, in order). A command that `waits`, sent from
        this process, returns once applied, or raises why it was not (CommandError).
        A key typed into a steer or an answer is redacted first (`redacted_command`)."""
        return self._send(redacted_command(command, self._secrets), request_id)

    def _send(self, command: Command, request_id: int | None) -> tuple[int, ...]:
        command.check(self.context())
        co = self._co
        receipts = (
            tuple(co.receipt_ids.next() for _ in command.targets) if command.receipted else ()
        )
        waits = command.waits and request_id is None and co.running and not co.on_thread
        answer = inbox.Answer() if waits else None
        co.command(Order(command, receipts, request_id, answer))
        while answer is not None and not answer.wait(WAIT_SLICE_S):
            if not co.running:  # the engine closed under it: nothing will apply it now
                raise CommandError(f"{command.title} not applied: the batch's engine has closed")
        if answer is not None and answer.refused is not None:
            raise CommandError(answer.refused)
        return receipts

    def apply_request(self, request_id: int, command: Command | CommandError) -> None:
        """A client's command (the owner's duties thread), or why it could not be read: sent as
        one from this process is, or refused with the reason."""
        if isinstance(command, CommandError):
            self._recorder.settle_request(request_id, (), str(command))  # refused, saying why
            return
        command = redacted_command(command, self._secrets)  # kept so, if refused too
        try:
            self._send(command, request_id)
        except CommandError as exc:
            self._recorder.settle_request(request_id, (), str(exc), command)


class _Known:
    """The ids of the batch's children: running here (delegates join as they come), or
    carried from before a resume."""

    def __init__(self, running: Mapping[str, object], carried: Collection[str]) -> None:
        self._running = running
        self._carried = carried

    def __contains__(self, child_id: object) -> bool:
        return child_id in self._running or child_id in self._carried
