"""The "since you last looked" digest, the last-looked file, and the alerts' batching and text."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import stat
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.api import needs
from flightdeck.engine.model import (
    BatchStatus,
    ChildRow,
    ChildStatus,
    Denial,
    Limits,
    LoopEvidence,
    Question,
    Snapshot,
    SteerReceipt,
    SteerState,
)
from flightdeck.tui.alerts import GATHER_S, AlertBatcher, Alerts, AlertWatch, notification, safe_id
from flightdeck.tui.digest import Mark, digest
from flightdeck.tui.lastlooked import LastLooked
from flightdeck.tui.widgets.digest import digest_text
from tui_fakes import T0, child, totals_of

S = ChildStatus
BATCH = "20270115-080000-demo"


def snap(
    rows: tuple[ChildRow, ...], at: float, held: str | None = None, soft_held: str | None = None
) -> Snapshot:
    return Snapshot(
        batch_id=BATCH,
        status=BatchStatus.RUNNING,
        started_ts=T0,
        now=T0 + at,
        children=rows,
        totals=totals_of(rows),
        pool_size=4,
        held=held,
        limits=Limits(4, soft_cost_usd=Decimal("5"), soft_held=soft_held),
    )


def looping(row: ChildRow, at: float) -> ChildRow:
    evidence = LoopEvidence("repeat", "read_file(path='a.py') 5 times", ("read_file",) * 5, T0 + at)
    return dataclasses.replace(row, loop=evidence, looped_ts=evidence.ts)


def test_the_digest_counts_children_flagged_looping_since_even_once_they_stop(
    tmp_path: Path,
) -> None:
    # A real child flagged looping, nudged, and cleared by its progress: it looped since the
    # mark, whether it still does or not, in the engine's view and in a view of its store.
    from flightdeck.engine.attached.view import StoreView
    from flightdeck.engine.inputs.settings import LoopSettings
    from flightdeck.engine.inputs.tasks import Task

    from helpers import run_to_end, settings, sim_route, start, tasks_batch

    loops = LoopSettings(repeat_calls=0, stale_turns=2, policy=("nudge",))
    route = dataclasses.replace(sim_route(time_scale=0.01, latency_ms=500), loops=loops)
    b = tasks_batch([Task(id="loops", goal="Review it [sim:loop]", seq=0, max_turns=400)])
    engine = start(b, settings(route), tmp_path)
    mark = Mark(engine.batch_id, engine.snapshot().started_ts - 1, Decimal(0))
    live = run_to_end(engine)
    assert live.children[0].loop is None  # no longer looping
    assert digest(mark, live).looped == 1
    view = StoreView(tmp_path / "state" / "flightdeck.db", engine.batch_id)
    try:
        attached = view.snapshot()
    finally:
        view.close()
    assert digest(mark, attached).looped == 1
    # Flagged before the mark: not since.
    later = dataclasses.replace(mark, ts=live.children[0].finished_ts or 0.0)
    assert digest(later, live).looped == digest(later, attached).looped == 0


def steer(n: int, child_id: str, state: SteerState, settled: float | None) -> SteerReceipt:
    settled_ts = T0 + settled if settled is not None else None
    return SteerReceipt(n, child_id, "wrap up", False, state, T0 + 1, settled_ts)


def test_the_digest_counts_what_happened_between_two_points(tmp_path: Path) -> None:
    f = tmp_path
    before_rows = (
        child(1, "done early", S.COMPLETED, folder=f, cost="0.10", started=1, finished=50),
        child(2, "a", S.RUNNING, folder=f, cost="0.05", started=2, last=99),
        child(3, "b", S.RUNNING, folder=f, cost="0.05", started=2, last=99),
        child(4, "c", S.RUNNING, folder=f, cost="0.00", started=2, last=99),
        child(5, "d", S.RUNNING, folder=f, cost="0.00", started=2, last=99),
        child(6, "e", S.RUNNING, folder=f, cost="0.00", started=2, last=99),
        child(7, "f", S.RUNNING, folder=f, cost="0.00", started=2, last=99),
        child(8, "failed early", S.FAILED, folder=f, started=1, finished=60, error="old error"),
    )
    mark = Mark.of(snap(before_rows, 100))
    rate = "RateLimited: 429 on req_8f3a2b, retry in 3.2s"
    after_rows = (
        before_rows[0],
        child(2, "a", S.COMPLETED, folder=f, cost="0.25", started=2, finished=150),
        child(3, "b", S.FAILED, folder=f, cost="0.10", started=2, finished=160, error=rate),
        child(4, "c", S.FAILED, folder=f, started=2, finished=170,
              error=rate.replace("8f3a2b", "99aa01").replace("3.2", "9")),
        child(5, "d", S.TIMED_OUT, folder=f, started=2, finished=170, error="timed out after 600s"),
        child(6, "e", S.STALLED, folder=f, started=2, finished=175, error="no activity for 120s"),
        looping(child(7, "f", S.RUNNING, folder=f, started=2, last=190,
                      steers=(steer(1, "review-07", SteerState.DELIVERED, 120),
                              steer(2, "review-07", SteerState.MISSED, 95),
                              steer(3, "review-07", SteerState.QUEUED, None))), 180),
        before_rows[7],
    )  # fmt: skip
    after_rows = (*after_rows, child(9, "g", S.RUNNING, folder=f, started=101, last=190,
                  steers=(steer(4, "review-09", SteerState.MISSED, 130),)))  # fmt: skip
    d = digest(mark, snap(after_rows, 200))
    assert (d.since, d.until) == (T0 + 100, T0 + 200)
    assert (d.completed, d.failed, d.stalled, d.stopped, d.looped) == (1, 3, 1, 0, 1)
    # spent since: 0.25 + 0.10 + 0.10 (child 1) - (0.10 + 0.05 + 0.05) before
    assert d.spent_usd == Decimal("0.25")
    # the delivered one and the later miss count; the miss before the mark and the queued don't
    assert (d.steers_delivered, d.steers_missed) == (1, 1)
    # the two rate limits are one signature, the timeout another; the old failure is not new
    assert d.signatures == (
        ("RateLimited: <n> on <id>, retry in <n>s", 2),
        ("timed out after <n>s", 1),
    )
    assert d.other_failures == 0 and not d.empty


def test_nothing_new_is_an_empty_digest_and_a_resumed_batch_never_spends_less(
    tmp_path: Path,
) -> None:
    rows = (child(1, "a", S.RUNNING, folder=tmp_path, cost="0.10", started=1, last=50),)
    later = snap(rows, 300)
    assert digest(Mark.of(snap(rows, 100)), later).empty
    # an earlier owner counted more than the store now holds (a lost attempt): not negative
    d = digest(Mark(BATCH, T0 + 100, Decimal("0.30")), later)
    assert d.spent_usd == 0 and d.empty
    assert "nothing new" in digest_text(d).plain


def test_top_signatures_are_the_commonest_and_the_rest_are_counted(tmp_path: Path) -> None:
    errors = ["alpha broke"] * 3 + ["beta broke"] * 2 + ["gamma"] * 2 + ["delta", None]
    rows = tuple(
        child(i, "g", S.FAILED, folder=tmp_path, started=1, finished=20, error=e)
        for i, e in enumerate(errors, start=1)
    )
    d = digest(Mark(BATCH, T0 + 10, Decimal(0)), snap(rows, 30))
    assert d.failed == 9
    assert [s for s, _ in d.signatures][:2] == ["alpha broke", "beta broke"]
    assert [n for _, n in d.signatures] == [3, 2, 2]
    assert d.other_failures == 2  # delta, and the one with no message


def test_superseded_delegates_are_no_news_and_sort_with_the_finished(tmp_path: Path) -> None:
    # Found by an audit: after a resume re-ran their parent, its earlier attempt's delegates
    # (unknown: their owner died) read as 2 failed in the digest and sorted as most urgent.
    from flightdeck.tui.widgets.rows import SortOrder, sort_key

    lost = child(1, "a", S.UNKNOWN, folder=tmp_path, started=1, finished=20, error="owner lost")
    gone = dataclasses.replace(lost, superseded=True)
    running = child(2, "b", S.RUNNING, folder=tmp_path, started=1, last=25)
    assert digest(Mark(BATCH, T0 + 10, Decimal(0)), snap((lost, running), 30)).failed == 1
    d = digest(Mark(BATCH, T0 + 10, Decimal(0)), snap((gone, running), 30))
    assert d.failed == 0 and d.signatures == ()
    key = sort_key(SortOrder.ATTENTION, gone)
    assert sort_key(SortOrder.ATTENTION, lost) < sort_key(SortOrder.ATTENTION, running) < key
    # Grouped by status apart, last, as the meter counts them (not among the unknown).
    from flightdeck.engine.api import Membership
    from flightdeck.tui.widgets.rows import GroupBy, group_rank, group_value

    units = Membership(None)
    assert (group_value(GroupBy.STATUS, lost, units), group_value(GroupBy.STATUS, gone, units)) == (
        "unknown",
        "superseded",
    )
    assert group_rank(GroupBy.STATUS, "superseded") > group_rank(GroupBy.STATUS, "stopped")


def test_the_panel_text_sanitizes_error_signatures(tmp_path: Path) -> None:
    hostile = "boom \x1b]0;pwned\x07 [bold]x[/] \x9b31m"
    rows = (child(1, "a", S.FAILED, folder=tmp_path, started=1, finished=20, error=hostile),)
    text = digest_text(digest(Mark(BATCH, T0, Decimal(0)), snap(rows, 30))).plain
    assert "\x1b" not in text and "\x07" not in text and "\x9b" not in text
    assert "[bold]x[/]" in text  # shown as written, never taken as markup
    assert "0 finished · 1 failed" in text


# --- the last-looked file ------------------------------------------------------------------


def test_the_last_look_is_written_whole_private_and_read_back(tmp_path: Path) -> None:
    looked = LastLooked(tmp_path, BATCH)
    assert looked.read() is None  # never written: no digest on a first attach
    mark = Mark(BATCH, T0 + 12.5, Decimal("0.0421"))
    looked.write(mark)
    assert looked.path == tmp_path / "batches" / BATCH / "looked.json"
    assert stat.S_IMODE(os.stat(looked.path).st_mode) == 0o600
    assert LastLooked(tmp_path, BATCH).read() == mark
    looked.write(dataclasses.replace(mark, ts=T0 + 20))
    assert looked.read() == dataclasses.replace(mark, ts=T0 + 20)
    assert [p.name for p in looked.path.parent.iterdir()] == ["looked.json"]  # no temp left


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        "[]",
        json.dumps({"batch": "another", "ts": 1.0, "spent_usd": "0"}),
        json.dumps({"batch": BATCH, "ts": "yesterday", "spent_usd": "0"}),
        json.dumps({"batch": BATCH, "ts": 1.0, "spent_usd": "lots"}),
        json.dumps({"batch": BATCH, "ts": 1.0, "spent_usd": "NaN"}),
        json.dumps({"batch": BATCH, "ts": 1.0}),
    ],
)
def test_a_corrupt_last_look_is_ignored_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, content: str
) -> None:
    looked = LastLooked(tmp_path, BATCH)
    looked.path.parent.mkdir(parents=True)
    looked.path.write_text(content)
    with caplog.at_level(logging.WARNING, logger="flightdeck"):
        assert looked.read() is None
    assert any("looked.json" in r.getMessage() for r in caplog.records), caplog.records
    looked.write(Mark(BATCH, T0, Decimal(0)))  # and it is written over on the next look
    assert looked.read() == Mark(BATCH, T0, Decimal(0))


def test_a_last_look_the_disk_refuses_is_a_warning_not_a_crash(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "batches").write_text("a file where the folder should be")
    looked = LastLooked(tmp_path, BATCH)
    with caplog.at_level(logging.WARNING, logger="flightdeck"):
        looked.write(Mark(BATCH, T0, Decimal(0)))
        assert looked.read() is None
        looked.write(Mark(BATCH, T0 + 1, Decimal(0)))  # not tried again: one warning
    assert sum("could not keep" in r.getMessage() for r in caplog.records) == 1, caplog.records


# --- alerts --------------------------------------------------------------------------------


def test_alerts_count_what_is_new_after_the_first_snapshot(tmp_path: Path) -> None:
    f = tmp_path
    watch = AlertWatch()
    old = child(1, "a", S.FAILED, folder=f, started=1, finished=5, error="x")
    running = [child(i, "r", S.RUNNING, folder=f, started=1, last=5) for i in range(2, 6)]
    assert not watch.observe(
        needs(snap((old, *running), 10))
    )  # what had failed before: the baseline
    burst = (
        old,
        child(2, "r", S.FAILED, folder=f, started=1, finished=11),
        child(3, "r", S.STALLED, folder=f, started=1, finished=11),
        looping(running[2], 11),
        running[3],
    )
    # The operator's own pause is no news to them; the soft budget's hold is.
    assert watch.observe(needs(snap(burst, 12, held="paused by the operator"))) == Alerts(2, 1, 0)
    budget = "soft budget $5.00 reached: projected $6.20"
    assert watch.observe(needs(snap(burst, 13, held=budget, soft_held=budget))) == Alerts(0, 0, 1)
    assert not watch.observe(needs(snap(burst, 14, held=budget, soft_held=budget)))  # nothing new


def test_an_entry_alerts_once_never_again_even_when_it_comes_back(tmp_path: Path) -> None:
    f = tmp_path
    watch = AlertWatch()
    asking = child(1, "a", S.RUNNING, folder=f, started=1, last=5)
    asks = dataclasses.replace(asking, question=Question("which branch?", T0 + 6))
    failed = child(2, "b", S.FAILED, folder=f, started=1, finished=7, error="x")
    assert not watch.observe(needs(snap((asking,), 5)))
    assert watch.observe(needs(snap((asks,), 6))) == Alerts(asks=1)
    assert not watch.observe(needs(snap((asks,), 7)))  # the same question, another poll
    cleared = dataclasses.replace(failed, dismissed_ts=T0 + 8)
    assert watch.observe(needs(snap((asks, failed), 8))) == Alerts(failed=1)
    assert not watch.observe(needs(snap((asks, cleared), 9)))  # cleared: gone
    assert not watch.observe(needs(snap((asks, failed), 10)))  # back, the same entry: no alert
    denied = dataclasses.replace(asking, denial=Denial("Bash", "{}", T0 + 11))
    assert watch.observe(needs(snap((denied, failed), 11))) == Alerts(denied=1)
    assert Alerts(asks=2, denied=1).text == "2 ask, 1 denied a tool"


def test_a_burst_of_alerts_is_one_with_the_counts_then_at_most_one_every_n_seconds() -> None:
    batcher = AlertBatcher(every_s=30)
    t = 1000.0
    batcher.add(Alerts(failed=1), t)
    assert batcher.due(t) is None  # gathering the rest of the burst
    batcher.add(Alerts(failed=2), t + 0.3)
    batcher.add(Alerts(looping=1), t + 0.6)
    assert batcher.due(t + GATHER_S) == Alerts(3, 1, 0)
    assert batcher.due(t + GATHER_S + 0.1) is None  # nothing pending
    batcher.add(Alerts(failed=1), t + 5)
    batcher.add(Alerts(held=1), t + 20)
    assert batcher.due(t + 25) is None  # too soon after the last
    assert batcher.due(t + GATHER_S + 30) == Alerts(1, 0, 1)
    assert Alerts(3, 1, 0).text == "3 failed, 1 looping"
    assert Alerts(0, 0, 1).text == "budget held"


def test_a_desktop_notification_is_counts_and_a_sanitized_id_only() -> None:
    hostile = "b\x1b]777;notify;x;y\x07\x1b[2J;rm -rf\x9c\u202e"
    alerts = Alerts(3, 1, 0)
    for style in ("osc777", "osc9"):
        sequence = notification(style, hostile, alerts)
        assert sequence is not None
        # one OSC: it starts with ESC ], ends at its BEL, and nothing else is a control character
        assert sequence.startswith("\x1b]") and sequence.endswith("\x07")
        payload = sequence[2:-1]
        assert all(0x20 <= ord(c) < 0x7F for c in payload), repr(payload)
    assert notification("osc777", hostile, alerts) == (
        "\x1b]777;notify;flightdeck b777notifyxy2Jrm-rf;3 failed, 1 looping\x07"
    )
    assert notification("osc9", BATCH, alerts) == (
        f"\x1b]9;flightdeck {BATCH}: 3 failed, 1 looping\x07"
    )
    assert notification("off", BATCH, alerts) is None
    assert safe_id("x" * 100) == "x" * 64
