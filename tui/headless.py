"""The headless runner: the batch id, a line per finished child, then a summary table."""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import sqlite3
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, NoReturn

from flightdeck.engine.attached.hints import command_line, soft_lift
from flightdeck.engine.model import (
    OPERATOR_HOLD,
    BatchStatus,
    ChildFinished,
    EngineEvent,
    GroupFinished,
)
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.console import console_for, hung_up, live_terminal, reader_gone
from flightdeck.tui.exitcodes import ExitCode, OutputClosed
from flightdeck.tui.logs import Severity, forward_logs
from flightdeck.tui.output import (
    failure_text,
    print_ending,
    print_lines,
    progress_label,
    report_hint,
    soft_hold_hint,
)
from rich.console import Console
from rich.text import Text

if TYPE_CHECKING:
    from pathlib import Path

    from flightdeck.engine.api import Engine
    from rich.progress import Progress

LEAVE_S = 1.0  # a second Ctrl+C waits this long for the store, and for the transcripts
ASKS_EVERY_S = 1.0  # how often the batch is looked at for new questions to the operator
# The signals that stop every child and record it, and what each makes the exit code.
_EXITS = {
    signal.SIGINT: ExitCode.INTERRUPTED,
    signal.SIGTERM: ExitCode.TERMINATED,
    signal.SIGHUP: ExitCode.HANGUP,
}


def asked_lines(engine: Engine, told: set[object]) -> list[Text]:
    """A line for each question (`ask_operator`) not told yet, with the command that answers."""
    from flightdeck.engine.apilight import needs

    lines = []
    for need in needs(engine.snapshot()):
        if need.kind == "asks" and need.child_id is not None and need.key not in told:
            told.add(need.key)
            words = ("answer", engine.batch_id, need.child_id, "-m", "…")  # the id whole
            answer = command_line(engine.state_dir, *words)
            shown = f"{one_line(need.child_id, 60)} asks: {one_line(need.text, 300)}"
            lines.append(Text(f"{shown} (`{answer}`)"))
    return lines


def run_headless(
    engine: Engine,
    console: Console,
    errors: Console | None = None,
    started: Callable[[], None] | None = None,
) -> ExitCode:
    """Print the batch id, one line per finished child, then a summary table.

    The engine's warnings and errors (a store write that failed, ...) go to `errors` (stderr by
    default) as they happen, one sanitized line each. `started` is called once the batch id is
    printed (`resume` says there what it adopted and ended).
    """
    errors = errors or console_for(stderr=True)
    notices: queue.SimpleQueue[tuple[str, Severity]] = queue.SimpleQueue()

    def show_notices() -> None:
        # Logged on engine threads, printed here: all Rich output stays on this thread.
        while True:
            try:
                text, severity = notices.get_nowait()
            except queue.Empty:
                return
            style = "red" if severity == "error" else "yellow"
            errors.print(Text(f"flightdeck: {severity}: {text}", style=style))

    stop_forwarding = forward_logs(lambda text, severity: notices.put((text, severity)))
    try:
        return _run_headless(engine, console, errors, show_notices, started)
    except OutputClosed:
        # The engine has closed on the way out: children still running were stopped and
        # recorded, as for Ctrl+C. Leaving them to run with nobody reading would spend money
        # unseen, and hold up the shell pipeline until the batch ends.
        what = "children still running were stopped"
        if not engine.stopped_by_stop_all:  # every child had ended: only output is lost
            what = f"the batch had {engine.status.value}"
        errors.print(Text(f"flightdeck: output closed; {what} ({report_hint(engine)})"))
        return ExitCode.OUTPUT_CLOSED
    finally:
        stop_forwarding()
        show_notices()


