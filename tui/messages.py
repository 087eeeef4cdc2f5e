"""Engine facts as Textual messages; posted from the engine's coordinator thread."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import suppress

from flightdeck.engine import model
from flightdeck.tui.widgets.rows import ATTENTION
from textual.message import Message
from textual.message_pump import MessagePump


class ChildStarted(Message):
    """A child left the queue and began its first turn."""

    def __init__(self, child_id: str) -> None:
        super().__init__()
        self.child_id = child_id


class ChildFinished(Message):
    """A child reached a final status."""

    def __init__(self, row: model.ChildRow, done: int, total: int) -> None:
        super().__init__()
        self.row = row
        self.done = done
        self.total = total


class GroupFinished(Message):
    """The last member of a group ended: the unit's result."""

    def __init__(self, unit: model.GroupFinished) -> None:
        super().__init__()
        self.unit = unit


class SteerSettled(Message):
    """An operator message was delivered to a child, or missed it."""

    def __init__(self, receipt: model.SteerReceipt) -> None:
        super().__init__()
        self.receipt = receipt


class BatchFinished(Message):
    """Every child is final."""

    def __init__(self, batch_id: str, status: model.BatchStatus) -> None:
        super().__init__()
        self.batch_id = batch_id
        self.status = status


def message_for(event: model.EngineEvent) -> Message:
    """The Textual message for one engine event."""
    match event:
        case model.ChildStarted(child_id=child_id):
            return ChildStarted(child_id)
        case model.ChildFinished(row=row, done=done, total=total):
            return ChildFinished(row, done, total)
        case model.GroupFinished():
            return GroupFinished(event)
        case model.SteerSettled(receipt=receipt):
            return SteerSettled(receipt)
        case model.BatchFinished(batch_id=batch_id, status=status):
            return BatchFinished(batch_id, status)
    raise TypeError(f"unknown engine event {event!r}")


def forwarder(to: MessagePump) -> Callable[[model.EngineEvent], None]:
    """An engine listener (called on engine threads) that posts `to` the facts it acts on.

    A start, or a finish that needs no notice, is left to the next poll, which shows it
    anyway: every message costs the UI thread a dispatch, and a big batch sends thousands.
    """

    def forward(event: model.EngineEvent) -> None:
        if isinstance(event, model.ChildStarted) or (
            isinstance(event, model.ChildFinished) and event.row.status not in ATTENTION
        ):
            return
        # post_message is thread-safe. RuntimeError: the app's loop already closed, nobody is
        # left to tell.
        with suppress(RuntimeError):
            to.post_message(message_for(event))

    return forward
