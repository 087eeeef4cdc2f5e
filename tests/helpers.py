"""Builders shared by the engine tests: sim routes, batches, settings, polling."""

from __future__ import annotations

import codecs
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from flightdeck.engine.api import Engine, load_batch, load_settings, state_dir_from
from flightdeck.engine.inputs.settings import (
    EngineSettings,
    RetrySettings,
    Route,
    Settings,
    default_sim_route,
)
from flightdeck.engine.inputs.tasks import Batch, Task
from flightdeck.engine.model import ChildFinished, EngineEvent, Snapshot

# The bound on a wait that only guards against a hang: generous, so that a busy machine never
# trips it (a test that fails on it was stuck, not slow). A bound that is part of what a test
# asserts ("ended within a second") is stated where it is asserted, not with this.
HANG_S = 60.0
# A child's transcript once `resume` has adopted its running process (the batch claimed by then).
# Not "adopted" alone: a test's tmp_path may hold the word ("test_a_steer_to_an_adopted_chi0").
ADOPTED = "engine    │ adopted: "
FAST = {"time_scale": 0.001, "latency_ms": 20, "tokens_per_s": 400}
# A stream that sends the first third of its answer, then hangs like a server that stopped
# sending until a stop closes it: output streamed, the call never over by itself.
HANGS = {
    "stall_rate": 1.0,
    "time_scale": 1.0,
    "latency_ms": 0,
    "tokens_per_s": 2000,
    "read_timeout_s": 3600,
}


