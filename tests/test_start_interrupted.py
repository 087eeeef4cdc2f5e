"""Ctrl+C while `flightdeck run` starts a batch's owner in the background, before the operator
has seen the batch (the TUI loading, or `--detach` not yet done): the owner is stopped, not
left to run the batch unseen. It was: `flightdeck: interrupted`, exit 130, and the batch ran on
in its owner, children and spend included, with nothing said of it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from flightdeck.tui.exitcodes import ExitCode

from helpers import ended, signals_as_a_shell_gives_them, until

# Holds the owner (the process `run` starts with --owner-of) before it loads anything, as a
# busy machine holds it: it says its pid, then waits for the gate.
HOLD = """import os, sys, time
if "--owner-of" in sys.argv:
    with open(os.environ["FD_TEST_HELD"] + ".part", "w") as f:
        f.write(str(os.getpid()))
    os.rename(os.environ["FD_TEST_HELD"] + ".part", os.environ["FD_TEST_HELD"])
    while not os.path.exists(os.environ["FD_TEST_GATE"]):
        time.sleep(0.01)
"""


def held_project(tmp_path: Path) -> dict[str, str]:
    """A task file in `tmp_path`, and the environment under which an owner started there says
    its pid in `held` and waits for `gate` (HOLD)."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(HOLD)
    (tmp_path / "tasks.jsonl").write_text('{"id": "c1", "goal": "Review it"}\n')
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    env = {"NO_COLOR": "1", "PYTHONPATH": path}
    return env | {"FD_TEST_HELD": str(tmp_path / "held"), "FD_TEST_GATE": str(tmp_path / "gate")}


def starter(
    tmp_path: Path, env: dict[str, str], *argv: str, process_group: int | None = None
) -> subprocess.Popen[str]:
    """`flightdeck run --detach` (through `argv`, the program that starts it) in `tmp_path`,
    its signals as a shell's job gets them."""
    command = ["run", "--detach", "tasks.jsonl", "--state-dir", "state"]
    return subprocess.Popen(
        [sys.executable, *argv, *command],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=signals_as_a_shell_gives_them,
        process_group=process_group,
    )


def said_never_started(run: subprocess.Popen[str], owner: int) -> None:
    """`run`, interrupted, ended its held owner and said nothing of it is left."""
    out, err = run.communicate(timeout=60)
    assert run.returncode == ExitCode.INTERRUPTED, err
    assert out == "", out  # no batch id: it never started
    assert f"its owner, pid {owner};" in err, err
    assert "never started: nothing is left of it" in err, err
    assert ended(owner)  # not left to run the batch unseen


def cleaned_up(run: subprocess.Popen[str], owner: int) -> None:
    """Nothing of a test's run or its owner left, however the test ended."""
    if owner and not ended(owner):
        os.kill(owner, signal.SIGKILL)
    if run.poll() is None:
        run.kill()
        run.communicate()


@pytest.mark.slow  # a starter and its owner
def test_ctrl_c_before_the_owner_recorded_the_batch_ends_it_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    env = {**os.environ, **held_project(tmp_path)}
    held = tmp_path / "held"
    run = starter(tmp_path, env, "-m", "flightdeck.tui.cli")
    owner = 0
    try:
        until(held.exists, 60, what="the owner started, and held")
        owner = int(held.read_text())
        run.send_signal(signal.SIGINT)
        said_never_started(run, owner)
        assert list((tmp_path / "state" / "batches").iterdir()) == []
    finally:
        cleaned_up(run, owner)


# The launcher (spawn._LAUNCH: it starts the owner in a session of its own and says its pid),
# held after it started the owner and before it says its pid, as a busy machine holds it.
HELD_LAUNCH = """import os, subprocess, sys, time
p = subprocess.Popen(sys.argv[1:], stdin=subprocess.DEVNULL, stdout=2, stderr=2,
                     start_new_session=True)
open(os.environ["FD_TEST_LAUNCHED"], "w").close()
while not os.path.exists(os.environ["FD_TEST_LAUNCH_GATE"]):
    time.sleep(0.01)
print(p.pid)
"""
STARTER = """import sys
from flightdeck.engine.attached import spawn
spawn._LAUNCH = sys.argv.pop(1)
from flightdeck.tui.entry import main
sys.exit(main())
"""


