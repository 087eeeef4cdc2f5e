"""Schedules on the coordinator's clock: waves of tasks, with an injected clock (no waiting for
real minutes)."""

from __future__ import annotations

import dataclasses
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.attached.client import Client
from flightdeck.engine.attached.view import StoreView
from flightdeck.engine.control.schedules import ScheduleClock
from flightdeck.engine.errors import SpecError
from flightdeck.engine.inputs.settings import Budget
from flightdeck.engine.inputs.tasks import Batch, Schedule, Task, load_batch
from flightdeck.engine.model import BatchStatus, ChildStatus
from flightdeck.engine.records.markdown import render_markdown
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.report import build_report
from flightdeck.engine.records.store import Store

from helpers import HANG_S, Hold, flightdeck, settings, sim_route, stepped, until
from test_store import make_batch, make_child

T0 = datetime(2026, 12, 1, 0, 7, tzinfo=UTC).timestamp()  # 00:07 UTC
TEMPLATE = (Task(id="scan", goal="Scan the logs (wave {wave})", seq=0),)


def every(seconds: float, **kw: object) -> Schedule:
    return Schedule(id="scan", tasks=TEMPLATE, every_s=seconds, **kw)  # type: ignore[arg-type]


def never_live(_: str) -> bool:
    return False


def test_nothing_fires_at_start_then_one_wave_per_tick() -> None:
    clock = ScheduleClock((every(900),), T0)
    assert clock.due(T0, never_live) == []
    assert clock.due(T0 + 899, never_live) == []
    (wave,) = clock.due(T0 + 900, never_live)
    assert [(t.id, t.goal) for t in wave] == [("scan-w1", "Scan the logs (wave 1)")]
    assert clock.due(T0 + 1799, never_live) == []
    (wave,) = clock.due(T0 + 1800, never_live)
    assert wave[0].id == "scan-w2"


def test_at_start_fires_at_once() -> None:
    clock = ScheduleClock((every(900, at_start=True),), T0)
    assert [w[0].id for w in clock.due(T0, never_live)] == ["scan-w1"]


def test_a_tick_is_skipped_while_the_last_wave_is_live() -> None:
    clock = ScheduleClock((every(60),), T0)
    (wave,) = clock.due(T0 + 60, never_live)
    live = {wave[0].id}
    assert clock.due(T0 + 120, lambda i: i in live) == []  # still running: skipped
    assert clock.skipped["scan"] == 1
    live.clear()
    assert [w[0].id for w in clock.due(T0 + 180, lambda i: i in live)] == ["scan-w2"]


def test_after_a_long_sleep_it_fires_once_not_once_per_missed_tick() -> None:
    clock = ScheduleClock((every(60),), T0)
    assert len(clock.due(T0 + 36_000, never_live)) == 1  # ten hours later: one wave
    assert clock.due(T0 + 36_001, never_live) == []
    assert clock.next_in(T0 + 36_001) == pytest.approx(59)


def test_a_cron_schedule_fires_at_its_times() -> None:
    cron = Schedule(id="scan", tasks=TEMPLATE, cron="*/15 * * * *")
    clock = ScheduleClock((cron,), T0)  # 00:07: next at 00:15
    assert clock.next_in(T0) == pytest.approx(8 * 60)
    assert clock.due(T0 + 8 * 60 - 1, never_live) == []
    assert len(clock.due(T0 + 8 * 60, never_live)) == 1
    assert clock.next_in(T0 + 8 * 60) == pytest.approx(15 * 60)


# --- on a real engine, with an injected clock -------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def scheduled_engine(tmp_path: Path, clock: FakeClock, **budget: int) -> Engine:
    batch = Batch(name="scheduled", tasks=(), schedules=(every(60),))
    s = dataclasses.replace(settings(sim_route(tool_turns=0)), budget=Budget(**budget))
    return Engine(batch, s, state_dir=tmp_path / "state", clock=clock)


