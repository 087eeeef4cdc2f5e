"""One process of a command child, from its start (or adoption) to the end of its whole tree:
its output read as it grows and turned into the child's figures and transcript, its steers
written to its stdin, and the stop, pause and reaping that leave no survivor.

The loop sleeps on the process (a pidfd wakes it when the process exits), sooner while output
flows and less often while it is quiet; the tree is walked only when a stop, an exit or an
adopted process needs it (agents/process.py, agents/tree.py).
"""

from __future__ import annotations

import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from flightdeck.engine.agents.formats import (
    Denied,
    Lifecycle,
    Live,
    Model,
    OutputReader,
    Report,
    Result,
    Retrying,
    Session,
    Shown,
    ToolEnded,
    ToolStarted,
    Waiting,
)
from flightdeck.engine.agents.formats.base import cut
from flightdeck.engine.agents.process import Process, Record
from flightdeck.engine.agents.tail import Line
from flightdeck.engine.agents.tree import Pid
from flightdeck.engine.child.cliinput import CliInput
from flightdeck.engine.child.clitally import CliTally
from flightdeck.engine.child.facts import ChildPaused, ToolDenied
from flightdeck.engine.child.port import ChildPort
from flightdeck.engine.child.steering import missed_note
from flightdeck.engine.inputs.settings import CommandSpec
from flightdeck.engine.model import Denial, SteerState
from flightdeck.engine.sanitize import one_line

FAST_S = 0.05  # how soon output is read again while it flows
SLOW_S = 0.25  # ... and at most this long apart while it is quiet (a stop waits no longer)
TRACK_ADOPTED_S = 2.0  # an adopted tree is walked this often: its orphans are not ours
REAP_S = 2.0  # ... and a started one's ended orphans reaped this often (ours: no zombie waits)
KEPT_LINES = 20  # the last output lines kept for the result, and of stderr for the reason
READ_TO_S = 1.0  # how often the offsets read so far go to the store (for an adopter)
# An output or stderr line shown (and kept for the result or reason) is cut here, as a model's
# streamed line is (records/lines.py): a line of megabytes (a tool's dump, no newline) would
# otherwise go whole into the transcript, and its tail, read by every view of the child.
# Lines fed to the format stay whole: one JSON event is one line, often hundreds of KB.
SHOWN_LINE_CHARS = 64 * 1024


@dataclass
class RunEnd:
    """How one process ended."""

    code: int | None = None  # exit status; negative: a signal; None: unknown (adopted)
    result: str | None = None  # the format's final answer, if it gave one
    result_error: bool = False  # the format said the turn failed
    for_steer: bool = False  # ended by a steer --now (resume mode), not by the CLI
    out: deque[str] = field(default_factory=lambda: deque(maxlen=KEPT_LINES))
    err: deque[str] = field(default_factory=lambda: deque(maxlen=KEPT_LINES))


def left_running(c: ChildPort, survivors: list[Pid]) -> None:
    """Name the processes of its tree that outlived SIGKILL by a second (an uninterruptible
    wait, say): its run is over, and nothing watches them any more."""
    for survivor in survivors:
        c.transcript.write(
            "error", f"process {survivor.pid} could not be killed: left running, unwatched"
        )


# A steer sent once the CLI has answered every message and its input is closed: it runs on
# until it exits (Claude Code waits for a command it moved to the background), but reads no more.
INPUT_CLOSED = "its CLI had answered every message and its input was closed: it is ending"


