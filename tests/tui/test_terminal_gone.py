"""A TUI whose terminal goes away with no SIGHUP (its window closed under `make`, an SSH
connection that dropped) quits: it used to live on for ever, a core busy reading end-of-file
and its event loop blocked writing to the dead terminal."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import Callable
from fcntl import ioctl
from pathlib import Path

import pytest
from flightdeck.tui import terminal

from helpers import HANG_S, until

WATCH = "flightdeck-terminal"  # the watch's thread (terminal.watch)


class OnPty:
    """A process on a pseudo-terminal that is not its controlling terminal (so no SIGHUP comes
    when it closes, as under `make`), its screen read as it is drawn (a full pty would block
    the app)."""

    def __init__(self, argv: list[str], cwd: Path, env: dict[str, str]) -> None:
        self.master, slave = os.openpty()
        ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 30, 100, 0, 0))
        self.process = subprocess.Popen(
            argv,
            cwd=cwd,
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            start_new_session=True,  # the pty is not its controlling terminal: no SIGHUP
        )
        os.close(slave)
        self.screen = bytearray()
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return
            if not data:
                return
            self.screen.extend(data)

    def until_shown(self, text: Callable[[], bytes | None], timeout: float = 60) -> None:
        """Wait until the screen shows `text()` (None: not known yet), the process alive."""
        deadline = time.monotonic() + timeout
        while (shown := text()) is None or shown not in self.screen:
            assert self.process.poll() is None, bytes(self.screen[-2000:])
            assert time.monotonic() < deadline, bytes(self.screen[-2000:])
            time.sleep(0.05)

    def hang_up(self) -> None:
        """The terminal goes."""
        os.close(self.master)

    def end(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def test_a_hung_up_terminal_is_seen_gone() -> None:
    master, slave = os.openpty()
    try:
        assert not terminal.gone(slave)
        os.close(master)
        assert terminal.gone(slave)
    finally:
        os.close(slave)
    with open(os.devnull) as null:  # not a terminal at all: never "gone"
        assert not terminal.gone(null.fileno())


def test_watch_quits_the_app_then_ends_the_process_if_it_does_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    master, slave = os.openpty()
    quit_asked, ended = threading.Event(), threading.Event()
    codes: list[int] = []
    there = threading.Semaphore(0)  # released each time the watch finds the terminal there
    real_gone = terminal.gone

    def gone(fd: int) -> bool:
        found = real_gone(fd)
        if not found:
            there.release()
        return found

    monkeypatch.setattr(terminal, "gone", gone)

    def end(code: int) -> None:
        codes.append(code)
        ended.set()

    try:
        terminal.watch(slave, quit_asked.set, every_s=0.01, grace_s=0.01, end=end)
        # Looked twice, the first look's outcome past: the terminal is there, nothing done.
        assert there.acquire(timeout=HANG_S) and there.acquire(timeout=HANG_S)
        assert not quit_asked.is_set()
        os.close(master)
        assert quit_asked.wait(HANG_S) and ended.wait(HANG_S)
        assert codes == [terminal.HANGUP_EXIT]
    finally:
        os.close(slave)


def test_an_app_over_in_time_is_not_ended_by_the_watch() -> None:
    """The app quit within the grace: the process goes its own way (an engine in it waiting
    for its children's stops), never cut short by the watch."""
    master, slave = os.openpty()
    ended: list[int] = []

    def quit_app() -> None:
        over.set()  # as the app's `run` does once it has returned

    try:
        before = set(threading.enumerate())
        over = terminal.watch(slave, quit_app, every_s=0.01, grace_s=0.2, end=ended.append)
        [watcher] = [t for t in threading.enumerate() if t not in before and t.name == WATCH]
        os.close(master)
        assert over.wait(HANG_S)
        watcher.join(HANG_S)  # the watch is over: an end would have come before
        assert not watcher.is_alive() and ended == []
    finally:
        os.close(slave)


def test_an_app_over_while_its_engine_winds_down_is_not_ended_by_the_watch() -> None:
    """The wind-down (`before_end`) takes seconds; should the app come unstuck and return
    meanwhile, the process is on its own way out (its engine closing, its store committing),
    which the watch's os._exit would cut short."""
    master, slave = os.openpty()
    ended: list[int] = []
    watcher: list[threading.Thread] = []

    def wind_down() -> None:
        watcher.append(threading.current_thread())
        over.set()  # as the app's `run` does once it has returned

    try:
        over = terminal.watch(
            slave, lambda: None, every_s=0.01, grace_s=0.01, end=ended.append, before_end=wind_down
        )
        os.close(master)
        until(lambda: bool(watcher), HANG_S, what="the wind-down")
        watcher[0].join(HANG_S)
        assert not watcher[0].is_alive() and ended == []
    finally:
        os.close(slave)


def test_attach_quits_once_its_terminal_is_gone(tmp_path: Path) -> None:
    """A real `flightdeck attach` on a pseudo-terminal that is not its controlling terminal (so
    no SIGHUP comes when it closes, as under `make`): it ends within seconds of the close."""
    env = {**os.environ, "TERM": "xterm-256color", "NO_COLOR": "1"}
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t0", "goal": "say hello"}) + "\n")
    cli = [sys.executable, "-m", "flightdeck.tui.cli"]
    state = ["--state-dir", str(tmp_path / "state")]
    run = subprocess.run(
        [*cli, "run", str(tasks), "--headless", *state],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert run.returncode == 0, run.stderr
    batch_id = run.stdout.split()[1]  # "batch ID" heads the output
    attach = OnPty([*cli, "attach", batch_id, *state], tmp_path, env)
    try:
        attach.until_shown(batch_id.encode)  # the app is drawn
        attach.hang_up()
        # Its watch ends it some EVERY_S + GRACE_S after the close; nothing else would (no
        # SIGHUP comes): a watch that missed the close leaves it running past HANG_S.
        try:
            code = attach.process.wait(HANG_S)
        except subprocess.TimeoutExpired:
            raise AssertionError("attach outlived its terminal") from None
        assert code in (terminal.HANGUP_EXIT, 0, 1), code
    finally:
        attach.end()


# The Python API's in-process TUI (`run_app`) over an engine whose sim children are held
# running. The app's event loop is stuck when the terminal goes, as a dead terminal's writes
# leave it (on_sigterm, which the watch schedules, never returns); the watch looks often.
IN_PROCESS = """
import functools, sys, time
from pathlib import Path
from flightdeck.engine.api import Engine, load_batch, load_settings
import pytest
from flightdeck.tui import terminal
from flightdeck.tui.app import FlightdeckApp, run_app

folder = Path(sys.argv[1])
terminal.watch = functools.partial(terminal.watch, every_s=0.05, grace_s=0.2)
FlightdeckApp.on_sigterm = lambda self: time.sleep(600)
engine = Engine(
    load_batch(folder / "tasks.jsonl"),
    load_settings(folder / "flightdeck.toml"),
    state_dir=folder / "state",
)
engine.start()
(folder / "batch").write_text(engine.batch_id)
run_app(engine)
"""


def test_an_in_process_engine_is_stopped_and_recorded_before_the_process_ends(
    tmp_path: Path,
) -> None:
    """Its terminal gone and its app stuck, a TUI with the engine in its own process ends the
    process (as a hangup would), but only once the engine has stopped its children and its
    store says so: not a batch left `running`, for a resume to find abandoned."""
    from flightdeck.engine.model import BatchStatus, ChildStatus
    from flightdeck.engine.records.reader import StoreReader

    from helpers import Hold

    hold = Hold(tmp_path / "hold")
    (tmp_path / "flightdeck.toml").write_text(
        "[routes.sim]\ntime_scale = 0.01\ntool_turns = 6\n" + hold.toml()
    )
    tasks = "".join(json.dumps({"id": f"c{i}", "goal": "say hello"}) + "\n" for i in (1, 2))
    (tmp_path / "tasks.jsonl").write_text(tasks)
    env = {**os.environ, "TERM": "xterm-256color", "NO_COLOR": "1"}
    app = OnPty([sys.executable, "-c", IN_PROCESS, str(tmp_path)], tmp_path, env)
    batch = tmp_path / "batch"
    try:
        # Its id once written whole (an empty file's b"" is on every screen).
        app.until_shown(lambda: (batch.read_text().encode() or None) if batch.exists() else None)
        app.hang_up()
        assert app.process.wait(60) == terminal.HANGUP_EXIT
    finally:
        app.end()
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
        info = reader.batch(batch.read_text())
        assert info is not None and info.status is BatchStatus.STOPPED
        statuses = {c.id: c.status for c in reader.children(info.id)}
    assert statuses == {"c1": ChildStatus.STOPPED, "c2": ChildStatus.STOPPED}
