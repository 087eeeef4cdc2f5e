"""Modal dialogs: steer, confirm stop, confirm pause or continue, quit."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import ClassVar

from flightdeck.engine.sanitize import one_line, sanitize
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, RadioButton, RadioSet
from textual.widgets.button import ButtonVariant

_PREVIEW = 6  # ids listed by name before "and N more"


class DialogBox(Vertical):
    """A dialog's box (class `dialog`): no larger than the screen, it scrolls (dialogs.tcss);
    laid out anew (shown, or the terminal resized under it), it brings the focused button or
    field into view. Focused in on_mount, before any layout, nothing scrolled to it, and on a
    small screen the steer box or a dialog's buttons were below the edge.

    And on each focus (tab), once laid out: Textual's own scroll to a newly focused widget
    first asks the last layout whether the widget is in view, and that layout can be older than
    the box's scroll offset. Shown at 40x12, the soft budget dialog's box had two scrolls to
    its field under way (Textual's animated one, this box's deferred one); a tab to Raise read
    the layout of the first (Raise in view, so no scroll) while the second had set the offset
    back, and Raise stayed below the edge (a make test on a busy machine; one run in three
    with TEXTUAL_FPS=8, the steer dialog's RadioSet as well)."""

    def on_resize(self, event: events.Resize) -> None:
        self.call_after_refresh(self._focused_in_view)

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        self.call_after_refresh(self._focused_in_view)

    def _focused_in_view(self) -> None:
        focused = self.screen.focused
        if focused is not None and self in focused.ancestors:
            focused.scroll_visible(animate=False)


def targets_text(child_ids: Sequence[str]) -> Text:
    """`a, b, c and 4 more`, as plain text (ids are untrusted)."""
    shown = ", ".join(one_line(i, 40) for i in child_ids[:_PREVIEW])
    more = len(child_ids) - _PREVIEW
    return Text(shown + (f" and {more} more" if more > 0 else ""), style="dim")


def _children(n: int) -> str:
    return f"{n} child" if n == 1 else f"{n} children"


def _ended(n: int, of: str = "tagged") -> str:
    """` (2 tagged have ended)`: tagged children (or a group's) the action leaves out, if any."""
    if not n:
        return ""
    return f" ({n} {of} {'has' if n == 1 else 'have'} ended)"


def _whose(query: str | None, group: str | None) -> str:
    """` matching `cost>0.50`` when the action is on everything a filter keeps, ` under group
    security` on a group's header (named as the header names it)."""
    if query is not None:
        return f" matching `{one_line(query, 60)}`"
    return f" under {one_line(group, 60)}" if group is not None else ""


def unsteerable_text(n: int, of: int) -> Text:
    """Said before the operator types: a steer to these children will be `missed`."""
    if of == 1:
        text = "This child's route cannot be steered: a message would be missed."
    elif n == of:
        text = "None of these children can be steered (a command route): it would be missed."
    else:
        text = f"{n} of these children cannot be steered (a command route): missed for them."
    return Text(text, style="yellow")


def mode_label(text: str, chosen: bool) -> Text:
    """A steer mode's label; the chosen one says so in words, readable without colour."""
    label = Text(text)
    if chosen:
        label.append("  ◂ chosen", style="bold")
    return label


class ModeButton(RadioButton):
    """A radio button whose label, not only its colour, shows that it is chosen."""

    def __init__(self, text: str, *, value: bool = False, id: str | None = None) -> None:
        self.text = text
        super().__init__(mode_label(text, value), value=value, id=id)

    def watch_value(self) -> None:
        super().watch_value()
        self.label = mode_label(self.text, self.value)


@dataclass(frozen=True, slots=True)
class SteerRequest:
    """What the operator asked for in the steer dialog."""

    message: str
    now: bool  # interrupt the current response instead of waiting for the next turn


class SteerDialog(ModalScreen[SteerRequest | None]):
    """Message plus "at next turn" / "interrupt now"."""

    CSS_PATH = "dialogs.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "cancel", "Cancel", id="dialog.cancel", tooltip="Close, send nothing"),
    ]

    def __init__(
        self,
        child_ids: Sequence[str],
        *,
        ended: int = 0,
        ended_of: str = "tagged",
        unsteerable: int = 0,
        cursor_blink: bool = True,
        query: str | None = None,
        group: str | None = None,  # the header's group the keys act on (`group security`)
    ) -> None:
        super().__init__()
        self.child_ids = list(child_ids)
        self.unsteerable = unsteerable  # children whose route takes no steer (a command)
        n = _children(len(self.child_ids))
        self.heading = f"Steer {n}{_whose(query, group)}{_ended(ended, ended_of)}"
        self.cursor_blink = cursor_blink

    def compose(self) -> ComposeResult:
        with DialogBox(classes="dialog"):
            yield Label(Text(self.heading, style="bold"))
            yield Label(targets_text(self.child_ids), classes="targets")
            if self.unsteerable:
                yield Label(
                    unsteerable_text(self.unsteerable, len(self.child_ids)), id="steer-cannot"
                )
            many = len(self.child_ids) != 1
            message = Input(
                placeholder="message to the children" if many else "message to the child",
                id="steer-message",
            )
            message.cursor_blink = self.cursor_blink
            yield message
            with RadioSet(id="steer-when"):
                yield ModeButton("at next turn", value=True, id="steer-next-turn")
                yield ModeButton("interrupt now", id="steer-now")
            yield Label("", id="steer-error")
            with Horizontal(classes="buttons"):
                yield Button("Send", variant="primary", id="send")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#steer-message", Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_send()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        if event.button.id == "send":
            self.action_send()
        else:
            self.action_cancel()

    def action_send(self) -> None:
        message = self.query_one("#steer-message", Input).value.strip()
        if not sanitize(message).strip():  # only escape sequences shows (and says) nothing
            self.query_one("#steer-error", Label).update(Text("Type a message first.", "red"))
            self.query_one("#steer-message", Input).focus()
            return
        now = self.query_one("#steer-when", RadioSet).pressed_index == 1
        self.dismiss(SteerRequest(message, now))

    def action_cancel(self) -> None:
        self.dismiss(None)


