"""The main screen's keys on its targets (targets.py): steer, stop, pause or continue, nudge;
their dialogs, what they send, and what they say (one summary for everything matching)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from flightdeck.engine.commands import Command, CommandError, Continue, Nudge, Pause, Steer, Stop
from flightdeck.engine.model import ChildStatus
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.screens import targets
from flightdeck.tui.screens.dialogs import (
    ConfirmPauseDialog,
    ConfirmStopDialog,
    SteerDialog,
    SteerRequest,
)
from flightdeck.tui.screens.summaries import Summaries, had_ended

if TYPE_CHECKING:
    from flightdeck.tui.screens.main import MainScreen


def sent(screen: MainScreen, command: Command) -> bool:
    """Send `command` to the batch; False, and the reason said, if it cannot be applied
    (nothing was sent)."""
    try:
        screen.view.send(command)
    except CommandError as exc:
        text = f"{command.title} not sent: {one_line(str(exc), 200)}"
        screen.notify(text, severity="error", markup=False)
        return False
    return True


def refused(screen: MainScreen) -> bool:
    """A batch whose owner is gone hears no command: say why, rather than send one."""
    reason = screen.view.read_only
    if reason:
        screen.notify(reason, severity="warning", markup=False)
    return bool(reason)


class TargetActions:
    """What s, x, p and n do, for the screen that owns it."""

    def __init__(self, screen: MainScreen) -> None:
        self.screen = screen
        self.summaries = Summaries(lambda text: screen.notify(text, markup=False))

    def _still_live(self, ids: list[str]) -> tuple[list[str], list[str]]:
        """`ids` split by a fresh snapshot into those still live and those ended meanwhile."""
        rows = {r.id: r for r in self.screen.view.snapshot().children}
        live = [i for i in ids if i in rows and rows[i].status.live]
        return live, [i for i in ids if i not in live]

    def steer(self) -> None:
        screen = self.screen
        if refused(screen):
            return
        table = screen.table
        ids = targets.live_targets(table)
        if not ids:
            return

        query = targets.matching_query(table)

        def send(request: SteerRequest | None) -> None:
            if request is None:
                return
            # Everything matching: a child may have ended while the dialog was open.
            live, ended_since = self._still_live(ids) if query is not None else (ids, [])
            rows = screen.table.rows_by_id
            before = {i: frozenset(r.id for r in rows[i].steers) for i in live}
            if live and not sent(screen, Steer(tuple(live), request.message, request.now)):
                return  # too long, or not valid text: nothing was queued
            when = "now" if request.now else "at next turn"
            text = f"steer queued for {len(live)} ({when})"
            if query is not None:
                text = f"steer queued for {len(live)} matching `{one_line(query, 60)}` ({when})"
                text += had_ended(len(ended_since) + ended)
                if live:  # their receipts are summed up in one notice once all have settled
                    self.summaries.steered(before, ended + len(ended_since))
            screen.notify(text, markup=False)

        ended = len(targets.ended_targets(table))
        rows = table.rows_by_id
        unsteerable = sum(1 for i in ids if not rows[i].steerable)
        dialog = SteerDialog(
            ids,
            ended=ended,
            ended_of=targets.ended_of(table),
            unsteerable=unsteerable,
            cursor_blink=screen.options.cursor_blink,
            query=query,
        )
        screen.app.push_screen(dialog, send)

    def stop(self) -> None:
        screen = self.screen
        if refused(screen):
            return
        table = screen.table
        ids = targets.live_targets(table)
        if not ids:
            return

        query = targets.matching_query(table)
        ended = len(targets.ended_targets(table))

        def stop(confirmed: bool | None) -> None:
            if not confirmed:
                return
            if query is None:
                if not sent(screen, Stop(tuple(ids))):
                    return
                screen.table.set_tagged(ids, False)
                screen.notify(f"stop requested for {len(ids)}", markup=False)
                screen.poll()
                return
            # Everything matching: one summary once every stop has landed (see settle_stops).
            live, ended_since = self._still_live(ids)
            if live and not sent(screen, Stop(tuple(live))):
                return
            self.summaries.stopped(live, ended + len(ended_since))
            screen.notify(
                f"stop requested for {len(live)} matching `{one_line(query, 60)}`", markup=False
            )
            screen.poll()

        dialog = ConfirmStopDialog(ids, ended=ended, ended_of=targets.ended_of(table), query=query)
        screen.app.push_screen(dialog, stop)

    def nudge(self) -> None:
        """The canned loop steer to each looping target (the engine fills in each one's
        evidence): a steer as `s` sends one (the operator's, at the next turn), with no dialog."""
        screen = self.screen
        if refused(screen):
            return
        ids = targets.looping_targets(screen.table)
        if not ids or not sent(screen, Nudge(tuple(ids))):
            return
        noun = "child" if len(ids) == 1 else "children"
        text = f"loop steer queued for {len(ids)} looping {noun} (at next turn)"
        screen.notify(text, markup=False)

    def pause(self) -> None:
        """Pause the targets; continue them when every one is paused already."""
        screen = self.screen
        if refused(screen):
            return
        table = screen.table
        ids = targets.live_targets(table)
        if not ids:
            return
        rows = table.rows_by_id
        # A pause still pending (to the turn's end, or until delegates return) is continued too.
        resume = all(rows[i].status is ChildStatus.PAUSED or rows[i].pausing for i in ids)
        verb = "continue" if resume else "pause"
        query = targets.matching_query(table)
        ended = len(targets.ended_targets(table))

        def send(confirmed: bool | None) -> None:
            if not confirmed:
                return
            live, ended_since = self._still_live(ids) if query is not None else (ids, [])
            command = Continue(tuple(live)) if resume else Pause(tuple(live))
            if live and not sent(screen, command):
                return
            if query is None:
                screen.table.set_tagged(ids, False)
                screen.notify(f"{verb} requested for {len(live)}", markup=False)
            else:  # one summary once every one has taken it (see settle_pauses)
                self.summaries.paused(live, ended + len(ended_since), resume)
                screen.notify(
                    f"{verb} requested for {len(live)} matching `{one_line(query, 60)}`",
                    markup=False,
                )
            screen.poll()

        dialog = ConfirmPauseDialog(
            ids, resume=resume, ended=ended, ended_of=targets.ended_of(table), query=query
        )
        screen.app.push_screen(dialog, send)
