"""The main screen's helpers as plain functions: given values, they return decisions (no app).

The Pilot tests drive the same keys through the screen; these pin what each helper decides, so
a helper that reached back into the screen (or sent a command itself) would show here.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from flightdeck.engine.api import TuiSettings
from flightdeck.engine.commands import Stop, StopAll
from flightdeck.engine.model import ChildRow, ChildStatus, Snapshot
from flightdeck.tui.screens import actions, batch
from flightdeck.tui.screens.decisions import Ask, Exit, Poll, Say, Send, Track, Untag
from flightdeck.tui.screens.dialogs import ConfirmStopDialog, QuitChoice, QuitDialog
from flightdeck.tui.screens.notices import Notices
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


def test_quit_exits_at_once_with_nothing_live_else_asks_once(tmp_path: Path) -> None:
    quit = batch.Quit()
    done = snapshot(tmp_path, rows_of(tmp_path, S.COMPLETED))
    assert tuple(quit.pressed(done, None, can_detach=True)) == (Exit(stopped=False),)
    live = snapshot(tmp_path, rows_of(tmp_path, S.RUNNING))
    assert tuple(quit.pressed(live, "the owner is gone", can_detach=True)) == (Exit(False),)
    (ask,) = quit.pressed(live, None, can_detach=True)
    assert isinstance(ask, Ask) and isinstance(ask.dialog, QuitDialog)
    assert quit.pressed(live, None, can_detach=True) == ()  # one question at a time
    assert tuple(ask.then(QuitChoice.STOP)) == (Send(StopAll()), Exit(stopped=True))
    assert quit.pressed(live, None, can_detach=True) != ()  # answered: it may ask again


def test_many_engine_facts_between_polls_are_one_toast(tmp_path: Path) -> None:
    notices = Notices(TuiSettings())
    rows = rows_of(tmp_path, S.FAILED, S.FAILED, S.COMPLETED, S.STOPPED)
    notices.child_finished(rows["review-01"])
    notices.batch_finished("completed")
    assert [say.text for say in notices.flush()] == [
        "review-01 failed",
        "batch finished: completed",
    ]
    assert notices.flush() == []
    for row in rows.values():
        notices.child_finished(row)
    assert tuple(notices.flush()) == (Say("4 updates (4 failures)"),)


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
