"""What the main screen tells the operator has happened: engine facts as toasts (gathered
between polls, summed up when many), the "needs you" queue with its bell, desktop alerts and
the terminal's title; as decisions the screen carries out (decisions.py)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable

from flightdeck.engine.apilight import Need, TuiSettings, needs
from flightdeck.engine.model import (
    BatchStatus,
    ChildRow,
    GroupFinished,
    Snapshot,
    SteerReceipt,
    SteerState,
    UnitStatus,
)
from flightdeck.engine.sanitize import one_line
from flightdeck.tui import alerts
from flightdeck.tui.alerts import AlertBatcher, AlertWatch
from flightdeck.tui.output import completion_text
from flightdeck.tui.screens.decisions import Decision, Ring, Say, Step, Title
from textual.notifications import SeverityLevel

_NOTICES_SHOWN = 3  # more engine notices than this in one poll are summed up in one toast
# ...and at most that many toasts of them in a toast's life (Textual's default timeout, 5 s):
# a big batch's failures, one every poll or two, kept half an 80-column screen under toasts.
_TOAST_S = 5.0
# A batch running again, attached: `flightdeck resume` took up an abandoned one, or a retry (from
# another view, `flightdeck retry`) reopened one that had ended.
_AGAIN = {
    BatchStatus.ABANDONED: "batch resumed: a new owner runs it on; steer and stop reach it again",
    BatchStatus.COMPLETED: "batch running again: a retry reopened it",
}


class Notices:
    """Engine facts since the last poll, and what is due to ring."""

    def __init__(self, tui: TuiSettings, clock: Callable[[], float] = time.monotonic) -> None:
        self._tui = tui
        self._clock = clock
        # Since the last poll (or held: too many shown lately), each with what it tells: a
        # child "failed" (or stalled, timed out), a steer "missed", or "other".
        self._notices: list[tuple[Say, str]] = []
        self._batch_notices: list[Say] = []  # the batch's own facts, never held
        self._told: deque[float] = deque()  # when each toast still on screen was shown
        self._alert_watch = AlertWatch()
        self._alerts = AlertBatcher(tui.notify_every_s)
        self._title = ""  # the terminal's title as last set
        self.queue: tuple[Need, ...] = ()  # the "needs you" queue, as of the last snapshot
        self._queued_from: Snapshot | None = None  # the snapshot the queue was worked out from
        self._status: BatchStatus | None = None  # the batch's, as last observed

    # --- engine facts, shown at the next poll --------------------------------------------------

    def child_finished(self, row: ChildRow) -> None:
        """A child that needs attention."""
        detail = f": {one_line(row.error, 80)}" if row.error else ""
        self._notices.append(
            (Say(f"{one_line(row.id)} {row.status.value}{detail}", "warning"), "failed")
        )

    def group_finished(self, unit: GroupFinished) -> None:
        # A stop is nobody's failure: a unit stopped whole is told as its stopped batch is.
        calm = unit.status in (UnitStatus.COMPLETED, UnitStatus.STOPPED)
        severity: SeverityLevel = "information" if calm else "warning"
        self._notices.append((Say(completion_text(unit), severity), "other"))

    def steer_settled(self, r: SteerReceipt) -> None:
        severity: SeverityLevel = "information" if r.state.value == "delivered" else "warning"
        # A missed one says why (the child had ended first, its route takes no steer), as the
        # row's transcript and `flightdeck steer` do: "steer missed: ev-141" alone left it open.
        why = f" ({one_line(r.how, 80)})" if r.state is SteerState.MISSED and r.how else ""
        # A loop policy's nudge is not the operator's: "steer delivered: t1200" alone read as
        # if someone had steered a child nobody did.
        whose = "loop policy's steer" if r.by == "policy" else "steer"
        said = Say(f"{whose} {r.state.value}: {one_line(r.child_id)}{why}", severity)
        self._notices.append((said, "missed" if r.state is SteerState.MISSED else "other"))

    def batch_finished(self, status: str, why: str | None) -> None:
        """The batch ended, or (`why`) its owner died: nothing finished, it can be resumed."""
        if status == "abandoned" and why:
            self._batch_notices.append(Say(why, "error"))
        else:
            self._batch_notices.append(Say(f"batch finished: {status}"))

    def flush(self) -> Decision:
        """The facts gathered since the last poll: each a toast, or one sum when many; while
        `_NOTICES_SHOWN` toasts of them are still on screen, the children's are held (and
        summed up once one has gone). The batch's own facts are told at once."""
        now, told = self._clock(), self._told
        while told and now - told[0] >= _TOAST_S:
            told.popleft()
        room = _NOTICES_SHOWN - len(told)
        shown: list[Say] = []
        if self._notices and room > 0:
            notices, self._notices = self._notices, []
            shown = [say for say, _ in notices]
            if len(notices) > room:  # a warning if one of them is: a failure is in the sum
                warns = any(say.severity != "information" for say in shown)
                severity: SeverityLevel = "warning" if warns else "information"
                shown = [Say(_summed([kind for _, kind in notices]), severity)]
            told.extend(now for _ in shown)
        batch, self._batch_notices = self._batch_notices, []
        return [*shown, *batch]

    # --- the bell and desktop notifications ----------------------------------------------------

    def observe(self, snap: Snapshot, now: float) -> Decision:
        """The "needs you" queue as `snap` has it: count its new entries; ring when a batch of
        them is due (counts only, batched; a desktop notification when opted in); the
        terminal's title carries the queue's length. No toast: the status bar counts the queue
        all along, and a toast would hide the transcript's end."""
        was, self._status = self._status, snap.status
        if was is not None and was is not snap.status and snap.status is BatchStatus.RUNNING:
            self._batch_notices.append(Say(_AGAIN.get(was, _AGAIN[BatchStatus.COMPLETED])))
        # Polls between two reads of the store have the very same rows: no pass over them all.
        if not _same_rows(self._queued_from, snap):
            self.queue = needs(snap)
        self._queued_from, queue = snap, self.queue
        self._alerts.add(self._alert_watch.observe(queue), now)
        due = self._alerts.due(now)
        steps: list[Step] = []
        if due is not None:
            sequence = alerts.notification(self._tui.desktop, snap.batch_id, due)
            steps.append(Ring(self._tui.bell, sequence))
        title = alerts.title(snap.batch_id, len(queue))
        if title != self._title:
            self._title = title
            steps.append(Title(title))
        return steps


def _same_rows(last: Snapshot | None, snap: Snapshot) -> bool:
    """Whether `snap` has `last`'s very rows, limits and status (what the queue is made of)."""
    if last is None:
        return False
    return (
        last.children is snap.children and last.limits is snap.limits and last.status is snap.status
    )


def _summed(kinds: list[str]) -> str:
    """Many notices as one: how many, the failures among them, and the steers missed apart (a
    stop of everything made a group steer's receipts "183 failures")."""
    failed, missed = kinds.count("failed"), kinds.count("missed")
    parts = [f"{failed} failure" + ("" if failed == 1 else "s")]
    if missed:
        parts.append(f"{missed} steer{'' if missed == 1 else 's'} missed")
    return f"{len(kinds)} updates ({', '.join(parts)})"
