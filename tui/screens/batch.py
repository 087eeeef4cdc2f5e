"""What the keys on the whole batch decide: stop all (X), pause admission (P), the limits
dialog (L), quit (q: it may stop all); and the soft budget's question, asked once when its hold
begins."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from decimal import Decimal

from flightdeck.engine.commands import (
    Command,
    ContinueAdmission,
    PauseAdmission,
    SetLimits,
    StopAll,
    describe,
)
from flightdeck.engine.errors import CommandError
from flightdeck.engine.model import OPERATOR_HOLD, BatchStatus, ChildRow, Snapshot
from flightdeck.engine.money import fmt_usd
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.fmt import limits_ended
from flightdeck.tui.screens.decisions import Ask, Decision, Exit, Poll, Say, Send
from flightdeck.tui.screens.dialogs import ConfirmStopDialog, QuitChoice, QuitDialog
from flightdeck.tui.screens.limits import LimitsDialog, SoftBudgetAnswer, SoftBudgetDialog
from flightdeck.tui.view import EngineView

# What a dialog that applies its change itself sends with: CommandError for a bad change (the
# dialog says why and stays open).
Sender = Callable[[Command], None]


def pause_admission(snap: Snapshot | None) -> Decision:
    """Pause the batch's admission, or continue it when the operator paused it."""
    on = not (snap is not None and snap.held is not None and OPERATOR_HOLD in snap.held)
    soft = snap.limits.soft_held if snap is not None and snap.limits is not None else None
    if on:
        text = "admission paused: no new child starts; the running go on (p pauses them)"
    elif soft is not None:  # the operator's hold ends, the soft budget's does not
        text = f"admission continued, but still held: {one_line(soft, 200)}; L raises or drops it"
    else:
        text = "admission continued: children start again"
    return (Send(PauseAdmission() if on else ContinueAdmission()), Say(text), Poll())


def stop_all(rows: Mapping[str, ChildRow], snap: Snapshot | None = None) -> Decision:
    """Confirm, then stop every live child; with none, a batch that still runs (its schedules
    wait for their next wave) is stopped as a whole."""
    ids = sorted((i for i, r in rows.items() if r.status.live), key=lambda i: rows[i].seq)
    if not ids and not waiting_for_waves(snap):
        return ()

    def answered(confirmed: bool | None) -> Decision:
        if not confirmed:
            return ()
        said = f"stop requested for all {len(ids)}" if ids else "stop requested: no more waves"
        return (Send(StopAll()), Say(said), Poll())

    return (Ask(ConfirmStopDialog(ids, everything=True), answered),)


def limits_sender(view: EngineView) -> Sender:
    """`view.send` for the limits dialog: a change to a batch that ended while it was open is
    refused in the dialog, as `L` then is (in-process the engine took it, nothing to admit)."""

    def send(command: Command) -> None:
        if reason := limits_refusal(view, view.snapshot()):
            raise CommandError(reason)
        view.send(command)

    return send


def _set_limits(send: Sender) -> Callable[[dict[str, object]], None]:
    return lambda change: send(SetLimits(change))


def limits_refusal(view: EngineView, snap: Snapshot | None) -> str | None:
    """Why `L` changes nothing from `view` (None: it can), `snap` the batch as last read: an
    ended batch's is said as `flightdeck limits` says it, in-process too (its engine took a
    change with nothing left to admit), not as "nothing left to steer or stop"."""
    reason = view.read_only
    if reason is not None:  # it may have ended since the last poll: its own (cheap) snapshot
        snap = view.snapshot()
    if snap is None or snap.status in (BatchStatus.RUNNING, BatchStatus.ABANDONED):
        return reason  # read-only, or its owner is gone
    return limits_ended(snap.batch_id, snap.status.value)


def limits(snap: Snapshot, send: Sender) -> Decision:
    """The limits dialog over the live limits (`snap`: read fresh as the key is pressed)."""
    if snap.limits is None:
        return (Say("this batch's limits are not known", "warning"),)

    def applied(change: dict[str, object] | None) -> Decision:
        if not change:
            return ()
        return (Say("limits changed: " + one_line(describe(change), 200)), Poll())

    return (Ask(LimitsDialog(snap.limits, _set_limits(send), held=snap.held), applied),)


