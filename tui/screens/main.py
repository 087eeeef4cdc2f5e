"""The main screen: children table, transcript, meter and status; every operator key.

The screen composes the widgets, applies each snapshot to them, and routes keys and engine
facts. The keys that change only how the children show (the cursor, tags, folds, order, the
filter) are its base class's, `Browsing` (browsing.py). What a command key does is decided
apart, as values (decisions.py): actions.py for s, x, p and n on targets.py's `Aim`, review.py
for R, D, M and delete, batch.py for X, P, L and the soft budget's question, notices.py for
toasts and alerts. The screen carries decisions out (`carry_out`): it alone touches the app.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import ClassVar

from flightdeck.engine.commands import CommandError
from flightdeck.engine.model import BatchStatus, Snapshot
from flightdeck.engine.sanitize import one_line
from flightdeck.tui import alerts
from flightdeck.tui.attention import Attention
from flightdeck.tui.messages import (
    BatchFinished,
    ChildFinished,
    GroupFinished,
    SteerSettled,
    forwarder,
)
from flightdeck.tui.options import UiOptions
from flightdeck.tui.screens import actions, batch, decisions, keys, refusals, review, targets
from flightdeck.tui.screens.browsing import Browsing
from flightdeck.tui.screens.decisions import Decision
from flightdeck.tui.screens.help import HelpScreen
from flightdeck.tui.screens.needs import NeedsScreen, go_to
from flightdeck.tui.screens.notices import Notices
from flightdeck.tui.screens.search import SearchScreen
from flightdeck.tui.screens.summaries import Summaries
from flightdeck.tui.view import EngineView
from flightdeck.tui.widgets import ChildrenTable, CostMeter, StatusBar, TranscriptView
from flightdeck.tui.widgets.banner import Banner
from flightdeck.tui.widgets.detail import ChildDetail
from flightdeck.tui.widgets.digest import DigestPanel
from flightdeck.tui.widgets.filter import FilterInput
from flightdeck.tui.widgets.footer import KeysFooter
from flightdeck.tui.widgets.routes import RoutePanel
from flightdeck.tui.widgets.rows import counted_to
from textual import events, work
from textual.app import ComposeResult, SystemCommand
from textual.binding import BindingType

__all__ = ["MainScreen", "UiOptions"]  # UiOptions: where tests and benchmarks have found it


class MainScreen(Browsing):
    """Supervise a batch: watch every child, steer or stop any of them."""

    CSS_PATH = "main.tcss"
    AUTO_FOCUS = "#children"
    BINDINGS: ClassVar[list[BindingType]] = keys.MAIN_BINDINGS

    def __init__(self, view: EngineView, options: UiOptions | None = None) -> None:
        super().__init__()
        self.view = view
        self.options = options = options or UiOptions()
        self.snapshot: Snapshot | None = None
        self.quitting = batch.Quit()
        self._unsubscribe: Callable[[], None] | None = None
        self.summaries = Summaries()  # sends to everything matching, summed up once taken
        self.notices = Notices(options.tui)
        self.attention = Attention(options.tui, options.looked, options.clock)
        self.soft_budget = batch.SoftBudget()
        self._bindings_state: tuple[bool | None, ...] = ()

    def compose(self) -> ComposeResult:
        yield Banner(id="banner")
        yield DigestPanel(id="digest")
        yield CostMeter(id="meter")
        yield RoutePanel(id="routes")
        yield ChildrenTable(id="children", hold_s=self.options.sort_hold_s)
        yield ChildDetail(id="detail")
        yield TranscriptView(id="transcript", poll_s=self.options.transcript_poll_s)
        filter_input = FilterInput(
            placeholder="filter: words status:failed route:sim cost>0.50 idle>5m is:looping"
        )
        filter_input.id = "filter"
        filter_input.cursor_blink = self.options.cursor_blink
        yield filter_input
        yield StatusBar(id="status")
        yield KeysFooter()

    def on_mount(self) -> None:
        self.query_one("#filter").display = False
        self.query_one("#routes").display = False  # until `r`: it costs a pass over the rows
        self._unsubscribe = self.view.subscribe(forwarder(self))
        self.poll()
        self.set_interval(self.options.poll_s, self.poll)

    def on_unmount(self) -> None:
        if self._unsubscribe is not None:
            self._unsubscribe()
        self.attention.closed(self.snapshot)

    # --- live updates -------------------------------------------------------------------------

    def poll(self) -> None:
        """Read a fresh snapshot and apply it by difference."""
        if self.frozen:
            return
        self.apply(self.view.snapshot())

    def apply(self, snap: Snapshot) -> None:
        """Every widget brought in line with `snap`; then what it settles, asks or rings."""
        first = self.snapshot is None
        self.snapshot = snap
        now = self.options.clock()
        table = self.table
        # The queue first: the status bar counts it, in the same frame as the rows it is of.
        queued = self.notices.observe(snap, now)
        with self.app.batch_update():
            left = snap.status is BatchStatus.ABANDONED  # its running children: left running
            table.apply(snap.children, counted_to(snap, now), snap.own, left)
            if self.following:
                table.follow()
            self.query_one("#meter", CostMeter).show(snap, now)
            routes = self.query_one("#routes", RoutePanel)
            if routes.display:
                routes.show(snap)
            held = f"admission held: {snap.held}" if snap.held else None
            self.query_one("#banner", Banner).show(snap.problem or held)
            self.digest.show(self.attention.opened(snap) if first else self.attention.polled(snap))
            self._detail()
            self._status()
        rows = table.rows_by_id
        summaries = self.summaries
        self.carry_out([decisions.Say(t) for t in summaries.settle_stops(rows)])
        self.carry_out([decisions.Say(t) for t in summaries.settle_steers(rows)])
        self.carry_out(self.soft_budget.seen(snap, self.view.send, self.view.read_only))
        self.carry_out([decisions.Say(t) for t in summaries.settle_pauses(rows)])
        self.carry_out(self.notices.flush())
        self.carry_out(queued)
        self._sync_bindings()

    def noticed_input(self) -> None:
        """A key or a click anywhere in the app: the operator is looking."""
        self.attention.key(self.snapshot)

    # --- decisions (decisions.py) -------------------------------------------------------------

    def carry_out(self, decision: Decision) -> None:
        """Carry out the steps of an order or a notice in turn; a send the batch refuses is
        said, and ends the decision (nothing was sent)."""
        for step in decision:
            match step:
                case decisions.Send(command=command):
                    try:
                        self.view.send(command)
                    except CommandError as exc:
                        text = f"{command.title} not sent: {one_line(str(exc), 200)}"
                        self.notify(text, severity="error", markup=False)
                        return
                case decisions.SendOff() as off:
                    self._send_off(off)
                case decisions.Say(text=text, severity=severity):
                    self.notify(text, severity=severity, markup=False)
                case decisions.Untag(ids=ids):
                    self.table.set_tagged(ids, False)
                case decisions.Track(bulk=bulk):
                    self.summaries.track(bulk)
                case decisions.Poll():
                    self.poll()
                case decisions.Ask(dialog=dialog, then=then):
                    self.app.push_screen(
                        dialog, lambda answer, then=then: self.carry_out(then(answer))
                    )
                case decisions.Ring(bell=bell, sequence=sequence):
                    alerts.ring(self.app, bell, sequence)
                case decisions.Title(text=text):
                    alerts.set_title(self.app, text)
                case decisions.Exit(stopped=stopped):
                    self.app.exit(result=stopped)

    @work(thread=True, exit_on_error=False, group="review", description="send")
    def _send_off(self, step: decisions.SendOff) -> None:
        """A slow command sent on a worker; what follows is carried out on the event loop."""
        then = decisions.sent_off(self.view, step, review.refusal(self.view))
        self.app.call_from_thread(self.carry_out, then)

    def order(self, decision: Decision) -> None:
        """A command key's decision; a batch whose owner is gone hears no command: say why."""
        reason = self.view.read_only
        if reason:
            self.notify(reason, severity="warning", markup=False)
            return
        self.carry_out(decision)

    # --- engine facts (notices.py) ------------------------------------------------------------

    def on_child_finished(self, message: ChildFinished) -> None:
        """A child that needs attention (no other finish is forwarded)."""
        self.notices.child_finished(message.row)

    def on_group_finished(self, message: GroupFinished) -> None:
        self.notices.group_finished(message.unit)

    def on_steer_settled(self, message: SteerSettled) -> None:
        if self.summaries.counts(message.receipt):
            return  # one of a steer to everything matching: summed up when all have settled
        self.notices.steer_settled(message.receipt)

    def on_batch_finished(self, message: BatchFinished) -> None:
        self.notices.batch_finished(message.status.value, self.view.read_only)
        self.poll()

    # --- selection ----------------------------------------------------------------------------

    def on_children_table_highlighted(self, event: ChildrenTable.Highlighted) -> None:
        child_id = event.child_id
        path = self.view.transcript_path(child_id) if child_id is not None else None
        self.transcript.show(child_id, path)
        self._detail()
        self._sync_bindings()

    def on_children_table_resorted(self, _: ChildrenTable.Resorted) -> None:
        self._status()

    def on_children_table_navigated(self, _: ChildrenTable.Navigated) -> None:
        self.following = False
        self._status()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if not self.is_mounted:
            return True
        # Hidden where it would only say why it sends nothing (on_key says why, if pressed).
        if refusals.refused(action, self.view, self.snapshot):
            return False
        table = self.table
        return keys.applies(action, table, self.snapshot, focused=self.focused)

    def on_key(self, event: events.Key) -> None:
        """Escape dismisses the digest while it shows; a key over children it cannot act on, or
        hidden where it would send nothing (read-only, ended), says why nothing happens."""
        if event.key == "escape" and self.digest.shown:
            event.stop()
            self._dismiss_digest()
            return
        # Before the bindings run (the key bubbles up first); a disabled binding runs nothing.
        active = self.active_bindings.get(event.key)
        view, snap = self.view, self.snapshot
        self.carry_out(refusals.unheard(event.key, active, self.table, self.focused, view, snap))

    # --- keys that send a command (actions.py on the targets, batch.py on the batch) ----------

    def action_steer(self) -> None:
        aim = targets.act_on(self.table)
        blink = self.options.cursor_blink
        self.order(actions.steer(aim, self.view.snapshot, self.view.secrets, cursor_blink=blink))

    def action_stop(self) -> None:
        self.order(actions.stop(targets.act_on(self.table), self.view.snapshot))

    def action_nudge(self) -> None:
        self.order(actions.nudge(targets.act_on(self.table)))

    def action_pause(self) -> None:
        self.order(actions.pause(targets.act_on(self.table), self.view.snapshot))

    def action_retry(self) -> None:
        self.carry_out(review.retry(targets.act_on(self.table), review.refusal(self.view)))

    def action_diff(self) -> None:
        row = self.table.rows_by_id.get(self.table.selected_id or "")
        self.carry_out(review.diff(row, self.view.secrets()))

    def action_merge(self) -> None:
        self.carry_out(review.merge(targets.act_on(self.table), review.refusal(self.view)))

    def action_discard(self) -> None:
        self.carry_out(review.discard(targets.act_on(self.table), review.refusal(self.view)))

    def action_pause_admission(self) -> None:
        self.order(batch.pause_admission(self.snapshot))

    def action_stop_all(self) -> None:
        self.order(batch.stop_all(self.table.rows_by_id, self.snapshot))

    def action_limits(self) -> None:
        """The limits dialog: the live limits, editable."""
        reason = batch.limits_refusal(self.view, self.view.snapshot())
        if reason:
            self.notify(reason, severity="warning", markup=False)
            return
        self.carry_out(batch.limits(self.view.snapshot(), batch.limits_sender(self.view)))

    # --- live updates paused, help, quit ------------------------------------------------------

    def action_freeze(self) -> None:
        self.frozen = not self.frozen
        self.transcript.frozen = self.frozen
        self._status()
        if not self.frozen:
            self.poll()

    def action_help(self) -> None:
        shown = [(self.app.get_key_display(b), b.description, b.tooltip) for b in keys.HELP]
        self.app.push_screen(HelpScreen(shown))

    def action_quit(self) -> None:
        """Quit now if nothing runs; otherwise ask to stop all first."""
        self.carry_out(self.quitting.pressed(self.view))  # looked at again when answered

    # --- other screens: search, needs you -----------------------------------------------------

    def action_search(self) -> None:
        """Search every transcript (F): a screen of its own (screens/search.py)."""
        self.app.push_screen(SearchScreen(self.view, cursor_blink=self.options.cursor_blink))

    def action_needs(self) -> None:
        """What needs the operator (!, screens/needs.py); enter there selects that child."""
        options = self.options
        table = self.table
        queue = NeedsScreen(
            self.view, options.clock, poll_s=options.poll_s, cursor_blink=options.cursor_blink
        )
        self.carry_out((decisions.Ask(queue, lambda child_id: go_to(table, child_id)),))

    # --- command palette --------------------------------------------------------------------

    def commands(self) -> Iterator[SystemCommand]:
        """Every screen action that applies right now, as a palette command."""
        return keys.palette_commands(self)
