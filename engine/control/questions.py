"""What children ask of the operator, the coordinator's side: questions (`ask_operator`) asked,
answered, and the answered children taking a slot again; tool calls an agent CLI's permissions
denied. Coordinator thread only.

A child that asks gives up its slot (as a parent waiting on its delegates does, see
child/ask.py); once answered, it takes one again when one is free, first come first, ahead of
new work, and its call returns the answer. The question and the answer are recorded in the
events table (for attached views and the record of what the operator did) and written into its
transcript.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from flightdeck.engine.child.ask import AskCall
from flightdeck.engine.child.state import Child
from flightdeck.engine.control.recorder import Recorder
from flightdeck.engine.control.slots import Slots
from flightdeck.engine.errors import check_asking
from flightdeck.engine.model import Denial, Question


class Questions:
    """The questions waiting for an answer, and the answered children waiting for a slot."""

    def __init__(self, slots: Slots, recorder: Recorder, clock: Callable[[], float]) -> None:
        self._slots = slots
        self._recorder = recorder
        self._clock = clock
        self.pending: dict[str, AskCall] = {}  # child id -> its call, unanswered
        self._answered: list[tuple[Child, AskCall, str]] = []

    def asked(self, child: Child, call: AskCall) -> None:
        """A child asks: recorded and shown; it waits without its slot."""
        slots, rec = self._slots, self._recorder
        child_id = child.task.id
        if child_id not in slots.alive or child.stop_status is not None:
            call.refuse("the operator cannot be asked now: the child is stopping")
            return
        ts = self._clock()
        self.pending[child_id] = call
        child.operator.ask(Question(call.question, ts))
        rec.record_event(child_id, "ask", json.dumps({"question": call.question}))
        slots.free_slot(child)
        rec.record(child.row())

    def answer(self, child_ids: tuple[str, ...], message: str) -> None:
        """The operator's answer to each of these children's questions; CommandError (nothing
        answered) if one of them asks nothing now."""
        check_asking(child_ids, self.pending)
        rec = self._recorder
        for child_id in dict.fromkeys(child_ids):
            call = self.pending.pop(child_id)
            child = self._slots.by_id[child_id]
            child.transcript.write("operator", f"answer: {message}")
            rec.record_event(child_id, "answer", json.dumps({"answer": message}))
            child.operator.ask(None)
            self._answered.append((child, call, message))
            rec.record(child.row())

    def admit(self) -> None:
        """Answered children take a slot again, first come first; their calls return."""
        answered = self._answered
        while answered:
            child, call, message = answered[0]
            if not self._slots.slot_again(child):
                return
            answered.pop(0)
            call.settle(message)

    def denied(self, child: Child, denial: Denial) -> None:
        """Its agent CLI's permissions denied a tool call: shown (the operator may allow it,
        by a steer or a retry), and recorded."""
        child.operator.denied(denial)
        detail = {"tool": denial.tool, "input": denial.input}
        self._recorder.record_event(child.task.id, "denied", json.dumps(detail, ensure_ascii=False))
        self._recorder.record(child.row())

    def ended(self, child: Child) -> None:
        """A child is final: its question (if any) is no longer waiting."""
        call = self.pending.pop(child.task.id, None)
        if call is not None:
            call.refuse("the child has ended")
            child.operator.ask(None)
        self._answered = [a for a in self._answered if a[0] is not child]