def test_a_scheduled_batch_runs_waves_until_it_is_stopped(tmp_path: Path) -> None:
    clock = FakeClock()
    engine = scheduled_engine(tmp_path, clock)
    engine.start()
    try:
        stepped(engine)  # the coordinator has looked at its schedule
        assert not engine.wait(0)  # no tasks and nothing due: it keeps running
        assert engine.snapshot().children == ()
        for n in (1, 2):
            clock.now += 60
            until(lambda n=n: engine.snapshot().totals.completed == n, timeout=60)
        assert [c.id for c in engine.snapshot().children] == ["scan-w1", "scan-w2"]
        assert engine.snapshot().scheduled  # none live, and more waves to come (the TUI's X, q)
        attached = StoreView(tmp_path / "state" / "flightdeck.db", engine.batch_id)
        assert attached.snapshot().scheduled  # as `run` on a terminal sees it
        engine.stop_all()
        assert engine.wait(60)
        until(lambda: attached.snapshot().status is BatchStatus.STOPPED, HANG_S)
        assert not attached.snapshot().scheduled
        attached.close()
    finally:
        engine.close()
    assert engine.status is BatchStatus.STOPPED
    assert not engine.snapshot().scheduled
    # No wave ran as it was stopped: the report still says who stopped the batch, and how.
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
        report = build_report(reader, engine.batch_id)
    [stop] = report["stops"]
    assert stop["child_id"] is None and "no more waves" in stop["reason"], stop
    assert "| (schedules) | stop | stopped by operator (stop all)" in render_markdown(report)


def test_schedules_a_stop_all_ended_stay_ended_when_the_batch_is_reopened(
    tmp_path: Path,
) -> None:
    # Found in a walkthrough: `stop --all` said "the schedules end, no more waves", but a
    # resume (the owner killed while a child was stopping), or a `retry` that reopened the
    # batch (even one refused), fired waves again, until stopped once more.
    clock = FakeClock()
    engine = scheduled_engine(tmp_path, clock)
    engine.start()
    try:
        clock.now += 60
        until(lambda: engine.snapshot().totals.completed == 1, timeout=60)
        engine.stop_all()
        assert engine.wait(60)
    finally:
        engine.close()
    again = Engine.resume(tmp_path / "state", engine.batch_id, reopen=True, clock=clock)
    again.start()
    try:
        clock.now += 60
        assert again.wait(HANG_S)  # nothing to run and no schedule left: it ends
    finally:
        again.close()
    assert [c.id for c in again.snapshot().children] == ["scan-w1"]


