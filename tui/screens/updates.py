"""The main screen's live updates: a fresh snapshot applied by difference to every widget, the
detail and status lines, and the footer's keys refreshed when what applies changed."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flightdeck.engine.api import Need, needs
from flightdeck.engine.model import BatchStatus, ChildStatus, Snapshot
from flightdeck.tui.widgets import CostMeter, StatusBar, StatusLine
from flightdeck.tui.widgets.banner import Banner
from flightdeck.tui.widgets.detail import ChildDetail, group_detail_text
from flightdeck.tui.widgets.routes import RoutePanel

if TYPE_CHECKING:
    from flightdeck.tui.screens.main import MainScreen

# The actions whose check_action depends on the rows (see sync_bindings).
_ROW_ACTIONS = ("steer", "stop", "nudge", "stop_all", "pause", "pause_admission", "tag", "fold")


class Updates:
    """Applies snapshots to the screen that owns it."""

    def __init__(self, screen: MainScreen) -> None:
        self.screen = screen
        self._bindings_state: tuple[bool | None, ...] = ()
        self.queue: tuple[Need, ...] = ()  # the "needs you" queue, as of the last snapshot

    def apply(self, snap: Snapshot) -> None:
        screen = self.screen
        first = screen.snapshot is None
        screen.snapshot = snap
        self.queue = needs(snap)
        now = screen.options.clock()
        table = screen.table
        with screen.app.batch_update():
            table.apply(snap.children, now)
            if screen.following:
                self.follow()
            screen.query_one("#meter", CostMeter).show(snap, now)
            routes = screen.query_one("#routes", RoutePanel)
            if routes.display:
                routes.show(snap)
            held = f"admission held: {snap.held}" if snap.held else None
            screen.query_one("#banner", Banner).show(snap.problem or held)
            screen.notices.digest(snap, first)
            self.detail()
            self.status()
        summaries = screen.acts.summaries
        summaries.settle_stops(table.rows_by_id)
        summaries.settle_steers(table.rows_by_id)
        screen.batch_controls.ask_soft_budget(snap)
        summaries.settle_pauses(table.rows_by_id)
        screen.notices.flush()
        screen.notices.observe(snap, self.queue, now)
        self.bindings()

    def follow(self) -> None:
        """The cursor to the most recently active running child."""
        table = self.screen.table
        rows = table.rows_by_id
        running = [rows[i] for i in table.shown if rows[i].status is ChildStatus.RUNNING]
        if running:
            newest = max(running, key=lambda r: r.activity.last_activity_ts or 0.0)
            table.select(newest.id)

    def detail(self) -> None:
        screen = self.screen
        table = screen.table
        header = table.selected_header
        if header is not None:  # a header: the group's summary, never a member's detail
            rows = table.rows_by_id
            live = sum(1 for i in table.group_members(header) if rows[i].status.live)
            text = group_detail_text(table.header_text(header), live, header.by.value)
            screen.query_one("#detail", ChildDetail).show_text(text)
            return
        selected = table.selected_id
        row = table.rows_by_id.get(selected) if selected is not None else None
        outlier = None
        kind = table.medians.outlier(row) if row is not None else None
        if row is not None and kind is not None:
            outlier = f"{kind} {table.medians.ratio(row, kind):.1f}× the batch median"
        screen.query_one("#detail", ChildDetail).show(row, screen.options.clock(), outlier)

    def status(self) -> None:
        screen = self.screen
        snap = screen.snapshot
        table = screen.table
        screen.query_one("#status", StatusBar).show(
            StatusLine(
                batch_id=snap.batch_id if snap else "",
                batch_status=snap.status if snap else BatchStatus.RUNNING,
                order=table.order.value,
                grouping=table.grouping.value if table.grouping is not None else None,
                query=table.row_filter.query,
                shown=len(table.shown),
                total=len(table.rows_by_id),
                tagged=len(table.tagged),
                following=screen.following,
                frozen=screen.frozen,
                resort_pending=table.resort_pending,
                paused=snap.totals.paused if snap else 0,
                pausing=snap.totals.pausing if snap else 0,
                held=snap.held if snap else None,
                needs=len(self.queue),
            )
        )

    def bindings(self) -> None:
        """check_action depends on the rows; refresh the footer only when the answer changed."""
        screen = self.screen
        state = tuple(screen.check_action(a, ()) for a in _ROW_ACTIONS)
        if state != self._bindings_state:
            self._bindings_state = state
            screen.refresh_bindings()
