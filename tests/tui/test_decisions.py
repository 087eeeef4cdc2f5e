"""The main screen's helpers as plain functions: given values, they return decisions (no app).

The Pilot tests drive the same keys through the screen; these pin what each helper decides, so
a helper that reached back into the screen (or sent a command itself) would show here.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from pathlib import Path
from typing import ClassVar

import pytest
from flightdeck.engine.api import TuiSettings
from flightdeck.engine.attached.rework import Changes
from flightdeck.engine.commands import (
    Accept,
    Command,
    CommandError,
    ContinueAdmission,
    Discard,
    Retry,
    Stop,
    StopAll,
)
from flightdeck.engine.model import (
    OPERATOR_HOLD,
    ChildRow,
    ChildStatus,
    Limits,
    Snapshot,
    SteerReceipt,
    SteerState,
)
from flightdeck.tui.readonly import READ_ONLY
from flightdeck.tui.screens import actions, batch, review
from flightdeck.tui.screens.decisions import (
    Ask,
    Exit,
    Poll,
    Say,
    Send,
    SendOff,
    Track,
    Untag,
    sent_off,
)
from flightdeck.tui.screens.dialogs import ConfirmStopDialog, QuitChoice, QuitDialog
from flightdeck.tui.screens.notices import Notices
from flightdeck.tui.screens.review import AcceptDialog, DiffScreen, DiscardDialog, RetryDialog
from flightdeck.tui.screens.summaries import BulkStop
from flightdeck.tui.screens.targets import Aim
from flightdeck.tui.widgets.lines import ChildLines, GroupHeader
from flightdeck.tui.widgets.rows import GroupBy, SortOrder
from tui_fakes import StaticView, child

S = ChildStatus


def rows_of(folder: Path, *statuses: ChildStatus) -> dict[str, ChildRow]:
    made = (child(i, f"goal {i}", s, folder=folder) for i, s in enumerate(statuses, 1))
    return {row.id: row for row in made}


def snapshot(folder: Path, rows: dict[str, ChildRow]) -> Snapshot:
    return StaticView(folder, tuple(rows.values())).snapshot()


def test_stop_over_the_cursor_asks_then_sends_untags_says_and_polls(tmp_path: Path) -> None:
    rows = rows_of(tmp_path, S.RUNNING, S.COMPLETED)
    aim = Aim(("review-01",), rows, None, None, False)
    (ask,) = actions.stop(aim, lambda: snapshot(tmp_path, rows))
    assert isinstance(ask, Ask) and isinstance(ask.dialog, ConfirmStopDialog)
    assert ask.then(False) == () and ask.then(None) == ()
    assert tuple(ask.then(True)) == (
        Send(Stop(("review-01",))),
        Untag(("review-01",)),
        Say("stop requested for 1"),
        Poll(),
    )


def test_stop_and_continue_of_tagged_children_untag_the_ended_ones_too(tmp_path: Path) -> None:
    """A tag left on a child that had ended took the next key: a filter on, `p` said "c016 has
    completed: nothing to pause" instead of acting on the children the filter kept."""
    rows = rows_of(tmp_path, S.RUNNING, S.COMPLETED, S.PAUSED)
    look = lambda: snapshot(tmp_path, rows)  # noqa: E731
    (ask,) = actions.stop(Aim(("review-01", "review-02"), rows, None, None, True), look)
    assert Untag(("review-01", "review-02")) in tuple(ask.then(True))
    (ask,) = actions.pause(Aim(("review-02", "review-03"), rows, None, None, True), look)
    assert Untag(("review-02", "review-03")) in tuple(ask.then(True))  # continued


def test_a_pause_of_tagged_children_keeps_their_tags_so_p_again_continues_them(
    tmp_path: Path,
) -> None:
    """The dialog says "Press p again over them to continue": untagged, p again acted on the
    cursor's one child."""
    rows = rows_of(tmp_path, S.RUNNING, S.RUNNING)
    (ask,) = actions.pause(
        Aim(tuple(rows), rows, None, None, True), lambda: snapshot(tmp_path, rows)
    )
    assert not any(isinstance(step, Untag) for step in ask.then(True))


