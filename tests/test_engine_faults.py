"""The engine on a store that cannot write: a finish is announced only once committed, no child
starts while commits are refused, and a store that gives up fails the batch (exit 3), naming
how many children's ends could not be recorded."""

from __future__ import annotations

import io
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.control import coordinator as coordinator_module
from flightdeck.engine.model import BatchStatus, ChildFinished, ChildStarted, ChildStatus
from flightdeck.engine.owner import run as run_module
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.store import Store
from flightdeck.tui.exitcodes import ExitCode
from flightdeck.tui.headless import run_headless
from rich.console import Console

from faults import FaultyConnection, faulty, small_filesystem
from helpers import HANG_S, batch, settings, sim_route, stepped, until

# Children that take some tens of milliseconds each, two at a time: a fault can land mid-batch.
SLOW = {"time_scale": 0.05, "tool_turns": 0}


class FaultyStores:
    """Every Store the engine makes gets a FaultyConnection (kept here)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.conns: list[FaultyConnection] = []
        stores = self

        class _Store(Store):
            def __init__(self, path: Path, **kw: Any) -> None:
                super().__init__(path, **kw)
                stores.conns.append(faulty(self))

        monkeypatch.setattr(run_module, "Store", _Store)

    @property
    def conn(self) -> FaultyConnection:
        return self.conns[0]


def fail_at_first_finish(engine: Engine, stores: FaultyStores) -> list[Any]:
    """Subscribe: every event, in order; the disk fills as the first finish is announced."""
    events: list[Any] = []

    def on_event(event: Any) -> None:
        if isinstance(event, ChildFinished) and not any(
            isinstance(e, ChildFinished) for e in events
        ):
            stores.conn.failing.set()
        events.append(event)

    engine.subscribe(on_event)
    return events


def stored(engine: Engine) -> dict[str, ChildStatus]:
    with StoreReader(engine.state_dir / "flightdeck.db") as reader:
        return {r.id: r.status for r in reader.children(engine.batch_id)}


def test_a_store_that_gives_up_fails_the_batch_and_announces_only_what_it_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stores = FaultyStores(monkeypatch)
    s = settings(sim_route(**SLOW), pool=2, store_retry_s=0.3)
    engine = Engine(batch(20), s, state_dir=tmp_path / "state")
    events = fail_at_first_finish(engine, stores)
    engine.start()
    try:
        assert engine.wait(HANG_S)
        snap = engine.snapshot()
    finally:
        engine.close()
    announced = [e.row.id for e in events if isinstance(e, ChildFinished)]
    assert snap.status is BatchStatus.FAILED and engine.status is BatchStatus.FAILED
    assert engine.failure == "the store cannot record (database or disk is full)"
    # Every child ended; those announced are on disk with their final status, the rest are
    # counted, none dropped in silence.
    assert all(row.status.terminal for row in snap.children)
    on_disk = stored(engine)
    assert announced and all(on_disk[i] is ChildStatus.COMPLETED for i in announced)
    assert engine.unrecorded == 20 - len(announced) > 0
    # No child started once the store had given up: the rest ended without starting.
    not_started = [r for r in snap.children if r.started_ts is None]
    assert not_started and all("before start" in (r.error or "") for r in not_started)
    # Said apart: they are no finished work that was lost (it said "20 finished children").
    ran = engine.unrecorded - len(not_started)
    assert snap.problem is not None
    assert (
        f"{engine.unrecorded} children's ends could not be recorded: {ran} finished, "
        f"{len(not_started)} never started"
    ) in snap.problem, snap.problem


def test_no_child_starts_while_commits_are_refused_and_all_land_once_they_are_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    stores = FaultyStores(monkeypatch)
    s = settings(sim_route(**SLOW), pool=2, store_retry_s=60)
    engine = Engine(batch(12), s, state_dir=tmp_path / "state")
    events = fail_at_first_finish(engine, stores)
    with caplog.at_level(logging.WARNING, logger="flightdeck"):
        engine.start()
        try:
            until(lambda: "no new child starts while the store cannot commit" in caplog.text)
            started = sum(isinstance(e, ChildStarted) for e in events)
            finished = sum(isinstance(e, ChildFinished) for e in events)
            until(lambda: engine.snapshot().totals.running == 0)  # those running have ended
            until(lambda: engine.snapshot().routes[0].alive == 0, what="their slots freed")
            stepped(engine)  # admission has looked at the free slots: none admits a child
            assert sum(isinstance(e, ChildStarted) for e in events) == started < 12
            assert sum(isinstance(e, ChildFinished) for e in events) == finished  # held, unsaid
            problem = engine.snapshot().problem or ""
            assert "cannot write to the store (database or disk is full)" in problem
            assert "held in memory" in problem and "no new child starts" in problem
            stores.conn.failing.clear()  # room again
            assert engine.wait(HANG_S)
            snap = engine.snapshot()
        finally:
            engine.close()
    assert snap.status is BatchStatus.COMPLETED and snap.problem is None
    assert engine.unrecorded == 0 and engine.failure is None
    assert sum(isinstance(e, ChildFinished) for e in events) == 12
    assert set(stored(engine).values()) == {ChildStatus.COMPLETED}
    assert "the store commits again" in caplog.text


def test_headless_prints_a_line_only_for_a_committed_child_and_exits_3(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stores = FaultyStores(monkeypatch)
    s = settings(sim_route(**SLOW), pool=2, store_retry_s=0.3)
    engine = Engine(batch(20), s, state_dir=tmp_path / "state")
    fail_at_first_finish(engine, stores)
    out, err = io.StringIO(), io.StringIO()
    code = run_headless(engine, Console(file=out, width=200), Console(file=err, width=200))
    assert code == ExitCode.NOT_RECORDED == 3
    lines = [line for line in out.getvalue().splitlines() if line.startswith("✓ [")]
    completed_on_disk = [i for i, st in stored(engine).items() if st is ChildStatus.COMPLETED]
    assert lines and len(lines) == len(completed_on_disk)
    # The summary table counts what was stored too (it said every child in memory had ended).
    [total] = [line for line in out.getvalue().splitlines() if re.match(r"\s*20\s+\d", line)]
    cells = total.split()
    assert cells[:2] == ["20", str(len(completed_on_disk))], total
    assert "— failed" in out.getvalue()  # the summary's title
    # ... and a line under it accounts for every child (only stderr said the rest had ended).
    lost = engine.unrecorded
    assert lost > 0 and len(completed_on_disk) + lost == 20
    noun = "child" if lost == 1 else "children"
    ended = f"with {len(completed_on_disk)} ok, 0 failed, 0 stopped: all 20"
    assert f"not recorded: {lost} {noun}; {ended}" in out.getvalue().splitlines()
    # No forecast of a completion that will not come, counting as "not finished" the children
    # that did finish and could not be recorded.
    assert "forecast:" not in out.getvalue()
    errors = err.getvalue()
    assert "cannot commit" in errors and "database or disk is full" in errors  # said at once
    last = errors.strip().splitlines()[-1]
    unstarted = sum(r.started_ts is None for r in engine.snapshot().children)
    assert last == (
        "flightdeck: error: the batch fails: the store cannot record (database or disk is "
        f"full); {engine.unrecorded} children's ends could not be recorded: "
        f"{engine.unrecorded - unstarted} finished, {unstarted} never started"
    )


def test_a_batch_on_a_full_real_filesystem_fails_and_prints_no_line_it_did_not_store(
    tmp_path: Path,
) -> None:
    """The reported case, small: a 1 MB tmpfs state folder, many children. Skipped where this
    machine cannot mount one."""
    with small_filesystem("1m") as fs:
        s = settings(sim_route(tool_turns=0), pool=4, store_retry_s=0.3)
        engine = Engine(batch(400, goal="Review item {i} " + "padding " * 40), s, state_dir=fs)
        out, err = io.StringIO(), io.StringIO()
        code = run_headless(engine, Console(file=out, width=200), Console(file=err, width=200))
        lines = [line for line in out.getvalue().splitlines() if line.startswith("✓ [")]
        completed = [i for i, st in stored(engine).items() if st is ChildStatus.COMPLETED]
    assert code == ExitCode.NOT_RECORDED
    assert len(lines) == len(completed) < 400
    assert "could not be recorded" in err.getvalue()


def test_store_retry_s_is_read_from_the_config_and_checked(tmp_path: Path) -> None:
    from flightdeck.engine.errors import ConfigError
    from flightdeck.engine.inputs.settings import EngineSettings, load_settings

    path = tmp_path / "flightdeck.toml"
    path.write_text("[engine]\nstore_retry_s = 5\n")
    assert load_settings(path).engine.store_retry_s == 5
    assert EngineSettings().store_retry_s == 60  # the documented default
    path.write_text('[engine]\nstore_retry_s = "soon"\n')
    with pytest.raises(ConfigError, match=r"flightdeck\.toml:2.*store_retry_s"):
        load_settings(path)


def test_headless_says_the_batch_id_once_its_row_is_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A script reads the id off the first line and at once sends a command (`flightdeck stop
    # ID`): it must find the batch, however slow the disk's first commit.
    first = [True]

    class _SlowStore(Store):
        def _attempt(self, writes: Any) -> None:
            if first[0]:
                first[0] = False
                time.sleep(0.3)
            super()._attempt(writes)

    monkeypatch.setattr(run_module, "Store", _SlowStore)
    engine = Engine(batch(2), settings(sim_route(time_scale=0.001)), state_dir=tmp_path / "st")
    found: list[bool] = []

    class _Out(io.StringIO):
        def write(self, text: str) -> int:
            if "batch " in text and not found:
                with StoreReader(tmp_path / "st" / "flightdeck.db") as reader:
                    found.append(reader.batch(engine.batch_id) is not None)
            return super().write(text)

    code = run_headless(engine, Console(file=_Out(), width=200), Console(file=io.StringIO()))
    assert code == ExitCode.OK and found == [True]


class HeldCommits(FaultyConnection):
    """A real connection whose COMMIT waits while `held` is set: a store that falls behind."""

    def __init__(self, conn: Any) -> None:
        super().__init__(conn)
        self.waiting = threading.Event()  # a COMMIT waits now
        self.go = threading.Event()

    def execute(self, sql: str, *args: Any) -> Any:
        if sql == "COMMIT" and not self.go.is_set():
            self.waiting.set()
            self.go.wait()
        return super().execute(sql, *args)


def test_no_child_starts_while_the_store_is_far_behind_and_all_run_once_it_catches_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Children that end faster than the store commits their final rows (instant ones, 64
    workers sharing the interpreter lock with its thread) left it 16,000 rows behind at 50,000
    children: the batch ended a second after its last child, every row held in memory."""
    monkeypatch.setattr(coordinator_module, "STORE_BEHIND_ROWS", 3)
    held: list[HeldCommits] = []

    class _Store(Store):
        def __init__(self, path: Path, **kw: Any) -> None:
            super().__init__(path, **kw)
            conn = HeldCommits(self._conn)
            self._conn = conn  # type: ignore[assignment]
            held.append(conn)

    monkeypatch.setattr(run_module, "Store", _Store)
    instant = sim_route(latency_ms=0, tokens_per_s=1e9, tool_turns=0)
    engine = Engine(batch(30), settings(instant, pool=2), state_dir=tmp_path / "state")
    events: list[Any] = []
    engine.subscribe(events.append)
    engine.start()  # every commit held from the first, the batch's row's
    [conn] = held
    try:
        until(conn.waiting.is_set, what="a commit held")
        until(lambda: engine.snapshot().totals.running == 0, what="the running ended")
        until(lambda: engine.snapshot().routes[0].alive == 0, what="their slots freed")
        stepped(engine)  # admission has looked at the free slots: none admits a child
        started = sum(isinstance(e, ChildStarted) for e in events)
        # Past three final rows behind, none starts: at most those three, and the two slots'.
        assert started <= 3 + 2
        assert engine.snapshot().totals.queued == 30 - started
        conn.go.set()
        assert engine.wait(60)
        snap = engine.snapshot()
    finally:
        conn.go.set()
        engine.close()
    assert snap.status is BatchStatus.COMPLETED and snap.totals.completed == 30
    assert sum(isinstance(e, ChildStarted) for e in events) == 30


