"""The main screen: children table, transcript, meter and status; every operator key.

The screen composes the widgets, routes keys and engine facts, and owns the helpers that do
the work: updates.py (snapshots applied), actions.py (s, x, p, n on targets.py's targets),
batch.py (X, P, l and the soft budget's question), notices.py (toasts, alerts, digest).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from typing import ClassVar

from flightdeck.engine import model
from flightdeck.engine.api import TuiSettings
from flightdeck.engine.commands import StopAll
from flightdeck.engine.model import BatchStatus, EngineEvent, Snapshot
from flightdeck.tui.lastlooked import LastLooked
from flightdeck.tui.messages import (
    BatchFinished,
    ChildFinished,
    GroupFinished,
    SteerSettled,
    message_for,
)
from flightdeck.tui.screens import targets
from flightdeck.tui.screens.actions import TargetActions
from flightdeck.tui.screens.batch import BatchControls
from flightdeck.tui.screens.dialogs import QuitChoice, QuitDialog
from flightdeck.tui.screens.help import HelpScreen
from flightdeck.tui.screens.keys import MAIN_BINDINGS, palette_commands
from flightdeck.tui.screens.notices import Notices
from flightdeck.tui.screens.review import ReviewActions
from flightdeck.tui.screens.updates import Updates
from flightdeck.tui.view import EngineView
from flightdeck.tui.widgets import ChildrenTable, CostMeter, StatusBar, TranscriptView
from flightdeck.tui.widgets.banner import Banner
from flightdeck.tui.widgets.detail import ChildDetail
from flightdeck.tui.widgets.digest import DigestPanel
from flightdeck.tui.widgets.filter import FilterInput
from flightdeck.tui.widgets.routes import RoutePanel
from flightdeck.tui.widgets.rows import ATTENTION, next_grouping
from textual import events
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.reactive import var
from textual.screen import Screen
from textual.widgets import Footer

_ROW_MOVES = frozenset({"row_down", "row_up", "first_row", "last_row"})


@dataclass(frozen=True)
class UiOptions:
    """What tests, benchmarks and screenshots tune: the clock, poll intervals, cursor blink;
    and the `[tui]` settings, with where the last-looked mark is kept (None: nowhere)."""

    clock: Callable[[], float] = time.time
    poll_s: float = 0.3  # how often the table and meter read a fresh snapshot
    transcript_poll_s: float = 0.25
    cursor_blink: bool = True
    sort_hold_s: float = 3.0  # rows keep their places this long after a key press
    tui: TuiSettings = field(default_factory=TuiSettings)
    looked: LastLooked | None = None


class MainScreen(Screen[None]):
    """Supervise a batch: watch every child, steer or stop any of them."""

    CSS_PATH = "main.tcss"
    AUTO_FOCUS = "#children"
    BINDINGS: ClassVar[list[BindingType]] = MAIN_BINDINGS

    following: var[bool] = var(False)
    """Whether the cursor jumps to the most recently active child on every poll."""
    frozen: var[bool] = var(False)
    """Whether live updates are paused (the engine keeps running)."""

    def __init__(self, view: EngineView, options: UiOptions | None = None) -> None:
        super().__init__()
        self.view = view
        self.options = options or UiOptions()
        self.snapshot: Snapshot | None = None
        self.quit_requested = False
        self._unsubscribe: Callable[[], None] | None = None
        self.updates = Updates(self)
        self.acts = TargetActions(self)
        self.review = ReviewActions(self, view, self.poll)
        self.batch_controls = BatchControls(self)
        self.notices = Notices(self)

    def compose(self) -> ComposeResult:
        yield Banner(id="banner")
        yield DigestPanel(id="digest")
        yield CostMeter(id="meter")
        yield RoutePanel(id="routes")
        table = ChildrenTable(id="children", hold_s=self.options.sort_hold_s)
        yield table
        yield ChildDetail(id="detail")
        yield TranscriptView(id="transcript", poll_s=self.options.transcript_poll_s)
        filter_input = FilterInput(
            placeholder="filter: words status:failed route:sim cost>0.50 idle>5m is:looping"
        )
        filter_input.id = "filter"
        filter_input.cursor_blink = self.options.cursor_blink
        yield filter_input
        yield StatusBar(id="status")
        yield Footer()

    @property
    def table(self) -> ChildrenTable:
        return self.query_one("#children", ChildrenTable)

    @property
    def transcript(self) -> TranscriptView:
        return self.query_one("#transcript", TranscriptView)

    def on_mount(self) -> None:
        self.query_one("#filter").display = False
        self.query_one("#routes").display = False  # until `r`: it costs a pass over the rows
        self._unsubscribe = self.view.subscribe(self._forward)
        self.poll()
        self.set_interval(self.options.poll_s, self.poll)

    def on_unmount(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
        self.notices.attention.closed(self.snapshot)

    def _forward(self, event: EngineEvent) -> None:
        """Engine thread: hand the facts this screen acts on to the UI thread.

        A start, or a finish that needs no notice, is left to the next poll, which shows it
        anyway: every message costs the UI thread a dispatch, and a big batch sends thousands.
        """
        if isinstance(event, model.ChildStarted) or (
            isinstance(event, model.ChildFinished) and event.row.status not in ATTENTION
        ):
            return
        # post_message is thread-safe. RuntimeError: the app's loop already closed, nobody is
        # left to tell.
        with suppress(RuntimeError):
            self.post_message(message_for(event))

    # --- live updates (updates.py) ------------------------------------------------------------

    def poll(self) -> None:
        """Read a fresh snapshot and apply it by difference."""
        if self.frozen:
            return
        self.apply(self.view.snapshot())

    def apply(self, snap: Snapshot) -> None:
        self.updates.apply(snap)

    def noticed_input(self) -> None:
        """A key or a click anywhere in the app: the operator is looking."""
        self.notices.attention.key(self.snapshot)

    # --- engine facts (notices.py) ------------------------------------------------------------

    def on_child_finished(self, message: ChildFinished) -> None:
        """A child that needs attention (`_forward` posts no other finish)."""
        self.notices.child_finished(message.row)

    def on_group_finished(self, message: GroupFinished) -> None:
        self.notices.group_finished(message.unit)

    def on_steer_settled(self, message: SteerSettled) -> None:
        if self.acts.summaries.counts(message.receipt):
            return  # one of a steer to everything matching: summed up when all have settled
        self.notices.steer_settled(message.receipt)

    def on_batch_finished(self, message: BatchFinished) -> None:
        self.notices.batch_finished(message.status.value)
        self.poll()

    # --- selection ----------------------------------------------------------------------------

    def on_children_table_highlighted(self, event: ChildrenTable.Highlighted) -> None:
        child_id = event.child_id
        path = self.view.transcript_path(child_id) if child_id is not None else None
        self.transcript.show(child_id, path)
        self.updates.detail()
        self.updates.bindings()

    def on_children_table_resorted(self, _: ChildrenTable.Resorted) -> None:
        self.updates.status()

    def on_children_table_navigated(self, _: ChildrenTable.Navigated) -> None:
        self.following = False
        self.updates.status()

    def matching_query(self) -> str | None:
        """The filter's query when s and x act on every child it keeps (targets.py)."""
        return targets.matching_query(self.table)

    def targets(self) -> list[str]:
        """The children s, x and p act on (targets.py)."""
        return targets.targets(self.table)

    def live_targets(self) -> list[str]:
        return targets.live_targets(self.table)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not self.is_mounted:
            return True
        table = self.table
        if action in ("steer", "stop", "pause"):
            if targets.live_targets(table):
                return True
            # Shown disabled over finished children: on_key says why the key does nothing.
            return None if targets.targets(table) else False
        if action == "nudge":  # shown only over a child flagged as looping
            return bool(targets.looping_targets(table))
        if action == "stop_all":
            return any(row.status.live for row in table.rows_by_id.values())
        if action == "pause_admission":
            snap = self.snapshot
            return snap is None or snap.status is BatchStatus.RUNNING
        if action in ("tag", "tag_group"):
            return bool(table.shown) or table.selected_header is not None
        if action == "tag_visible":
            return bool(table.shown)
        if action == "fold":  # enter elsewhere (the filter box, the transcript) is theirs
            return self.focused is table and table.group_under_cursor() is not None
        if action in _ROW_MOVES:
            return self.focused is table
        return True

    def on_key(self, event: events.Key) -> None:
        """Steer or stop pressed over children that have all ended: say why nothing happens.
        Escape dismisses the digest while it shows."""
        # Before the bindings run (the key bubbles up first); a disabled binding runs nothing.
        table = self.table
        if (
            event.key == "n"
            and self.focused is table
            and not targets.looping_targets(table)
            and targets.targets(table)
        ):  # n is hidden here: say why it does nothing
            self.notify("no child here is flagged as looping: nothing to nudge", markup=False)
        if event.key == "escape" and self.notices.digest_shown:
            event.stop()
            self.notices.dismiss_digest()
            return
        active = self.active_bindings.get(event.key)
        acts = ("steer", "stop", "pause")
        if active is None or active.enabled or active.binding.action not in acts:
            return
        if targets.targets(table):
            text = targets.nothing_to(table, active.binding.action)
            self.notify(text, severity="warning", markup=False)

    # --- keys on the targets (actions.py) and on the batch (batch.py) -------------------------

    def action_steer(self) -> None:
        self.acts.steer()

    def action_stop(self) -> None:
        self.acts.stop()

    def action_nudge(self) -> None:
        self.acts.nudge()

    def action_pause(self) -> None:
        self.acts.pause()

    def action_retry(self) -> None:
        self.review.retry()

    def action_diff(self) -> None:
        self.review.diff()

    def action_merge(self) -> None:
        self.review.merge()

    def action_discard(self) -> None:
        self.review.discard()

    def action_pause_admission(self) -> None:
        self.batch_controls.pause_admission()

    def action_stop_all(self) -> None:
        self.batch_controls.stop_all()

    def action_limits(self) -> None:
        self.batch_controls.limits()

    # --- tags (targets.py) --------------------------------------------------------------------

    def action_tag(self) -> None:
        if targets.tag(self.table):
            self._after_tags()

    def action_tag_visible(self) -> None:
        targets.tag_visible(self.table)
        self._after_tags()

    def action_tag_group(self) -> None:
        """Tag the selected child's whole group (a completion unit): s and x then act on it."""
        done = targets.tag_group(self.table)
        if isinstance(done, str):
            self.notify(done, markup=False)
        elif done:
            self._after_tags()

    def _after_tags(self) -> None:
        self.updates.detail()  # over a header, it counts the tagged members
        self.updates.status()
        self.updates.bindings()

    # --- the table's view ---------------------------------------------------------------------

    def action_row_down(self) -> None:
        self.table.action_cursor_down()

    def action_row_up(self) -> None:
        self.table.action_cursor_up()

    def action_first_row(self) -> None:
        self.table.action_first_row()

    def action_last_row(self) -> None:
        self.table.action_last_row()

    def action_fold(self) -> None:
        """Grouped: fold the group under the cursor to its header, or unfold it."""
        table = self.table
        header = table.group_under_cursor()
        if header is None:
            return
        with self.app.batch_update():
            table.toggle_fold(header)
            self.updates.detail()
            self.updates.status()
        self.updates.bindings()

    def action_sort(self) -> None:
        self.table.set_order(self.table.order.next())
        self.updates.status()

    def action_group_by(self) -> None:
        """Group the table by the next of: group, status, route, tool, error, nothing."""
        table = self.table
        with self.app.batch_update():
            table.set_grouping(next_grouping(table.grouping))
            self.updates.detail()
            self.updates.status()
        self.updates.bindings()

    def action_follow(self) -> None:
        self.following = not self.following
        if self.following:
            self.updates.follow()
        self.updates.status()

    def action_freeze(self) -> None:
        self.frozen = not self.frozen
        self.transcript.frozen = self.frozen
        self.updates.status()
        if not self.frozen:
            self.poll()

    def action_routes(self) -> None:
        routes = self.query_one("#routes", RoutePanel)
        routes.display = not routes.display
        if routes.display and self.snapshot is not None:
            routes.show(self.snapshot)

    def action_digest(self) -> None:
        """Show what happened since the operator last looked; dismiss it if it shows."""
        self.notices.toggle_digest()

    def action_help(self) -> None:
        keys = [
            (self.app.get_key_display(b), b.description, b.tooltip) for b in self._all_bindings()
        ]
        self.app.push_screen(HelpScreen(keys))

    def _all_bindings(self) -> list[Binding]:
        bindings = [b for b in self.BINDINGS if isinstance(b, Binding)]
        palette = Binding("ctrl+p", "command_palette", "Commands", tooltip="Every command by name")
        return [*bindings, palette]

    def action_quit(self) -> None:
        """Quit now if nothing runs; otherwise ask to stop all first."""
        if self.quit_requested:
            return
        snap = self.view.snapshot()
        live = sum(1 for row in snap.children if row.status.live)
        if not live or self.view.read_only:  # nothing this UI could stop: just go
            self.app.exit(result=False)
            return

        def answer(choice: QuitChoice | None) -> None:
            self.quit_requested = False
            if choice is QuitChoice.STOP:
                self.view.send(StopAll())
                self.app.exit(result=True)
            elif choice is QuitChoice.DETACH:  # the owner process runs the batch on
                self.app.exit(result=False)

        self.quit_requested = True
        can_detach = self.view.can_detach and not self.view.read_only
        self.app.push_screen(QuitDialog(live, detach=can_detach), answer)

    # --- filter -----------------------------------------------------------------------------

    def action_filter(self) -> None:
        self.query_one("#filter", FilterInput).open(self.table.row_filter)

    def on_filter_input_applied(self, message: FilterInput.Applied) -> None:
        table = self.table
        if message.row_filter == table.row_filter:
            return
        table.row_filter = message.row_filter
        with self.app.batch_update():
            table.rebuild()
            self.updates.status()
        self.updates.bindings()

    def on_filter_input_rejected(self, message: FilterInput.Rejected) -> None:
        self.notify(message.reason, severity="error", markup=False)

    def on_filter_input_closed(self, _: FilterInput.Closed) -> None:
        self.table.focus()

    # --- command palette --------------------------------------------------------------------

    def commands(self) -> Iterator[SystemCommand]:
        """Every screen action that applies right now, as a palette command."""
        return palette_commands(self)
