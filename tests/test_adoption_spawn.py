"""An owner killed right after it spawned a command child, before the child's process row was
committed, leaves nothing running that `resume` cannot find: the command is held until its row
is committed (engine/agents/gate.py). A real owner, killed with SIGKILL the instant the child's
process is in the process table, while another connection holds the database's write lock (as a
second run on the state folder may): the row cannot commit before the kill."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import sqlite3
import sys
import threading
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import psutil
import pytest
from flightdeck.engine.agents.book import StoreBook
from flightdeck.engine.agents.gate import MarkerError
from flightdeck.engine.agents.process import Files, Process
from flightdeck.engine.agents.tree import TAG_ENV, exists
from flightdeck.engine.agents.tree import alive as tree_alive
from flightdeck.engine.api import Engine
from flightdeck.engine.commands import ContinueAdmission, PauseAdmission
from flightdeck.engine.inputs.settings import CommandSpec, Route, Settings
from flightdeck.engine.inputs.tasks import Batch, Task
from flightdeck.engine.model import ChildRow, ChildStatus, SteerState, Usage
from flightdeck.engine.owner import run as run_module
from flightdeck.engine.records import processes as processes_module
from flightdeck.engine.records.processes import UPSERT as PROCESS_ROW
from flightdeck.engine.records.processes import ProcessLog, processes, still_running
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.store import Store

from faults import FaultyConnection, fill, fill_inodes, small_filesystem
from helpers import HANG_S, batch, settings, until
from test_adoption import argv, batch_of, flightdeck, kill_owner, project, runs
from test_agents import FAKES, config, engine_for, row_of
from test_resume import dead_batch
from test_store import make_child

# Notes its pid in `{task}.ran` (one line a run), then runs until `{task}.go` exists.
UNTIL_GO = (
    "import os, pathlib, sys, time\n"
    "folder, task = pathlib.Path(sys.argv[1]), sys.argv[2]\n"
    "with open(folder / f'{task}.ran', 'a') as f:\n"
    "    f.write(f'{os.getpid()}\\n')\n"
    "while not (folder / f'{task}.go').exists():\n"
    "    time.sleep(0.01)\n"
)


def ran(tmp_path: Path, task: str) -> list[int]:
    path = tmp_path / f"{task}.ran"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def spawned(batch_id: str, task: str) -> list[int]:
    """The processes a child's run started (held or running: its command, the holder of its
    input), by their tag (engine/agents/tree.py), zombies aside."""
    found = []
    for proc in psutil.process_iter(["status"]):
        with contextlib.suppress(psutil.Error):
            tagged = proc.environ().get(TAG_ENV) == f"{batch_id}/{task}"
            if tagged and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("stdin", [False, True], ids=["no-input", "fifo-input"])
def test_an_owner_killed_before_its_child_s_process_row_commits_leaves_no_orphan(
    tmp_path: Path, stdin: bool
) -> None:
    script = tmp_path / "until_go.py"
    script.write_text(UNTIL_GO)
    route = argv(str(script), str(tmp_path), "{id}") + ("stdin = true\n" if stdin else "")
    folder = project(tmp_path / "p", route, ["t0", "t1"])
    config = folder / "flightdeck.toml"
    # One at a time: t1 is spawned once t0 ends, after the test has taken the write lock.
    config.write_text(config.read_text().replace("max_concurrent = 4", "max_concurrent = 1"))
    db = folder / "state" / "flightdeck.db"
    owner = flightdeck(folder, "run", "tasks.jsonl", "--headless")
    lock = None
    seen: list[int] = []
    try:
        batch_id = batch_of(folder)
        until(lambda: len(ran(tmp_path, "t0")) == 1, what="t0 running")
        until(lambda: still_running(db, batch_id) == 1, what="t0's process recorded")
        lock = sqlite3.connect(db, isolation_level=None, timeout=HANG_S)
        lock.execute("BEGIN IMMEDIATE")  # the owner's writer thread waits from here on
        (tmp_path / "t0.go").touch()
        # Its command, and the holder of its input (started right after it); or, where the
        # command is not held (as before), its first line: it runs.
        started = 2 if stdin else 1
        until(
            lambda: len(spawned(batch_id, "t1")) == started or bool(ran(tmp_path, "t1")),
            what="t1's processes",
        )
        seen = spawned(batch_id, "t1")
        owner.send_signal(signal.SIGKILL)
        lock.rollback()
        kill_owner(owner)
        # Nothing recorded t1's process: the kill came before its row could commit.
        assert still_running(db, batch_id) == 0
        resume = flightdeck(folder, "resume", batch_id)
        # t1 runs again: by then, nothing of its first spawn may be left running.
        until(lambda: [p for p in ran(tmp_path, "t1") if p not in seen] != [], what="t1 rerun")
        left = [pid for pid in seen if runs(pid)]
        (tmp_path / "t1.go").touch()
        out, err = resume.communicate(timeout=HANG_S)
    finally:
        (tmp_path / "t0.go").touch()
        (tmp_path / "t1.go").touch()
        if lock is not None:
            lock.close()
        if owner.poll() is None:
            kill_owner(owner)
        for pid in seen:  # a failed test leaves nothing running
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
    assert left == [], f"the dead owner's spawn of t1 still runs: {left}"
    assert resume.returncode == 0, out + err
    # Held until its row committed, the first spawn never ran the command: t1 ran once.
    assert len(ran(tmp_path, "t1")) == 1, ran(tmp_path, "t1")
    with StoreReader(db) as reader:
        rows = {r.id: r for r in reader.children(batch_id)}
    assert all(r.status is ChildStatus.COMPLETED for r in rows.values()), rows


class FullAtProcessRow(FaultyConnection):
    """The disk fills as the first process row is written: from then on, no COMMIT lands."""

    def executemany(self, sql: str, params: Any) -> sqlite3.Cursor:
        if sql == PROCESS_ROW:
            self.failing.set()
        return self._conn.executemany(sql, params)


def test_a_process_the_store_cannot_record_never_runs_and_its_child_fails_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conns: list[FullAtProcessRow] = []

    class _Store(Store):
        def __init__(self, path: Path, **kw: Any) -> None:
            super().__init__(path, **kw)
            conns.append(FullAtProcessRow(self._conn))
            self._conn = conns[-1]  # type: ignore[assignment]

    monkeypatch.setattr(run_module, "Store", _Store)
    script = tmp_path / "until_go.py"
    script.write_text(UNTIL_GO)
    route = argv(str(script), str(tmp_path), "{id}")
    settings = config(tmp_path, route, engine="store_retry_s = 0.3\n")
    engine = engine_for(tmp_path, settings)
    try:
        assert engine.wait(HANG_S)
        row = row_of(engine)
        said = Path(row.transcript).read_text()
    finally:
        (tmp_path / "t0.go").touch()
        engine.close()
    assert conns[0].refused > 0  # the process row's commit was refused
    assert row.status is ChildStatus.FAILED
    assert row.error == (
        "not started: its process could not be recorded in the store (database or disk is full)"
    )
    assert "not started: its process could not be recorded" in said
    assert ran(tmp_path, "t0") == []  # held until recorded: the command never ran
    assert spawned(engine.batch_id, "t0") == []  # and nothing of it is left


class HeldAtSecondProcessRow(FaultyConnection):
    """The second process row's write (a steer's resume) waits for `release` (a write lock held
    elsewhere, say): past its wait, the process is not run."""

    rows = 0
    release = threading.Event()

    def executemany(self, sql: str, params: Any) -> sqlite3.Cursor:
        if sql == PROCESS_ROW:
            self.rows += 1
            if self.rows == 2:
                self.release.wait(HANG_S)
        return self._conn.executemany(sql, params)


@pytest.mark.parametrize("now", [False, True])
def test_a_steer_whose_resume_the_store_did_not_record_is_missed_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, now: bool
) -> None:
    # The steer was settled delivered before its resume ran, and the child failed "not
    # started: ...": a child that had run, and answered, for a steer that never reached it.
    class _Store(Store):
        def __init__(self, path: Path, **kw: Any) -> None:
            super().__init__(path, **kw)
            self._conn = HeldAtSecondProcessRow(self._conn)  # type: ignore[assignment]

    monkeypatch.setattr(run_module, "Store", _Store)
    monkeypatch.setattr(processes_module, "COMMIT_MARGIN_S", 0.5)
    HeldAtSecondProcessRow.release.clear()
    gate = tmp_path / "gate"
    codex = [str(FAKES / "fake_codex.py"), "exec", "--json", "--fake-gate", str(gate), "{goal}"]
    resume = [str(FAKES / "fake_codex.py"), "exec", "resume", "{session}", "--json", "{message}"]
    route = argv(*codex) + "resume_" + argv(*resume)
    route += 'format = "codex-json"\nsteer = "resume"\nkill_grace_s = 0.3\n'
    engine = engine_for(tmp_path, config(tmp_path, route, engine="store_retry_s = 0.3\n"))
    try:
        until(lambda: row_of(engine).activity.current_tool == "shell", HANG_S)
        engine.steer(["t0"], "and the changelog", now=now)
        until(lambda: row_of(engine).steers, HANG_S, what="the steer queued")
        gate.touch()
        until(lambda: row_of(engine).status.terminal, HANG_S, what="t0 ended")
    finally:
        gate.touch()
        HeldAtSecondProcessRow.release.set()
    assert engine.wait(HANG_S)
    row = row_of(engine)
    why = "its session was not resumed: its process was not recorded in the store within 0.8s"
    assert [(r.state, r.how) for r in row.steers] == [(SteerState.MISSED, why)]
    if now:  # its turn was ended for the steer: no answer stands
        assert (row.status, row.error) == (ChildStatus.FAILED, f"ended for a steer, then {why}")
    else:  # the turn it had answered stands
        assert (row.status, row.result) == (ChildStatus.COMPLETED, "done: review the change")
    said = Path(row.transcript).read_text()
    assert f"missed: and the changelog ({why})" in said
    assert "delivered: and the changelog" not in said
    assert "not started" not in said  # it had started, and answered
    assert "its session's resume did not run: its process was not recorded" in said


def _two_held_in_turn(tmp_path: Path) -> tuple[Batch, Settings, dict[str, str], Path]:
    """Two tasks on one slot, each running until its go file (`UNTIL_GO`), and the state
    folder they record into: the full-disk tests' batch."""
    script = tmp_path / "until_go.py"
    script.write_text(UNTIL_GO)
    route = argv(str(script), str(tmp_path), "{id}")
    settings = config(tmp_path, route, engine="max_concurrent = 1\n")
    tasks = Batch(
        name="full", tasks=(Task(id="t0", goal="x", seq=0), Task(id="t1", goal="x", seq=1))
    )
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    return tasks, settings, {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}, state