@pytest.mark.slow
def test_ctrl_c_while_the_disk_is_full_says_the_stop_waits_for_the_store(tmp_path: Path) -> None:
    # Found by a walk-through: Ctrl+C on a full disk said "stopping all children…" and then
    # nothing for the whole store_retry_s, the stop waiting (as documented) for room that the
    # line never mentioned.
    import json
    import os
    import signal
    import subprocess
    import sys

    from helpers import read_until, signals_as_a_shell_gives_them

    lines = [json.dumps({"goal": f"Summarize item {i} in two sentences."}) for i in range(400)]
    (tmp_path / "tasks.jsonl").write_text("\n".join(lines) + "\n")
    (tmp_path / "flightdeck.toml").write_text(
        "[engine]\nmax_concurrent = 8\nstore_retry_s = 600\n"
        "[routes.sim]\ntime_scale = 0.05\nmax_concurrent = 8\n"
    )
    with small_filesystem("2m") as fs:
        command = ["run", "tasks.jsonl", "--headless", "--state-dir", str(fs / "state")]
        owner = subprocess.Popen(
            [sys.executable, "-m", "flightdeck.tui.cli", *command],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "NO_COLOR": "1"},
            preexec_fn=signals_as_a_shell_gives_them,
        )
        try:
            assert owner.stdout is not None and owner.stderr is not None
            read_until(owner.stderr.fileno(), "held in memory", timeout=60)  # the disk filled
            owner.send_signal(signal.SIGINT)
            said = read_until(owner.stdout.fileno(), "the stop waits for the store: ")
            assert "stopping all children" in said
            assert "the stop waits for the store: cannot write to the store (database" in said
            subprocess.run(["mount", "-o", "remount,size=64m", str(fs)], check=True)  # room
            owner.communicate(timeout=120)
            assert owner.returncode == ExitCode.INTERRUPTED
        finally:
            if owner.poll() is None:
                owner.kill()
                owner.communicate()