class Supervisor:
    """Watches one process for its child; `run` returns when its whole tree has ended."""

    def __init__(
        self,
        child: ChildPort,
        proc: Process,
        spec: CommandSpec,
        reader: OutputReader,
        tally: CliTally,
        *,
        stdin: CliInput | None,
        session: list[str],
        record: Callable[[Record], None],
    ) -> None:
        self._c = child
        self._proc = proc
        self._spec = spec
        self.reader = reader  # the format's, which the runner asks what it was told
        self._tally = tally
        self._input = stdin
        self._session = session  # [id] once the format reported one (shared across runs)
        self._record = record  # where the offsets read so far go (the store, for an adopter)
        self._transcript = child.transcript  # opened already: one look-up, not one per line
        self._end = RunEnd()
        self._stopping = False
        self._cli_call: str | None = None  # the CLI's last tool call, for the loop checks
        self._quiet = False  # replaying output a dead owner already wrote down
        self._term_at: float | None = None  # when SIGTERM went, for the grace period
        self._killed = False
        self._suspended = False  # paused by the operator: the process group is stopped
        self._left: list[Pid] | None = None  # its tree left once it exited (None: not asked)

    # --- the loop ----------------------------------------------------------------------------

    def run(self, resume_mode: bool) -> RunEnd:
        """Read, deliver, stop; until the process and its tree have ended."""
        proc = self._proc
        interval = FAST_S
        last_track = last_reap = last_book = time.monotonic()
        try:
            # One just let go has written nothing yet: reading its empty files first would
            # cost system calls, each a turn at the interpreter lock (its exit ends the wait).
            exited = False if proc.adopted else proc.wait(interval)
            while True:
                # Woken by its exit, it is read once its tree is looked at: by the final read
                # below, or on the next round if descendants run on (not here and there too).
                read = not exited and self._lines(proc.read())
                interval = FAST_S if read else min(SLOW_S, interval * 1.5)
                now = time.monotonic()
                if proc.adopted and now - last_track >= TRACK_ADOPTED_S:
                    last_track = now
                    proc.track()
                elif not proc.adopted and now - last_reap >= REAP_S:
                    last_reap = now
                    proc.reap()
                if self._step(resume_mode, now):
                    break
                if now - last_book >= READ_TO_S:
                    last_book = now
                    self._record(proc.record())
                exited = proc.wait(interval)
        except BaseException:
            # A bug (or a signal) while reading it: the process must not outlive its child.
            proc.signal(signal.SIGKILL)
            raise
        finally:
            self._lines(proc.read(final=True))
            for event in self.reader.ended():
                self._event(event)
            self._reap()
        self._end.code = proc.returncode
        return self._end

    def _step(self, resume_mode: bool, now: float) -> bool:
        """Pause, steers, stop and exit, looked at once; True when it is over."""
        c, proc, spec = self._c, self._proc, self._spec
        if self._term_at is None and not c.interrupt.is_set():
            self._pause_point()
        if self._input is not None and self._term_at is None and not self._suspended:
            self._deliver()
        if self._term_at is None:
            if c.interrupt.is_set():
                c.progress.stopping("stopping")
                if self._suspended:  # a stopped process acts on no SIGTERM until it goes on
                    proc.signal(signal.SIGCONT)
                    self._suspended = False
                self._terminate("stop")
            elif resume_mode and not self._suspended and c.steering.now_pending and self._session:
                self._end.for_steer = True
                c.progress.show("stopping for a steer")
                self._terminate("steer (interrupt now): the session resumes")
        exited = proc.poll()
        if exited and self._term_at is None:
            self._left = proc.survivors()
            if self._left:  # it has exited but its descendants still run (and may write)
                self._terminate("the process exited; its descendants")
        term_at = self._term_at
        if term_at is not None and not self._killed and now - term_at >= spec.kill_grace_s:
            proc.signal(signal.SIGKILL)
            self._killed = True
            c.transcript.write("engine", "SIGKILL sent: it outlived the grace period")
        if not exited:
            return False
        if not self._left:
            return True
        if term_at is None or not (left := proc.survivors()):
            self._left = []
            return True
        self._left = left
        # Something we cannot signal is left: do not wait for it forever.
        return self._killed and now - term_at >= spec.kill_grace_s + 1

    # --- output ------------------------------------------------------------------------------

    def _lines(self, lines: list[Line]) -> bool:
        """Handle lines read; True if there were any."""
        if not lines:
            return False
        c = self._c
        plain: list[str] = []
        for line in lines:
            shown = cut(line.text, SHOWN_LINE_CHARS)
            if line.stream == "stderr":
                self._end.err.append(shown)
                self._write("stderr", shown)
                continue
            self._end.out.append(shown)
            events = self.reader.feed(line.text)
            if len(events) == 1 and type(events[0]) is Shown and events[0].role == "output":
                plain.append(shown)  # runs of plain output: one transcript write
                continue
            if plain:
                self._write("output", "\n".join(plain))
                plain = []
            for event in events:
                self._event(event)
        if plain:
            self._write("output", "\n".join(plain))
        if c.progress.current_tool is None and not self._stopping and not c.progress.held:
            c.progress.tick("output")  # a retry notice or a tool stays what is shown
        else:
            c.progress.touch()
        return True

    def replay(self, lines: list[Line]) -> None:
        """What an adopted process wrote before: through the format for what it spent and
        said, without the transcript lines a dead owner wrote already."""
        self._quiet = True
        try:
            if self._input is not None:
                self._input.expect(self._c.steering.pending(), self._proc.written())
            self._lines(lines)
        finally:
            self._quiet = False

    def _write(self, role: str, text: str) -> None:
        if not self._quiet:
            self._transcript.write(role, text)

    def _event(self, event: object) -> None:
        c = self._c
        match event:
            case Shown(role, text):
                self._write(role, text)
                self._watch_loops(role, text)
            case ToolStarted(name):
                # The model answered: a retry it waited on is over (Codex reports no usage
                # before its turn's end, so nothing else would say so until then).
                c.progress.working(self._tally.calls)
                c.progress.tool_started(one_line(c.clean(name), 60))
            case ToolEnded() | Waiting(None):
                c.progress.tool_ended()
            case Waiting(what):  # a tool of its own runs on: the limit inside a tool holds
                c.progress.tool_started(one_line(c.clean(what or ""), 60), call=False)
            case Live():
                if self._input is not None:
                    self._input.model_answered()
                if self._tally.live(event):
                    c.progress.working(self._tally.calls)
                    self._spent()
            case Report():
                self._tally.report(event)
                c.progress.working(self._tally.calls)
                self._spent()
            case Retrying(text):
                c.progress.retry(c.clean(text))
            case Model(name):
                c.progress.reported_model(one_line(c.clean(name), 80))
            case Session(session_id):
                self._session[:] = [session_id]
            case Denied(tool, given):
                if not self._quiet:  # an adopted process's old denials were told before
                    denial = Denial(c.clean(tool), c.clean(given), c.clock())
                    c.report(ToolDenied(c.task.id, denial))
            case Result(text, error):
                self._end.result, self._end.result_error = text, error
                if self._input is not None:
                    self._input.result()
            case Lifecycle() if self._input is not None:
                if (queued := self._input.queued(event)) is not None:  # read, not yet started
                    self._write("operator", f"queued by the CLI: {queued.message}")
                started = self._input.lifecycle(event)
                if started is not None:
                    receipt, how = started
                    self._write("operator", f"delivered {how}: {receipt.message}")
                    c.settle(receipt, SteerState.DELIVERED, how)

    def _spent(self) -> None:
        tally = self._tally
        self._c.progress.spend(tally.usage, tally.cost, tally.known, pending=tally.pending)

    def _watch_loops(self, role: str, text: str) -> None:
        """A CLI's tool call and its result feed the loop checks as one turn."""
        c = self._c
        if role == "tool-call":
            self._cli_call = c.clean(text)
        elif role == "tool" and self._cli_call is not None:
            name, _, args = self._cli_call.partition(" ")
            c.loops.call(name, args, text)
            self._cli_call = None
            c.loops.turn_ended(None)

    # --- stdin -------------------------------------------------------------------------------

    def _deliver(self) -> None:
        """Steers waiting, written to its stdin; its input ends once all are answered."""
        cli = self._input
        assert cli is not None
        c, proc = self._c, self._proc
        if not proc.stdin_open:
            return
        if written := cli.written_before():  # by a dead owner: the CLI answers them as it goes
            c.steering.withdraw({r.id for r in written})
        if c.steering.waiting:
            for receipt in c.steering.take():
                interrupting = receipt.now and cli.running
                if (why_not := cli.steer(receipt)) is None:
                    how = "after interrupting the running turn" if interrupting else "to its input"
                    self._write("operator", f"sent {how}: {receipt.message}")
                else:
                    self._write("operator", missed_note(receipt.message, why_not))
                    c.settle(receipt, SteerState.MISSED, why_not)
        if cli.answered() and c.steering.close_unless_waiting(INPUT_CLOSED):
            proc.close_stdin()  # every message answered and none waits: it exits

    def missed(self, reason: str) -> None:
        """Steers sent that the CLI never started (it ended first)."""
        if self._input is None:
            return
        for receipt in self._input.unstarted():
            self._write("operator", missed_note(receipt.message, reason))
            self._c.settle(receipt, SteerState.MISSED, reason)

    # --- stop, pause, reaping ----------------------------------------------------------------

    def _pause_point(self) -> None:
        """The operator's pause and continue for a process: it has no turn boundary flightdeck
        can see, so its group is suspended at once, and goes on where it stopped."""
        c, proc = self._c, self._proc
        if not self._suspended and c.pause_wanted and not c.interrupt.is_set():
            proc.signal(signal.SIGSTOP)  # first: once the row says paused, it is stopped
            if not c.take_pause():  # a stop came first, or a continue
                proc.signal(signal.SIGCONT)
                return
            self._write("engine", "paused: process group suspended (SIGSTOP)")
            c.report(ChildPaused(c.task.id))
            self._suspended = True
        elif self._suspended and not c.pause_wanted:
            proc.signal(signal.SIGCONT)
            c.mark_running()
            self._write("engine", "continued: process group resumed (SIGCONT)")
            self._suspended = False

    def suspended_already(self) -> None:
        """An adopted process its dead owner suspended for a pause: paused still, or sent on
        if a continue (or a stop) came first."""
        c = self._c
        if c.take_pause():
            # Again: a dead owner sends SIGCONT before it records `running` (_pause_point).
            self._proc.signal(signal.SIGSTOP)
            self._write("engine", "still paused by the operator (suspended): continue it to run it")
            c.report(ChildPaused(c.task.id))
            self._suspended = True
        else:
            self._proc.signal(signal.SIGCONT)

    def _terminate(self, why: str) -> None:
        """SIGTERM to the group and the tree; the grace period starts now."""
        self._stopping = True
        grace = self._spec.kill_grace_s
        self._c.transcript.write("engine", f"SIGTERM sent ({why}); SIGKILL in {grace:g}s")
        self._proc.signal(signal.SIGTERM)
        self._term_at = time.monotonic()

    def _reap(self) -> None:
        """No survivor: descendants left after the process ended get the same two signals."""
        proc, spec = self._proc, self._spec
        # Known already when the process exited and nothing was signalled since.
        survivors = self._left if self._left is not None else proc.survivors()
        if survivors and self._term_at is None:
            self._terminate("descendants outlived the process")
        if survivors and not self._killed:
            assert self._term_at is not None
            left = max(0.0, spec.kill_grace_s - (time.monotonic() - self._term_at))
            survivors = proc.wait_gone(left)
            if survivors:
                proc.signal(signal.SIGKILL)
        if survivors:
            left_running(self._c, proc.wait_gone(1.0))
        self._stopping = False
        self._c.progress.tool_ended()
