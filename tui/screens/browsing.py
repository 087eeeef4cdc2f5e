"""The main screen's browsing: the keys that change only how the children show (the cursor,
tags, folds, order, grouping, following, the routes panel, the digest, the filter) and the
detail and status lines that follow them. None sends anything to the batch: the keys that do,
and the snapshots shown, are MainScreen's (main.py)."""

from __future__ import annotations

from flightdeck.engine.model import Snapshot
from flightdeck.tui.attention import Attention
from flightdeck.tui.options import UiOptions
from flightdeck.tui.screens import keys, targets
from flightdeck.tui.screens.notices import Notices
from flightdeck.tui.widgets import ChildrenTable, StatusBar, TranscriptView
from flightdeck.tui.widgets.detail import ChildDetail
from flightdeck.tui.widgets.digest import DigestPanel
from flightdeck.tui.widgets.filter import FilterInput
from flightdeck.tui.widgets.routes import RoutePanel
from flightdeck.tui.widgets.rows import next_grouping
from flightdeck.tui.widgets.status import status_line
from textual.reactive import var
from textual.screen import Screen


class Browsing(Screen[None]):
    """The children table's screen, as browsed; MainScreen adds what it shows and what acts."""

    following: var[bool] = var(False)
    """Whether the cursor jumps to the most recently active child on every poll."""
    frozen: var[bool] = var(False)
    """Whether live updates are paused (the engine keeps running)."""

    # Set by MainScreen: what the lines below the table show, and the footer's keys.
    options: UiOptions
    snapshot: Snapshot | None
    notices: Notices
    attention: Attention
    _bindings_state: tuple[bool | None, ...]  # whether each of keys.ROW_ACTIONS applies

    @property
    def table(self) -> ChildrenTable:
        return self.query_one("#children", ChildrenTable)

    @property
    def transcript(self) -> TranscriptView:
        return self.query_one("#transcript", TranscriptView)

    @property
    def digest(self) -> DigestPanel:
        return self.query_one("#digest", DigestPanel)

    def _detail(self) -> None:
        now = self.options.clock()
        self.query_one("#detail", ChildDetail).show_selected(self.table, now, self.snapshot)

    def _status(self) -> None:
        line = status_line(
            self.snapshot,
            self.table,
            following=self.following,
            frozen=self.frozen,
            needs=len(self.notices.queue),
        )
        self.query_one("#status", StatusBar).show(line)

    def _sync_bindings(self) -> None:
        """check_action depends on the rows; refresh the footer only when the answer changed."""
        state = tuple(self.check_action(a, ()) for a in keys.ROW_ACTIONS)
        if state != self._bindings_state:
            self._bindings_state = state
            self.refresh_bindings()

    def _reshaped(self) -> None:
        """The table's lines or tags changed: the detail (a header counts its tagged members),
        the status and the footer follow."""
        with self.app.batch_update():
            self._detail()
            self._status()
        self._sync_bindings()

    # --- tags (targets.py) --------------------------------------------------------------------

    def action_tag(self) -> None:
        if targets.tag(self.table):
            self._reshaped()

    def action_tag_visible(self) -> None:
        targets.tag_visible(self.table)
        self._reshaped()

    def action_tag_group(self) -> None:
        """Tag the selected child's whole group (a completion unit): s and x then act on it."""
        done = targets.tag_group(self.table)
        if isinstance(done, str):
            self.notify(done, markup=False)
        elif done:
            self._reshaped()

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
        header = self.table.group_under_cursor()
        if header is not None:
            self.table.toggle_fold(header)
            self._reshaped()

    def action_sort(self) -> None:
        self.table.set_order(self.table.model.order.next())
        self._status()

    def action_group_by(self) -> None:
        """Group the table by the next of: group, status, route, tool, error, nothing."""
        self.table.set_grouping(next_grouping(self.table.model.grouping))
        self._reshaped()

    def action_follow(self) -> None:
        if not self.following and (why := targets.kept_none(self.table, "follow")):
            self.notify(why, markup=False)
            return
        self.following = not self.following
        if self.following:
            self.table.follow(start=True)
        self._status()

    def action_routes(self) -> None:
        routes = self.query_one("#routes", RoutePanel)
        routes.display = not routes.display
        if routes.display and self.snapshot is not None:
            routes.show(self.snapshot)

    def action_digest(self) -> None:
        """Show what happened since the operator last looked; dismiss it if it shows."""
        if self.digest.shown:
            self._dismiss_digest()
        elif self.snapshot is not None:
            self.digest.show(self.attention.on_demand(self.snapshot))

    def _dismiss_digest(self) -> None:
        self.digest.show(None)
        self.attention.dismissed(self.snapshot)

    # --- filter -------------------------------------------------------------------------------

    def action_filter(self) -> None:
        self.query_one("#filter", FilterInput).open(self.table.row_filter)

    def on_filter_input_applied(self, message: FilterInput.Applied) -> None:
        table = self.table
        if message.row_filter == table.row_filter:
            return
        table.row_filter = message.row_filter
        table.rebuild()
        self._reshaped()

    def on_filter_input_rejected(self, message: FilterInput.Rejected) -> None:
        self.notify(message.reason, severity="error", markup=False)

    def on_filter_input_closed(self, _: FilterInput.Closed) -> None:
        # Unless it was opened again since (enter, then / before this came): it keeps the focus,
        # or what is typed into it would go to the table's keys.
        if not self.query_one("#filter", FilterInput).display:
            self.table.focus()