def test_a_full_disk_at_a_command_s_start_fails_it_unrun_saying_the_disk_is_full(
    tmp_path: Path,
) -> None:
    # On a disk with no room left, the held process's marker is the first write to fail,
    # before its row: the child failed "exit 127: cannot start …: No space left on device", as
    # if its program could not start, where the docs say it was not started, unrecorded.
    # The batches' folder is on the full disk; the database, beside it, still commits (as
    # SQLite does on a full disk in the pages its log has already: admission would otherwise
    # hold t1 back until the store commits again).
    tasks, settings, env, state = _two_held_in_turn(tmp_path)
    with small_filesystem("2m") as fs:
        (state / "batches").symlink_to(fs)
        engine = Engine(tasks, settings, state_dir=state, env=env)
        engine.start()
        try:
            until(lambda: ran(tmp_path, "t0") != [], what="t0 running")
            filler = fill(fs)
            (tmp_path / "t0.go").touch()  # t1 starts on the full disk
            assert engine.wait(HANG_S)
            row = row_of(engine, "t1")
            left = sorted(p.name for p in (fs / engine.batch_id / "io").iterdir())
            filler.unlink()
        finally:
            (tmp_path / "t0.go").touch()
            engine.close()
    with StoreReader(state / "flightdeck.db") as reader:
        stored = reader.child(engine.batch_id, "t1")
    assert ran(tmp_path, "t1") == []  # never run
    assert left == []  # nor its output files, made before the marker, left behind
    assert row.status is ChildStatus.FAILED
    assert row.error is not None and row.error.startswith(
        "not started: its process could not be recorded (its marker "
    )
    assert row.error.endswith("/io/t1.held: No space left on device)"), row.error
    assert stored is not None and (stored.status, stored.error) == (row.status, row.error)