def left_text(engine: Engine, started: bool) -> Text:
    """What a second Ctrl+C says as it leaves: children still stopping are left behind only
    if some had not ended (it may come after the last one, while the engine closes); their
    ends unrecorded and command children's processes running on, `resume` finishes the job."""
    if started and engine.wait(0):
        return Text(f"flightdeck: left before the summary ({report_hint(engine)})", style="yellow")
    text = "flightdeck: left without waiting for children still stopping"
    if started:
        from flightdeck.engine.attached.store import still_running

        resume = command_line(engine.state_dir, "resume", engine.batch_id)
        left = 0
        # Said from a signal handler that must go on to leave: a store it cannot read (damaged,
        # gone) leaves the count out, never the exit.
        with contextlib.suppress(sqlite3.Error, OSError):
            left = still_running(engine.state_dir / "flightdeck.db", engine.batch_id)
        running = f"; {left} of their processes still run" if left else ""
        text += f"{running} (`{resume}` ends them and records the batch's end)"
    return Text(text, style="yellow")


def held_text(held: str | None, batch_id: str, state_dir: Path) -> Text:
    """The line said when admission is held (and how to continue it), or released. Its
    commands name `state_dir` (pasted into another shell, whose default folder may differ),
    and a soft budget's hold says how to lift it too."""
    if held is None:
        return Text("admission released: children start again", style="cyan")
    line = f"admission held: {one_line(held, 200)}"
    if OPERATOR_HOLD in held:
        line += f" (`{command_line(state_dir, 'continue', batch_id)}` continues it)"
    if held.replace(OPERATOR_HOLD, "").strip("; "):
        # The other hold is the soft budget's, which `continue` does not lift.
        line += ". " + soft_lift(state_dir, batch_id)
    return Text(line, style="bold cyan")


