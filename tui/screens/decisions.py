"""What a key on the main screen decides, as values the screen carries out in order.

A key's order (actions.py on children, batch.py on the whole batch) and the screen's notices
(notices.py) are plain functions of what the screen shows; they return a `Decision`: send this
command (or send it off the event loop: review.py's slow ones), say that, ask with this dialog
and decide again on its answer. Only the screen touches
the app (`MainScreen.carry_out`); a send the batch refuses is said there, and ends the decision.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from flightdeck.engine.commands import Command, CommandError
from flightdeck.engine.model import Snapshot
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.screens.summaries import Bulk
from textual.notifications import SeverityLevel
from textual.screen import Screen

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Send:
    """Send `command` to the batch; refused (CommandError), the reason is said and the rest of
    the decision is dropped: nothing was sent."""

    command: Command


@dataclass(frozen=True, slots=True)
class SendOff:
    """Send `command` off the event loop (a merge runs git, a retry may start the owner again):
    `done` is said once it is taken, a refusal as not applied (`sent_off`, on a worker). A
    callable `done` is given the snapshot read after it: what was applied (review.Decided)."""

    command: Command
    done: str | Callable[[Snapshot], str]


@dataclass(frozen=True, slots=True)
class Say:
    """A toast, shown as plain text (never markup): untrusted parts are cut to one line."""

    text: str
    severity: SeverityLevel = "information"


@dataclass(frozen=True, slots=True)
class Untag:
    """Untag these children (the command they were tagged for was sent)."""

    ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Track:
    """A send to everything matching: summed up once every child has taken it (summaries.py)."""

    bulk: Bulk


@dataclass(frozen=True, slots=True)
class Poll:
    """Read a fresh snapshot now, so what was sent shows at once."""


@dataclass(frozen=True, slots=True)
class Ask(Generic[T]):
    """Show `dialog`; what follows is decided on its answer (None: dismissed)."""

    dialog: Screen[T]
    then: Callable[[T | None], Decision]


@dataclass(frozen=True, slots=True)
class Ring:
    """Ring the bell, and write a desktop notification's escape sequence (alerts.py)."""

    bell: bool
    sequence: str | None


@dataclass(frozen=True, slots=True)
class Title:
    """Set the app's and the terminal window's title (alerts.title: counts, a sanitized id)."""

    text: str


@dataclass(frozen=True, slots=True)
class Exit:
    """Close the app; `stopped`: the operator stopped everything to quit (the app's result)."""

    stopped: bool


Step = Send | SendOff | Say | Untag | Track | Poll | Ask[Any] | Ring | Title | Exit
Decision = Sequence[Step]


class Sends(Protocol):
    """What `sent_off` needs of the view (tui/view.py's EngineView has it)."""

    def send(self, command: Command) -> None: ...

    def snapshot(self) -> Snapshot: ...


def sent_off(view: Sends, step: SendOff, refused: str | None) -> Decision:
    """`step`'s command sent (on a worker thread), unless the view is `refused` it (read-only:
    said); what to carry out after, on the event loop."""
    if refused:
        return (Say(refused, "warning"),)
    try:
        view.send(step.command)
    except CommandError as exc:
        text = f"{step.command.title} not applied: {one_line(str(exc), 300)}"
        return (Say(text, "error"),)
    return (Say(step.done if isinstance(step.done, str) else step.done(view.snapshot())), Poll())