class Quit:
    """Quit at once when nothing runs that this UI could stop; else ask, one question at a time
    (ctrl+q and the palette ask too). The answer is taken as the batch is when it is given: one
    that ended, or whose owner died, while the question was open has nothing left to stop."""

    def __init__(self) -> None:
        self.asking = False

    def pressed(self, view: EngineView) -> Decision:
        if self.asking:
            return ()
        snap = view.snapshot()
        live = _live(snap)
        if (not live and not waiting_for_waves(snap)) or view.read_only:
            return (Exit(stopped=False),)

        def answered(choice: QuitChoice | None) -> Decision:
            self.asking = False
            if choice is QuitChoice.STOP and moot(view) is None:
                return (Send(StopAll()), Exit(stopped=True))
            if choice is not None:  # detach, or nothing left to stop: the batch is as it is
                return (Exit(stopped=False),)
            return ()

        self.asking = True
        dialog = QuitDialog(
            live,
            detach=view.can_detach,
            moot=lambda: moot(view),
            count=lambda: _live(view.snapshot()),
        )
        return (Ask(dialog, answered),)


def _live(snap: Snapshot) -> int:
    return sum(1 for row in snap.children if row.status.live)


def waiting_for_waves(snap: Snapshot | None) -> bool:
    """Whether the batch runs on with no child live: a scheduled batch between two waves (any
    other ends as its last child does). Nothing to stop but the batch itself, which would
    otherwise fire wave after wave, the UI gone."""
    if snap is None or not snap.scheduled or snap.status is not BatchStatus.RUNNING:
        return False
    return not any(row.status.live for row in snap.children)


def moot(view: EngineView) -> str | None:
    """Why stopping all is moot now (no child runs any more, or nothing would apply a stop:
    the owner is gone), or None."""
    snap = view.snapshot()
    if not _live(snap) and not waiting_for_waves(snap):
        running = snap.status is BatchStatus.RUNNING
        what = "no child runs any more" if running else f"the batch has ended ({snap.status.value})"
        return f"{what}: nothing left to stop"
    return view.read_only


class SoftBudget:
    """The soft budget's question: asked once, when its hold begins; closed unanswered once
    that hold is gone (lifted from another terminal, the batch ended, its owner died), so a
    stale answer never drops or lowers a budget set since."""

    def __init__(self) -> None:
        self._held: str | None = None  # the hold last seen
        # Its questions still open: one under another dialog when its hold went stays here
        # until it is on top again, whatever holds were asked about since.
        self._asking: list[SoftBudgetDialog] = []

    def seen(self, snap: Snapshot, send: Sender, read_only: str | None) -> Decision:
        """The question, if `snap` shows a hold that was not there before (none read-only)."""
        limits = snap.limits
        held = limits.soft_held if limits is not None and not read_only else None
        self._close_stale(held)
        if held == self._held:
            return ()
        self._held = held
        if held is None or limits is None:
            return ()
        dialog = SoftBudgetDialog(held, limits, _set_limits(send), lambda: send(StopAll()))
        self._asking.append(dialog)
        return (Ask(dialog, _answered),)

    def _close_stale(self, held: str | None) -> None:
        keep = []
        for asking in self._asking:
            if asking.held == held:
                keep.append(asking)
            elif asking.is_active:
                asking.dismiss(None)
            elif asking in asking.app.screen_stack:
                keep.append(asking)  # under another dialog: closed once it is on top again
        self._asking = keep


def _answered(answer: SoftBudgetAnswer | None) -> Decision:
    if answer is None:
        return ()
    if answer.stop:
        text = "stop requested for all"
    elif answer.raise_to is None:
        text = "soft budget dropped for this batch: admission goes on"
    else:
        text = f"soft budget raised to {fmt_usd(Decimal(answer.raise_to))}"
    return (Say(text), Poll())