def test_max_runs_counts_across_waves_and_ends_the_batch(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FakeClock()
    engine = scheduled_engine(tmp_path, clock, max_runs=2)
    engine.start()
    try:
        for n in (1, 2):
            clock.now += 60
            until(lambda n=n: engine.snapshot().totals.completed == n, timeout=60)
        clock.now += 60
        assert engine.wait(60)  # the third tick finds the budget spent: no wave, the end
    finally:
        engine.close()
    snap = engine.snapshot()
    assert [c.status for c in snap.children] == [ChildStatus.COMPLETED] * 2
    assert engine.status is BatchStatus.COMPLETED
    # Said, once (found by an audit: the batch ended with nothing saying why the waves stopped).
    said = [r.getMessage() for r in caplog.records if "schedules end" in r.getMessage()]
    assert said == ["the schedules end, no more waves: max_runs (2) reached"]
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:  # and the report
        report = build_report(reader, engine.batch_id)
    assert report["schedules_end"] == "max_runs (2) reached"
    assert "\n- schedules ended: max_runs (2) reached\n" in render_markdown(report)


def test_an_attached_view_says_why_the_schedules_ended(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Found in a walkthrough: the owner's warning went to its owner.log alone, so `run` on a
    # terminal (an attached view) showed the waves stop with nothing saying why.
    clock = FakeClock()
    engine = scheduled_engine(tmp_path, clock, max_runs=1)
    db = tmp_path / "state" / "flightdeck.db"
    engine.start()
    try:
        assert engine.flush(60)  # the batch's row committed: the store's writer thread has it
        attached = StoreView(db, engine.batch_id)
        assert attached.snapshot().scheduled
        clock.now += 60
        until(lambda: engine.snapshot().totals.completed == 1, timeout=60)
        clock.now += 60
        assert engine.wait(60)  # the budget ended the schedules, then the batch
    finally:
        engine.close()
    until(lambda: attached.snapshot().status is BatchStatus.COMPLETED, HANG_S)
    attached.close()
    later = StoreView(db, engine.batch_id)  # opened on the ended batch: history, not news
    assert later.snapshot().status is BatchStatus.COMPLETED
    later.close()
    said = [
        r.getMessage() for r in caplog.records if r.name.startswith("flightdeck.engine.attached")
    ]
    assert said == ["the schedules end, no more waves: max_runs (1) reached"]
    # Nor do `wait` and `stop --all` say its schedules fire on (Client.scheduled).
    assert not Client(db, engine.batch_id).scheduled()


def test_an_attached_view_agrees_with_wait_and_stop_all_once_a_stop_all_ended_the_schedules(
    tmp_path: Path,
) -> None:
    # Found in a review: a stop-all ends the schedules with the batch's own stop (no
    # `schedules_end`), which `wait` and `stop --all` read (Client.scheduled) and an attached
    # view did not: it said `scheduled` while the stopped children ended, and through a whole
    # run that reopened the batch (its schedules stay ended).
    db = tmp_path / "flightdeck.db"
    store = Store(db)
    spec = json.dumps({"tasks": [], "schedules": [{"id": "scan"}]})
    store.create_batch(make_batch("b1", spec_json=spec))  # running, its owner this process
    store.add_children("b1", [make_child(1, status=ChildStatus.RUNNING)])
    assert store.flush(timeout=HANG_S)
    view = StoreView(db, "b1", watch=False)
    client = Client(db, "b1")
    try:
        assert view.snapshot().scheduled and client.scheduled()
        store.record_event("b1", "c1", 1100.0, "stop", "stopped by operator")  # a child's stop
        assert store.flush(timeout=HANG_S)
        view.refresh()
        assert view.snapshot().scheduled and client.scheduled()
        # What the coordinator records of a stop-all of a scheduled batch (controls.py).
        why = "stopped by operator (stop all): the schedules end, no more waves"
        store.record_event("b1", None, 1101.0, "stop", why)
        assert store.flush(timeout=HANG_S)
        assert view.refresh()
        assert view.snapshot().status is BatchStatus.RUNNING  # its child is still stopping
        assert not client.scheduled()
        assert not view.snapshot().scheduled
    finally:
        client.close()
        view.close()
        store.close()


def test_a_retry_of_a_schedules_wave_is_refused_before_anything_is_sent(
    tmp_path: Path,
) -> None:
    # Found in a walkthrough: `retry B --where status:unknown` after a lost owner took the
    # waves too, and the owner it reopened the batch for refused the whole retry (the batch's
    # own tasks with it); a wave named was sent, an owner started, and refused only then.
    from flightdeck.engine.attached.rework import send_retry
    from flightdeck.engine.commands import CommandError, Retry

    hold = Hold(tmp_path / "hold")
    clock = FakeClock()
    batch = Batch(name="s", tasks=(Task(id="t", goal="g", seq=0),), schedules=(every(60),))
    s = settings(sim_route(tool_turns=0, **hold.options()))
    engine = Engine(batch, s, state_dir=tmp_path / "state", clock=clock)
    engine.start()
    try:
        clock.now += 60
        until(lambda: len(engine.snapshot().children) == 2, timeout=60)
        engine.stop_all()
        assert engine.wait(60)
    finally:
        engine.close()
    db = tmp_path / "state" / "flightdeck.db"

    def no_owner(*_: object) -> list[str]:
        raise AssertionError("an owner was started for a retry it refuses")

    with pytest.raises(CommandError, match="scan-w1 is a schedule's wave"):
        send_retry(db, engine.batch_id, Retry(("scan-w1",)), start=no_owner)
    with Client(db, engine.batch_id) as client:  # picked by a query: left out, said so
        assert client.own() == {"t"}


LAST = "0 0 1 1 * 0 2027"  # one date: 2027-01-01 00:00 UTC, then never again
NEW_YEAR = datetime(2027, 1, 1, tzinfo=UTC).timestamp()


def test_a_cron_past_its_last_date_ends_its_schedule_once() -> None:
    last = Schedule(id="once", tasks=(dataclasses.replace(TEMPLATE[0], id="once"),), cron=LAST)
    clock = ScheduleClock((last, every(3600)), T0)
    (wave, _) = clock.due(NEW_YEAR, never_live)  # its last wave is still made
    assert wave[0].id == "once-w1"
    assert [s.id for s in clock.over()] == ["once"]
    assert clock.over() == [] and clock  # said once; the other one goes on
    assert [w[0].id for w in clock.due(NEW_YEAR + 3600, never_live)] == ["scan-w2"]
    # Made again after its last date (a resume): over at once, never due.
    again = ScheduleClock((last,), NEW_YEAR + 1)
    assert [s.id for s in again.over()] == ["once"] and not again
    assert again.due(NEW_YEAR + 10**8, never_live) == [] and again.next_in(NEW_YEAR) is None


def test_a_batch_whose_cron_passes_its_last_date_ends_when_its_last_wave_has(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Found by an audit: croniter's CroniterBadDateError failed the coordinator, every child
    # stopped, the last wave never made.
    clock = FakeClock()
    batch = Batch(name="s", tasks=(), schedules=(Schedule(id="scan", tasks=TEMPLATE, cron=LAST),))
    s = settings(sim_route(tool_turns=0))
    engine = Engine(batch, s, state_dir=tmp_path / "state", clock=clock)
    engine.start()
    try:
        stepped(engine)
        assert not engine.wait(0)  # its last date not come: it keeps running
        clock.now = NEW_YEAR
        assert engine.wait(60)
    finally:
        engine.close()
    assert [(c.id, c.status) for c in engine.snapshot().children] == [
        ("scan-w1", ChildStatus.COMPLETED)
    ]
    assert engine.status is BatchStatus.COMPLETED
    said = [r.getMessage() for r in caplog.records if "cron" in r.getMessage()]
    assert said == [
        f"the schedules end, no more waves: schedule scan's cron '{LAST}' names no later date"
    ]


# --- the file format ---------------------------------------------------------------------------

GOOD = """
[[schedules]]
id = "log-scan"
every = "15m"
at_start = true
[schedules.task]
goal = "Scan the logs (wave {wave})"
group = "ops"

[[schedules]]
cron = "0 * * * *"
[schedules.task]
goal = "Hourly check"
"""


def test_a_batch_of_schedules_loads(tmp_path: Path) -> None:
    path = tmp_path / "b.toml"
    path.write_text(GOOD)
    batch = load_batch(path)
    assert batch.tasks == ()
    first, second = batch.schedules
    assert (first.id, first.every_s, first.at_start, first.cron) == ("log-scan", 900.0, True, None)
    assert [(t.id, t.group) for t in first.tasks] == [("log-scan", "ops")]
    assert (second.id, second.cron, second.every_s) == ("schedule-2", "0 * * * *", None)


@pytest.mark.parametrize(
    ("entry", "line", "field", "message"),
    [
        ('every = "15x"', 3, "schedules.every", "unknown unit 'x'"),
        ("every = -5", 3, "schedules.every", "must be more than 0"),
        ("every = nan", 3, "schedules.every", "finite"),
        ("every = inf", 3, "schedules.every", "finite"),
        ('cron = "every day"', 3, "schedules.cron", "croniter"),
        # croniter reads them, and finds no date: the batch failed as it started (a traceback)
        ('cron = "0 0 30 2 *"', 3, "schedules.cron", "'0 0 30 2 *' never fires"),
        ('cron = "0 0 1 1 * 0 2020"', 3, "schedules.cron", "never fires"),
        ('every = "1m"\ncron = "* * * * *"', 2, "schedules.every", "one of them"),
        ('every = "1m"\nat_start = "yes"', 4, "schedules.at_start", "true or false"),
    ],
)
def test_a_bad_schedule_is_an_error_at_its_line(
    tmp_path: Path, entry: str, line: int, field: str, message: str
) -> None:
    path = tmp_path / "b.toml"
    path.write_text(f'\n[[schedules]]\n{entry}\n[schedules.task]\ngoal = "x"\n')
    with pytest.raises(SpecError) as err:
        load_batch(path)
    text = str(err.value)
    assert f"{path}:{line}" in text and field in text and message in text, text


def test_a_schedule_without_a_template_is_refused_by_run_with_nothing_written(
    tmp_path: Path,
) -> None:
    (tmp_path / "b.toml").write_text('[[schedules]]\nevery = "1m"\n')
    out = flightdeck("run", "b.toml", "--headless", cwd=tmp_path)
    assert out.returncode == 2
    assert "b.toml:1" in out.stderr and "schedules.task" in out.stderr
    assert not (tmp_path / ".flightdeck").exists()


def test_a_resumed_schedule_never_reuses_a_waves_id() -> None:
    taken = {"scan-w1", "scan-w2"}  # the waves before the owner died
    clock = ScheduleClock((every(60),), T0, lambda i: i in taken)
    (wave,) = clock.due(T0 + 60, never_live)
    assert wave[0].id == "scan-w3" and wave[0].goal == "Scan the logs (wave 3)"


def test_an_unknown_placeholder_in_a_template_is_refused_as_for_each_refuses_it(
    tmp_path: Path,
) -> None:
    # Found by an audit: `{bogus}` was left in every wave's goal ("y 1 {bogus}").
    (tmp_path / "b.toml").write_text(
        '[[schedules]]\nevery = "1m"\n[schedules.task]\ngoal = "y {wave} {bogus}"\n'
    )
    out = flightdeck("run", "b.toml", "--headless", cwd=tmp_path)
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == (
        "flightdeck: b.toml:4: goal: unknown placeholder {bogus} (known: {wave}; write"
        " {{bogus}} for the text itself)\n"
    )
    assert not (tmp_path / ".flightdeck").exists()
    path = tmp_path / "c.toml"
    path.write_text('[[schedules]]\nevery = "1m"\n[schedules.task]\ngoal = "y"\ncontext = "{x}"\n')
    with pytest.raises(SpecError, match=r"c.toml:5: context: unknown placeholder \{x\}"):
        load_batch(path)


def test_a_for_each_template_fills_wave_in_each_wave_and_braces_stay_text(
    tmp_path: Path,
) -> None:
    # for_each refused `{wave}` (not one of its own placeholders) in a schedule's template.
    path = tmp_path / "b.toml"
    path.write_text(
        '[[schedules]]\nevery = "1m"\n[schedules.task]\nid = "s-{index}"\n'
        'goal = "{item} in wave {wave} {{wave}}"\nfor_each = ["a{wave}", "b"]\n'
    )
    (schedule,) = load_batch(path).schedules
    clock = ScheduleClock((schedule,), T0)
    (wave,) = clock.due(T0 + 60, never_live)
    assert [(t.id, t.goal) for t in wave] == [
        ("s-1-w1", "a{wave} in wave 1 {wave}"),
        ("s-2-w1", "b in wave 1 {wave}"),
    ]


def test_two_schedules_whose_templates_share_an_id_are_refused_at_the_second(
    tmp_path: Path,
) -> None:
    # Found walking the fleet: both made `same-w1`, `same-w2`, ...: the same id twice in the
    # batch, lines reading `● same-w4 ... running`, and a batch that never ended.
    path = tmp_path / "b.toml"
    path.write_text(
        '[[schedules]]\nid = "a"\nevery = "5s"\n[schedules.task]\nid = "same"\ngoal = "x"\n'
        '[[schedules]]\nid = "b"\nevery = "5s"\n[schedules.task]\nid = "same"\ngoal = "y"\n'
    )
    with pytest.raises(SpecError) as err:
        load_batch(path)
    text = str(err.value)
    assert f"{path}:11" in text and "schedules.task.id" in text, text
    assert "schedule 'a' has a task 'same' too" in text, text


def test_two_waves_due_at_once_never_share_an_id() -> None:
    # A Batch built in Python is not checked as a file is: the clock steps around the ids of
    # the waves it makes in the same tick, which are not in the batch yet.
    a = Schedule(id="a", tasks=TEMPLATE, every_s=60)
    b = Schedule(id="b", tasks=TEMPLATE, every_s=60)
    clock = ScheduleClock((a, b), T0)
    ids = [t.id for wave in clock.due(T0 + 60, never_live) for t in wave]
    assert ids == ["scan-w1", "scan-w2"]


def test_wave_in_a_templates_group_is_refused_not_left_as_text(tmp_path: Path) -> None:
    # Found walking the fleet: `group = "g{wave}"` made every wave's group the text `g{wave}`.
    path = tmp_path / "b.toml"
    path.write_text(
        '[[schedules]]\nevery = "5s"\n[schedules.task]\ngroup = "g{wave}"\ngoal = "x"\n'
    )
    with pytest.raises(SpecError) as err:
        load_batch(path)
    text = str(err.value)
    assert f"{path}:4" in text and "schedules.task.group" in text and "{wave}" in text, text
