"""What the main screen tells the operator has happened: engine facts as toasts (gathered
between polls, summed up when many), the bell and desktop alerts, and the "since you last
looked" digest."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from flightdeck.engine.api import Need
from flightdeck.engine.model import ChildRow, GroupFinished, Snapshot, SteerReceipt
from flightdeck.engine.sanitize import one_line
from flightdeck.tui import alerts
from flightdeck.tui.alerts import AlertBatcher, Alerts, AlertWatch
from flightdeck.tui.attention import Attention
from flightdeck.tui.output import completion_text
from flightdeck.tui.widgets.digest import DigestPanel
from textual.notifications import SeverityLevel

if TYPE_CHECKING:
    from flightdeck.tui.screens.main import MainScreen

_NOTICES_SHOWN = 3  # more engine notices than this in one poll are summed up in one toast


class Notices:
    """The screen's toasts, alerts and digest, for the screen that owns it."""

    def __init__(self, screen: MainScreen) -> None:
        self.screen = screen
        options = screen.options
        self._notices: list[tuple[str, SeverityLevel]] = []  # (text, severity) since the last poll
        self.attention = Attention(options.tui, options.looked, options.clock)
        self._alert_watch = AlertWatch()
        self._alerts = AlertBatcher(options.tui.notify_every_s)
        self.title = ""  # the terminal's title as last set

    # --- engine facts, shown at the next poll --------------------------------------------------

    def child_finished(self, row: ChildRow) -> None:
        """A child that needs attention."""
        detail = f": {one_line(row.error, 80)}" if row.error else ""
        self._notices.append((f"{one_line(row.id)} {row.status.value}{detail}", "warning"))

    def group_finished(self, unit: GroupFinished) -> None:
        severity: SeverityLevel = "information" if unit.status.value == "completed" else "warning"
        self._notices.append((completion_text(unit), severity))

    def steer_settled(self, r: SteerReceipt) -> None:
        severity: SeverityLevel = "information" if r.state.value == "delivered" else "warning"
        self._notices.append((f"steer {r.state.value}: {one_line(r.child_id)}", severity))

    def batch_finished(self, status: str) -> None:
        self._notices.append((f"batch finished: {status}", "information"))

    def flush(self) -> None:
        notices, self._notices = self._notices, []
        if len(notices) > _NOTICES_SHOWN:
            warnings = sum(1 for _, severity in notices if severity == "warning")
            self.screen.notify(f"{len(notices)} updates ({warnings} failures)", markup=False)
            return
        for text, severity in notices:
            self.screen.notify(text, severity=severity, markup=False)

    # --- the bell and desktop notifications ----------------------------------------------------

    def observe(self, snap: Snapshot, queue: Sequence[Need], now: float) -> None:
        """Count the queue's new entries; alert when a batch of them is due; the terminal's
        title carries the queue's length."""
        self._alerts.add(self._alert_watch.observe(queue), now)
        due = self._alerts.due(now)
        if due is not None:
            self._alert(snap.batch_id, due)
        title = alerts.title(snap.batch_id, len(queue))
        if title != self.title:
            self.title = title
            self.screen.app.title = title
            alerts.set_title(self.screen.app, title)

    def _alert(self, batch_id: str, due: Alerts) -> None:
        """The bell and (opted in) a desktop notification: counts only, batched. No toast: the
        status bar counts the queue all along, and a toast would hide the transcript's end."""
        tui, app = self.screen.options.tui, self.screen.app
        if tui.bell:
            app.bell()
        sequence = alerts.notification(tui.desktop, batch_id, due)
        if sequence is not None:
            alerts.write_to_terminal(app, sequence)

    # --- the digest ----------------------------------------------------------------------------

    @property
    def _panel(self) -> DigestPanel:
        return self.screen.query_one("#digest", DigestPanel)

    def digest(self, snap: Snapshot, first: bool) -> None:
        """The digest as this poll leaves it: shown on opening, or once the operator is back."""
        found = self.attention.opened(snap) if first else self.attention.polled(snap)
        self._panel.show(found)

    @property
    def digest_shown(self) -> bool:
        return self._panel.shown

    def toggle_digest(self) -> None:
        """Show what happened since the operator last looked; dismiss it if it shows."""
        if self._panel.shown:
            self.dismiss_digest()
        elif self.screen.snapshot is not None:
            self._panel.show(self.attention.on_demand(self.screen.snapshot))

    def dismiss_digest(self) -> None:
        self._panel.show(None)
        self.attention.dismissed(self.screen.snapshot)