def test_stop_over_a_filter_sends_to_those_still_live_when_confirmed(tmp_path: Path) -> None:
    rows = rows_of(tmp_path, S.RUNNING, S.RUNNING, S.FAILED)
    aim = Aim(tuple(rows), rows, "goal", None, False)
    # While the dialog is open, review-02 finishes on its own.
    later = dict(rows, **{"review-02": dataclasses.replace(rows["review-02"], status=S.COMPLETED)})
    (ask,) = actions.stop(aim, lambda: snapshot(tmp_path, later))
    assert tuple(ask.then(True)) == (
        Send(Stop(("review-01",))),
        Track(BulkStop(("review-01",), 2)),  # one had ended before, one since
        Say("stop requested for 1 matching `goal`"),
        Poll(),
    )


def test_a_key_over_children_that_all_ended_decides_nothing(tmp_path: Path) -> None:
    rows = rows_of(tmp_path, S.COMPLETED, S.STOPPED)
    aim = Aim(tuple(rows), rows, None, None, True)
    look = lambda: snapshot(tmp_path, rows)  # noqa: E731
    assert actions.stop(aim, look) == ()
    assert actions.pause(aim, look) == ()
    assert actions.nudge(aim) == ()
    assert aim.nothing_to("stop") == "all 2 tagged children have ended: nothing to stop"


class Viewed:
    """What Quit reads of a view: a snapshot and a read-only reason, changed by the test."""

    def __init__(self, snap: Snapshot, read_only: str | None = None) -> None:
        self.snap, self.read_only, self.can_detach = snap, read_only, True

    def snapshot(self) -> Snapshot:
        return self.snap


def test_quit_exits_at_once_with_nothing_live_else_asks_once(tmp_path: Path) -> None:
    quit = batch.Quit()
    done = snapshot(tmp_path, rows_of(tmp_path, S.COMPLETED))
    assert tuple(quit.pressed(Viewed(done))) == (Exit(stopped=False),)  # type: ignore[arg-type]
    live = snapshot(tmp_path, rows_of(tmp_path, S.RUNNING))
    gone = Viewed(live, "the owner is gone")
    assert tuple(quit.pressed(gone)) == (Exit(False),)  # type: ignore[arg-type]
    view = Viewed(live)
    (ask,) = quit.pressed(view)  # type: ignore[arg-type]
    assert isinstance(ask, Ask) and isinstance(ask.dialog, QuitDialog)
    assert quit.pressed(view) == ()  # type: ignore[arg-type]  # one question at a time
    assert tuple(ask.then(QuitChoice.STOP)) == (Send(StopAll()), Exit(stopped=True))
    assert quit.pressed(view) != ()  # type: ignore[arg-type]  # answered: it may ask again


def test_between_two_waves_quit_and_stop_all_still_act_on_the_scheduled_batch(
    tmp_path: Path,
) -> None:
    # Found walking the fleet: with no child live between two waves, `q` detached at once and
    # `X` was hidden and did nothing, the batch firing wave after wave with nobody watching.
    rows = rows_of(tmp_path, S.COMPLETED)
    between = dataclasses.replace(snapshot(tmp_path, rows), scheduled=True)
    (ask,) = batch.Quit().pressed(Viewed(between))  # type: ignore[arg-type]
    assert isinstance(ask, Ask) and isinstance(ask.dialog, QuitDialog)
    assert tuple(ask.then(QuitChoice.STOP)) == (Send(StopAll()), Exit(stopped=True))
    (ask,) = batch.stop_all(rows, between)
    assert isinstance(ask, Ask) and isinstance(ask.dialog, ConfirmStopDialog)
    assert "no more waves" in ask.dialog.heading
    assert tuple(ask.then(True)) == (Send(StopAll()), Say("stop requested: no more waves"), Poll())
    # Without schedules (or once they ended) nothing is left to stop: quit at once, X says nothing.
    ended = snapshot(tmp_path, rows)
    assert tuple(batch.Quit().pressed(Viewed(ended))) == (Exit(stopped=False),)  # type: ignore[arg-type]
    assert batch.stop_all(rows, ended) == ()


