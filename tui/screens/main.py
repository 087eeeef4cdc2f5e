"""The main screen: children table, transcript, meter and status; every operator key."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass
from functools import partial
from typing import ClassVar

from flightdeck.engine import model
from flightdeck.engine.model import BatchStatus, ChildStatus, EngineEvent, Snapshot
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.messages import BatchFinished, ChildFinished, SteerSettled, message_for
from flightdeck.tui.screens.dialogs import ConfirmStopDialog, QuitDialog, SteerDialog, SteerRequest
from flightdeck.tui.screens.help import HelpScreen
from flightdeck.tui.view import EngineView
from flightdeck.tui.widgets import ChildrenTable, CostMeter, StatusBar, StatusLine, TranscriptView
from flightdeck.tui.widgets.filter import FilterInput
from flightdeck.tui.widgets.rows import ATTENTION, RowFilter, parse_filter
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.reactive import var
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import DataTable, Footer, Input

# Command palette titles, "noun: verb", keyed by action.
PALETTE = {
    "steer": "child: steer",
    "stop": "child: stop",
    "stop_all": "batch: stop all",
    "tag": "child: tag / untag",
    "tag_visible": "view: tag all visible",
    "filter": "view: filter",
    "sort": "view: next sort order",
    "follow": "view: follow most active",
    "freeze": "view: freeze / unfreeze",
    "help": "app: help",
    "quit": "app: quit",
}
_NOTICES_SHOWN = 3  # more engine notices than this in one poll are summed up in one toast
_FILTER_DEBOUNCE_S = 0.15


@dataclass(frozen=True)
class UiOptions:
    """What tests, benchmarks and screenshots tune: the clock, poll intervals, cursor blink."""

    clock: Callable[[], float] = time.time
    poll_s: float = 0.3  # how often the table and meter read a fresh snapshot
    transcript_poll_s: float = 0.25
    cursor_blink: bool = True


class MainScreen(Screen[None]):
    """Supervise a batch: watch every child, steer or stop any of them."""

    CSS_PATH = "main.tcss"
    AUTO_FOCUS = "#children"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "s",
            "steer",
            "Steer",
            id="child.steer",
            tooltip="Send a message to the selected or tagged children",
        ),
        Binding(
            "x",
            "stop",
            "Stop",
            id="child.stop",
            tooltip="Stop the selected or tagged children (confirm, or press x twice)",
        ),
        Binding(
            "X",
            "stop_all",
            "Stop all",
            id="batch.stop-all",
            tooltip="Stop every running and queued child (confirm)",
        ),
        Binding(
            "space",
            "tag",
            "Tag",
            show=False,
            id="child.tag",
            tooltip="Tag or untag the selected child and move down",
        ),
        Binding(
            "t",
            "tag_visible",
            "Tag visible",
            show=False,
            id="view.tag-visible",
            tooltip="Tag every visible child; again to untag them",
        ),
        Binding(
            "slash",
            "filter",
            "Filter",
            id="view.filter",
            tooltip="Filter rows: words, status:failed, route:NAME, is:tagged",
        ),
        Binding(
            "o",
            "sort",
            "Sort",
            show=False,
            id="view.sort",
            tooltip="Cycle the order: attention, recent, cost, tokens, id, batch",
        ),
        Binding(
            "f",
            "follow",
            "Follow",
            show=False,
            id="view.follow",
            tooltip="Keep the cursor on the most recently active child",
        ),
        Binding(
            "z",
            "freeze",
            "Freeze",
            show=False,
            id="view.freeze",
            tooltip="Pause or resume live updates",
        ),
        Binding(
            "question_mark",
            "help",
            "Help",
            id="app.help",
            tooltip="Every key, the filter language and the status glyphs",
        ),
        Binding(
            "q",
            "quit",
            "Quit",
            id="app.quit",
            tooltip="Quit; asks first while children still run",
        ),
    ]

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
        self._notices: list[tuple[str, str]] = []  # (text, severity) since the last poll
        self._unsubscribe: Callable[[], None] | None = None
        self._bindings_state: tuple[bool, ...] = ()
        self._filter_before = RowFilter()
        self._filter_timer: Timer | None = None

    def compose(self) -> ComposeResult:
        yield CostMeter(id="meter")
        yield ChildrenTable(id="children")
        yield TranscriptView(id="transcript", poll_s=self.options.transcript_poll_s)
        filter_input = FilterInput(placeholder="filter: words status:failed route:sim is:tagged")
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
        self._unsubscribe = self.view.subscribe(self._forward)
        self.poll()
        self.set_interval(self.options.poll_s, self.poll)

    def on_unmount(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()

    def _forward(self, event: EngineEvent) -> None:
        """Engine thread: hand the facts this screen acts on to the UI thread.

        A start, or a finish that needs no notice, is left to the next poll, which shows it
        anyway: every message costs the UI thread a dispatch, and two per child slowed a batch
        of 2,000 instant children under the TUI from 1,100 to 730 a second.
        """
        if isinstance(event, model.ChildStarted) or (
            isinstance(event, model.ChildFinished) and event.row.status not in ATTENTION
        ):
            return
        # post_message is thread-safe. RuntimeError: the app's loop already closed, nobody is
        # left to tell.
        with suppress(RuntimeError):
            self.post_message(message_for(event))

    # --- live updates -----------------------------------------------------------------------

    def poll(self) -> None:
        """Read a fresh snapshot and apply it by difference."""
        if self.frozen:
            return
        self.apply(self.view.snapshot())

    def apply(self, snap: Snapshot) -> None:
        self.snapshot = snap
        now = self.options.clock()
        table = self.table
        with self.app.batch_update():
            table.apply(snap.children, now)
            if self.following:
                self._follow()
            self.query_one("#meter", CostMeter).show(snap, now)
            self._show_status()
        self._flush_notices()
        self._sync_bindings()

    def _follow(self) -> None:
        rows = self.table.rows_by_id
        running = [rows[i] for i in self.table.shown if rows[i].status is ChildStatus.RUNNING]
        if running:
            newest = max(running, key=lambda r: r.activity.last_activity_ts or 0.0)
            self.table.pinned_top = False
            self.table.select(newest.id)

    def _show_status(self) -> None:
        snap = self.snapshot
        table = self.table
        self.query_one("#status", StatusBar).show(
            StatusLine(
                batch_id=snap.batch_id if snap else "",
                batch_status=snap.status if snap else BatchStatus.RUNNING,
                order=table.order.value,
                query=table.row_filter.query,
                shown=len(table.shown),
                total=len(table.rows_by_id),
                tagged=len(table.tagged),
                following=self.following,
                frozen=self.frozen,
            )
        )

    def _flush_notices(self) -> None:
        notices, self._notices = self._notices, []
        if len(notices) > _NOTICES_SHOWN:
            warnings = sum(1 for _, severity in notices if severity == "warning")
            self.notify(f"{len(notices)} updates ({warnings} failures)", markup=False)
            return
        for text, severity in notices:
            self.notify(text, severity=severity, markup=False)  # type: ignore[arg-type]

    def _sync_bindings(self) -> None:
        """check_action depends on the rows; refresh the footer only when the answer changed."""
        state = tuple(bool(self.check_action(a, ())) for a in ("steer", "stop", "stop_all", "tag"))
        if state != self._bindings_state:
            self._bindings_state = state
            self.refresh_bindings()

    # --- engine facts -----------------------------------------------------------------------

    def on_child_finished(self, message: ChildFinished) -> None:
        """A child that needs attention (`_forward` posts no other finish)."""
        row = message.row
        detail = f": {one_line(row.error, 80)}" if row.error else ""
        self._notices.append((f"{one_line(row.id)} {row.status.value}{detail}", "warning"))

    def on_steer_settled(self, message: SteerSettled) -> None:
        r = message.receipt
        severity = "information" if r.state.value == "delivered" else "warning"
        self._notices.append((f"steer {r.state.value}: {one_line(r.child_id)}", severity))

    def on_batch_finished(self, message: BatchFinished) -> None:
        self._notices.append((f"batch finished: {message.status.value}", "information"))
        self.poll()

    # --- selection --------------------------------------------------------------------------

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        child_id = event.row_key.value
        path = self.view.transcript_path(child_id) if child_id is not None else None
        self.transcript.show(child_id, path)
        self._sync_bindings()

    def on_children_table_navigated(self, _: ChildrenTable.Navigated) -> None:
        self.following = False

    def targets(self) -> list[str]:
        """Tagged children if any, else the one under the cursor."""
        table = self.table
        if table.tagged:
            rows = table.rows_by_id
            return sorted((i for i in table.tagged if i in rows), key=lambda i: rows[i].seq)
        selected = table.selected_id
        return [selected] if selected is not None else []

    def live_targets(self) -> list[str]:
        rows = self.table.rows_by_id
        return [i for i in self.targets() if rows[i].status.live]

    def _any_live(self) -> bool:
        return any(row.status.live for row in self.table.rows_by_id.values())

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not self.is_mounted:
            return True
        if action in ("steer", "stop"):
            return bool(self.live_targets())
        if action == "stop_all":
            return self._any_live()
        if action in ("tag", "tag_visible"):
            return bool(self.table.shown)
        return True

    # --- actions ----------------------------------------------------------------------------

    def action_steer(self) -> None:
        ids = self.live_targets()
        if not ids:
            return

        def send(request: SteerRequest | None) -> None:
            if request is None:
                return
            self.view.steer(ids, request.message, request.now)
            when = "now" if request.now else "at next turn"
            self.notify(f"steer queued for {len(ids)} ({when})", markup=False)

        self.app.push_screen(SteerDialog(ids, cursor_blink=self.options.cursor_blink), send)

    def action_stop(self) -> None:
        ids = self.live_targets()
        if not ids:
            return

        def stop(confirmed: bool | None) -> None:
            if confirmed:
                self.view.stop(ids)
                self.table.set_tagged(ids, False)
                self.notify(f"stop requested for {len(ids)}", markup=False)
                self.poll()

        self.app.push_screen(ConfirmStopDialog(ids), stop)

    def action_stop_all(self) -> None:
        rows = self.table.rows_by_id
        ids = sorted((i for i, r in rows.items() if r.status.live), key=lambda i: rows[i].seq)
        if not ids:
            return

        def stop_all(confirmed: bool | None) -> None:
            if confirmed:
                self.view.stop_all()
                self.notify(f"stop requested for all {len(ids)}", markup=False)
                self.poll()

        self.app.push_screen(ConfirmStopDialog(ids, everything=True), stop_all)

    def action_tag(self) -> None:
        table = self.table
        selected = table.selected_id
        if selected is None:
            return
        table.set_tagged([selected], selected not in table.tagged)
        if table.row_filter.tagged_only:
            table.rebuild()
        else:
            table.action_cursor_down()
        self._after_tags()

    def action_tag_visible(self) -> None:
        table = self.table
        shown = list(table.shown)
        every = all(i in table.tagged for i in shown)
        table.set_tagged(shown, not every)
        if table.row_filter.tagged_only:
            table.rebuild()
        self._after_tags()

    def _after_tags(self) -> None:
        self._show_status()
        self._sync_bindings()

    def action_sort(self) -> None:
        self.table.set_order(self.table.order.next())
        self._show_status()

    def action_follow(self) -> None:
        self.following = not self.following
        if self.following:
            self._follow()
        self._show_status()

    def action_freeze(self) -> None:
        self.frozen = not self.frozen
        self.transcript.frozen = self.frozen
        self._show_status()
        if not self.frozen:
            self.poll()

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
        if not live:
            self.app.exit(result=False)
            return

        def answer(stop: bool | None) -> None:
            self.quit_requested = False
            if stop:
                self.view.stop_all()
                self.app.exit(result=True)

        self.quit_requested = True
        self.app.push_screen(QuitDialog(live), answer)

    # --- filter -----------------------------------------------------------------------------

    def action_filter(self) -> None:
        box = self.query_one("#filter", FilterInput)
        self._filter_before = self.table.row_filter
        box.value = self.table.row_filter.query
        box.display = True
        box.focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        if event.input.id != "filter":
            return
        if self._filter_timer is not None:
            self._filter_timer.stop()
        # Rebuilding thousands of rows per keystroke is wasted work: wait for a pause.
        apply = partial(self._set_filter, event.value, submitted=False)
        self._filter_timer = self.set_timer(_FILTER_DEBOUNCE_S, apply)

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id != "filter":
            return
        if self._filter_timer is not None:
            self._filter_timer.stop()
        if self._set_filter(event.value, submitted=True):
            self._close_filter()
        else:
            # Live filtering may have shown a valid prefix ("status"); a bad filter submitted
            # leaves the one in force before the edit.
            self._use_filter(self._filter_before)

    def on_filter_input_cancelled(self, _: FilterInput.Cancelled) -> None:
        if self._filter_timer is not None:
            self._filter_timer.stop()
        self._use_filter(self._filter_before)
        self._close_filter()

    def _set_filter(self, query: str, *, submitted: bool) -> bool:
        box = self.query_one("#filter", FilterInput)
        try:
            row_filter = parse_filter(query)
        except ValueError as exc:
            box.add_class("-invalid")
            # While typing, a pause often falls on an unfinished query ("status:f"): the box
            # turns red; why is said once the query is submitted.
            if submitted:
                self.notify(str(exc), severity="error", markup=False)
            return False
        box.remove_class("-invalid")
        self._use_filter(row_filter)
        return True

    def _use_filter(self, row_filter: RowFilter) -> None:
        table = self.table
        if row_filter == table.row_filter:
            return
        table.row_filter = row_filter
        with self.app.batch_update():
            table.rebuild()
            self._show_status()
        self._sync_bindings()

    def _close_filter(self) -> None:
        self.query_one("#filter").display = False
        self.table.focus()

    # --- command palette --------------------------------------------------------------------

    def commands(self) -> Iterator[SystemCommand]:
        """Every screen action that applies right now, as a palette command."""
        for binding in self.BINDINGS:
            if not isinstance(binding, Binding) or binding.action not in PALETTE:
                continue
            if self.check_action(binding.action, ()) is False:
                continue
            yield SystemCommand(
                PALETTE[binding.action],
                binding.tooltip,
                partial(self.run_action, binding.action),
            )
