"""The "needs you" queue (`!`): every entry oldest first with its reason (engine/triage/needs.py);
`a` answers a child's question, `c` clears an entry, enter goes to the child in the table. `a` and
`c` are hidden where they would send nothing (`refusals.refused`: read-only, ended, owner gone)."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from flightdeck.engine.apilight import Need, needs
from flightdeck.engine.commands import Answer, Command, CommandError, Dismiss
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.fmt import fmt_age
from flightdeck.tui.screens.decisions import Decision, Say
from flightdeck.tui.screens.refusals import hidden_reason, refused
from flightdeck.tui.view import EngineView
from flightdeck.tui.widgets import ChildrenTable
from flightdeck.tui.widgets.lists import Rows
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, Input, Label, OptionList
from textual.widgets.option_list import Option

_REASONS = {
    "budget": ("budget held", "bold cyan"),
    "asks": ("asks", "bold magenta"),
    "denied": ("denied a tool", "bold yellow"),
    "looping": ("looping", "bold yellow"),
    "stalled": ("stalled", "bold red"),
    "timed_out": ("timed out", "bold red"),
    "unknown": ("unknown end", "bold red"),
    "failed": ("failed", "bold red"),
}
_WHY_NOT_CLEARED = {
    "asks": "a question clears once answered (a), or when its child ends",
    "budget": "the soft budget's hold clears when it is raised (L) or the batch continues",
}


def need_text(need: Need, now: float) -> Text:
    """One entry: its reason, its child, how long ago, what it says (plain text: untrusted)."""
    reason, style = _REASONS.get(need.kind, (need.kind, "bold"))
    out = Text(f"{reason:<14}", style=style)
    out.append(f"{one_line(need.child_id or 'batch', 30):<31}", style="bold")
    out.append(f"{_age(need, now):>8}  ", style="dim")
    out.append(one_line(need.text, 300))
    return out


def _age(need: Need, now: float) -> str:
    return fmt_age(now - need.since) if need.since is not None else ""


def go_to(table: ChildrenTable, child_id: str | None) -> Decision:
    """Enter on an entry (None: escape): the table's cursor on its child, if shown."""
    if child_id is None or table.select(child_id):
        return ()
    return (Say("that child is not shown here (the filter hides it)"),)