class _ConfirmTargets(ModalScreen[bool]):
    """Confirm an action on some children: a heading, the first names, a note, two buttons;
    the subclass's bindings confirm with its key."""

    CSS_PATH = "dialogs.tcss"

    def __init__(
        self,
        child_ids: Sequence[str],
        heading: str,
        note: str,
        button: str,
        variant: ButtonVariant,
    ) -> None:
        super().__init__()
        self.child_ids = list(child_ids)
        self.heading, self.note = heading, note
        self._button, self._variant = button, variant

    def compose(self) -> ComposeResult:
        with DialogBox(classes="dialog"):
            yield Label(Text(self.heading, style="bold"))
            yield Label(targets_text(self.child_ids), classes="targets")
            yield Label(Text(self.note))
            with Horizontal(classes="buttons"):
                yield Button(self._button, variant=self._variant, id="confirm")
                yield Button("Cancel", id="cancel")

    def on_mount(self) -> None:
        self.query_one("#confirm", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "confirm")

    def action_confirm(self) -> None:
        self.dismiss(True)

    def action_cancel(self) -> None:
        self.dismiss(False)


class ConfirmStopDialog(_ConfirmTargets):
    """Confirm stopping some children (or all); pressing the stop key again confirms."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,n", "cancel", "Cancel", id="dialog.cancel", tooltip="Keep them running"),
        Binding("y,x,X", "confirm", "Stop", id="dialog.confirm", tooltip="Stop them"),
    ]

    def __init__(
        self,
        child_ids: Sequence[str],
        *,
        everything: bool = False,
        ended: int = 0,
        ended_of: str = "tagged",
        query: str | None = None,
        group: str | None = None,
    ) -> None:
        n = _children(len(child_ids))
        if everything and not child_ids:  # a scheduled batch between two waves
            heading = "Stop the batch? No child runs now; its schedules start no more waves."
        elif everything:
            heading = f"Stop all {n}?"
        else:
            heading = f"Stop {n}{_whose(query, group)}{_ended(ended, ended_of)}?"
        note = "Partial transcripts and usage are kept. Queued ones never start."
        super().__init__(child_ids, heading, note, "Stop", "error")


class ConfirmPauseDialog(_ConfirmTargets):
    """Confirm pausing (or continuing) some children; pressing the pause key again confirms."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "escape,n", "cancel", "Cancel", id="dialog.cancel", tooltip="Leave them as they are"
        ),
        Binding("y,p", "confirm", "Confirm", id="dialog.confirm", tooltip="Pause or continue them"),
    ]

    def __init__(
        self,
        child_ids: Sequence[str],
        *,
        resume: bool = False,
        ended: int = 0,
        ended_of: str = "tagged",
        query: str | None = None,
        group: str | None = None,
    ) -> None:
        verb = "Continue" if resume else "Pause"
        n = _children(len(child_ids))
        heading = f"{verb} {n}{_whose(query, group)}{_ended(ended, ended_of)}?"
        note = (
            "Each takes a slot again before any new child starts, with its context intact."
            if resume
            else "A running child holds at its next turn and frees its slot (one waiting on "
            "its delegates, once they return); a queued one does not start. Press p again over "
            "them to continue."
        )
        super().__init__(child_ids, heading, note, verb, "warning")


