"""Children that ended, worked on again from the main screen: R retries them (fresh or
continuing), D shows a child's diff, M accepts (merges) children's changes into a branch and
delete discards them. Commands go through the view like any other; those that take a while
(git, an owner started again) are sent off the event loop."""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from flightdeck.engine.attached.rework import Changes, overlap_in, patch_of
from flightdeck.engine.commands import Accept, Command, CommandError, Discard, Retry
from flightdeck.engine.model import ChildRow, ChildStatus
from flightdeck.engine.sanitize import one_line, sanitize
from flightdeck.tui.readonly import READ_ONLY, ReadOnlyView
from flightdeck.tui.screens import targets
from flightdeck.tui.screens.dialogs import targets_text
from flightdeck.tui.view import EngineView
from flightdeck.tui.widgets import ChildrenTable
from rich.syntax import Syntax
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Button, Footer, Input, Label, Static

RETRYABLE = frozenset(
    {
        ChildStatus.FAILED,
        ChildStatus.STOPPED,
        ChildStatus.TIMED_OUT,
        ChildStatus.STALLED,
        ChildStatus.UNKNOWN,
    }
)


def _n(count: int) -> str:
    return f"{count} child" if count == 1 else f"{count} children"


class RetryDialog(ModalScreen[bool | None]):
    """Retry these children: fresh (True: no) or continuing (True); None: cancelled."""

    CSS_PATH = "dialogs.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Cancel", id="dialog.cancel", tooltip="Retry none"),
        Binding("f", "dismiss(False)", "Fresh", id="retry.fresh", tooltip="From its goal"),
        Binding("c", "dismiss(True)", "Continue", id="retry.continue", tooltip="Work on"),
    ]

    def __init__(self, child_ids: list[str], skipped: int) -> None:
        super().__init__()
        self.child_ids = child_ids
        self.skipped = skipped

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text(f"Retry {_n(len(self.child_ids))}", style="bold"))
            yield Label(targets_text(self.child_ids), classes="targets")
            text = (
                "f: fresh, from its goal.  c: continue from where it stopped (its transcript "
                "as context; an agent CLI's session resumed). The earlier attempt is kept."
            )
            if self.skipped:
                text += f" {_n(self.skipped)} that completed or still run are left out."
            yield Label(Text(text))
            with Horizontal(classes="buttons"):
                yield Button("Cancel", id="cancel")
                yield Button("Fresh", id="fresh", variant="primary")
                yield Button("Continue", id="continue", variant="warning")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss({"fresh": False, "continue": True}.get(event.button.id or ""))


class AcceptDialog(ModalScreen[str | None]):
    """Merge these children's changes into the branch typed (None: cancelled)."""

    CSS_PATH = "dialogs.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Cancel", id="dialog.cancel", tooltip="Merge nothing"),
    ]

    def __init__(self, child_ids: list[str], overlap: str | None) -> None:
        super().__init__()
        self.child_ids = child_ids
        self.overlap = overlap

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text(f"Merge {_n(len(self.child_ids))}' changes", style="bold"))
            yield Label(targets_text(self.child_ids), classes="targets")
            if self.overlap:
                warning = f"changed by more than one of them: {one_line(self.overlap, 300)}"
                yield Label(Text(warning, style="yellow"), id="overlap")
            yield Label(Text("each committed on flightdeck/BATCH/CHILD; all merge, or none"))
            yield Input(placeholder="branch to merge into", id="into")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.value.strip():
            self.dismiss(event.value.strip())


class DiscardDialog(ModalScreen[bool]):
    """Drop these children's changes: their worktrees and branches removed."""

    CSS_PATH = "dialogs.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(False)", "Cancel", id="dialog.cancel", tooltip="Keep them"),
        Binding("delete", "dismiss(True)", "Discard", id="discard.confirm", tooltip="Drop them"),
    ]

    def __init__(self, child_ids: list[str]) -> None:
        super().__init__()
        self.child_ids = child_ids

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog"):
            yield Label(Text(f"Discard {_n(len(self.child_ids))}' changes?", style="bold"))
            yield Label(targets_text(self.child_ids), classes="targets")
            yield Label(Text("their worktrees (or copies) and branches are removed"))
            with Horizontal(classes="buttons"):
                yield Button("Keep", id="keep")
                yield Button("Discard", id="discard", variant="error")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id == "discard")


