"""The Textual app: wiring only. `run_app` runs it over an engine in this process; `flightdeck
run` and `attach` run it over an owner process (tui/attached.py)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import sys
import threading
from collections.abc import Iterable
from functools import cached_property, partial
from typing import TYPE_CHECKING, Any

from flightdeck.engine.commands import StopAll
from flightdeck.engine.model import BatchStatus, Snapshot
from flightdeck.engine.sanitize import one_line, sanitize
from flightdeck.tui import alerts, terminal
from flightdeck.tui.exitcodes import ExitCode
from flightdeck.tui.lastlooked import LastLooked
from flightdeck.tui.logs import Severity, forward_logs
from flightdeck.tui.options import UiOptions
from flightdeck.tui.screens.main import MainScreen
from flightdeck.tui.view import EngineView, LiveView
from rich.traceback import Traceback
from textual import events
from textual.app import App, SystemCommand
from textual.screen import Screen
from textual.worker import Worker, WorkerState

if TYPE_CHECKING:  # attach runs the app over a store, with no engine of its own to import
    from flightdeck.engine.api import Engine

STOP_WAIT_S = 10.0  # stop takes effect within a second; this only bounds a misbehaving child


class FlightdeckApp(App[bool]):
    """Supervise one batch; the result is True when the operator stopped everything to quit."""

    TITLE = "flightdeck"
    # Every screen's class by its width: under 72 columns a dialog's buttons go one under
    # another (dialogs.tcss), since a row of them would run past the edge.
    HORIZONTAL_BREAKPOINTS = [(0, "-narrow"), (72, "-wide")]  # noqa: RUF012 (App's own type)

    def __init__(self, view: EngineView, options: UiOptions | None = None) -> None:
        super().__init__()
        self.view = view
        self.options = options

    terminated = False  # ended by SIGTERM
    shown = False  # it has the terminal: a Ctrl+C from here on is no longer before it showed

    def on_mount(self) -> None:
        self.shown = True
        # Pushed rather than made the default screen: only pushed screens load their CSS_PATH.
        self.push_screen(self.main)
        # What start-up built (modules, widgets, the first snapshot) lives as long as the screen:
        # out of the collector's full passes, which otherwise stall keys for 100-300 ms each.
        self.call_after_refresh(gc.freeze)
        # The engine's warnings and errors as notifications: under the app, stderr is not shown.
        self._stop_logs = forward_logs(self._show_log)
        # SIGTERM (`kill`, a service manager) would end the process with the terminal still in
        # the app's mode and the batch "running" in the store: stop everything and quit instead.
        with contextlib.suppress(NotImplementedError, RuntimeError):  # not on this platform
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, self.on_sigterm)
        # A terminal that goes with no SIGHUP (tui/terminal.py): quit as for SIGTERM.
        stdin = sys.__stdin__
        if not self.is_headless and stdin is not None and stdin.isatty():
            loop = asyncio.get_running_loop()
            quit_app = partial(loop.call_soon_threadsafe, self.on_sigterm)
            self._terminal_watch = terminal.watch(
                stdin.fileno(), quit_app, before_end=self._wind_down
            )

    _terminal_watch: threading.Event | None = None  # set once the app is over (`run`)

    def run(self, **kwargs: Any) -> bool | None:
        try:
            return super().run(**kwargs)
        finally:
            if self._terminal_watch is not None:  # over: the process goes its own way
                self._terminal_watch.set()

    def _wind_down(self) -> None:
        """The process ends, its terminal gone and this app's loop stuck (tui/terminal.py): an
        engine in this process first stops its children and commits its records, as "stop all
        and quit" would, bounded as that is."""
        if isinstance(self.view, LiveView):
            self.view.wind_down(STOP_WAIT_S)

    def _fatal_error(self) -> None:
        # Textual's own report of a failure shows every frame's locals, where a key can be (an
        # attached client redacts a steer with the batch's keys, and holds the steer), and the
        # exception's words as they are (they may quote a child's output): neither, here.
        trace = Traceback.extract(*sys.exc_info(), show_locals=False)
        for stack in trace.stacks:
            stack.exc_value = sanitize(stack.exc_value)
        self.bell()
        self.panic(Traceback(trace, width=None))

    def on_sigterm(self) -> None:
        """Stop every child and quit, as "stop all and quit" does, without asking; attached to
        an owner process, only this client goes (the batch is the owner's to end)."""
        self.terminated = True
        if self.view.can_detach:
            self.exit(result=False)
            return
        self.view.send(StopAll())
        self.exit(result=True)

    async def on_event(self, event: events.Event) -> None:
        # Every key or click, whichever screen has it, tells the digest the operator is here.
        if isinstance(event, events.Key | events.MouseDown) and not event.is_forwarded:
            self.main.noticed_input()
        await super().on_event(event)

    def on_unmount(self) -> None:
        alerts.restore_title(self)  # the shell's title back, not the batch's
        gc.unfreeze()  # collectable again once the screen goes (tests run many apps)
        self._stop_logs()
        with contextlib.suppress(NotImplementedError, RuntimeError):
            asyncio.get_running_loop().remove_signal_handler(signal.SIGTERM)

    def _show_log(self, text: str, severity: Severity) -> None:
        # Called on the engine thread that logged: notify only posts a message (thread-safe).
        self.notify(text, severity=severity, markup=False, timeout=10)

    @cached_property
    def main(self) -> MainScreen:
        return MainScreen(self.view, self.options)

    def get_system_commands(self, screen: Screen[object]) -> Iterable[SystemCommand]:
        main = screen if isinstance(screen, MainScreen) else None
        for command in super().get_system_commands(screen):
            # The main screen lists its own "app: quit"; Textual's "Quit" would be a second one.
            if main is None or command.callback != self.action_quit:
                yield command
        if main is not None:
            yield from main.commands()

    async def action_quit(self) -> None:
        # ctrl+q and the palette's Quit go through the same question as `q`.
        self.main.action_quit()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The one place worker errors surface: a notification, never a crash."""
        if event.state is WorkerState.ERROR:
            what = event.worker.description or event.worker.name
            error = one_line(str(event.worker.error), 200)
            self.notify(f"{what} failed: {error}", severity="error", markup=False)


def exit_code(snapshot: Snapshot) -> ExitCode:
    """OK if the batch completed (every child did, but delegates of their parents' earlier
    attempts: its status says it), INCOMPLETE otherwise."""
    return ExitCode.OK if snapshot.status is BatchStatus.COMPLETED else ExitCode.INCOMPLETE


def run_app(engine: Engine) -> ExitCode:
    """Run the app on an already-started engine; returns the process exit code."""
    # Ages ("2s ago") on the engine's own clock: its stamps ignore steps of the system clock.
    looked = LastLooked(engine.state_dir, engine.batch_id)
    options = UiOptions(clock=engine.clock, tui=engine.settings.tui, looked=looked)
    app = FlightdeckApp(LiveView(engine), options)
    stopped = app.run()
    if stopped:
        engine.wait(STOP_WAIT_S)
        return ExitCode.TERMINATED if app.terminated else ExitCode.INTERRUPTED
    if app.return_code:
        return ExitCode.INCOMPLETE  # the UI crashed; Textual has printed the traceback
    if engine.failure is not None or engine.unrecorded:
        return ExitCode.NOT_RECORDED  # the banner said why, and stderr says it again
    return exit_code(engine.snapshot())