class QuitChoice(StrEnum):
    """What `q` can do while children still run."""

    DETACH = "detach"  # leave: the owner process runs the batch on
    STOP = "stop"  # stop every child, then quit


class QuitDialog(ModalScreen[QuitChoice | None]):
    """Children still run: detach (when the batch has an owner elsewhere), stop them all and
    quit, or stay (None). Each has its key, shown on its button.

    Enter detaches (the batch runs on: nothing is lost) when it can; else no button has focus,
    so `q` then Enter ends nothing by accident, and stays nowhere by surprise either."""

    CSS_PATH = "dialogs.tcss"
    AUTO_FOCUS = "#detach"  # when there is one; else nothing has focus
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,n", "cancel", "Cancel", id="dialog.cancel", tooltip="Stay"),
        Binding("d", "detach", "Detach", id="dialog.detach", tooltip="Leave; the batch runs on"),
        Binding(
            "s", "stop_quit", "Stop all and quit", id="dialog.stop-quit", tooltip="Stop them all"
        ),
    ]

    def __init__(
        self,
        live: int,
        *,
        detach: bool = False,
        moot: Callable[[], str | None] | None = None,
        count: Callable[[], int] | None = None,
    ) -> None:
        super().__init__()
        self.live = live
        self.detach = detach
        # Why stopping is moot now (the batch ended, its owner died), and how many children
        # are live: looked at while it shows, so that what it says is never stale.
        self.moot = moot
        self.count = count
        self.moot_said: str | None = None

    def _again(self) -> str:
        """How to come back once detached: a browser tab's page has its own Restart."""
        if self.app.is_web:
            return "the page's Restart opens it again"
        return "attach again with `flightdeck attach`"

    def _said(self) -> tuple[str, str, str]:
        """The heading, the note and the stop button's label, as the batch is now."""
        if self.moot_said is not None:
            return one_line(self.moot_said, 300), "Quitting stops nothing.", "Quit  s"
        if not self.live:  # a scheduled batch between two waves: it runs on if left
            if self.detach:
                note = (
                    f"Detach leaves it running, wave after wave ({self._again()}); stopping"
                    " ends it. Finished work is already saved."
                )
            else:
                note = "Quitting ends it; finished work is already saved."
            heading = "No child runs now, but the batch goes on: its schedules start more waves."
            return heading, note, "Stop and quit  s"
        verb = "is" if self.live == 1 else "are"
        if self.detach:
            note = (
                f"Detach leaves them running ({self._again()}); "
                "stopping ends them. Finished work is already saved."
            )
        else:
            note = "Quitting stops them; finished work is already saved."
        heading = f"{_children(self.live)} {verb} still running or queued."
        return heading, note, "Stop all and quit  s"

    def compose(self) -> ComposeResult:
        heading, note, stop = self._said()
        with DialogBox(classes="dialog"):
            yield Label(Text(heading, "bold"), id="quit-heading")
            yield Label(Text(note), id="quit-note")
            with Horizontal(classes="buttons"):
                if self.detach:
                    yield Button("Detach  d", variant="primary", id="detach")
                yield Button(stop, variant="error", id="stop-quit")
                yield Button("Cancel  Esc", id="cancel")

    def on_mount(self) -> None:
        if self.moot is not None or self.count is not None:
            self.set_interval(0.25, self._look)

    def _look(self) -> None:
        """Keep the count of live children current, and say so once stopping is moot: the
        batch ended, or its owner died, meanwhile; `s` then quits alone (batch.Quit looks
        again when answered)."""
        # The count first: a later look at moot then sees no child live either, and says so,
        # rather than the heading of a scheduled batch between two waves.
        live = self.count() if self.count is not None else self.live
        why = self.moot() if self.moot is not None else None
        if (why, live) == (self.moot_said, self.live):
            return
        self.moot_said = why  # None again: a retry reopened it, s stops all again
        self.live = live
        heading, note, stop = self._said()
        self.query_one("#quit-heading", Label).update(Text(heading, "bold"))
        self.query_one("#quit-note", Label).update(Text(note))
        self.query_one("#stop-quit", Button).label = stop

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.detach or action != "detach"

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        choices = {"detach": QuitChoice.DETACH, "stop-quit": QuitChoice.STOP}
        self.dismiss(choices.get(event.button.id or ""))

    def action_detach(self) -> None:
        self.dismiss(QuitChoice.DETACH)

    def action_stop_quit(self) -> None:
        self.dismiss(QuitChoice.STOP)

    def action_cancel(self) -> None:
        self.dismiss(None)
