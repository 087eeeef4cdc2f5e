"""What a child needs of its operator (engine/triage/needs.py reads it from the row): the
question it asks, the last tool call its CLI's permissions denied, when the operator cleared it.
Set on the coordinator thread; a reader sees it in the child's next row (`version`)."""

from __future__ import annotations

from flightdeck.engine.model import Denial, Question


class OperatorNeeds:
    """One child's question, denial and clearing."""

    __slots__ = ("denial", "dismissed_ts", "question", "version")

    def __init__(self) -> None:
        self.question: Question | None = None
        self.denial: Denial | None = None
        self.dismissed_ts: float | None = None
        self.version = 0

    def ask(self, question: Question | None) -> None:
        """It asks this (None: it was answered, or asks no more)."""
        self.question = question
        self.version += 1

    def denied(self, denial: Denial) -> None:
        """Its CLI's permissions denied this call."""
        self.denial = denial
        self.version += 1

    def dismissed(self, ts: float) -> None:
        """The operator cleared its entry in the queue."""
        self.dismissed_ts = ts
        self.version += 1