def test_output_files_a_full_disk_refuses_fail_the_command_unrun_saying_why(
    tmp_path: Path,
) -> None:
    # No file can be made on the disk (no inode left): its output files are the first refused
    # and the child failed "exit 127: cannot start <program>: No space left on device", as if
    # its program could not start. t1 waits behind the paused admission until t0's files are
    # gone and the last inode is taken.
    tasks, settings, env, state = _two_held_in_turn(tmp_path)
    with small_filesystem("2m", inodes=64) as fs:
        (state / "batches").symlink_to(fs)
        engine = Engine(tasks, settings, state_dir=state, env=env)
        engine.start()
        try:
            until(lambda: ran(tmp_path, "t0") != [], what="t0 running")
            engine.send(PauseAdmission())
            until(lambda: engine.snapshot().held is not None, what="admission paused")
            (tmp_path / "t0.go").touch()
            until(lambda: row_of(engine, "t0").status.terminal, what="t0 ended")
            filler = fill_inodes(fs)
            engine.send(ContinueAdmission())
            until(lambda: row_of(engine, "t1").status.terminal, what="t1 ended")
            row = row_of(engine, "t1")
            shutil.rmtree(filler)
            assert engine.wait(HANG_S)
        finally:
            (tmp_path / "t0.go").touch()
            engine.close()
    assert ran(tmp_path, "t1") == []  # never run
    assert row.status is ChildStatus.FAILED
    assert row.error is not None and row.error.startswith(
        "not started: its process could not be recorded (its output file "
    )
    assert row.error.endswith("/io/t1.out: No space left on device)"), row.error