@pytest.mark.slow  # a starter, its launcher and its owner
def test_ctrl_c_while_the_launcher_starts_the_owner_ends_the_owner(tmp_path: Path) -> None:
    # A terminal's Ctrl+C reaches the whole foreground process group: it killed the launcher
    # before it said the owner's pid, and the owner, in a session of its own, ran on unseen.
    env = {**os.environ, **held_project(tmp_path)}
    held = tmp_path / "held"
    launched, launch_gate = tmp_path / "launched", tmp_path / "launch-gate"
    env |= {"FD_TEST_LAUNCHED": str(launched), "FD_TEST_LAUNCH_GATE": str(launch_gate)}
    run = starter(
        tmp_path,
        env,
        "-c",
        STARTER,
        HELD_LAUNCH,
        process_group=0,  # a terminal's foreground group: the starter and its launcher
    )
    owner = 0
    try:
        until(launched.exists, 60, what="the launcher started the owner, and held")
        until(held.exists, 60, what="the owner started, and held")
        owner = int(held.read_text())
        os.killpg(run.pid, signal.SIGINT)  # as the terminal sends it
        launch_gate.touch()
        said_never_started(run, owner)
    finally:
        cleaned_up(run, owner)


def started_held_and_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *, detach: bool
) -> None:
    """`run` (`--detach` or not) called in this process, its owner held before it records the
    batch, and interrupted as the test arranged: the owner is ended and nothing is left."""
    import argparse

    from flightdeck.tui import attached

    for name, value in held_project(tmp_path).items():
        monkeypatch.setenv(name, value)
    held = tmp_path / "held"
    args = argparse.Namespace(
        batch_file=tmp_path / "tasks.jsonl",
        config=None,
        max_concurrent=None,
        executor=None,
        detach=detach,
    )
    state = tmp_path / "state"
    try:
        code = attached.run_in_background(args, state)
    except KeyboardInterrupt:
        until(held.exists, 60, what="the owner started")
        os.kill(int(held.read_text()), signal.SIGKILL)
        pytest.fail("the interrupt escaped, and the owner ran on unseen")
    assert code == ExitCode.INTERRUPTED
    assert list((state / "batches").iterdir()) == []  # never started: nothing left of it
    # Ended before it got far, or held: either way it runs no more.
    assert not held.exists() or ended(int(held.read_text()))


@pytest.mark.slow  # an owner started
def test_a_ctrl_c_just_as_the_launch_ends_still_ends_the_owner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found in review: a SIGINT just after the handler that notes it was put back (the owner's
    # pid known) raised outside the `try` that stops the owner: it ran the batch on, unseen.
    import contextlib
    from collections.abc import Iterator

    from flightdeck.tui import attached

    @contextlib.contextmanager
    def interrupted_as_it_ends() -> Iterator[list[int]]:
        yield []
        raise KeyboardInterrupt  # as the terminal's SIGINT, the default handler back

    monkeypatch.setattr(attached, "_interrupt_noted", interrupted_as_it_ends)
    started_held_and_interrupted(tmp_path, monkeypatch, detach=True)


@pytest.mark.slow  # an owner started
def test_a_ctrl_c_while_the_tui_loads_beside_the_starting_owner_ends_the_owner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `run` on a terminal loads the TUI's modules while its owner starts (before the owner has
    # recorded the batch): a Ctrl+C in that half second stops the owner, as one before it does.
    import importlib.abc

    class CtrlC(importlib.abc.MetaPathFinder):
        def find_spec(self, name: str, *_: object) -> None:
            if name == "flightdeck.tui.app":
                raise KeyboardInterrupt  # as the terminal's SIGINT, mid-import

    monkeypatch.delitem(sys.modules, "flightdeck.tui.app", raising=False)
    monkeypatch.setattr(sys, "meta_path", [CtrlC(), *sys.meta_path])
    started_held_and_interrupted(tmp_path, monkeypatch, detach=False)


@pytest.mark.parametrize("shown", [False, True])
def test_an_interrupt_stops_the_batch_only_before_the_tui_has_shown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shown: bool
) -> None:
    # Found in review: any KeyboardInterrupt out of the app's run was taken as "before the
    # operator saw the batch", so a `kill -INT` while it showed, or a Ctrl+C as it gave the
    # terminal back after a detach, stopped a batch the operator had chosen to leave running.
    from flightdeck.tui import app as app_module
    from flightdeck.tui import attached

    def run(self: app_module.FlightdeckApp) -> bool:
        self.shown = shown
        raise KeyboardInterrupt

    class View:  # what attach_tui reads of a StoreView before the app runs
        db = tmp_path / "flightdeck.db"
        batch_id = "20270115-080000-demo"
        closed = False

        def close(self) -> None:
            self.closed = True

    monkeypatch.setattr(app_module.FlightdeckApp, "run", run)
    view = View()
    stopped: list[bool] = []

    def unseen() -> ExitCode:
        stopped.append(True)
        return ExitCode.INTERRUPTED

    if shown:
        with pytest.raises(KeyboardInterrupt):
            attached.attach_tui(view, unseen=unseen)  # type: ignore[arg-type]
        assert stopped == []
    else:
        assert attached.attach_tui(view, unseen=unseen) == ExitCode.INTERRUPTED  # type: ignore[arg-type]
        assert stopped == [True]
    assert view.closed
