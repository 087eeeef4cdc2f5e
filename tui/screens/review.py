"""Children that ended, worked on again from the main screen: R retries them (fresh or
continuing), D shows a child's diff, M accepts (merges) children's changes into a branch and
delete discards them. Like the other keys' (actions.py), each returns a `Decision` the main
screen carries out; the commands that take a while (git, an owner started again) are sent off
its event loop (`SendOff`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from flightdeck.engine.attached.rework import Changes, overlap_in, patch_of, said_of
from flightdeck.engine.commands import Accept, CommandError, Discard, Retry
from flightdeck.engine.model import ChildRow, ChildStatus, Snapshot
from flightdeck.engine.model.units import is_wave
from flightdeck.engine.sanitize import one_line, sanitize
from flightdeck.tui.readonly import READ_ONLY, ReadOnlyView
from flightdeck.tui.screens.decisions import Ask, Decision, Say, SendOff
from flightdeck.tui.screens.dialogs import DialogBox, targets_text
from flightdeck.tui.screens.targets import Aim
from flightdeck.tui.view import EngineView
from rich.syntax import Syntax
from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
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


def _whose(count: int) -> str:
    """`_n` as a possessive: "1 child's", "2 children's"."""
    return f"{_n(count)}'s"


class RetryDialog(ModalScreen[bool | None]):
    """Retry these children: fresh (True: no) or continuing (True); None: cancelled."""

    CSS_PATH = "dialogs.tcss"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape", "dismiss(None)", "Cancel", id="dialog.cancel", tooltip="Retry none"),
        Binding("f", "dismiss(False)", "Fresh", id="retry.fresh", tooltip="From its goal"),
        Binding("c", "dismiss(True)", "Continue", id="retry.continue", tooltip="Work on"),
    ]

    def __init__(
        self, child_ids: list[str], skipped: int, delegates: int = 0, waves: int = 0
    ) -> None:
        super().__init__()
        self.child_ids = child_ids
        self.skipped = skipped  # completed or still running
        self.delegates = delegates  # ended as a retry would take them, but delegates
        self.waves = waves  # and a schedule's waves

    def compose(self) -> ComposeResult:
        with DialogBox(classes="dialog"):
            yield Label(Text(f"Retry {_n(len(self.child_ids))}", style="bold"))
            yield Label(targets_text(self.child_ids), classes="targets")
            text = (
                "f: fresh, from its goal.  c: continue from where it stopped (its transcript "
                "as context; an agent CLI's session resumed). The earlier attempt is kept."
            )
            if self.skipped:
                text += f" {_n(self.skipped)} that completed or still run are left out."
            if self.delegates or self.waves:
                text += f" {_left_out(self.delegates, self.waves)}."
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
        with DialogBox(classes="dialog"):
            yield Label(Text(f"Merge {_whose(len(self.child_ids))} changes", style="bold"))
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
        Binding(
            "delete,backspace",  # a Mac's delete key sends backspace
            "dismiss(True)",
            "Discard",
            key_display="del",
            id="discard.confirm",
            tooltip="Drop them",
        ),
    ]

    def __init__(self, child_ids: list[str]) -> None:
        super().__init__()
        self.child_ids = child_ids

    def compose(self) -> ComposeResult:
        with DialogBox(classes="dialog"):
            yield Label(Text(f"Discard {_whose(len(self.child_ids))} changes?", style="bold"))
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
        # The arrows, as the title says: the footer showed the last key of each, `]` and `[`.
        Binding(
            "right,right_square_bracket", "file(1)", "Next file", key_display="→", id="diff.next"
        ),
        Binding(
            "left,left_square_bracket",
            "file(-1)",
            "Previous file",
            key_display="←",
            id="diff.previous",
        ),
        Binding("a", "all", "All files", id="diff.all", tooltip="Every file at once"),
    ]

    def __init__(self, row: ChildRow, changes: Changes, secrets: tuple[str, ...]) -> None:
        super().__init__()
        self.row = row
        self.changes = changes
        self.secrets = secrets  # the batch's keys (the view's): the files are the child's
        self.index: int | None = None  # the file shown; None: all of them
        self.text = ""  # the diff shown, as plain (sanitized, redacted) text

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
            text = sanitize(patch_of(self.changes, path, self.secrets))
        except CommandError as exc:  # git's words and the worktree's path: sanitized too
            text = f"no diff: {one_line(str(exc))}\n"
        self.app.call_from_thread(self._show, text)

    def _show(self, text: str) -> None:
        self.text = text
        self.query_one("#diff-head", Static).update(self._head())
        self.query_one("#diff", Static).update(
            Syntax(text, "diff", theme="ansi_dark", background_color="default")
        )
        self.query_one("#diff-body", VerticalScroll).scroll_home(animate=False)


def refusal(view: EngineView) -> str | None:
    """Why R, M and delete send nothing here (a read-only view); None: they may. (A batch that
    ended is no reason: a retry reopens it, an accept or discard is applied without an owner.)"""
    return READ_ONLY if isinstance(view, ReadOnlyView) else None


def retry(aim: Aim, refused: str | None = None) -> Decision:
    """R: the retry dialog over the targets that failed or were stopped; fresh or continuing.
    `refused` (a read-only view, `refusal`): said, and no dialog opened, as the other keys."""
    if refused:
        return (Say(refused, "warning"),)
    if why := aim.kept_none("retry"):
        return (Say(why),)
    rows = aim.rows
    ended = [i for i in aim.ids if rows[i].status in RETRYABLE]
    tasks = [i for i in ended if rows[i].parent is None]
    # A schedule's wave is no task of the batch: the owner would refuse the whole retry.
    ids = [i for i in tasks if not is_wave(rows[i], aim.own)]
    # A delegate failed as much as any child: "completed or still run" said otherwise.
    delegates, waves = len(ended) - len(tasks), len(tasks) - len(ids)
    if not ids and len(aim.ids) == 1 and (one := _nothing_to_retry(rows[aim.ids[0]])):
        return (Say(one),)  # named, as D and `flightdeck retry` do
    if not ids:
        why = _left_out(delegates, waves) if delegates or waves else "none failed or was stopped"
        return (Say(f"nothing here to retry: {why}"),)

    def chosen(resume: bool | None) -> Decision:
        if resume is None:
            return ()
        done = f"retry ({'continue' if resume else 'fresh'}) queued for {_n(len(ids))}"
        return (SendOff(Retry(tuple(ids), resume), done),)

    return (Ask(RetryDialog(ids, len(aim.ids) - len(ended), delegates, waves), chosen),)


def _nothing_to_retry(row: ChildRow) -> str | None:
    """Why one child is no retry's, in the owner's words (engine/commands.py, Retry.check);
    None for a delegate or a wave, which `_left_out` words."""
    if row.status.live:
        return f"{one_line(row.id)} has not ended ({row.status.value}): nothing to retry"
    if row.status is ChildStatus.COMPLETED:
        return f"{one_line(row.id)} completed: nothing to retry"
    return None


def _left_out(delegates: int, waves: int = 0) -> str:
    """Why delegates (and a schedule's waves) are not retried, as `flightdeck retry` says it."""
    parts = []
    if delegates:
        noun = "1 delegate is" if delegates == 1 else f"{delegates} delegates are"
        parts.append(f"{noun} left out (they run again with their parents)")
    if waves:
        noun = "1 schedule wave is" if waves == 1 else f"{waves} schedule waves are"
        parts.append(f"{noun} left out (not retried)")
    return "; ".join(parts)


def diff(row: ChildRow | None, secrets: tuple[str, ...]) -> Decision:
    """D: the selected child's diff, on a screen of its own, redacted of the batch's keys."""
    if row is not None and row.changes is None and row.status.live:  # known once it ends
        said = f"{one_line(row.id)} has not ended ({row.status.value})"
        return (Say(f"{said}: its changes are known once it has"),)
    if row is None:  # a group's header, or a filter that keeps no child
        return (Say("no child is selected: D shows the selected child's changes"),)
    if row.changes is None:
        return (Say("this child changed no file in a workspace of its own"),)
    return (Ask(DiffScreen(row, row.changes, secrets), lambda _: ()),)


def _pending(aim: Aim) -> tuple[str, ...]:
    """The targets whose changes are still pending (neither accepted nor discarded)."""
    changes = [(i, aim.rows[i].changes) for i in aim.ids]
    return tuple(i for i, c in changes if c is not None and c.pending)


@dataclass(frozen=True, slots=True)
class Decided:
    """What M or delete says once applied: the sentence `flightdeck merge` and `discard` print
    (`accepted a, b into main (now <sha>)`), of the children's changes as the snapshot read
    after it has them (an accept's commit is only known then)."""

    ids: tuple[str, ...]

    def __call__(self, snap: Snapshot) -> str:
        changes = {row.id: row.changes for row in snap.children}
        decided = {i: c for i in self.ids if (c := changes.get(i)) and not c.pending}
        if not decided:  # the view applied it, but its snapshot does not show it yet
            return f"applied to {_n(len(self.ids))}"
        return one_line(said_of(decided), 300)  # the branch is the operator's typing


def merge(aim: Aim, refused: str | None = None) -> Decision:
    """M: the targets' pending changes merged into the branch typed in the dialog."""
    if refused:
        return (Say(refused, "warning"),)
    ids = _pending(aim)
    if why := aim.kept_none("merge"):
        return (Say(why),)
    if not ids:
        return (Say("nothing here to merge: no changes left pending"),)

    def into(branch: str | None) -> Decision:
        return (SendOff(Accept(ids, branch), Decided(ids)),) if branch else ()

    return (Ask(AcceptDialog(list(ids), overlap_in(aim.rows, ids)), into),)


def discard(aim: Aim, refused: str | None = None) -> Decision:
    """Delete: the targets' pending changes dropped, once confirmed."""
    if refused:
        return (Say(refused, "warning"),)
    ids = _pending(aim)
    if why := aim.kept_none("discard"):
        return (Say(why),)
    if not ids:
        return (Say("nothing here to discard: no changes left pending"),)

    def confirmed(yes: bool | None) -> Decision:
        return (SendOff(Discard(ids), Decided(ids)),) if yes else ()

    return (Ask(DiscardDialog(list(ids)), confirmed),)