class NeedsScreen(Screen[str | None]):
    """The queue, kept current; dismissed with the child to go to (None: back as it was)."""

    CSS_PATH = "needs.tcss"
    AUTO_FOCUS = "#needs-list"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "close", "Close", id="needs.close", tooltip="Back to the children"),
        Binding(  # priority, as the main screen's keys that open a box (screens/keys.py)
            "a",
            "answer",
            "Answer",
            priority=True,
            id="needs.answer",
            tooltip="Answer the selected child's question (ask_operator): its tool's result",
        ),
        Binding(
            "c",
            "clear",
            "Clear",
            id="needs.clear",
            tooltip="Clear the selected entry; the child stays as it is (it comes back if "
            "something new happens to it)",
        ),
    ]

    def __init__(
        self,
        view: EngineView,
        clock: Callable[[], float],
        *,
        poll_s: float = 0.3,
        cursor_blink: bool = True,
    ) -> None:
        super().__init__()
        self._view = view
        self._clock = clock
        self._poll_s = poll_s
        self.cursor_blink = cursor_blink
        self.entries: tuple[Need, ...] = ()
        self._ages: list[str] = []  # each entry's age as shown
        self.answering: Need | None = None  # whose question the answer box answers
        self._refusing: str | None = None  # the view's `read_only` as the footer last showed it

    def compose(self) -> ComposeResult:
        yield Label("", id="needs-title")
        yield Rows(id="needs-list")
        yield Label("", id="needs-question")
        answer = Input(
            placeholder="the answer; enter sends it, escape leaves it", id="needs-answer"
        )
        answer.cursor_blink = self.cursor_blink
        yield answer
        yield Footer()

    def on_mount(self) -> None:
        self._show_answer(None)
        self.refresh_queue()
        self.set_interval(self._poll_s, self.refresh_queue)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "answer" and self.focused is self.query_one("#needs-answer", Input):
            return False  # typed into the answer box, `a` is text
        # Hidden where it would only say why it sends nothing (on_key says why, if pressed).
        return not refused(action, self._view)

    def on_key(self, event: events.Key) -> None:
        """A key hidden where it would send nothing (read-only, ended) says why, if pressed."""
        hidden = self.active_bindings.get(event.key) is None
        if hidden and (reason := hidden_reason(event.key, self.BINDINGS, self._view)):
            self.notify(reason, severity="warning", markup=False)

    def refresh_queue(self) -> None:
        """The queue as it is now; the cursor stays on its entry while that is still there."""
        if self._view.read_only != self._refusing:  # the batch ended, or its owner went
            self._refusing = self._view.read_only
            self.refresh_bindings()
        snapshot = self._view.snapshot()
        entries = tuple(needs(snapshot))
        title = f"Needs you: {len(entries):,}" if entries else "Nothing needs you"
        self.query_one("#needs-title", Label).update(Text(title, style="bold"))
        listing = self.query_one("#needs-list", OptionList)
        now = self._clock()
        ages = [_age(n, now) for n in entries]
        if entries == self.entries:
            # The same entries: only their ages move on, those that did redrawn in place (the
            # cursor stays; a long queue is not drawn again every poll).
            for i, (need, age) in enumerate(zip(entries, ages, strict=True)):
                if age != self._ages[i]:
                    listing.replace_option_prompt_at_index(i, need_text(need, now))
            self._ages = ages
            return
        was = self.selected
        self.entries = entries
        self._ages = ages
        listing.clear_options()
        listing.add_options(Option(need_text(n, now), id=str(i)) for i, n in enumerate(entries))
        if entries:
            keys = [n.key for n in entries]
            listing.highlighted = keys.index(was.key) if was is not None and was.key in keys else 0
        gone = self.answering
        if gone is not None and gone.key not in {n.key for n in entries}:
            # Answered elsewhere (another view, the command line), or its child ended: said,
            # as the box goes with what was typed in it.
            self._show_answer(None)
            row = snapshot.child(gone.child_id) if gone.child_id is not None else None
            who = one_line(gone.child_id or "", 60)
            why = "was answered elsewhere"
            if row is not None and row.status.terminal:
                why = f"left the queue: {who} has {row.status.value}"
            self.notify(f"{who}'s question {why}: yours was not sent", markup=False)

    @property
    def selected(self) -> Need | None:
        index = self.query_one("#needs-list", OptionList).highlighted
        return self.entries[index] if index is not None and index < len(self.entries) else None

    def action_answer(self) -> None:
        need = self.selected
        if need is None or need.kind != "asks":
            self.notify("only a child that asks (ask_operator) is answered", markup=False)
            return
        self._show_answer(need)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        need = self.answering
        if need is None or need.child_id is None:
            return
        if self._send(Answer((need.child_id,), event.value)):
            self.notify(f"answer sent to {one_line(need.child_id, 60)}", markup=False)
            self._show_answer(None)
            self.refresh_queue()

    def action_clear(self) -> None:
        need = self.selected
        if need is None:
            return
        if need.kind in _WHY_NOT_CLEARED or need.child_id is None:
            self.notify(_WHY_NOT_CLEARED[need.kind], markup=False)
            return
        if self._send(Dismiss((need.child_id,))):
            self.notify(f"cleared: {one_line(need.child_id, 60)}", markup=False)

    def _send(self, command: Command) -> bool:
        """Send `command`; False, and the reason said, if the batch cannot hear it (its owner
        is gone) or refused it: nothing was sent."""
        reason = self._view.read_only
        if reason:
            self.notify(reason, severity="warning", markup=False)
            return False
        try:
            self._view.send(command)
        except CommandError as exc:
            text = f"{command.title} not sent: {one_line(str(exc), 200)}"
            self.notify(text, severity="error", markup=False)
            return False
        return True

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        need = self.selected
        if need is not None and need.child_id is not None:
            self.dismiss(need.child_id)

    def action_close(self) -> None:
        if self.answering is not None:
            self._show_answer(None)
            return
        self.dismiss(None)

    def _show_answer(self, need: Need | None) -> None:
        """The answer box under the full question (None: hidden, the list focused)."""
        self.answering = need
        question = self.query_one("#needs-question", Label)
        box = self.query_one("#needs-answer", Input)
        question.display = box.display = need is not None
        if need is None:
            self.query_one("#needs-list", OptionList).focus()
            return
        asks = Text(f"{one_line(need.child_id or '', 60)} asks: ", style="bold magenta")
        question.update(asks.append(one_line(need.text, 2000)))
        box.value = ""
        self.set_focus(box)  # now: focus() waits its turn behind keys already read