def test_a_fast_command_s_child_is_recorded_started_before_its_process_row_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by a review: the coordinator records a child's start after its launch loop, while
    # its worker spawns the command, records its process, lets it run and, once it ended,
    # deletes that row. A coordinator slow to get there (a long loop, a busy interpreter) let
    # the delete commit first: an owner killed then left a row saying queued and no process,
    # and `resume` ran the child afresh as one never started (no lost attempt; its worktree's
    # changes refused it). The start is held here until the command's process row is gone.
    from flightdeck.engine.owner.recording import StoreRecorder

    go = threading.Event()
    real = StoreRecorder.record_running

    def late(self: StoreRecorder, child_id: str, row: Callable[[], ChildRow]) -> None:
        if child_id == "t0":
            go.wait(HANG_S)
        real(self, child_id, row)

    monkeypatch.setattr(StoreRecorder, "record_running", late)
    script = tmp_path / "until_go.py"
    script.write_text(UNTIL_GO)
    (tmp_path / "t0.go").touch()  # it ends at once
    engine = engine_for(tmp_path, config(tmp_path, argv(str(script), str(tmp_path), "{id}")))
    db = tmp_path / "state" / "flightdeck.db"
    try:
        until(lambda: ran(tmp_path, "t0") != [], what="t0's command")
        until(lambda: processes(db, engine.batch_id) == [], what="its process row deleted")
        with StoreReader(db) as reader:
            stored = reader.child(engine.batch_id, "t0")
    finally:
        go.set()
        assert engine.wait(HANG_S)
        engine.close()
    assert stored is not None
    assert (stored.status, stored.started_ts is not None) == (ChildStatus.RUNNING, True)


class HeldAtProcessRow(FaultyConnection):
    """The process row's write waits for `release` (a write lock held elsewhere, say)."""

    reached = threading.Event()
    release = threading.Event()

    def executemany(self, sql: str, params: Any) -> sqlite3.Cursor:
        if sql == PROCESS_ROW:
            self.reached.set()
            self.release.wait(HANG_S)
        return self._conn.executemany(sql, params)