def test_continuing_admission_the_soft_budget_still_holds_says_so(tmp_path: Path) -> None:
    # Found by an audit: P over a batch held by the operator and the soft budget said
    # "admission continued: children start again", and none started: the soft budget held on.
    soft = "soft budget $0.00 reached: spent $0.00"
    snap = dataclasses.replace(
        snapshot(tmp_path, rows_of(tmp_path, S.RUNNING)),
        held=f"{OPERATOR_HOLD}; {soft}",
        limits=Limits(pool_size=4, soft_cost_usd=Decimal(0), soft_held=soft),
    )
    assert tuple(batch.pause_admission(snap)) == (
        Send(ContinueAdmission()),
        Say(f"admission continued, but still held: {soft}; L raises or drops it"),
        Poll(),
    )
    alone = dataclasses.replace(snap, held=OPERATOR_HOLD, limits=Limits(pool_size=4))
    (_, said, _) = batch.pause_admission(alone)
    assert said == Say("admission continued: children start again")


def test_many_engine_facts_between_polls_are_one_toast(tmp_path: Path) -> None:
    notices = Notices(TuiSettings())
    rows = rows_of(tmp_path, S.FAILED, S.FAILED, S.COMPLETED, S.STOPPED)
    notices.child_finished(rows["review-01"])
    notices.batch_finished("completed", None)
    assert [say.text for say in notices.flush()] == [
        "review-01 failed",
        "batch finished: completed",
    ]
    assert notices.flush() == []
    for row in rows.values():
        notices.child_finished(row)
    # A warning, as its failures each were: shown as information, the sum read as good news.
    assert tuple(notices.flush()) == (Say("4 updates (4 failures)", "warning"),)


def test_a_trickle_of_failures_keeps_at_most_three_toasts_on_screen(tmp_path: Path) -> None:
    # Walking a 5,000-child batch: a failure every poll or two was a toast each, five seconds
    # long, so the toasts stood over half an 80-column screen (and the transcript's end) for
    # the whole run. Three at most stay on screen; the rest wait and are summed up, none lost.
    now = [0.0]
    notices = Notices(TuiSettings(), clock=lambda: now[0])
    failed = next(iter(rows_of(tmp_path, S.FAILED).values()))
    told: list[tuple[float, str]] = []
    for poll in range(40):  # a failure every poll (0.25 s) for ten seconds
        now[0] = poll * 0.25
        notices.child_finished(failed)
        told += [(now[0], say.text) for say in notices.flush()]
    for at, _ in told:  # never more than three in a toast's five seconds
        assert sum(1 for t, _ in told if at <= t < at + 5.0) <= 3
    assert told[:3] == [(t, "review-01 failed") for t in (0.0, 0.25, 0.5)]
    assert told[3] == (5.0, "18 updates (18 failures)")
    counted = sum(int(text.split()[0]) if "updates" in text else 1 for _, text in told)
    now[0] = 60.0
    counted += sum(int(s.text.split()[0]) if "updates" in s.text else 1 for s in notices.flush())
    assert counted == 40
    now[0] = 100.0
    for _ in range(3):  # three toasts on screen: no room for a fourth
        notices.child_finished(failed)
        assert len(notices.flush()) == 1
    notices.child_finished(failed)
    notices.batch_finished("completed", None)  # the batch's own news is never held
    assert [say.text for say in notices.flush()] == ["batch finished: completed"]
    now[0] = 105.0
    assert [say.text for say in notices.flush()] == ["review-01 failed"]


def test_many_missed_steers_summed_up_are_not_called_failures(tmp_path: Path) -> None:
    # Walking a 5,000-child batch: a stop of everything while a steer to a group of 510 was
    # on its way summed its receipts up as "184 updates (183 failures)"; one child had failed.
    notices = Notices(TuiSettings())
    missed = SteerReceipt(3, "ev-141", "Be brief.", False, SteerState.MISSED, 1.0, 1.0)
    for n in range(5):
        notices.steer_settled(dataclasses.replace(missed, id=n, child_id=f"ev-{n}"))
    notices.child_finished(next(iter(rows_of(tmp_path, S.FAILED).values())))
    assert [say.text for say in notices.flush()] == ["6 updates (1 failure, 5 steers missed)"]