def _run_headless(
    engine: Engine,
    console: Console,
    errors: Console,
    show_notices: Callable[[], None],
    started_hook: Callable[[], None] | None = None,
) -> ExitCode:
    events: queue.SimpleQueue[EngineEvent] = queue.SimpleQueue()
    engine.subscribe(events.put)  # the coordinator only enqueues; this thread prints
    interrupted = started = False
    held: str | None = None  # admission's hold last said
    exit_code = ExitCode.INTERRUPTED
    progress: Progress | None = None

    def on_signal(signum: int, frame: FrameType | None) -> None:
        # Ctrl+C, SIGTERM (`kill`, a service manager, a CI timeout) or SIGHUP (its terminal
        # closed): stop every child and record it, rather than leave the batch "running" in the
        # store, and an agent CLI's processes running with nobody watching.
        nonlocal interrupted, exit_code
        if signum == signal.SIGHUP:
            hung_up(console, errors)  # what is said from here on would fail on the gone terminal
        if interrupted:
            leave_now()
        interrupted = True
        sig = signal.Signals(signum)
        exit_code = _EXITS[sig]
        again = "Ctrl+C again" if sig == signal.SIGINT else f"a second {sig.name}"
        console.print(Text(f"stopping all children… ({again} to force)", style="yellow"))
        if started:  # else start() has not returned yet: stopped as soon as it does
            engine.stop_all()
            # A full disk: their ends are held with the rest, so the stop waits for room.
            if engine.failure is None and (problem := engine.problem()) is not None:
                said = f"the stop waits for the store: {one_line(problem)}"
                console.print(Text(said, style="yellow"))

    def leave_now() -> NoReturn:
        """A second Ctrl+C: keep what is already recorded (a second or two at most), then go,
        without waiting for the children still stopping, or the threads that run them."""
        for signum in handled:  # a third one cannot break the exit
            signal.signal(signum, signal.SIG_IGN)
        if progress is not None:
            progress.stop()  # the terminal gets its cursor back
        engine.flush(LEAVE_S)
        show_notices()
        errors.print(left_text(engine, started))
        for stream in (console.file, errors.file):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(exit_code)

    # Installed before the batch starts and until the engine has closed: a signal in between
    # (just after the batch id is printed, while the engine closes) must stop the children and
    # record it, not kill the process or raise in the middle of start() or close().
    # A SIGHUP already ignored (`nohup`) is the operator's word that the batch outlives its
    # terminal: it stays ignored.
    nohup = signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    handled = tuple(s for s in _EXITS if not (nohup and s == signal.SIGHUP))
    previous = {signum: signal.signal(signum, on_signal) for signum in handled}
    try:
        try:
            batch_id = engine.start()
        except BaseException:
            engine.close()  # a failed start leaves no threads or writer process behind
            raise
        started = True
        if interrupted:  # a signal while it started
            engine.stop_all()
        # Said once the batch's row is committed: a script that reads the id and at once sends
        # a command (`flightdeck stop ID`) must find the batch.
        engine.flush(5)
        console.print(Text(f"batch {batch_id}", style="bold"))
        if started_hook is not None:
            started_hook()
        if live_terminal(console):  # not a pipe, even one given colour (FORCE_COLOR)
            # Here: an owner writing its log, or a headless run piped, draws no bar.
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
            )

            progress = Progress(
                # the words are the spend and the forecast: plain text, never markup
                TextColumn("{task.description}", style="progress.description", markup=False),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=console,
                transient=True,
            )
            progress.start()
            snap = engine.snapshot()  # a resumed batch: what an earlier owner finished counts
            ended = sum(1 for r in snap.children if not r.status.live)
            bar = progress.add_task("running", total=len(snap.children), completed=ended)
        soft_held: str | None = None
        told: set[object] = set()  # the questions said
        asks_at = 0.0
        may_ask = any(r.ask_operator for r in engine.settings.routes.values())
        while True:
            done = engine.wait(0.1)
            if may_ask and time.monotonic() - asks_at >= ASKS_EVERY_S:
                asks_at = time.monotonic()
                for line in asked_lines(engine, told):
                    console.print(line, style="bold magenta")
            finished: list[ChildFinished | GroupFinished] = []
            while True:
                try:
                    event = events.get_nowait()
                except queue.Empty:
                    break
                if isinstance(event, ChildFinished | GroupFinished):
                    finished.append(event)
            if finished:
                print_lines(console, finished, styled=progress is not None)
                ends = [e for e in finished if isinstance(e, ChildFinished)]
                if progress is not None and ends:
                    # a snapshot per wake-up that saw an end: the forecast moves only then
                    label = progress_label(engine.snapshot())
                    last = ends[-1]  # delegates and waves add to the total as they come
                    progress.update(bar, completed=last.done, total=last.total, description=label)
            ending = done or interrupted or engine.status is not BatchStatus.RUNNING
            if engine.held != held and not (engine.held is None and ending):
                # One line as a hold begins or ends; not at the batch's end, where a hold goes
                # with the batch and nothing starts again.
                held = engine.held
                soft = engine.limits().soft_held
                if soft is not None and soft != soft_held:  # with the commands that go on
                    console.print(Text(soft_hold_hint(engine, soft), style="yellow"))
                else:
                    console.print(held_text(held, batch_id, engine.state_dir))
                soft_held = soft
            show_notices()
            if done:
                break
            if reader_gone(console.file):  # `| head -1`: as if the next line's write failed
                console.on_broken_pipe()
    finally:
        try:
            if progress is not None:
                progress.stop()
        finally:  # even if the terminal write failed: a close skipped here hangs the exit
            if started:
                engine.close()
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            show_notices()  # what closing the store and the writer process logged
    snap = engine.snapshot()
    every = None  # after a store failure: every child, as the summary must account for them
    if engine.unrecorded:  # the table counts what the store kept, as the report will
        from flightdeck.engine.attached.store import as_stored

        every = len(snap.children)
        snap = as_stored(engine.state_dir / "flightdeck.db", snap)
    print_ending(console, engine, snap, every)
    failure = failure_text(engine)
    if failure is not None:  # said last, on stderr, so it is what a reader sees
        # An exception's words, or the file system's: they may quote a child's output, a path.
        errors.print(Text(f"flightdeck: error: {one_line(failure)}", style="red"))
        return ExitCode.NOT_RECORDED
    if interrupted:
        return exit_code
    # The batch's own status: delegates of their parents' earlier attempts do not decide it.
    return ExitCode.OK if snap.status is BatchStatus.COMPLETED else ExitCode.INCOMPLETE
