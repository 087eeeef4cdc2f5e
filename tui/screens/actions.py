"""What s, x, p and n decide over their targets (targets.py's `Aim`): the dialog they ask, the
command they send, and what they say (one summary for everything matching)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from flightdeck.engine.commands import Continue, Nudge, Pause, Steer, Stop
from flightdeck.engine.model import ChildRow, ChildStatus, Snapshot
from flightdeck.engine.sanitize import one_line, redact
from flightdeck.tui.screens.decisions import Ask, Decision, Poll, Say, Send, Track, Untag
from flightdeck.tui.screens.dialogs import (
    ConfirmPauseDialog,
    ConfirmStopDialog,
    SteerDialog,
    SteerRequest,
)
from flightdeck.tui.screens.summaries import BulkPause, BulkSteer, BulkStop, had_ended
from flightdeck.tui.screens.targets import Aim

Look = Callable[[], Snapshot]  # a fresh snapshot, read when a dialog's answer comes
Keys = Callable[[], tuple[str, ...]]  # the batch's keys, which a steer's message is redacted of


def _still_live(
    ids: tuple[str, ...], look: Look
) -> tuple[tuple[str, ...], int, Mapping[str, ChildRow]]:
    """`ids` still live by a fresh snapshot; how many ended meanwhile; that snapshot's rows."""
    rows = {r.id: r for r in look().children}
    live = tuple(i for i in ids if i in rows and rows[i].status.live)
    return live, len(ids) - len(live), rows


def _matching(query: str) -> str:
    return f"matching `{one_line(query, 60)}`"


def steer(aim: Aim, look: Look, keys: Keys, *, cursor_blink: bool) -> Decision:
    """The steer dialog over the live targets; its message sent to them."""
    ids = aim.live
    if not ids:
        return ()
    query, ended = aim.query, len(aim.ended)

    def answered(request: SteerRequest | None) -> Decision:
        if request is None:
            return ()
        when = "now" if request.now else "at next turn"
        if query is None:
            steer = Send(Steer(ids, request.message, request.now))
            return (steer, Say(f"steer queued for {len(ids)} ({when})"))
        # Everything matching: a child may have ended while the dialog was open.
        live, ended_since, rows = _still_live(ids, look)
        text = f"steer queued for {len(live)} {_matching(query)} ({when})"
        text += had_ended(ended_since + ended)
        if not live:
            return (Say(text),)
        # The receipts each had before: the one this steer makes is a new one with its message
        # as recorded (a key typed into it redacted), not another operator's steer meanwhile.
        before = {i: frozenset(r.id for r in rows[i].steers) for i in live}
        recorded = redact(request.message, keys())
        bulk = BulkSteer(before, ended + ended_since, recorded, request.now)
        sent = Send(Steer(live, request.message, request.now))
        return (sent, Track(bulk), Say(text))

    rows = aim.rows
    dialog = SteerDialog(
        ids,
        ended=ended,
        ended_of=aim.ended_of,
        unsteerable=sum(1 for i in ids if not rows[i].steerable),
        cursor_blink=cursor_blink,
        query=query,
        group=aim.group,
    )
    return (Ask(dialog, answered),)


def stop(aim: Aim, look: Look) -> Decision:
    """Confirm, then stop the live targets."""
    ids = aim.live
    if not ids:
        return ()
    query, ended = aim.query, len(aim.ended)

    def answered(confirmed: bool | None) -> Decision:
        if not confirmed:
            return ()
        if query is None:
            # Every target untagged, the ended too: a tag left on one would take the next key.
            untag = Untag(aim.ids)
            return (Send(Stop(ids)), untag, Say(f"stop requested for {len(ids)}"), Poll())
        # Everything matching: one summary once every stop has landed (see settle_stops).
        live, ended_since, _ = _still_live(ids, look)
        sent = (Send(Stop(live)),) if live else ()
        text = f"stop requested for {len(live)} {_matching(query)}"
        return (*sent, Track(BulkStop(live, ended + ended_since)), Say(text), Poll())

    dialog = ConfirmStopDialog(
        ids, ended=ended, ended_of=aim.ended_of, query=query, group=aim.group
    )
    return (Ask(dialog, answered),)


def nudge(aim: Aim) -> Decision:
    """The canned loop steer to each looping target (the engine fills in each one's evidence):
    a steer as `s` sends one (the operator's, at the next turn), with no dialog."""
    ids = aim.looping
    if not ids:
        return ()
    noun = "child" if len(ids) == 1 else "children"
    return (
        Send(Nudge(ids)),
        Say(f"loop steer queued for {len(ids)} looping {noun} (at next turn)"),
    )


def pause(aim: Aim, look: Look) -> Decision:
    """Confirm, then pause the live targets; continue them when every one is paused already."""
    ids = aim.live
    if not ids:
        return ()
    rows = aim.rows
    # A pause still pending (to the turn's end, or until delegates return) is continued too.
    resume = all(rows[i].status is ChildStatus.PAUSED or rows[i].pausing for i in ids)
    verb = "continue" if resume else "pause"
    query, ended = aim.query, len(aim.ended)

    def answered(confirmed: bool | None) -> Decision:
        if not confirmed:
            return ()
        if query is None:
            command = Continue(ids) if resume else Pause(ids)
            # Paused, they stay tagged: p again continues them, as the dialog says; continued,
            # every tag goes, the ended ones' too, as after a stop.
            untag = (Untag(aim.ids),) if resume else ()
            return (Send(command), *untag, Say(f"{verb} requested for {len(ids)}"), Poll())
        # One summary once every one has taken it (see settle_pauses).
        live, ended_since, _ = _still_live(ids, look)
        sent = (Send(Continue(live) if resume else Pause(live)),) if live else ()
        bulk = BulkPause(live, ended + ended_since, resume)
        text = f"{verb} requested for {len(live)} {_matching(query)}"
        return (*sent, Track(bulk), Say(text), Poll())

    dialog = ConfirmPauseDialog(
        ids, resume=resume, ended=ended, ended_of=aim.ended_of, query=query, group=aim.group
    )
    return (Ask(dialog, answered),)
