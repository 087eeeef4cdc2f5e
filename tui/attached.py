"""The commands of a batch run by an owner process: `run` in the background (attached or
`--detach`), `attach`, `logs`."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import time
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from flightdeck.engine.attached.hints import command_line, gone, resume_hint
from flightdeck.engine.model import BatchStatus
from flightdeck.engine.sanitize import one_line, sanitize
from flightdeck.tui.console import console_for, draws_tui
from flightdeck.tui.exitcodes import ExitCode
from flightdeck.tui.usage import (
    UsageError,
    no_child_id,
    state_db,
    unknown_batch,
    unknown_children,
)
from rich.text import Text

if TYPE_CHECKING:
    from flightdeck.engine.apilight import Settings, TuiSettings
    from flightdeck.engine.attached.spawn import StartedOwner
    from flightdeck.engine.attached.view import StoreView

STOP_WAIT_S = 10.0  # "stop all and quit" waits this long for the owner to record the end
# The GIL switch interval while the attached screen runs (CPython's default is 5 ms). The event
# loop gives the GIL up at every turn (its select), and while the store's reader holds it in a
# read, each turn waited up to the whole interval to have it back, and a key takes several
# turns to its frame. The engine's own processes want the opposite (engine/control/pool.py).
KEYS_SWITCH_S = 0.001


def run_in_background(
    args: argparse.Namespace, state_dir: Path, settings: Settings | None = None
) -> ExitCode:
    """`flightdeck run` on a terminal (the TUI attached to a new owner) or with `--detach`."""
    from flightdeck.engine.attached.spawn import launch_owner, wait_ready

    command = [sys.executable, "-m", "flightdeck.tui.cli", "run", "--headless"]
    command += [str(args.batch_file.absolute()), "--state-dir", str(state_dir)]
    if args.config is not None:
        command += ["--config", str(args.config.absolute())]
    if args.max_concurrent is not None:
        command += ["--max-concurrent", str(args.max_concurrent)]
    if args.executor is not None:
        command += ["--executor", args.executor]
    owner: StartedOwner | None = None
    try:
        # In the `try`: a Ctrl+C just as the noting handler is put back stops the owner too.
        with _interrupt_noted() as interrupted:
            owner = launch_owner(command, state_dir, settings)
        if interrupted:
            raise KeyboardInterrupt
        if not args.detach:
            # Loaded while the owner starts, not after: each takes about half a second, and
            # the two run at once on two cores.
            import flightdeck.tui.app  # noqa: F401
            from flightdeck.engine.attached.view import StoreView
        wait_ready(owner)
        if args.detach:
            return _detached(owner, state_dir)
        view = StoreView(owner.db, owner.batch_id)
    except KeyboardInterrupt:
        if owner is None:  # before the launch: nothing to stop
            raise
        return _interrupted(owner, state_dir)
    tui = None if settings is None else settings.tui
    return attach_tui(view, tui, unseen=partial(_interrupted, owner, state_dir))


@contextlib.contextmanager
def _interrupt_noted() -> Iterator[list[int]]:
    """A Ctrl+C while the owner is launched is noted, then acted on once its pid is known:
    raised mid-launch, it lost the pid, and the owner (a session of its own) ran on unseen."""
    noted: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, _frame: noted.append(signum))
    try:
        yield noted
    finally:
        signal.signal(signal.SIGINT, previous)


def _detached(owner: StartedOwner, state_dir: Path) -> ExitCode:
    """`--detach`: the id alone on stdout, for scripts (`id=$(flightdeck run --detach
    tasks.toml)`); the owner's pid and log, and how to attach, on stderr."""
    try:
        sys.stdout.write(owner.batch_id + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        console_for().on_broken_pipe()
    err = console_for(stderr=True)
    err.print(Text(f"owner pid {owner.pid}, log {sanitize(str(owner.log))}"))
    err.print(Text(f"attach: {attach_hint(owner.batch_id, state_dir)}"))
    return ExitCode.OK


def _interrupted(owner: StartedOwner, state_dir: Path) -> ExitCode:
    """Ctrl+C before the batch was shown (its owner starting, the TUI loading): the operator
    has seen nothing of it, so it is stopped, not left to run and spend unseen."""
    from flightdeck.engine.attached.spawn import OwnerDidNotEnd, end_owner

    err = console_for(stderr=True)
    b = owner.batch_id
    err.print(
        Text(
            f"flightdeck: interrupted: stopping batch {b} (its owner, pid {owner.pid}; "
            "Ctrl+C again leaves, and it stops all the same)"
        )
    )
    try:
        status = end_owner(owner)
    except OwnerDidNotEnd as exc:
        err.print(Text(f"flightdeck: {exc}"))
        return ExitCode.INTERRUPTED
    if status is not None:
        report = command_line(state_dir, "report", b)
        err.print(Text(f"flightdeck: batch {b} {status} (report: {report})"))
    else:
        err.print(Text(f"flightdeck: batch {b} never started: nothing is left of it"))
    return ExitCode.INTERRUPTED


def cmd_attach(args: argparse.Namespace) -> ExitCode:
    """`flightdeck attach [BATCH_ID] [--read-only]`: the TUI on a batch (the latest running one
    by default); read-only once the batch has ended or its owner is gone, or when asked."""
    from flightdeck.engine.apilight import load_settings

    # The [tui] table of --config, or of ./flightdeck.toml if there is one: checked like a run's.
    tui = load_settings(args.config).tui
    db = state_db(args.state_dir, args.config)
    if args.batch_id is not None:  # an unknown id is said as every command says it, first
        from flightdeck.engine.attached.store import StoreReader

        with StoreReader(db) as reader:
            if reader.batch(args.batch_id) is None:
                raise unknown_batch(args.batch_id, db)
    if not draws_tui():
        dumb = " that can draw it (TERM=dumb)" if sys.stdout.isatty() else ""
        raise UsageError(
            None,
            None,
            None,
            f"attach needs a terminal{dumb} (scripts: flightdeck logs, report, wait)",
        )
    return attach_tui(open_view(db, args.batch_id), tui, read_only=args.read_only)


def open_view(db: Path, batch_id: str | None) -> StoreView:
    """The StoreView of `batch_id` (default: the latest running batch); UsageError if none."""
    from flightdeck.engine.attached.store import StoreReader
    from flightdeck.engine.attached.view import StoreView

    if batch_id is None:
        with StoreReader(db) as reader:
            running = [b for b in reader.batches() if b.status is BatchStatus.RUNNING]
        if not running:
            raise UsageError(
                None,
                None,
                "batch_id",
                f"no running batch in {sanitize(str(db.parent))} (flightdeck ls lists them all)",
            )
        batch_id = running[0].id
    try:
        return StoreView(db, batch_id)
    except LookupError:
        raise unknown_batch(batch_id, db) from None


def attach_tui(
    view: StoreView,
    tui: TuiSettings | None = None,
    *,
    read_only: bool = False,
    unseen: Callable[[], ExitCode] | None = None,
) -> ExitCode:
    """Run the TUI over `view` until the operator detaches or quits; say what is left.
    `read_only`: every command refused (readonly.py), and the operator's last-looked mark left
    alone (a watcher is not the operator). `unseen`: what a Ctrl+C does while the TUI loads,
    before it has the terminal (`run`: its batch is stopped)."""
    app = None
    try:
        from flightdeck.engine.apilight import TuiSettings
        from flightdeck.tui.app import FlightdeckApp, exit_code
        from flightdeck.tui.lastlooked import LastLooked
        from flightdeck.tui.options import UiOptions
        from flightdeck.tui.readonly import ReadOnlyView

        state_dir = view.db.parent
        looked = None if read_only else LastLooked(state_dir, view.batch_id)
        shown = ReadOnlyView(view) if read_only else view
        app = FlightdeckApp(shown, UiOptions(tui=tui or TuiSettings(), looked=looked))
        with keys_first():
            stopped = app.run()
    except BaseException as exc:
        view.close()
        # Once it has shown (then a `kill -INT`, a Ctrl+C as it gives the terminal back), the
        # operator has seen the batch: an interrupt is no reason to stop it.
        seen = app is not None and app.shown
        if unseen is None or not isinstance(exc, KeyboardInterrupt) or seen:
            raise
        return unseen()
    try:
        if stopped:  # "stop all and quit": the owner records the end, then this says so
            deadline = time.monotonic() + STOP_WAIT_S
            while view.snapshot().status is BatchStatus.RUNNING and time.monotonic() < deadline:
                time.sleep(0.05)
                view.refresh()
        view.refresh()
        snap = view.snapshot()
    finally:
        view.close()
    console = console_for()
    if app.return_code:
        return ExitCode.INCOMPLETE  # the UI crashed; Textual has printed the traceback
    if snap.status is BatchStatus.RUNNING:
        pid = f" (owner pid {view.info.owner_pid})" if view.info is not None else ""
        console.print(Text(f"detached: batch {snap.batch_id} runs on{pid}", style="bold"))
        console.print(Text(f"attach again: {attach_hint(snap.batch_id, state_dir)}"))
        return ExitCode.OK
    from flightdeck.tui.output import money_lines, pending_line, summary_table

    console.print(summary_table(snap))
    for line in money_lines(snap):
        console.print(line)
    if pending := pending_line(snap, state_dir):
        console.print(Text(pending))
    console.print(Text(f"report: {command_line(state_dir, 'report', snap.batch_id)}"))
    if snap.status is BatchStatus.ABANDONED:  # its owner died: the one thing left to do
        console.print(Text(f"{gone(state_dir)}: {resume_hint(state_dir, snap.batch_id)}"))
    if stopped:
        return ExitCode.TERMINATED if app.terminated else ExitCode.INTERRUPTED
    return exit_code(snap)


@contextlib.contextmanager
def keys_first() -> Iterator[None]:
    """The GIL handed back to the screen's event loop within KEYS_SWITCH_S, while inside."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(KEYS_SWITCH_S)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def attach_hint(batch_id: str, state_dir: Path) -> str:
    """The command that attaches to this batch again, to paste back into a shell."""
    return command_line(state_dir, "attach", batch_id)


def cmd_logs(args: argparse.Namespace) -> ExitCode:
    """`flightdeck logs BATCH CHILD [-f]`: print a transcript, or follow it until the child ends."""
    from flightdeck.engine.attached.store import StoreReader
    from flightdeck.tui.client import abandoned, batch_client, say_error
    from flightdeck.tui.tail import follow, read_all

    if args.child_id is None:
        raise no_child_id(args)
    db = state_db(args.state_dir)
    reader = StoreReader(db)
    try:
        if reader.batch(args.batch_id) is None:  # a child's id first: the command meant
            raise unknown_batch(args.batch_id, db, "logs", more=False)
        row = reader.child(args.batch_id, args.child_id)
        if row is None:
            raise unknown_children((args.child_id,), args.batch_id)
        path = Path(row.transcript)
        deleted = f"{path}: the transcript is gone (deleted since the child started)"
        if row.started_ts is not None and not path.exists():  # written from its start on
            say_error(deleted)
            return ExitCode.INCOMPLETE
        if row.started_ts is None and not path.exists():
            # Nothing printed and exit 0 read as an empty transcript; `-f` waits for it instead.
            when = "never started" if row.status.terminal else "has not started yet"
            said = f"{one_line(args.child_id)} {when} ({row.status.value})"
            if not args.follow or row.status.terminal:
                say_error(f"{said}: it has no transcript")
                return ExitCode.INCOMPLETE
            # On stderr (stdout is the transcript), as `wait` says what it waits for.
            console_for(stderr=True).print(Text(f"{said}: waiting for it to start; Ctrl+C stops"))
        out = sys.stdout
        try:
            if not args.follow:
                for chunk in read_all(path):
                    out.write("".join(line + "\n" for line in chunk.lines))
                out.flush()
                return ExitCode.OK

            client = batch_client(args)
            gone: list[int] = []  # the owner's pid once it is found dead; 0: the file is gone

            def ended() -> bool:
                found = reader.child(args.batch_id, args.child_id)
                if found is None or found.status.terminal:
                    return True
                if found.started_ts is not None and not path.exists():  # deleted meanwhile
                    gone.append(0)
                    return True
                owner = client.owner()
                if owner.status is BatchStatus.ABANDONED:  # nothing will write to it any more
                    gone.append(owner.pid)
                return bool(gone)

            try:
                for chunk in follow(path, ended=ended):
                    out.write("".join(line + "\n" for line in chunk.lines))
                    out.flush()
                if gone:  # as `wait` says it
                    say_error(abandoned(client, gone[0]) if gone[0] else deleted)
                    return ExitCode.INCOMPLETE
            finally:
                client.close()
        except BrokenPipeError:  # `flightdeck logs … | head`
            console_for().on_broken_pipe()
        except KeyboardInterrupt:
            return ExitCode.INTERRUPTED
        return ExitCode.OK
    finally:
        reader.close()