def test_a_missed_steer_says_why_and_a_delivered_one_alone(tmp_path: Path) -> None:
    notices = Notices(TuiSettings())
    missed = SteerReceipt(
        3,
        "ev-141",
        "Be brief.",
        False,
        SteerState.MISSED,
        1.0,
        1.0,
        how="the child had ended: completed",
    )
    delivered = dataclasses.replace(missed, child_id="ev-136", state=SteerState.DELIVERED, how=None)
    notices.steer_settled(missed)
    notices.steer_settled(delivered)
    assert [say.text for say in notices.flush()] == [
        "steer missed: ev-141 (the child had ended: completed)",
        "steer delivered: ev-136",
    ]


def test_child_lines_sort_filter_and_group_without_a_widget(tmp_path: Path) -> None:
    lines = ChildLines()
    rows = rows_of(tmp_path, S.COMPLETED, S.RUNNING, S.FAILED, S.RUNNING)
    taken = lines.take(list(rows.values()), 0.0)
    assert taken.refiltered and taken.wider  # `review-01` is wider than the column's floor
    lines.set_order(SortOrder.ID)
    lines.relayout(lines.sorted_ids())
    assert list(lines.shown) == ["review-01", "review-02", "review-03", "review-04"]
    lines.set_grouping(GroupBy.STATUS)
    lines.relayout(lines.sorted_ids())
    running = GroupHeader(GroupBy.STATUS, "running")
    assert running in lines.lines and lines.group_members(running) == ["review-02", "review-04"]
    lines.folded.add(running)
    lines.relayout()
    assert "review-02" not in lines.shown and lines.position(running) is not None
    # A snapshot where nothing changed takes nothing in.
    again = lines.take(list(rows.values()), 0.0)
    assert not (again.refiltered or again.moved or again.regrouped)


# --- review.py: R, M and delete over children that ended ------------------------------------


def test_retry_asks_over_those_that_failed_and_sends_it_off_the_event_loop(tmp_path: Path) -> None:
    rows = rows_of(tmp_path, S.FAILED, S.COMPLETED, S.STOPPED)
    (ask,) = review.retry(Aim(tuple(rows), rows, None, None, True))
    assert isinstance(ask, Ask) and isinstance(ask.dialog, RetryDialog)
    assert ask.dialog.child_ids == ["review-01", "review-03"] and ask.dialog.skipped == 1
    assert ask.then(None) == ()
    retried = Retry(("review-01", "review-03"), True)
    assert tuple(ask.then(True)) == (SendOff(retried, "retry (continue) queued for 2 children"),)
    # One child that completed is named, as one still running is and as `flightdeck retry`
    # says it (found in a walkthrough: "nothing here to retry: none failed or was stopped").
    completed = Aim(("review-02",), rows, None, None, False)
    assert review.retry(completed) == (Say("review-02 completed: nothing to retry"),)
    done = rows_of(tmp_path, S.COMPLETED, S.COMPLETED)
    both = Aim(tuple(done), done, "status:completed", None, False)
    assert review.retry(both) == (Say("nothing here to retry: none failed or was stopped"),)


def test_retry_leaves_a_schedules_waves_out(tmp_path: Path) -> None:
    # Found in a walkthrough: R over `status:unknown` after a lost owner offered the waves
    # too, and the owner refused the whole retry (the batch's own tasks with it).
    rows = rows_of(tmp_path, S.FAILED, S.UNKNOWN, S.STOPPED)
    own = {"review-01", "review-03"}  # review-02 is a schedule's wave
    (ask,) = review.retry(Aim(tuple(rows), rows, "status:unknown", None, False, own))
    assert isinstance(ask, Ask) and isinstance(ask.dialog, RetryDialog)
    assert ask.dialog.child_ids == ["review-01", "review-03"] and ask.dialog.waves == 1
    wave = Aim(("review-02",), rows, None, None, False, own)
    assert review.retry(wave) == (
        Say("nothing here to retry: 1 schedule wave is left out (not retried)"),
    )


