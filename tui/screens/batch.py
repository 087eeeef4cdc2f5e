"""The main screen's keys on the whole batch: stop all (X), pause admission (P), the limits
dialog (L); and the soft budget's question, asked once when its hold begins."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from flightdeck.engine.commands import (
    ContinueAdmission,
    PauseAdmission,
    SetLimits,
    StopAll,
    describe,
)
from flightdeck.engine.model import OPERATOR_HOLD, Snapshot
from flightdeck.engine.money import fmt_usd
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.screens.actions import refused, sent
from flightdeck.tui.screens.dialogs import ConfirmStopDialog
from flightdeck.tui.screens.limits import LimitsDialog, SoftBudgetAnswer, SoftBudgetDialog

if TYPE_CHECKING:
    from flightdeck.tui.screens.main import MainScreen


class BatchControls:
    """What X, P and l do, and the soft budget's question, for the screen that owns it."""

    def __init__(self, screen: MainScreen) -> None:
        self.screen = screen
        self._soft_held: str | None = None  # the soft budget's hold last seen (asked once)

    def pause_admission(self) -> None:
        """Pause the batch's admission, or continue it when the operator paused it."""
        screen = self.screen
        if refused(screen):
            return
        snap = screen.snapshot
        on = not (snap is not None and snap.held is not None and OPERATOR_HOLD in snap.held)
        if not sent(screen, PauseAdmission() if on else ContinueAdmission()):
            return
        if on:
            text = "admission paused: no new child starts; the running go on (p pauses them)"
        else:
            text = "admission continued: children start again"
        screen.notify(text, markup=False)
        screen.poll()

    def stop_all(self) -> None:
        screen = self.screen
        if refused(screen):
            return
        rows = screen.table.rows_by_id
        ids = sorted((i for i, r in rows.items() if r.status.live), key=lambda i: rows[i].seq)
        if not ids:
            return

        def stop_all(confirmed: bool | None) -> None:
            if confirmed and sent(screen, StopAll()):
                screen.notify(f"stop requested for all {len(ids)}", markup=False)
                screen.poll()

        screen.app.push_screen(ConfirmStopDialog(ids, everything=True), stop_all)

    def limits(self) -> None:
        """The limits dialog: the live limits, editable."""
        screen = self.screen
        if refused(screen):
            return
        snap = screen.view.snapshot()
        if snap.limits is None:
            screen.notify("this batch's limits are not known", severity="warning", markup=False)
            return

        def applied(change: dict[str, object] | None) -> None:
            if change:
                screen.notify("limits changed: " + one_line(describe(change), 200), markup=False)
                screen.poll()

        dialog = LimitsDialog(snap.limits, self._set_limits, held=snap.held)
        screen.app.push_screen(dialog, applied)

    def _set_limits(self, change: dict[str, object]) -> None:
        """What the limits dialogs apply: CommandError (the dialog says why) for a bad one."""
        self.screen.view.send(SetLimits(change))

    def ask_soft_budget(self, snap: Snapshot) -> None:
        """The soft budget's hold has begun: ask the operator once what to do."""
        screen = self.screen
        limits = snap.limits
        held = limits.soft_held if limits is not None else None
        if held == self._soft_held:
            return
        self._soft_held = held
        if held is None or limits is None or screen.view.read_only:
            return

        def answered(answer: SoftBudgetAnswer | None) -> None:
            if answer is None:
                return
            if answer.stop:
                text = "stop requested for all"
            elif answer.raise_to is None:
                text = "soft budget dropped for this batch: admission goes on"
            else:
                text = f"soft budget raised to {fmt_usd(Decimal(answer.raise_to))}"
            screen.notify(text, markup=False)
            screen.poll()

        dialog = SoftBudgetDialog(
            held, limits, self._set_limits, lambda: screen.view.send(StopAll())
        )
        screen.app.push_screen(dialog, answered)
