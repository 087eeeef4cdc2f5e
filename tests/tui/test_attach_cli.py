"""`run --detach`, `attach` and `logs` as a user runs them: real subprocesses, real owners."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.attached.view import StoreView
from flightdeck.engine.model import BatchStatus, ChildStatus
from flightdeck.engine.records.reader import StoreReader
from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.attached import open_view
from flightdeck.tui.commands import UsageError
from flightdeck.tui.exitcodes import ExitCode
from flightdeck.tui.screens.main import UiOptions
from tui_support import SIZE, notices_of, until, until_exited, until_running

from helpers import HANG_S, Hold, cli, finished_here, flightdeck, wait_ended
from helpers import until as poll_until

QUICK = "[routes.sim]\ntime_scale = 0.001\nlatency_ms = 20\ntokens_per_s = 400\n"
# Children held running (each call waits before its first token; nothing releases them).
HELD = "[routes.sim]\ntime_scale = 0.01\ntool_turns = 6\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "quick.toml").write_text(QUICK, encoding="utf-8")
    held = HELD + Hold(tmp_path / "hold").toml()
    (tmp_path / "held.toml").write_text(held, encoding="utf-8")
    (tmp_path / "tasks.jsonl").write_text(
        "".join(f'{{"id": "c{i}", "goal": "Review item {i}"}}\n' for i in range(1, 4)),
        encoding="utf-8",
    )
    return tmp_path


@pytest.fixture
def owners() -> Iterator[list[int]]:
    """Owner pids a test started; any still alive at the end is stopped (SIGTERM)."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        # A detached owner is an orphan: once ended, it may stay a zombie nobody reaps.
        wait_ended(pid, 10)


def kill_owner(view: StoreView, pid: int) -> None:
    """kill -9 the batch's owner, and wait for the view to see it abandoned."""
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + HANG_S
    while view.snapshot().status is not BatchStatus.ABANDONED:
        assert time.monotonic() < deadline, "the dead owner is noticed"
        time.sleep(0.05)


def detach(project: Path, config: str, owners: list[int]) -> str:
    result = flightdeck("run", "--detach", "tasks.jsonl", "--config", config, cwd=project)
    assert result.returncode == ExitCode.OK, result.stderr
    batch_id = result.stdout.strip()
    with StoreReader(project / ".flightdeck" / "flightdeck.db") as reader:
        info = reader.batch(batch_id)
    assert info is not None
    owners.append(info.owner_pid)
    return batch_id


def attached_app(project: Path, owners: list[int]) -> tuple[str, StoreView, FlightdeckApp]:
    """A held batch run detached, a view attached to it, and the app on that view."""
    batch_id = detach(project, "held.toml", owners)
    view = open_view(project / ".flightdeck" / "flightdeck.db", batch_id)
    return batch_id, view, FlightdeckApp(view, UiOptions(poll_s=0.05, cursor_blink=False))


@pytest.mark.slow
def test_run_detach_prints_the_id_and_leaves_the_owner_running(
    project: Path, owners: list[int]
) -> None:
    batch_id = detach(project, "held.toml", owners)  # returns while its children run on
    db = project / ".flightdeck" / "flightdeck.db"
    with StoreReader(db) as reader:
        info = reader.batch(batch_id)
        assert info is not None and info.status is BatchStatus.RUNNING
        assert info.owner_pid != os.getpid()
        assert os.getsid(info.owner_pid) == info.owner_pid  # a session of its own
    assert (project / ".flightdeck" / "batches" / batch_id / "owner.log").is_file()
    stopped = flightdeck("stop", batch_id, "--all", cwd=project)
    assert stopped.returncode == ExitCode.OK, stopped.stderr
    waited = flightdeck("wait", batch_id, cwd=project)
    assert waited.returncode == ExitCode.INCOMPLETE  # stopped, not completed


def test_run_detach_on_bad_input_says_why_and_writes_nothing(project: Path) -> None:
    (project / "bad.jsonl").write_text('{"id": "a", "goal": "x"}\n{"id": 5, "goal": "y"}\n')
    result = flightdeck("run", "--detach", "bad.jsonl", "--config", "quick.toml", cwd=project)
    assert result.returncode == ExitCode.USAGE
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("flightdeck: bad.jsonl:2: id"), line
    assert not (project / ".flightdeck").exists()