def test_retry_says_delegates_are_left_out_as_delegates_not_as_completed(tmp_path: Path) -> None:
    # Walking a 5,000-child batch: R over `status:failed` said "6 children that completed or
    # still run are left out" of 109 that had all failed: 6 were delegates (they run again
    # with their parents, as `flightdeck retry` says).
    rows = rows_of(tmp_path, S.FAILED, S.FAILED, S.COMPLETED, S.STOPPED)
    rows["review-02"] = dataclasses.replace(rows["review-02"], parent="review-01")
    rows["review-04"] = dataclasses.replace(rows["review-04"], parent="review-01")
    (ask,) = review.retry(Aim(tuple(rows), rows, "status:failed", None, False))
    assert isinstance(ask, Ask) and isinstance(ask.dialog, RetryDialog)
    assert ask.dialog.child_ids == ["review-01"] and ask.dialog.skipped == 1
    assert ask.dialog.delegates == 2
    delegates = Aim(("review-02",), rows, None, None, False)
    assert review.retry(delegates) == (
        Say("nothing here to retry: 1 delegate is left out (they run again with their parents)"),
    )


def test_merge_and_discard_act_on_pending_changes_only(tmp_path: Path) -> None:
    pending = Changes(files=(), workspace=str(tmp_path))
    rows = rows_of(tmp_path, S.COMPLETED, S.FAILED)
    rows["review-01"] = dataclasses.replace(rows["review-01"], changes=pending)
    accepted = dataclasses.replace(pending, state="accepted")
    rows["review-02"] = dataclasses.replace(rows["review-02"], changes=accepted)
    aim = Aim(tuple(rows), rows, None, None, True)
    (ask,) = review.merge(aim)
    assert isinstance(ask, Ask) and isinstance(ask.dialog, AcceptDialog)
    assert ask.dialog.child_ids == ["review-01"] and ask.then(None) == ()
    merged = SendOff(Accept(("review-01",), "main"), review.Decided(("review-01",)))
    assert tuple(ask.then("main")) == (merged,)
    (ask,) = review.discard(aim)
    assert isinstance(ask.dialog, DiscardDialog) and ask.then(False) == ()
    assert tuple(ask.then(True)) == (
        SendOff(Discard(("review-01",)), review.Decided(("review-01",))),
    )
    done = Aim(("review-02",), rows, None, None, False)
    assert review.merge(done) == (Say("nothing here to merge: no changes left pending"),)
    (shown,) = review.diff(rows["review-02"], ())  # its changes, accepted, still shown
    assert (
        isinstance(shown, Ask) and isinstance(shown.dialog, DiffScreen) and shown.then(None) == ()
    )
    no_child = Say("no child is selected: D shows the selected child's changes")
    assert review.diff(None, ()) == (no_child,)  # a header, or a filter that keeps none


def test_d_on_a_running_child_says_its_changes_are_known_once_it_ends(tmp_path: Path) -> None:
    # Found in a walkthrough: D over a child still running (it had written a file) said it
    # "changed no file", where `flightdeck diff` says it has not ended.
    rows = rows_of(tmp_path, S.RUNNING, S.COMPLETED)
    said = "review-01 has not ended (running): its changes are known once it has"
    assert review.diff(rows["review-01"], ()) == (Say(said),)
    no_file = Say("this child changed no file in a workspace of its own")
    assert review.diff(rows["review-02"], ()) == (no_file,)