class DiffScreen(Screen[None]):
    """A child's diff, coloured, scrolled; one file at a time or all of them."""

    DEFAULT_CSS = """
    DiffScreen #diff-head { height: auto; padding: 0 1; background: $panel; }
    DiffScreen #diff-body { height: 1fr; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,q", "app.pop_screen", "Close", id="diff.close", tooltip="Back"),
        Binding("right,right_square_bracket", "file(1)", "Next file", id="diff.next"),
        Binding("left,left_square_bracket", "file(-1)", "Previous file", id="diff.previous"),
        Binding("a", "all", "All files", id="diff.all", tooltip="Every file at once"),
    ]

    def __init__(self, row: ChildRow, changes: Changes) -> None:
        super().__init__()
        self.row = row
        self.changes = changes
        self.index: int | None = None  # the file shown; None: all of them
        self.text = ""  # the diff shown, as plain (sanitized) text

    def compose(self) -> ComposeResult:
        yield Static(id="diff-head", markup=False)
        with VerticalScroll(id="diff-body"):
            yield Static(id="diff", markup=False)
        yield Footer()

    def on_mount(self) -> None:
        self.load()

    def action_file(self, step: int) -> None:
        n = len(self.changes.files)
        if n:
            self.index = (step - (step > 0)) % n if self.index is None else (self.index + step) % n
            self.load()

    def action_all(self) -> None:
        self.index = None
        self.load()

    def _head(self) -> Text:
        head = Text(one_line(self.row.id), style="bold")
        head.append(f"  {self.changes.summary} ({self.changes.state})")
        shown = "all files" if self.index is None else f"file {self.index + 1} of "
        shown += "" if self.index is None else str(len(self.changes.files))
        head.append(f"  {shown}", style="dim")
        if self.index is not None:
            head.append(f"  {one_line(self.changes.files[self.index].path)}")
        head.append("  ←/→ file, a all, esc back", style="dim")
        return head

    @work(thread=True, exclusive=True, exit_on_error=False, group="diff", description="diff")
    def load(self) -> None:
        """git reads the diff: off the event loop."""
        path = None if self.index is None else self.changes.files[self.index].path
        try:
            text = sanitize(patch_of(self.changes, path))
        except CommandError as exc:
            text = f"no diff: {exc}\n"
        self.app.call_from_thread(self._show, text)

    def _show(self, text: str) -> None:
        self.text = text
        self.query_one("#diff-head", Static).update(self._head())
        self.query_one("#diff", Static).update(
            Syntax(text, "diff", theme="ansi_dark", background_color="default")
        )
        self.query_one("#diff-body", VerticalScroll).scroll_home(animate=False)


class ReviewActions:
    """What R, D, M and delete do, for the screen that owns it (its table `#children`)."""

    def __init__(self, screen: Screen[None], view: EngineView, poll: Callable[[], None]) -> None:
        self.screen = screen
        self.view = view
        self.poll = poll

    @property
    def table(self) -> ChildrenTable:
        return self.screen.query_one("#children", ChildrenTable)

    def _rows(self) -> list[ChildRow]:
        rows = self.table.rows_by_id
        return [rows[i] for i in targets.targets(self.table)]

    def _send(self, command: Command, done: str) -> None:
        """Send off the event loop (a merge, an owner started again take a while); say how
        it went."""
        screen = self.screen
        if isinstance(self.view, ReadOnlyView):  # it would only log that it sent nothing
            screen.notify(READ_ONLY, severity="warning", markup=False)
            return

        def run() -> None:
            try:
                self.view.send(command)
            except CommandError as exc:
                text = f"{command.title} not applied: {one_line(str(exc), 300)}"
                screen.app.call_from_thread(screen.notify, text, severity="error", markup=False)
            else:
                screen.app.call_from_thread(screen.notify, done, markup=False)
                screen.app.call_from_thread(self.poll)

        screen.run_worker(run, thread=True, exit_on_error=False, group="review")

    def retry(self) -> None:
        rows = self._rows()
        ids = [r.id for r in rows if r.status in RETRYABLE and r.parent is None]
        if not ids:
            self.screen.notify("nothing here to retry: none failed or was stopped", markup=False)
            return

        def chosen(resume: bool | None) -> None:
            if resume is not None:
                mode = "continue" if resume else "fresh"
                self._send(Retry(tuple(ids), resume), f"retry ({mode}) queued for {_n(len(ids))}")

        self.screen.app.push_screen(RetryDialog(ids, len(rows) - len(ids)), chosen)

    def diff(self) -> None:
        table = self.table
        row = table.rows_by_id.get(table.selected_id or "")
        if row is None or row.changes is None:
            self.screen.notify("this child changed no file in a workspace of its own")
            return
        self.screen.app.push_screen(DiffScreen(row, row.changes))

    def _pending(self, verb: str) -> list[str]:
        ids = [r.id for r in self._rows() if r.changes is not None and r.changes.pending]
        if not ids:
            self.screen.notify(f"nothing here to {verb}: no changes left pending", markup=False)
        return ids

    def merge(self) -> None:
        ids = self._pending("merge")
        if not ids:
            return
        rows = self.table.rows_by_id

        def into(branch: str | None) -> None:
            if branch:
                self._send(Accept(tuple(ids), branch), f"merged {_n(len(ids))} into {branch}")

        warn = overlap_in(rows, tuple(ids))
        self.screen.app.push_screen(AcceptDialog(ids, warn), into)

    def discard(self) -> None:
        ids = self._pending("discard")
        if ids:

            def confirmed(yes: bool | None) -> None:
                if yes:
                    self._send(Discard(tuple(ids)), f"discarded {_n(len(ids))}' changes")

            self.screen.app.push_screen(DiscardDialog(ids), confirmed)