@pytest.mark.slow
def test_logs_prints_and_follows_a_transcript_sanitized(project: Path, owners: list[int]) -> None:
    batch_id = detach(project, "held.toml", owners)
    follow = subprocess.Popen(
        [sys.executable, "-m", "flightdeck.tui.cli", "logs", batch_id, "c1", "-f"],
        cwd=project,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert follow.stdout is not None
        first = follow.stdout.readline()  # the transcript so far, then as it grows
        assert "system" in first
        # Something untrusted in the file (the writer sanitizes; the reader does again).
        with StoreReader(project / ".flightdeck" / "flightdeck.db") as reader:
            row = reader.child(batch_id, "c1")
        assert row is not None
        with open(row.transcript, "a", encoding="utf-8") as fh:
            fh.write("00:00:00.000  tool      │ \x1b]0;pwned\x07evil \x1b[31mred\n")
        flightdeck("stop", batch_id, "c1", cwd=project)
        follow.wait(HANG_S)  # it ends once the child has ended (its output is far below a pipe's)
        out = follow.stdout.read()  # through the same buffer `readline` filled
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.wait()
        if follow.stdout is not None:
            follow.stdout.close()
    assert follow.returncode == ExitCode.OK
    assert "evil red" in out and "\x1b" not in out and "\x07" not in out
    assert "stopped" in out.splitlines()[-1]
    printed = flightdeck("logs", batch_id, "c1", cwd=project)
    assert printed.returncode == ExitCode.OK
    assert printed.stdout == first + out
    # A transcript deleted since (found by an audit): said, not printed as an empty one.
    Path(row.transcript).unlink()
    gone = flightdeck("logs", batch_id, "c1", cwd=project)
    assert (gone.returncode, gone.stdout) == (ExitCode.INCOMPLETE, "")
    assert "the transcript is gone (deleted since the child started)" in gone.stderr


@pytest.mark.slow
def test_logs_f_says_a_transcript_deleted_while_it_follows(
    project: Path, owners: list[int]
) -> None:
    # Found by an audit: it went quiet, and exited 0 once the child ended.
    batch_id = detach(project, "held.toml", owners)  # its children run on, held
    follow = subprocess.Popen(
        [sys.executable, "-m", "flightdeck.tui.cli", "logs", batch_id, "c1", "-f"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert follow.stdout is not None and "system" in follow.stdout.readline()
        with StoreReader(project / ".flightdeck" / "flightdeck.db") as reader:
            row = reader.child(batch_id, "c1")
        assert row is not None
        Path(row.transcript).unlink()
        _, err = follow.communicate(timeout=HANG_S)
    finally:
        if follow.poll() is None:
            follow.kill()
            follow.communicate()
    assert follow.returncode == ExitCode.INCOMPLETE
    assert "the transcript is gone (deleted since the child started)" in err


@pytest.mark.slow
def test_logs_and_attach_bad_inputs_exit_2_with_one_line(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    none_here = flightdeck("logs", "x", "c1", cwd=project)
    assert none_here.returncode == ExitCode.USAGE
    assert "no flightdeck state here" in none_here.stderr
    batch_id = finished_here(project, config_file="quick.toml")

    def process(*args: str) -> tuple[int, str]:  # as a user runs it
        result = flightdeck(*args, cwd=project)
        return result.returncode, result.stderr

    # logs and attach run as processes in the tests above and in tests/tui/test_tmux_attach.py
    def here(*args: str) -> tuple[int, str]:
        code, _, err = cli(capsys, *args)
        return code, err

    monkeypatch.chdir(project)
    cases = [
        (process, ("logs", "nope", "c1"), "no batch 'nope'"),
        (here, ("logs", batch_id, "nope"), f"no child with id 'nope' in batch {batch_id}"),
        (here, ("attach", batch_id), "attach needs a terminal"),
        (
            here,
            ("attach", "x", "--state-dir", str(project / "elsewhere")),
            "no flightdeck state here",
        ),
        # The owner's own start, by hand, on a batch that exists: its rows are never replaced.
        (
            process,
            ("run", "tasks.jsonl", "--config", "quick.toml", "--headless", "--owner-of", batch_id),
            "is not a batch folder run claimed",
        ),
    ]
    for call, args, expected in cases:
        code, err = call(*args)
        assert code == ExitCode.USAGE, (args, err)
        assert len(err.strip().splitlines()) == 1, err
        assert expected in err, (args, err)
    db = project / ".flightdeck" / "flightdeck.db"
    with pytest.raises(UsageError, match="no batch 'nope'"):
        open_view(db, "nope")


@pytest.mark.slow
@pytest.mark.anyio
async def test_attach_on_a_finished_batch_is_read_only(project: Path) -> None:
    batch_id = finished_here(project, config_file="quick.toml")
    db = project / ".flightdeck" / "flightdeck.db"
    with pytest.raises(UsageError, match="no running batch"):
        open_view(db, None)  # the default is the latest running batch: there is none
    view = open_view(db, batch_id)
    assert view.read_only is not None and "has ended (completed)" in view.read_only
    app = FlightdeckApp(view, UiOptions(poll_s=0.05, cursor_blink=False))
    async with app.run_test(size=SIZE) as pilot:
        table = app.main.table
        await until(pilot, lambda: len(table.shown) == 3, "three rows")
        assert all(r.status is ChildStatus.COMPLETED for r in table.rows_by_id.values())
        await until(pilot, lambda: app.main.transcript.lines, "a transcript to browse")
        await pilot.press("s")  # nothing to steer: it says so, and sends nothing
        await until_exited(pilot, "nothing runs: q quits at once", by=pilot.press("q"))
    assert app.return_value is False
    view.close()
    with StoreReader(db) as reader:
        assert reader.controls(batch_id) == []


def test_the_attached_screen_runs_with_a_short_gil_switch_interval(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The store's reader holds the GIL for tens of milliseconds a read, and the event loop
    # gives it up at every turn: at CPython's 5 ms interval, each turn of a key's path waited
    # that long to have it back (docs/performance.md, "Keys: the floor on this host…").
    from flightdeck.tui import attached

    batch_id = finished_here(project, config_file="quick.toml")
    seen: list[float] = []
    monkeypatch.setattr(
        FlightdeckApp, "run", lambda self, *a, **k: seen.append(sys.getswitchinterval())
    )
    before = sys.getswitchinterval()
    view = StoreView(project / ".flightdeck" / "flightdeck.db", batch_id, watch=False)
    attached.attach_tui(view, read_only=True)
    assert seen == [attached.KEYS_SWITCH_S] and attached.KEYS_SWITCH_S <= 0.001
    assert sys.getswitchinterval() == before  # the process's own setting back after


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_abandoned_batch_opens_read_only_and_says_why(
    project: Path,
    owners: list[int],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    batch_id = detach(project, "held.toml", owners)
    db = project / ".flightdeck" / "flightdeck.db"
    view = open_view(db, None)  # the latest running batch
    assert view.batch_id == batch_id and view.read_only is None
    kill_owner(view, owners[-1])
    reason = view.read_only
    assert reason is not None and "abandoned" in reason and f"resume {batch_id}" in reason
    app = FlightdeckApp(view, UiOptions(poll_s=0.05, cursor_blink=False))
    async with app.run_test(size=SIZE) as pilot:
        await until(pilot, lambda: len(app.main.table.shown) == 3, "three rows")
        app.main.action_stop_all()  # a key over rows still marked running: refused, said why
        await until(
            pilot,
            lambda: any("abandoned" in str(n.message) for n in app._notifications),
            "the reason shown",
        )
        await until_exited(pilot, by=pilot.press("q"))  # abandoned: q quits at once
    view.close()
    with StoreReader(db) as reader:
        assert reader.controls(batch_id) == []
    # On quit, `attach` says what is left to do: the resume command, ready to paste.
    out = quit_at_once(monkeypatch, capsys, StoreView(db, batch_id, watch=False))
    assert f"its owner died: `flightdeck resume {batch_id} --state-dir" in out, out


def quit_at_once(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], view: StoreView
) -> str:
    """What `attach` prints once its app (here one that quits at once) is over."""
    from flightdeck.tui import attached

    monkeypatch.setattr(FlightdeckApp, "run", lambda self, *a, **k: None)
    capsys.readouterr()
    attached.attach_tui(view, read_only=True)
    return capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_abandoned_batchs_running_rows_say_they_were_left_running_and_stop_their_clock(
    project: Path, owners: list[int]
) -> None:
    # Found by users, after a kill -9 of the owner: the meter said `● 3 left running`, but each
    # of those rows kept the green running `●`, as if still watched; and the meter's elapsed
    # stopped at the owner's last heartbeat while the rows counted their idle time on.
    from flightdeck.tui.widgets.detail import ChildDetail
    from flightdeck.tui.widgets.rows import last

    batch_id = detach(project, "held.toml", owners)
    view = open_view(project / ".flightdeck" / "flightdeck.db", batch_id)
    poll_until(
        lambda: [r.status for r in view.snapshot().children] == [ChildStatus.RUNNING] * 3,
        what="three children running",
    )
    kill_owner(view, owners[-1])
    ended = view.snapshot().finished_ts
    assert ended is not None
    shift, reads = [0.0], [0]

    def clock() -> float:
        reads[0] += 1
        return time.time() + shift[0]

    app = FlightdeckApp(view, UiOptions(clock=clock, poll_s=0.05, cursor_blink=False))
    async with app.run_test(size=SIZE) as pilot:
        table = app.main.table
        await until(pilot, lambda: len(table.shown) == 3, "three rows")
        for child_id in ("c1", "c2", "c3"):
            cells = table.model.cells(child_id)
            assert cells[0] == (" ●", "yellow"), child_id  # not the running green
            assert cells[5][0].startswith("left running · "), cells[5]
        detail = app.main.query_one("#detail", ChildDetail)
        await until(pilot, lambda: "left running: its owner died" in str(detail.render()), "")
        assert "burn" not in str(detail.render())  # nothing burns until a resume
        shift[0] = 3600.0  # an hour later
        seen = reads[0]
        await until(pilot, lambda: reads[0] > seen + 4, "polls after the hour passed")
        for child_id, row in table.rows_by_id.items():
            assert row.status is ChildStatus.RUNNING  # as `flightdeck report` says it
            assert table.model.cells(child_id)[6] == last(row, ended), child_id
        await until_exited(pilot, by=pilot.press("q"))  # abandoned: q quits at once
    view.close()


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_owner_that_dies_while_attached_is_said_with_the_resume_command(
    project: Path, owners: list[int]
) -> None:
    # Found by an audit in tmux: a kill -9 of the owner showed a passing "batch finished:
    # abandoned" (nothing finished), and the resume command only once s or X was pressed.
    from flightdeck.tui.widgets.status import StatusBar

    batch_id, view, app = attached_app(project, owners)
    async with app.run_test(size=(200, 40)) as pilot:
        await until(pilot, lambda: len(app.main.table.shown) == 3, "three rows")
        os.kill(owners[-1], signal.SIGKILL)
        resume = f"flightdeck resume {batch_id} --state-dir"
        await until(
            pilot,
            lambda: any(resume in str(n.message) for n in app._notifications),
            "the owner's death said, with the resume command",
            timeout=60,
        )
        assert not any("batch finished" in str(n.message) for n in app._notifications)
        status = str(app.main.query_one("#status", StatusBar).render())
        assert "abandoned: its owner died, `flightdeck resume` runs it on" in status
        await until_exited(pilot, by=pilot.press("q"))  # abandoned: q quits at once
    view.close()


def test_attach_checks_its_tui_settings_like_a_run(project: Path) -> None:
    (project / "bad.toml").write_text('[tui]\n\ndesktop = "growl"\n', encoding="utf-8")
    out = flightdeck("attach", "--config", "bad.toml", "--state-dir", "st", cwd=project)
    assert out.returncode == ExitCode.USAGE, out.stderr
    assert "bad.toml:3: tui.desktop: expected one of 'off', 'osc777', 'osc9'" in out.stderr


RESUME = (sys.executable, "-m", "flightdeck.tui.cli", "resume")


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    """helpers.until at a pace for reading the store (a fresh view a poll, at times)."""
    poll_until(condition, timeout, every=0.05, what=what)


@pytest.fixture
def resumes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """`flightdeck resume` processes a test started; stopped (SIGTERM) at its end."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def resume(folder: Path, batch_id: str, resumes: list[subprocess.Popen[bytes]]) -> None:
    process = subprocess.Popen(
        [*RESUME, batch_id],
        cwd=folder,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    resumes.append(process)


@pytest.mark.slow
def test_a_view_attached_across_a_resume_counts_the_attempts_the_dead_owner_lost(
    project: Path,
    owners: list[int],
    resumes: list[subprocess.Popen[bytes]],
) -> None:
    # Found in tmux: a view attached before the owner died read the lost attempts once, at
    # attach, so after `resume` its meter left out what they cost (`lost attempts $…`) while
    # a view attached afterwards, and the report, had it.
    hold = Hold(project / "hold")
    for child in ("c1", "c2", "c3"):
        hold.release(child, 0)  # each child's first call is billed; its second is held
    batch_id = detach(project, "held.toml", owners)
    db = project / ".flightdeck" / "flightdeck.db"
    view = StoreView(db, batch_id, poll_s=0.05)
    try:
        wait_for(
            lambda: all(r.usage.total > 0 for r in view.snapshot().children),
            "each child's first call billed",
        )
        kill_owner(view, owners[-1])
        assert view.snapshot().lost_cost_usd == 0  # nothing is lost until a resume says so
        resume(project, batch_id, resumes)
        wait_for(
            lambda: view.info is not None and view.info.owner_pid == resumes[-1].pid,
            "the new owner picked up",
        )

        def lost_now() -> Decimal:  # as a view attached now reads it
            fresh = StoreView(db, batch_id, watch=False)
            try:
                return fresh.snapshot().lost_cost_usd or Decimal(0)
            finally:
                fresh.close()

        # The new owner's pid is in the batch row before its lost attempts are recorded.
        wait_for(lambda: lost_now() > 0, "the lost attempts recorded by the resume")
        lost = lost_now()
        wait_for(lambda: view.snapshot().lost_cost_usd == lost, f"lost attempts {lost}", 10)
        assert view.snapshot().status is BatchStatus.RUNNING
    finally:
        view.close()


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_steer_typed_while_the_owner_died_is_refused_with_the_resume_command(
    project: Path, owners: list[int]
) -> None:
    # Found in tmux: a steer dialog opened while the owner lived and sent once it had died
    # said "steer queued for 1 (at next turn)", recorded a request nothing would apply until
    # a resume, while every key pressed after the death said why nothing is sent.
    import sqlite3

    from flightdeck.tui.screens.dialogs import SteerDialog
    from tui_support import on_screen, type_text

    batch_id, view, app = attached_app(project, owners)
    db = project / ".flightdeck" / "flightdeck.db"
    async with app.run_test(size=(200, 40)) as pilot:
        table = app.main.table
        await until_running(pilot, app, 3)
        table.select("c1")
        await pilot.press("s")
        await until(pilot, lambda: on_screen(app, SteerDialog), "the steer dialog")
        kill_owner(view, owners[-1])
        await type_text(pilot, "look again")
        await pilot.press("enter")
        resume = f"flightdeck resume {batch_id} --state-dir"
        await until(
            pilot,
            lambda: any(
                "steer not sent" in str(n.message) and resume in str(n.message)
                for n in app._notifications
            ),
            "the steer refused, with the resume command",
        )
        assert not any("queued" in str(n.message) for n in app._notifications)
        await until_exited(pilot, by=pilot.press("q"))  # abandoned: q quits at once
    view.close()
    with sqlite3.connect(db) as conn:
        assert conn.execute("SELECT count(*) FROM requests").fetchone()[0] == 0


@pytest.mark.slow
@pytest.mark.anyio
async def test_a_view_attached_when_its_owner_died_says_when_a_resume_takes_it_up(
    project: Path, owners: list[int], resumes: list[subprocess.Popen[bytes]]
) -> None:
    # Found in tmux: the view said the owner died and to run `flightdeck resume`; once
    # someone had, it went back to "running" without a word, the abandoned toast gone.
    from flightdeck.tui.widgets.status import StatusBar

    batch_id, view, app = attached_app(project, owners)
    said = notices_of(app)
    async with app.run_test(size=(200, 40)) as pilot:
        await until(pilot, lambda: len(app.main.table.shown) == 3, "three rows")
        kill_owner(view, owners[-1])
        await until(pilot, lambda: any("abandoned" in s for s in said), "the death said")
        resume(project, batch_id, resumes)
        await until(
            pilot,
            lambda: any(s.startswith("batch resumed: a new owner runs it on") for s in said),
            "the resume said",
        )
        status = str(app.main.query_one("#status", StatusBar).render())
        assert f"batch {batch_id} running" in status
        assert view.read_only is None
        await pilot.press("q")
        await until(pilot, lambda: on_screen_quit(app), "the quit question: children run")
        await until_exited(pilot, by=pilot.press("d"))
    view.close()


def on_screen_quit(app: FlightdeckApp) -> bool:
    from flightdeck.tui.screens.dialogs import QuitDialog

    return isinstance(app.screen, QuitDialog)


@pytest.mark.slow
@pytest.mark.anyio
async def test_an_owner_stopped_silent_is_said_in_the_banner_not_shown_as_if_well(
    project: Path, owners: list[int]
) -> None:
    # Found in tmux: an owner stopped with SIGSTOP (a debugger, a hung disk) left the attached
    # view looking alive, elapsed ticking, a steer "queued"; nothing said its owner had gone
    # silent. Its clock is moved on past the 30 s after which a client calls an owner hung,
    # rather than the test waiting them out.
    from flightdeck.tui.widgets.banner import Banner

    batch_id = detach(project, "held.toml", owners)
    shift = [0.0]
    view = StoreView(
        project / ".flightdeck" / "flightdeck.db",
        batch_id,
        poll_s=0.05,
        clock=lambda: time.time() + shift[0],
    )
    app = FlightdeckApp(view, UiOptions(poll_s=0.05, cursor_blink=False))
    try:
        async with app.run_test(size=(200, 40)) as pilot:
            await until(pilot, lambda: len(app.main.table.shown) == 3, "three rows")
            banner = app.main.query_one("#banner", Banner)
            os.kill(owners[-1], signal.SIGSTOP)
            shift[0] = 45.0
            silent = f"the owner (pid {owners[-1]}) has written nothing for "
            await until(pilot, lambda: silent in (banner.problem or ""), "the silence said")
            assert view.snapshot().status is BatchStatus.RUNNING  # alive: not abandoned
            os.kill(owners[-1], signal.SIGCONT)
            shift[0] = 0.0
            await until(pilot, lambda: silent not in (banner.problem or ""), "its return seen")
            await pilot.press("q")
    finally:
        os.kill(owners[-1], signal.SIGCONT)
        view.close()


@pytest.mark.slow
def test_a_command_to_an_owner_stopped_silent_is_not_waited_on_for_ever(
    project: Path, owners: list[int]
) -> None:
    # docs/architecture.md: "a client calls an owner dead when it hears nothing for 30 s".
    # None did: `flightdeck stop` to an owner stopped with SIGSTOP waited for ever. Its last
    # heartbeat is moved 60 s back while it is stopped, rather than the test waiting them out.
    import sqlite3

    batch_id = detach(project, "held.toml", owners)
    db = project / ".flightdeck" / "flightdeck.db"
    os.kill(owners[-1], signal.SIGSTOP)
    try:
        with sqlite3.connect(db, timeout=30) as conn:
            conn.execute(
                "UPDATE batches SET heartbeat_ts = ? WHERE id = ?", (time.time() - 60, batch_id)
            )
        out = flightdeck("stop", batch_id, "c1", cwd=project, timeout=30)
        assert out.returncode == ExitCode.INCOMPLETE, out
        assert f"(pid {owners[-1]}) has not answered for 6" in out.stderr, out.stderr
        assert "the request stays pending, applied once it goes on" in out.stderr
    finally:
        os.kill(owners[-1], signal.SIGCONT)
    view = StoreView(db, batch_id, poll_s=0.05)  # once it goes on, it applies the stop
    try:
        wait_for(lambda: status_of(view, "c1") is ChildStatus.STOPPED, "c1 stopped", 30)
    finally:
        view.close()


def status_of(view: StoreView, child_id: str) -> ChildStatus | None:
    row = view.snapshot().child(child_id)
    return None if row is None else row.status


@pytest.mark.slow
def test_an_abandoned_batch_shows_none_of_its_dead_owners_route_gauges(
    project: Path, owners: list[int]
) -> None:
    """Found in a sweep in tmux: after a kill -9 of the owner, the route gauges (`r`) still
    said `paused 2.2s  429s/min 6`, and the meter `concurrency 3 adapted to 429s`, frozen at
    the death, as if the route were still throttled. They are the owner's live figures, which
    die with it; the panel says so and counts what the rows tell."""
    from flightdeck.tui.widgets.routes import NOT_STORED, routes_text

    batch_id = detach(project, "held.toml", owners)
    view = open_view(project / ".flightdeck" / "flightdeck.db", batch_id)
    try:
        wait_for(lambda: view.snapshot().routes != (), "the owner's route gauges")
        kill_owner(view, owners[-1])
        snap = view.snapshot()
        assert snap.routes == ()
        shown = routes_text(snap).plain
        assert NOT_STORED in shown and "sim sim-1  in flight 3" in shown, shown
    finally:
        view.close()