def test_m_and_delete_say_what_was_applied_in_the_command_line_sentence(tmp_path: Path) -> None:
    # One action, one sentence: `flightdeck merge` prints `accepted a, b into main (now <sha>)`,
    # the M key said `merged 2 children into main` (and delete `discarded 2 children' changes`).
    pending = Changes(files=(), workspace=str(tmp_path))
    rows = {
        i: dataclasses.replace(r, changes=pending)
        for i, r in rows_of(tmp_path, S.FAILED, S.FAILED).items()
    }
    aim = Aim(tuple(rows), rows, None, None, True)
    merged = {
        i: dataclasses.replace(
            r, changes=pending.decided("accepted", branch=i, into="main", commit="0123456789abcdef")
        )
        for i, r in rows.items()
    }
    discarded = {
        i: dataclasses.replace(r, changes=pending.decided("discarded")) for i, r in rows.items()
    }
    view = Sending(snapshot(tmp_path, merged))
    (ask,) = review.merge(aim)
    (off,) = ask.then("main")
    assert isinstance(off, SendOff) and off.done == review.Decided(("review-01", "review-02"))
    assert tuple(sent_off(view, off, None)) == (
        Say("accepted review-01, review-02 into main (now 0123456789ab)"),
        Poll(),
    )
    view.snap = snapshot(tmp_path, discarded)
    (ask,) = review.discard(aim)
    (off,) = ask.then(True)
    assert isinstance(off, SendOff)
    assert tuple(sent_off(view, off, None)) == (Say("discarded review-01, review-02"), Poll())
    ids = ("review-01", "review-02")
    assert view.sent == [Accept(ids, "main"), Discard(ids)]
    # A view whose snapshot does not show it yet: said as applied, not as something else.
    view.snap = snapshot(tmp_path, rows)
    assert tuple(sent_off(view, off, None)) == (Say("applied to 2 children"), Poll())


class Sending:
    """A view that records what is sent to it (or refuses it, saying `refuse`); `snap`: the
    batch as it stands once that is applied."""

    def __init__(self, snap: Snapshot | None = None, refuse: str | None = None) -> None:
        self.sent: list[Command] = []
        self.snap = snap
        self.refuse = refuse

    def send(self, command: Command) -> None:
        if self.refuse is not None:
            raise CommandError(self.refuse)
        self.sent.append(command)

    def snapshot(self) -> Snapshot:
        assert self.snap is not None
        return self.snap


def test_a_slow_send_says_when_it_was_taken_refused_or_read_only() -> None:
    said = "retry (fresh) queued for 1 child"
    step = SendOff(Retry(("a",), False), said)
    view = Sending()
    assert tuple(sent_off(view, step, None)) == (Say(said), Poll())
    assert view.sent == [step.command]
    refusing = Sending(refuse="nothing to retry")
    assert tuple(sent_off(refusing, step, None)) == (
        Say("retry not applied: nothing to retry", "error"),
    )
    assert tuple(sent_off(view, step, READ_ONLY)) == (Say(READ_ONLY, "warning"),)
    assert view.sent == [step.command]  # a read-only view sends nothing


class _FakeSoftDialog:
    """The soft budget's dialog as `SoftBudget` sees it: its hold, and its place in a stack."""

    stack: ClassVar[list[object]] = []

    def __init__(self, held: str, *_: object) -> None:
        self.held = held
        self.app = self  # `asking.app.screen_stack`
        self.screen_stack = _FakeSoftDialog.stack

    @property
    def is_active(self) -> bool:
        return self.stack[-1] is self

    def dismiss(self, _: object) -> None:
        self.stack.remove(self)


def test_a_soft_budget_question_under_another_dialog_is_closed_even_after_a_new_hold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its hold lifted while another dialog covered it, then a new hold asked again: the first
    # question was forgotten, left in the stack, its stale Continue dropping the new budget.
    monkeypatch.setattr(batch, "SoftBudgetDialog", _FakeSoftDialog)
    stack = _FakeSoftDialog.stack
    stack[:] = ["main"]
    soft, rows = batch.SoftBudget(), rows_of(tmp_path, ChildStatus.RUNNING)

    def seen(held: str | None) -> None:
        limits = Limits(pool_size=2, soft_cost_usd=Decimal(1), soft_held=held)
        snap = dataclasses.replace(snapshot(tmp_path, rows), limits=limits)
        for step in soft.seen(snap, lambda command: None, None):
            assert isinstance(step, Ask)
            stack.append(step.dialog)

    seen("soft budget $1.00 reached: spent $1.00")
    first = stack[-1]
    stack.append("another dialog")
    seen(None)  # raised from another terminal
    seen("soft budget $2.00 reached: spent $2.00")  # and reached again
    stack.remove("another dialog")
    stack.remove(stack[-1])  # the new question, answered
    seen(None)
    assert first not in stack, stack
