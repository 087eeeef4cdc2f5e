"""The main screen: children table, transcript, meter and status; every operator key."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from dataclasses import dataclass, field
from typing import ClassVar

from flightdeck.engine import model
from flightdeck.engine.inputs.settings import TuiSettings
from flightdeck.engine.inputs.settings.loops import fill
from flightdeck.engine.limits import describe
from flightdeck.engine.model import (
    OPERATOR_HOLD,
    BatchStatus,
    ChildStatus,
    EngineEvent,
    Snapshot,
    SteerState,
)
from flightdeck.engine.sanitize import one_line
from flightdeck.tui import alerts
from flightdeck.tui.alerts import AlertBatcher, Alerts, AlertWatch
from flightdeck.tui.attention import Attention
from flightdeck.tui.lastlooked import LastLooked
from flightdeck.tui.messages import (
    BatchFinished,
    ChildFinished,
    GroupFinished,
    SteerSettled,
    message_for,
)
from flightdeck.tui.output import completion_text
from flightdeck.tui.screens.dialogs import (
    ConfirmPauseDialog,
    ConfirmStopDialog,
    QuitChoice,
    QuitDialog,
    SteerDialog,
    SteerRequest,
)
from flightdeck.tui.screens.help import HelpScreen
from flightdeck.tui.screens.keys import MAIN_BINDINGS, palette_commands
from flightdeck.tui.screens.limits import LimitsDialog, SoftBudgetAnswer, SoftBudgetDialog
from flightdeck.tui.view import EngineView
from flightdeck.tui.widgets import ChildrenTable, CostMeter, StatusBar, StatusLine, TranscriptView
from flightdeck.tui.widgets.banner import Banner
from flightdeck.tui.widgets.children import GroupHeader
from flightdeck.tui.widgets.detail import ChildDetail, group_detail_text
from flightdeck.tui.widgets.digest import DigestPanel
from flightdeck.tui.widgets.filter import FilterInput
from flightdeck.tui.widgets.routes import RoutePanel
from flightdeck.tui.widgets.rows import ATTENTION, GroupBy, next_grouping
from textual import events
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding, BindingType
from textual.notifications import SeverityLevel
from textual.reactive import var
from textual.screen import Screen
from textual.widgets import Footer

_NOTICES_SHOWN = 3  # more engine notices than this in one poll are summed up in one toast
_ROW_MOVES = frozenset({"row_down", "row_up", "first_row", "last_row"})
# How a finished child ended, after its id; other statuses read "has <status>".
_ENDED = {ChildStatus.STOPPED: "was stopped", ChildStatus.UNKNOWN: "ended (status unknown)"}


@dataclass(frozen=True, slots=True)
class _BulkStop:
    """A stop sent to every child matching a filter: the ones sent, and how many had ended."""

    ids: tuple[str, ...]
    ended: int


@dataclass(frozen=True, slots=True)
class _BulkSteer:
    """A steer sent to every child matching a filter: the receipts each child had before it
    (the new one is the one not among them), and how many had ended."""

    before: dict[str, frozenset[int]]
    ended: int


@dataclass(frozen=True, slots=True)
class _BulkPause:
    """A pause (or continue) sent to every child matching a filter: the ones sent, and how
    many had ended."""

    ids: tuple[str, ...]
    ended: int
    resume: bool


def _had_ended(n: int) -> str:
    """`, 2 had already ended` (nothing when none had)."""
    return f", {n} had already ended" if n else ""


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
        self._notices: list[tuple[str, SeverityLevel]] = []  # (text, severity) since the last poll
        self._unsubscribe: Callable[[], None] | None = None
        self._bindings_state: tuple[bool | None, ...] = ()
        self._stops: list[_BulkStop] = []  # stops of everything matching, not all landed yet
        self._steers: list[_BulkSteer] = []  # steers of everything matching, not all settled
        self._pauses: list[_BulkPause] = []  # pauses of everything matching, not all taken
        self._summed: set[int] = set()  # receipts a steer's summary has counted
        self.attention = Attention(self.options.tui, self.options.looked, self.options.clock)
        self._alert_watch = AlertWatch()
        self._alerts = AlertBatcher(self.options.tui.notify_every_s)
        self._soft_held: str | None = None  # the soft budget's hold last seen (asked once)

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
            placeholder="filter: words status:failed route:sim cost>0.50 idle>5m is:tagged"
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
        self.attention.closed(self.snapshot)

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

    # --- live updates -----------------------------------------------------------------------

    def poll(self) -> None:
        """Read a fresh snapshot and apply it by difference."""
        if self.frozen:
            return
        self.apply(self.view.snapshot())

    def apply(self, snap: Snapshot) -> None:
        first = self.snapshot is None
        self.snapshot = snap
        now = self.options.clock()
        table = self.table
        with self.app.batch_update():
            table.apply(snap.children, now)
            if self.following:
                self._follow()
            self.query_one("#meter", CostMeter).show(snap, now)
            routes = self.query_one("#routes", RoutePanel)
            if routes.display:
                routes.show(snap)
            held = f"admission held: {snap.held}" if snap.held else None
            self.query_one("#banner", Banner).show(snap.problem or held)
            found = self.attention.opened(snap) if first else self.attention.polled(snap)
            self.query_one("#digest", DigestPanel).show(found)
            self._show_detail()
            self._show_status()
        self._settle_stops()
        self._settle_steers()
        self._ask_soft_budget(snap)
        self._settle_pauses()
        self._flush_notices()
        self._alerts.add(self._alert_watch.observe(snap), now)
        due = self._alerts.due(now)
        if due is not None:
            self._alert(snap.batch_id, due)
        self._sync_bindings()

    def _alert(self, batch_id: str, due: Alerts) -> None:
        """Ring, and (opted in) raise a desktop notification: counts only, batched."""
        if self.options.tui.bell:
            self.app.bell()
        sequence = alerts.notification(self.options.tui.desktop, batch_id, due)
        if sequence is not None:
            alerts.write_to_terminal(self.app, sequence)

    def noticed_input(self) -> None:
        """A key or a click anywhere in the app: the operator is looking."""
        self.attention.key(self.snapshot)

    def _follow(self) -> None:
        rows = self.table.rows_by_id
        running = [rows[i] for i in self.table.shown if rows[i].status is ChildStatus.RUNNING]
        if running:
            newest = max(running, key=lambda r: r.activity.last_activity_ts or 0.0)
            self.table.pinned_top = False
            self.table.select(newest.id)

    def _show_detail(self) -> None:
        table = self.table
        header = table.selected_header
        if header is not None:  # a header: the group's summary, never a member's detail
            rows = table.rows_by_id
            live = sum(1 for i in table.group_members(header) if rows[i].status.live)
            text = group_detail_text(table.header_text(header), live, header.by.value)
            self.query_one("#detail", ChildDetail).show_text(text)
            return
        selected = table.selected_id
        row = table.rows_by_id.get(selected) if selected is not None else None
        outlier = None
        kind = table.medians.outlier(row) if row is not None else None
        if row is not None and kind is not None:
            outlier = f"{kind} {table.medians.ratio(row, kind):.1f}× the batch median"
        self.query_one("#detail", ChildDetail).show(row, self.options.clock(), outlier)

    def _show_status(self) -> None:
        snap = self.snapshot
        table = self.table
        self.query_one("#status", StatusBar).show(
            StatusLine(
                batch_id=snap.batch_id if snap else "",
                batch_status=snap.status if snap else BatchStatus.RUNNING,
                order=table.order.value,
                grouping=table.grouping.value if table.grouping is not None else None,
                query=table.row_filter.query,
                shown=len(table.shown),
                total=len(table.rows_by_id),
                tagged=len(table.tagged),
                following=self.following,
                frozen=self.frozen,
                resort_pending=table.resort_pending,
                paused=snap.totals.paused if snap else 0,
                held=snap.held if snap else None,
            )
        )

    def _flush_notices(self) -> None:
        notices, self._notices = self._notices, []
        if len(notices) > _NOTICES_SHOWN:
            warnings = sum(1 for _, severity in notices if severity == "warning")
            self.notify(f"{len(notices)} updates ({warnings} failures)", markup=False)
            return
        for text, severity in notices:
            self.notify(text, severity=severity, markup=False)

    def _sync_bindings(self) -> None:
        """check_action depends on the rows; refresh the footer only when the answer changed."""
        actions = ("steer", "stop", "nudge", "stop_all", "pause", "pause_admission", "tag", "fold")
        state = tuple(self.check_action(a, ()) for a in actions)
        if state != self._bindings_state:
            self._bindings_state = state
            self.refresh_bindings()

    # --- engine facts -----------------------------------------------------------------------

    def on_child_finished(self, message: ChildFinished) -> None:
        """A child that needs attention (`_forward` posts no other finish)."""
        row = message.row
        detail = f": {one_line(row.error, 80)}" if row.error else ""
        self._notices.append((f"{one_line(row.id)} {row.status.value}{detail}", "warning"))

    def on_group_finished(self, message: GroupFinished) -> None:
        unit = message.unit
        severity: SeverityLevel = "information" if unit.status.value == "completed" else "warning"
        self._notices.append((completion_text(unit), severity))

    def on_steer_settled(self, message: SteerSettled) -> None:
        r = message.receipt
        if r.id in self._summed or any(r.child_id in bulk.before for bulk in self._steers):
            return  # one of a steer to everything matching: summed up when all have settled
        severity: SeverityLevel = "information" if r.state.value == "delivered" else "warning"
        self._notices.append((f"steer {r.state.value}: {one_line(r.child_id)}", severity))

    def on_batch_finished(self, message: BatchFinished) -> None:
        self._notices.append((f"batch finished: {message.status.value}", "information"))
        self.poll()

    # --- selection --------------------------------------------------------------------------

    def on_children_table_highlighted(self, event: ChildrenTable.Highlighted) -> None:
        child_id = event.child_id
        path = self.view.transcript_path(child_id) if child_id is not None else None
        self.transcript.show(child_id, path)
        self._show_detail()
        self._sync_bindings()

    def on_children_table_resorted(self, _: ChildrenTable.Resorted) -> None:
        self._show_status()

    def on_children_table_navigated(self, _: ChildrenTable.Navigated) -> None:
        self.following = False
        self._show_status()

    def matching_query(self) -> str | None:
        """The filter's query when s and x act on every child it keeps: a filter is on, nothing
        is tagged and the cursor is not on a group's header. None otherwise."""
        table = self.table
        if table.tagged or table.selected_header is not None or not table.row_filter.active:
            return None
        return table.row_filter.query

    def targets(self) -> list[str]:
        """Tagged children if any; on a header, its group; with a filter on, every child it
        keeps; else the one under the cursor."""
        table = self.table
        if table.tagged:
            rows = table.rows_by_id
            return sorted((i for i in table.tagged if i in rows), key=lambda i: rows[i].seq)
        header = table.selected_header
        if header is not None:
            return table.group_members(header)
        if self.matching_query() is not None:
            return table.matching
        selected = table.selected_id
        return [selected] if selected is not None else []

    def _ended_of(self) -> str:
        """Whose ended children a dialog counts: the tagged ones, the header's group's, or the
        filter's."""
        table = self.table
        if table.tagged:
            return "tagged"
        if table.selected_header is not None:
            return "in the group"
        return "matching" if self.matching_query() is not None else "tagged"

    def live_targets(self) -> list[str]:
        rows = self.table.rows_by_id
        return [i for i in self.targets() if rows[i].status.live]

    def _ended_targets(self) -> list[str]:
        rows = self.table.rows_by_id
        return [i for i in self.targets() if not rows[i].status.live]

    def _nothing_to(self, verb: str) -> None:
        """Every target has ended: say so, rather than let the key do nothing."""
        ended = self._ended_targets()
        header = self.table.selected_header if not self.table.tagged else None
        query = self.matching_query()
        if header is not None:
            why = f"every child under {one_line(header.described, 60)} has ended"
        elif query is not None:
            why = f"every child matching `{one_line(query, 60)}` has ended"
        elif len(ended) == 1:
            row = self.table.rows_by_id[ended[0]]
            how = _ENDED.get(row.status, "has " + row.status.value.replace("_", " "))
            why = f"{one_line(row.id)} {how}"
        else:
            why = f"all {len(ended)} tagged children have ended"
        self.notify(f"{why}: nothing to {verb}", severity="warning", markup=False)

    def _any_live(self) -> bool:
        return any(row.status.live for row in self.table.rows_by_id.values())

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not self.is_mounted:
            return True
        if action in ("steer", "stop", "pause"):
            if self.live_targets():
                return True
            # Shown disabled over finished children: on_key says why the key does nothing.
            return None if self.targets() else False
        if action == "nudge":  # shown only over a child flagged as looping
            return bool(self._looping_targets())
        if action == "stop_all":
            return self._any_live()
        if action == "pause_admission":
            snap = self.snapshot
            return snap is None or snap.status is BatchStatus.RUNNING
        if action in ("tag", "tag_group"):
            return bool(self.table.shown) or self.table.selected_header is not None
        if action == "tag_visible":
            return bool(self.table.shown)
        if action == "fold":  # enter elsewhere (the filter box, the transcript) is theirs
            return self.focused is self.table and self.table.group_under_cursor() is not None
        if action in _ROW_MOVES:
            return self.focused is self.table
        return True

    def on_key(self, event: events.Key) -> None:
        """Steer or stop pressed over children that have all ended: say why nothing happens.
        Escape dismisses the digest while it shows."""
        # Before the bindings run (the key bubbles up first); a disabled binding runs nothing.
        if (
            event.key == "n"
            and self.focused is self.table
            and not self._looping_targets()
            and self.targets()
        ):  # n is hidden here: say why it does nothing
            self.notify("no child here is flagged as looping: nothing to nudge", markup=False)
        if event.key == "escape" and self.query_one("#digest", DigestPanel).shown:
            event.stop()
            self._dismiss_digest()
            return
        active = self.active_bindings.get(event.key)
        acts = ("steer", "stop", "pause")
        if active is None or active.enabled or active.binding.action not in acts:
            return
        if self.targets():
            self._nothing_to(active.binding.action)

    # --- actions ----------------------------------------------------------------------------

    def _refused(self) -> bool:
        """A batch whose owner is gone hears no command: say why, rather than send one."""
        reason = self.view.read_only
        if reason:
            self.notify(reason, severity="warning", markup=False)
        return bool(reason)

    def action_steer(self) -> None:
        if self._refused():
            return
        ids = self.live_targets()
        if not ids:
            return

        query = self.matching_query()

        def send(request: SteerRequest | None) -> None:
            if request is None:
                return
            # Everything matching: a child may have ended while the dialog was open.
            live, ended_since = self._still_live(ids) if query is not None else (ids, [])
            rows = self.table.rows_by_id
            before = {i: frozenset(r.id for r in rows[i].steers) for i in live}
            try:
                if live:
                    self.view.steer(live, request.message, request.now)
            except ValueError as exc:  # too long, or not valid text: nothing was queued
                self.notify(
                    f"steer not sent: {one_line(str(exc), 200)}", severity="error", markup=False
                )
                return
            when = "now" if request.now else "at next turn"
            text = f"steer queued for {len(live)} ({when})"
            if query is not None:
                text = f"steer queued for {len(live)} matching `{one_line(query, 60)}` ({when})"
                text += _had_ended(len(ended_since) + ended)
                if live:  # their receipts are summed up in one notice once all have settled
                    self._steers.append(_BulkSteer(before, ended + len(ended_since)))
            self.notify(text, markup=False)

        ended = len(self._ended_targets())
        rows = self.table.rows_by_id
        unsteerable = sum(1 for i in ids if not rows[i].steerable)
        dialog = SteerDialog(
            ids,
            ended=ended,
            ended_of=self._ended_of(),
            unsteerable=unsteerable,
            cursor_blink=self.options.cursor_blink,
            query=query,
        )
        self.app.push_screen(dialog, send)

    def action_stop(self) -> None:
        if self._refused():
            return
        ids = self.live_targets()
        if not ids:
            return

        query = self.matching_query()
        ended = len(self._ended_targets())

        def stop(confirmed: bool | None) -> None:
            if not confirmed:
                return
            if query is None:
                self.view.stop(ids)
                self.table.set_tagged(ids, False)
                self.notify(f"stop requested for {len(ids)}", markup=False)
                self.poll()
                return
            # Everything matching: one summary once every stop has landed (see _settle_stops).
            live, ended_since = self._still_live(ids)
            if live:
                self.view.stop(live)
            self._stops.append(_BulkStop(tuple(live), ended + len(ended_since)))
            self.notify(
                f"stop requested for {len(live)} matching `{one_line(query, 60)}`", markup=False
            )
            self.poll()

        dialog = ConfirmStopDialog(ids, ended=ended, ended_of=self._ended_of(), query=query)
        self.app.push_screen(dialog, stop)

    def _looping_targets(self) -> list[str]:
        rows = self.table.rows_by_id
        return [i for i in self.live_targets() if rows[i].loop is not None]

    def action_nudge(self) -> None:
        """The canned loop steer to each looping target, its evidence filled in: a steer as
        `s` sends one (the operator's, at the next turn), with no dialog."""
        if self._refused():
            return
        rows = self.table.rows_by_id
        by_message: dict[str, list[str]] = {}
        template = self.view.loop_steer
        for child_id in self._looping_targets():
            loop = rows[child_id].loop
            if loop is None:
                continue
            message = fill(template, summary=loop.summary, kind=loop.kind, child_id=child_id)
            by_message.setdefault(message, []).append(child_id)
        if not by_message:
            return
        sent = 0
        try:
            for message, ids in by_message.items():
                self.view.steer(ids, message, False)
                sent += len(ids)
        except ValueError as exc:  # too long, or not valid text: this one was not queued
            self.notify(
                f"steer not sent: {one_line(str(exc), 200)}", severity="error", markup=False
            )
        if sent:
            noun = "child" if sent == 1 else "children"
            self.notify(f"loop steer queued for {sent} looping {noun} (at next turn)", markup=False)

    def _still_live(self, ids: list[str]) -> tuple[list[str], list[str]]:
        """`ids` split by a fresh snapshot into those still live and those ended meanwhile."""
        rows = {r.id: r for r in self.view.snapshot().children}
        live = [i for i in ids if i in rows and rows[i].status.live]
        return live, [i for i in ids if i not in live]

    def _settle_steers(self) -> None:
        """A steer of everything matching, every receipt settled: one summary of them."""
        if not self._steers:
            return
        rows = self.table.rows_by_id
        waiting: list[_BulkSteer] = []
        for bulk in self._steers:
            states: list[SteerState] = []
            receipts: list[int] = []
            for child_id, known in bulk.before.items():
                new = [r for r in rows[child_id].steers if r.id not in known]
                if not new or new[-1].state is SteerState.QUEUED:
                    break
                states.append(new[-1].state)
                receipts.append(new[-1].id)
            else:
                self._summed.update(receipts)  # their own notices may still be on the way
                delivered = states.count(SteerState.DELIVERED)
                text = f"steer: {delivered} delivered, {len(states) - delivered} missed"
                self.notify(text + _had_ended(bulk.ended), markup=False)
                continue
            waiting.append(bulk)
        self._steers = waiting

    def _settle_stops(self) -> None:
        """A stop of everything matching, every child of it ended: one summary of how."""
        if not self._stops:
            return
        rows = self.table.rows_by_id
        waiting: list[_BulkStop] = []
        for bulk in self._stops:
            if any(i in rows and rows[i].status.live for i in bulk.ids):
                waiting.append(bulk)
                continue
            stopped = sum(1 for i in bulk.ids if rows[i].status is ChildStatus.STOPPED)
            # A child that finished on its own before the stop reached it had ended too.
            self.notify(
                f"{stopped} stopped" + _had_ended(bulk.ended + len(bulk.ids) - stopped),
                markup=False,
            )
        self._stops = waiting

    def action_pause(self) -> None:
        """Pause the targets; continue them when every one is paused already."""
        if self._refused():
            return
        ids = self.live_targets()
        if not ids:
            return
        rows = self.table.rows_by_id
        resume = all(rows[i].status is ChildStatus.PAUSED for i in ids)
        verb = "continue" if resume else "pause"
        query = self.matching_query()
        ended = len(self._ended_targets())

        def send(confirmed: bool | None) -> None:
            if not confirmed:
                return
            live, ended_since = self._still_live(ids) if query is not None else (ids, [])
            if live:
                self.view.pause(live, resume)
            if query is None:
                self.table.set_tagged(ids, False)
                self.notify(f"{verb} requested for {len(live)}", markup=False)
            else:  # one summary once every one has taken it (see _settle_pauses)
                self._pauses.append(_BulkPause(tuple(live), ended + len(ended_since), resume))
                self.notify(
                    f"{verb} requested for {len(live)} matching `{one_line(query, 60)}`",
                    markup=False,
                )
            self.poll()

        dialog = ConfirmPauseDialog(
            ids, resume=resume, ended=ended, ended_of=self._ended_of(), query=query
        )
        self.app.push_screen(dialog, send)

    def _settle_pauses(self) -> None:
        """A pause (or continue) of everything matching, every child of it paused (continued)
        or ended: one summary of how."""
        if not self._pauses:
            return
        rows = self.table.rows_by_id
        waiting: list[_BulkPause] = []
        for bulk in self._pauses:
            states = [rows[i].status for i in bulk.ids if i in rows]
            if bulk.resume:
                pending = any(s is ChildStatus.PAUSED for s in states)
            else:
                # A running child pauses at its next turn boundary: until then, not yet.
                pending = any(s.live and s is not ChildStatus.PAUSED for s in states)
            if pending:
                waiting.append(bulk)
                continue
            done = sum(1 for s in states if s.live)
            verb = "continued" if bulk.resume else "paused"
            self.notify(
                f"{done} {verb}" + _had_ended(bulk.ended + len(bulk.ids) - done), markup=False
            )
        self._pauses = waiting

    def action_pause_admission(self) -> None:
        """Pause the batch's admission, or continue it when the operator paused it."""
        if self._refused():
            return
        snap = self.snapshot
        on = not (snap is not None and snap.held is not None and OPERATOR_HOLD in snap.held)
        self.view.pause_admission(on)
        if on:
            text = "admission paused: no new child starts; the running go on (p pauses them)"
        else:
            text = "admission continued: children start again"
        self.notify(text, markup=False)
        self.poll()

    def action_stop_all(self) -> None:
        if self._refused():
            return
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

    def action_limits(self) -> None:
        """The limits dialog: the live limits, editable."""
        if self._refused():
            return
        snap = self.view.snapshot()
        if snap.limits is None:
            self.notify("this batch's limits are not known", severity="warning", markup=False)
            return

        def applied(change: dict[str, object] | None) -> None:
            if change:
                self.notify("limits changed: " + one_line(describe(change), 200), markup=False)
                self.poll()

        dialog = LimitsDialog(snap.limits, self.view.set_limits, held=snap.held)
        self.app.push_screen(dialog, applied)

    def _ask_soft_budget(self, snap: Snapshot) -> None:
        """The soft budget's hold has begun: ask the operator once what to do."""
        limits = snap.limits
        held = limits.soft_held if limits is not None else None
        if held == self._soft_held:
            return
        self._soft_held = held
        if held is None or limits is None or self.view.read_only:
            return

        def answered(answer: SoftBudgetAnswer | None) -> None:
            if answer is None:
                return
            if answer.stop:
                text = "stop requested for all"
            elif answer.raise_to is None:
                text = "soft budget dropped for this batch: admission goes on"
            else:
                text = f"soft budget raised to ${answer.raise_to}"
            self.notify(text, markup=False)
            self.poll()

        dialog = SoftBudgetDialog(held, limits, self.view.set_limits, self.view.stop_all)
        self.app.push_screen(dialog, answered)

    def action_row_down(self) -> None:
        self.table.action_cursor_down()

    def action_row_up(self) -> None:
        self.table.action_cursor_up()

    def action_first_row(self) -> None:
        self.table.action_first_row()

    def action_last_row(self) -> None:
        self.table.action_last_row()

    def action_tag(self) -> None:
        table = self.table
        header = table.selected_header
        selected = table.selected_id
        if header is not None:  # a header tags (or untags) its whole group
            members = table.group_members(header)
            table.set_tagged(members, not all(i in table.tagged for i in members))
        elif selected is not None:
            table.set_tagged([selected], selected not in table.tagged)
        else:
            return
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

    def action_tag_group(self) -> None:
        """Tag the selected child's whole group (a completion unit): s and x then act on it."""
        table = self.table
        header = table.selected_header
        selected = table.selected_id
        row = table.rows_by_id.get(selected) if selected is not None else None
        if header is None and row is not None:
            if row.group is None:
                self.notify(f"{one_line(row.id)} is in no group", markup=False)
                return
            header = GroupHeader(GroupBy.GROUP, row.group)
        if header is None:
            return
        members = table.group_members(header)
        every = all(i in table.tagged for i in members)
        table.set_tagged(members, not every)
        if table.row_filter.tagged_only:
            table.rebuild()
        self._after_tags()

    def _after_tags(self) -> None:
        self._show_detail()  # over a header, it counts the tagged members
        self._show_status()
        self._sync_bindings()

    def action_fold(self) -> None:
        """Grouped: fold the group under the cursor to its header, or unfold it."""
        table = self.table
        header = table.group_under_cursor()
        if header is None:
            return
        with self.app.batch_update():
            table.toggle_fold(header)
            self._show_detail()
            self._show_status()
        self._sync_bindings()

    def action_sort(self) -> None:
        self.table.set_order(self.table.order.next())
        self._show_status()

    def action_group_by(self) -> None:
        """Group the table by the next of: group, status, route, tool, error, nothing."""
        table = self.table
        with self.app.batch_update():
            table.set_grouping(next_grouping(table.grouping))
            self._show_detail()
            self._show_status()
        self._sync_bindings()

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

    def action_routes(self) -> None:
        routes = self.query_one("#routes", RoutePanel)
        routes.display = not routes.display
        if routes.display and self.snapshot is not None:
            routes.show(self.snapshot)

    def action_digest(self) -> None:
        """Show what happened since the operator last looked; dismiss it if it shows."""
        panel = self.query_one("#digest", DigestPanel)
        if panel.shown:
            self._dismiss_digest()
        elif self.snapshot is not None:
            panel.show(self.attention.on_demand(self.snapshot))

    def _dismiss_digest(self) -> None:
        self.query_one("#digest", DigestPanel).show(None)
        self.attention.dismissed(self.snapshot)

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
                self.view.stop_all()
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
            self._show_status()
        self._sync_bindings()

    def on_filter_input_rejected(self, message: FilterInput.Rejected) -> None:
        self.notify(message.reason, severity="error", markup=False)

    def on_filter_input_closed(self, _: FilterInput.Closed) -> None:
        self.table.focus()

    # --- command palette --------------------------------------------------------------------

    def commands(self) -> Iterator[SystemCommand]:
        """Every screen action that applies right now, as a palette command."""
        return palette_commands(self)