def test_a_child_stopped_while_its_process_row_commits_never_runs_its_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by a review: the stop was seen only once the held command had been let run (a
    # commit waits up to store_retry_s + 15 s), and the command then ran until its SIGTERM.
    class _Store(Store):
        def __init__(self, path: Path, **kw: Any) -> None:
            super().__init__(path, **kw)
            self._conn = HeldAtProcessRow(self._conn)  # type: ignore[assignment]

    monkeypatch.setattr(run_module, "Store", _Store)
    HeldAtProcessRow.reached.clear()
    HeldAtProcessRow.release.clear()
    script = tmp_path / "until_go.py"
    script.write_text(UNTIL_GO)
    route = argv(str(script), str(tmp_path), "{id}") + f"kill_grace_s = {HANG_S}\n"
    # A command let run outlives its SIGTERM (ignored here, and so in what this process starts)
    # long enough to say it ran: the test cannot pass by a stop that came first.
    term = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    engine = engine_for(tmp_path, config(tmp_path, route))
    try:
        assert HeldAtProcessRow.reached.wait(HANG_S)
        engine.stop(["t0"])
        child = engine._coordinator.slots.by_id["t0"]  # type: ignore[union-attr]
        until(child.interrupt.is_set, what="the stop to reach t0")
        HeldAtProcessRow.release.set()
        until(lambda: row_of(engine).status.terminal or bool(ran(tmp_path, "t0")), what="t0")
        assert ran(tmp_path, "t0") == []  # it never ran
        assert engine.wait(HANG_S)
        assert row_of(engine).status is ChildStatus.STOPPED
        assert spawned(engine.batch_id, "t0") == []
    finally:
        HeldAtProcessRow.release.set()
        (tmp_path / "t0.go").touch()
        signal.signal(signal.SIGTERM, term)
        engine.close()


@pytest.mark.parametrize("mode", [None, 0o644, "folder"])
def test_a_held_program_that_cannot_start_is_said_as_popen_says_it(
    tmp_path: Path, mode: int | str | None
) -> None:
    # Under the shell that holds it, a program gone since the batch started (or made not
    # executable) would be the shell's `exec: not found` in its stderr, exit 127 or 126.
    program = tmp_path / "gone"
    if mode == "folder":
        program.mkdir()
    elif mode is not None:
        program.write_text("#!/bin/sh\necho ran\n")
        program.chmod(int(mode))
    files = Files(tmp_path / "out", tmp_path / "err")
    env = {"PATH": os.environ["PATH"]}
    expected = FileNotFoundError if mode is None else PermissionError
    with pytest.raises(expected):
        Process.spawn([str(program)], cwd=tmp_path, env=env, files=files, tag="b/c", held=True)


def test_a_held_shell_whose_marker_cannot_be_written_ends_unrun_and_reaped(
    tmp_path: Path,
) -> None:
    # The marker is written once the shell is spawned: one it cannot be (here a folder in its
    # place) fails the spawn as a start would, the shell let go unrun and reaped, no zombie.
    files = Files(tmp_path / "t0.out", tmp_path / "t0.err")
    files.held.mkdir()
    before = {p.pid for p in psutil.Process().children()}
    with pytest.raises(MarkerError) as raised:  # the runner says it was not recorded
        Process.spawn(["true"], cwd=tmp_path, env=os.environ, files=files, tag="b/t0", held=True)
    assert (raised.value.errno, raised.value.filename) == (errno.EISDIR, str(files.held))
    left = [p for p in psutil.Process().children() if p.pid not in before]
    assert left == []


def test_a_held_command_let_go_runs_in_its_own_folder_with_the_owner_s_paths_relative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A state folder given as a relative path (`state_dir = "state"`) makes the batch's files
    # relative to the owner's folder, while the command runs in its workspace: its marker,
    # emptied by the shell there, was looked for in the workspace, and the command never ran.
    monkeypatch.chdir(tmp_path)
    work = tmp_path / "ws"
    work.mkdir()
    io = Path("state") / "io"
    io.mkdir(parents=True)
    files = Files(io / "t0.out", io / "t0.err")
    proc = Process.spawn(["pwd"], cwd=work, env=os.environ, files=files, tag="b/t0", held=True)
    proc.go()
    until(lambda: proc.returncode is not None, what="the command to end")
    assert (proc.returncode, files.out.read_text()) == (0, f"{work}\n"), files.err.read_text()
    assert files.held.read_bytes() == b""  # emptied as it was let run


def a_dead_owner_s_held_process(
    tmp_path: Path, *extra: str
) -> tuple[Path, Files, Callable[[], Process], Process, Store]:
    """Batch b1 of a dead owner whose child t0000, of an agent CLI's route, runs: its process
    spawned held and recorded, as its owner does before letting it go. Its state folder, the
    process's files, how another is spawned with them, the process, and the store (the caller
    closes it)."""
    fake = Path(__file__).parent / "fakes" / "fake_claude.py"
    argv = [sys.executable, str(fake), "-p", "--output-format", "stream-json", "--verbose", *extra]
    command = CommandSpec(argv=(*argv, "{goal}"), format="claude-stream-json")
    route = Route(name="cli", provider="command", model="cli", command=command)
    state = tmp_path / "state"
    bdir = state / "batches" / "b1"
    bdir.mkdir(parents=True)
    row = make_child(
        0, id="t0000", route="cli", status=ChildStatus.RUNNING, usage=Usage(), cost_usd=None,
        started_ts=1450.0, transcript=str(bdir / "t0000.log"),
    )  # fmt: skip
    io = bdir / "io"
    files = Files(io / "t0000.out", io / "t0000.err")
    store = Store(state / "flightdeck.db")
    store.create_batch(dead_batch(state, settings(route), batch(1), heartbeat_ts=1500.0))
    store.add_children("b1", [row])

    def spawn() -> Process:
        return Process.spawn(
            [*argv, row.goal], cwd=tmp_path, env=os.environ, files=files, tag="b1/t0000", held=True
        )

    book = StoreBook(ProcessLog(store, "b1"), "t0000")
    proc = spawn()
    try:
        assert book.started(proc.record(), Usage(), None, Decimal(0), Usage()) is None
    except BaseException:
        proc.go(run=False)
        store.close()
        raise
    return state, files, spawn, proc, store


def resumed(state: Path, *, rerun: bool = True) -> tuple[ChildRow, str]:
    """Batch b1 resumed to its end: its child's row and transcript."""
    engine = Engine.resume(state, "b1", rerun=rerun)
    engine.start()
    try:
        assert engine.wait(HANG_S)
        ended = engine.snapshot().child("t0000")
    finally:
        engine.close()
    assert ended is not None
    return ended, Path(ended.transcript).read_text()


def test_an_owner_killed_after_the_row_committed_before_letting_go_has_its_task_run_again(
    tmp_path: Path,
) -> None:
    # An owner killed between the process row's commit and opening the gate left the row of a
    # shell that exits unrun. `resume` took it for a process that ran and ended: an agent
    # CLI's child was adopted, read to the end of no output and failed, "ended without a
    # result", its task never run. The process here is held and recorded as the owner does,
    # then its gate's write end closed, as the owner's death closes it.
    state, _, _, proc, store = a_dead_owner_s_held_process(tmp_path)
    with store:
        proc.go(run=False)  # the pipe's write end closed, as by the owner's death
        until(lambda: proc.returncode is not None, what="the held shell to end")
    assert proc.returncode != 0  # at the pipe's end, unrun
    ended, said = resumed(state)
    assert (ended.status, ended.error) == (ChildStatus.COMPLETED, None)
    assert "never ran: its owner died before letting it start" in said
    # What the owner's death did, said as it happened (it had said "died while it ran").
    assert "died while it ran" not in said
    assert "died before its process ran; it restarts from the start" in said


def test_a_dead_owner_s_process_ended_by_resume_leaves_no_file_in_the_batch_folder(
    tmp_path: Path,
) -> None:
    # Its output files went with its tree, its marker stayed: one `io/ID.held` left for each
    # such process in a batch whose task did not run again (a rerun's spawn writes it anew and
    # deletes it at its end). Here the resume runs nothing again.
    state, files, _, proc, store = a_dead_owner_s_held_process(tmp_path)
    with store:
        proc.go(run=False)  # the pipe's write end closed, as by the owner's death
        until(lambda: proc.returncode is not None, what="the held shell to end")
    ended, said = resumed(state, rerun=False)
    assert ended.status is ChildStatus.UNKNOWN
    assert "never ran: its owner died before letting it start" in said
    assert sorted(p.name for p in files.out.parent.iterdir()) == []


def test_a_process_that_ran_is_not_taken_for_unrun_by_the_marker_of_the_next(
    tmp_path: Path,
) -> None:
    # A route with steer = "resume" spawns its child's next process with the same files as
    # soon as the last one ended, before the row saying so is committed (another process may
    # hold the database's write lock). An owner killed then left the row of a process that
    # ran beside the next one's full marker: `resume` said it never ran and ran its task again
    # from the start, twice in all. The CLI here notes its pid: one run, never a second.
    pidfile = tmp_path / "cli.pid"
    state, files, spawn, first, store = a_dead_owner_s_held_process(
        tmp_path, "--fake-pidfile", str(pidfile)
    )
    with store:
        first.go()
        until(lambda: first.returncode is not None, what="the first process to end")
        assert first.returncode == 0
        first.release()  # as the runner does, before its `ended` row (not committed here)
        following = spawn()  # the next, held: its row not committed as the owner dies
        following.go(run=False)
        until(lambda: following.returncode is not None, what="the held shell to end")
        assert files.held.read_bytes() != b""  # the next one's, unrun
    ended, said = resumed(state)
    assert "never ran" not in said
    assert "adopted" in said
    # Its output went with its files (the next spawn's are new): never run twice, not again.
    assert (ended.status, ended.error) == (
        ChildStatus.FAILED, "it ended without a result (adopted: no exit status)"
    )  # fmt: skip
    assert pidfile.read_text().split() == [str(first.pid)]  # its task was not run again


def test_a_held_shell_found_alive_after_its_owner_died_is_ended_and_its_task_run_again(
    tmp_path: Path,
) -> None:
    # `resume` started within the instant its owner died may find the held shell alive still
    # (at its pipe's end, not yet exited): adopted, it ended unrun and an agent CLI's child
    # failed, "ended without a result". Here the gate's write end is held through the
    # resume's start (as the dying owner's was), and closed once the resume has looked.
    state, _, _, proc, store = a_dead_owner_s_held_process(tmp_path)
    with store:
        engine = Engine.resume(state, "b1")
        try:
            engine.start()
            found_alive, left = tree_alive(proc.root), exists(proc.root)
        finally:
            proc.go(run=False)  # the pipe's write end closed, as by the owner's death
        proc.poll()  # its Popen learns it was reaped (ECHILD)
    try:
        assert engine.wait(HANG_S)
        ended = engine.snapshot().child("t0000")
    finally:
        engine.close()
    assert ended is not None
    assert (ended.status, ended.error) == (ChildStatus.COMPLETED, None)
    assert not found_alive  # ended by the resume, not by its pipe's end
    assert not left  # and reaped, its parent being this process
    said = Path(ended.transcript).read_text()
    assert f"its process {proc.pid} never ran: its owner died before letting it start" in said
    assert "died before its process ran; it restarts from the start" in said
    assert "adopted" not in said and "died while it ran" not in said


def test_a_held_shell_let_go_as_its_owner_died_is_adopted_not_ended(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by a review: a shell whose marker still named it when `resume` first looked was
    # ended, though its dying owner may have let it go in that instant (the marker emptied and
    # the command run just after the look): an agent CLI that ran was killed and its task run
    # again from the start, where it could have been adopted. Here the owner lets it go right
    # after that first look, and the CLI is running before the resume goes on.
    from flightdeck.engine.owner import adopting

    pidfile, hold = tmp_path / "cli.pid", tmp_path / "hold"
    state, _, _, proc, store = a_dead_owner_s_held_process(
        tmp_path, "--fake-pidfile", str(pidfile), "--fake-hold", str(hold)
    )
    real = adopting.never_ran
    looked: list[bool] = []

    def let_go_after_the_look(marker: Path, proc_id: Any) -> bool:
        found = real(marker, proc_id)
        if not looked:
            looked.append(found)
            proc.go()  # its owner let it go as it died
            until(pidfile.exists, what="the CLI to run")
        return found

    monkeypatch.setattr(adopting, "never_ran", let_go_after_the_look)
    with store:
        engine = Engine.resume(state, "b1")
        try:
            engine.start()
            hold.touch()
            assert engine.wait(HANG_S)
            ended = engine.snapshot().child("t0000")
        finally:
            proc.go(run=False)
            hold.touch()
            engine.close()
        until(lambda: proc.poll() is not None or not exists(proc.root), what="its end")
    assert looked == [True]  # the first look found it held
    assert ended is not None
    said = Path(ended.transcript).read_text()
    assert "adopted" in said and "its tree was ended" not in said, said
    assert (ended.status, ended.error) == (ChildStatus.COMPLETED, None)
    assert pidfile.read_text() == str(proc.pid)  # one run, never a second