class Hold:
    """The sim's `hold_dir`: every call of a sim child on a route given `options()` (or
    `toml()` in a flightdeck.toml, for an owner in another process) waits before its first
    token until `release` lets it go, so a test holds children running as long as it needs
    instead of making them "long enough" for the machine it hopes to run on."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def options(self) -> dict[str, Any]:
        return {"hold_dir": str(self.folder)}

    def toml(self) -> str:
        return f"hold_dir = {json.dumps(str(self.folder))}\n"

    def release(self, child: str | None = None, call: int | None = None) -> None:
        """Let every call go (no child named), every call of `child`, or only its call
        number `call` (from 0, retries counted)."""
        name = "all" if child is None else child if call is None else f"{child}@{call}"
        (self.folder / name).touch()

    def hold(self) -> None:
        """Hold again the calls `release()` (of everything) let go; those in flight go on."""
        (self.folder / "all").unlink(missing_ok=True)

    def held(self) -> set[str]:
        """The calls that have reached the hold (`<child id>@<call>`), released since or not."""
        return {p.name.removesuffix(".held") for p in self.folder.glob("*.held")}


def sim_route(name: str = "sim", *, max_concurrent: int | None = None, **options: Any) -> Route:
    merged = {**FAST, **options}
    base = default_sim_route(name, **merged)
    retry = RetrySettings(attempts=8, base_s=0.5, max_s=5.0)
    return Route(
        name=name,
        provider="sim",
        model=base.model,
        max_concurrent=max_concurrent,
        price=base.price,
        retry=retry,
        options=base.options,
    )


def settings(*routes: Route, pool: int | str = "auto", **engine: Any) -> Settings:
    routes = routes or (sim_route(),)
    return Settings(
        engine=EngineSettings(max_concurrent=pool, default_route=routes[0].name, **engine),  # type: ignore[arg-type]
        routes=MappingProxyType({r.name: r for r in routes}),
    )


def batch(
    n: int, *, route: str | None = None, goal: str = "Review item {i}", **fields: Any
) -> Batch:
    tasks = tuple(
        Task(id=f"t{i:04d}", goal=goal.format(i=i), seq=i, route=route, **fields) for i in range(n)
    )
    return Batch(name="test", tasks=tasks)


def tasks_batch(tasks: list[Task]) -> Batch:
    return Batch(name="test", tasks=tuple(tasks))


def start(b: Batch, s: Settings, tmp: Path, **kw: Any) -> Engine:
    engine = Engine(b, s, state_dir=tmp / "state", **kw)
    engine.start()
    return engine


def run_to_end(engine: Engine, timeout: float = HANG_S) -> Snapshot:
    """Wait until every child is final, snapshot, and close the engine whatever happens."""
    try:
        assert engine.wait(timeout)
        return engine.snapshot()
    finally:
        engine.close()


def until(
    pred: Callable[[], bool], timeout: float = HANG_S, every: float = 0.005, what: str = ""
) -> float:
    """Poll `pred` until true; return the seconds it took. Fails the test on timeout (saying
    `what` it waited for)."""
    t0 = time.monotonic()
    while not pred():
        if time.monotonic() - t0 > timeout:
            raise AssertionError(
                f"condition not met within {timeout}s" + (f": {what}" if what else "")
            )
        time.sleep(every)
    return time.monotonic() - t0


class SkipClock:
    """An engine's clock that can skip ahead: the steady clock plus the seconds `skip` added.

    A test that shows a quiet child is *not* stalled skips past `stall_after_s`, then lets the
    watchdog look (`watched`), instead of sleeping the limit out."""

    def __init__(self) -> None:
        self._ahead = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self._ahead

    def skip(self, seconds: float) -> None:
        self._ahead += seconds


def stepped(engine: Engine) -> None:
    """Return once the engine's coordinator has gone round its loop after handling everything
    queued to it before this call (the orders sent, the facts its workers reported): what it
    decides on them in a step (admission, the soft budget's hold, the watchdog when due) it has
    decided. A request to record progress is answered in one step, and the rest of that step
    runs after it; a second request, answered in a later step, comes back after that rest.

    What a test waits on before it shows that something did *not* happen (nothing started, no
    hold lifted), in place of a sleep that hoped the coordinator had got there."""
    coordinator = engine._coordinator
    assert coordinator is not None, "the engine has not started"
    for _ in range(2):
        assert coordinator.record_progress(HANG_S), f"the coordinator did not answer in {HANG_S}s"


def watched(engine: Engine) -> None:
    """Return once the engine's watchdog has looked at its children on its clock as it reads
    now: it runs in the coordinator's step (`stepped`) when due, and a `SkipClock.skip` makes
    it due at once."""
    stepped(engine)


def announced(engine: Engine) -> set[str]:
    """A set that fills with the ids of the children whose end `engine` announces from now on
    (ChildFinished, on the coordinator's thread). The coordinator frees a child's slot when it
    hears of its end, before its row is committed and announced (a final status in the
    snapshot comes before either): once an id is in, its slot is free, and after a `stepped`
    admission has looked at what that lets start."""
    ids: set[str] = set()

    def on_event(event: EngineEvent) -> None:
        if isinstance(event, ChildFinished):
            ids.add(event.row.id)

    engine.subscribe(on_event)
    return ids


def stops_asked(engine: Engine) -> set[str]:
    """The children the coordinator has asked to stop (the operator, the watchdog) and not yet
    heard end: a stop shows in a child's row only once its worker has acted on it."""
    coordinator = engine._coordinator
    assert coordinator is not None, "the engine has not started"
    return set(coordinator.slots.stop_requested)


def ended(pid: int) -> bool:
    """Whether process `pid` has ended: gone, or a zombie nobody reaps (an orphan of this
    machine's init, which may never reap it: it runs nothing)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].startswith("Z")
    except OSError:
        return True


def wait_ended(pid: int, timeout: float) -> bool:
    """Wait up to `timeout` s for `ended(pid)`; whether it did. For clean-ups, which must not
    raise (a wait for the pid to vanish would wait out a zombie's whole timeout)."""
    deadline = time.monotonic() + timeout
    while not ended(pid):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)
    return True


def laughs(levels: int) -> str:
    """A "billion laughs": each list is nine aliases of the one before, 9**levels values."""
    items = ['      - &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for n in range(1, levels):
        items.append(f"      - &a{n} [" + ", ".join([f"*a{n - 1}"] * 9) + "]")
    return 'tasks:\n  - goal: "x {item}"\n    for_each:\n' + "\n".join(items) + "\n"


def flightdeck(
    *args: str, cwd: Path, timeout: float = 60, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The `flightdeck` command as a user runs it (plus `env`): a real subprocess, plain
    (NO_COLOR) output."""
    return subprocess.run(
        [sys.executable, "-m", "flightdeck.tui.cli", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {}), "NO_COLOR": "1"},
    )


def finished_here(
    folder: Path,
    tasks: str = "tasks.jsonl",
    state_dir: str | None = None,
    config_file: str = "flightdeck.toml",
) -> str:
    """The batch `flightdeck run TASKS --headless [--state-dir D] [--config C]` would leave in
    `folder`'s store, run to its end in this process through the Engine API: its id. For a
    test that needs only a finished batch to read; `run` itself is tested as a process."""
    config = load_settings(folder / config_file)
    where = state_dir_from(None if state_dir is None else Path(state_dir), config)
    work = load_batch(
        folder / tasks,
        max_chars=config.engine.max_task_chars,
        max_tasks=config.engine.max_tasks,
    )
    engine = Engine(work, config, state_dir=folder / where)
    engine.start()
    run_to_end(engine)
    return engine.batch_id


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    """`flightdeck ARGS` called in this process (`tui.cli.main`, from the current folder): its
    exit code, stdout and stderr. For a command's checks of its input and its messages, where
    a test elsewhere runs the same command as a process."""
    from flightdeck.tui.cli import main

    try:
        code = int(main(list(args)))
    except SystemExit as exits:  # argparse's errors end the parse
        code = int(exits.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def flightdeck_process(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """`flightdeck` started as a user runs it (plus `env`), left running: its output piped, to
    be read as it comes."""
    return subprocess.Popen(
        [sys.executable, "-m", "flightdeck.tui.cli", *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {}), "NO_COLOR": "1"},
    )


def read_until(fd: int, text: str, timeout: float = 30) -> str:
    """What a pipe says until `text` is in it (read as it comes, no buffer hiding it)."""
    decoder = codecs.getincrementaldecoder("utf-8")()  # a chunk may end inside a character
    said = ""
    deadline = time.monotonic() + timeout
    while text not in said:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, f"{text!r} not said by now: {said!r}"
        chunk = os.read(fd, 65536)
        assert chunk, f"{text!r} never said: {said!r}"
        said += decoder.decode(chunk)
    return said


def summary_of(lines: list[str]) -> list[list[str]]:
    """The end-of-run summary table's rows, its header first: columns are two spaces apart
    (or more), figures and headers right-aligned, a header in two lines over a rule."""
    rule = next(i for i, line in enumerate(lines) if line.startswith("─"))
    above = {m.end(): m.group() for m in re.finditer(r"\S+", lines[rule - 2])}
    names = re.finditer(r"\S+", lines[rule - 1])
    header = [f"{above.get(m.end(), '')} {m.group()}".strip() for m in names]
    rows = [re.split(r"\s{2,}", line.strip()) for line in lines[rule + 1 :]]
    return [header, *(row for row in rows if len(row) == len(header))]


def signals_as_a_shell_gives_them() -> None:
    """In the child before exec: SIGINT and SIGTERM unblocked and at their defaults, as a shell
    starts a command. An ignored or blocked signal is inherited across exec, and a test worker
    that ran other tests first is not a shell."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
