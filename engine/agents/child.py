"""A command child: its task run as a process on a worker thread, reporting the same facts as
a model child (activity, current tool, usage and cost or unknown, transcript, status, result),
so the table, meter, steer, stop, slots, caps, budgets and records work unchanged."""

from __future__ import annotations

import json
import queue
import shlex
import signal
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from flightdeck.engine.agents.argv import expand
from flightdeck.engine.agents.formats import (
    OutputReader,
    Report,
    Result,
    Session,
    Shown,
    ToolEnded,
    ToolStarted,
    reader_for,
)
from flightdeck.engine.agents.launch import CommandRoute
from flightdeck.engine.agents.process import Line, Process
from flightdeck.engine.agents.workspace import Workspace, WorkspaceError
from flightdeck.engine.child.facts import ChildDone, ChildPaused
from flightdeck.engine.child.facts import Report as ReportFact
from flightdeck.engine.child.loop import Child
from flightdeck.engine.child.policy import CallPolicy
from flightdeck.engine.child.steering import missed_note
from flightdeck.engine.child.tools import Toolbox
from flightdeck.engine.inputs.settings import CommandSpec
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.model import ChildStatus, SteerReceipt, SteerState
from flightdeck.engine.records.meter import Meter
from flightdeck.engine.records.sink import TranscriptSink
from flightdeck.engine.sanitize import one_line

CANNOT_STEER = "this route cannot be steered"
POLL_S = 0.1  # how often a running child looks at its stop, its steers and its tree
TRACK_S = 0.2  # how often the process tree is walked for descendants
KEPT_LINES = 20  # the last output lines kept for the result, and of stderr for the reason
REASON_LINES = 5  # stderr lines in a failure's reason
MAX_ARGV_SHOWN = 1000  # characters of the command line in the transcript


@dataclass
class RunEnd:
    """How one process ended."""

    code: int | None = None  # exit status; negative: the signal that killed it
    result: str | None = None  # the format's final answer, if it gave one
    result_error: bool = False  # the format said the turn failed
    reported: bool = False  # usage came (the format's report)
    for_steer: bool = False  # ended by a steer --now (resume mode), not by the CLI
    out: deque[str] = field(default_factory=lambda: deque(maxlen=KEPT_LINES))
    err: deque[str] = field(default_factory=lambda: deque(maxlen=KEPT_LINES))


class CommandChild(Child):
    """One task of a command route; `run` replaces the model loop."""

    def __init__(
        self,
        task: Task,
        command: CommandRoute,
        retry: CallPolicy,
        toolbox: Toolbox,
        transcript_path: str,
        meter: Meter,
        clock: Callable[[], float],
        report: ReportFact,
        queued_ts: float,
        sink: TranscriptSink | None,
        *,
        workspace: Workspace,
    ) -> None:
        super().__init__(
            task,
            command.route,
            command,
            retry,
            toolbox,
            transcript_path,
            meter,
            clock,
            report,
            queued_ts,
            sink,
        )
        self._command = command
        self._spec = command.spec
        self._workspace = workspace
        # Unknown (`$?`) until the CLI reports what it spent; never shown as zero.
        self._cost = None
        self._reported_usd = Decimal(0)
        self._cost_lost = False  # a run ended without its report, or a report had no price
        self._session: str | None = None
        self._stopping = False  # SIGTERM sent: the row says `stopping` until it has ended
        # For the loop checks: the call the CLI made last (its transcript text), and the
        # folder it runs in. A CLI's own turns are not seen: one call and its result is one.
        self._cli_call: str | None = None
        self._cwd: Path | None = None

    # --- what the coordinator and the watchdog ask -----------------------------------------

    @property
    def stop_grace_s(self) -> float:
        """A stop takes up to kill_grace_s (SIGTERM, then SIGKILL) and a moment to reap."""
        return self._spec.kill_grace_s + 1.0

    @property
    def steerable(self) -> bool:
        return self._spec.steer != "none"

    @property
    def keeps_thread(self) -> bool:
        """Paused, its process group is suspended (SIGSTOP) and this thread waits on it: the
        process holds what it knows, and only this thread can read it when it goes on."""
        return True

    def add_steer(self, receipt: SteerReceipt) -> bool:
        if self._spec.steer == "none":
            # Never dropped in silence: missed at once, and the operator is told why.
            self.transcript.write("operator", missed_note(receipt.message, CANNOT_STEER))
            self._settle(receipt, SteerState.MISSED)
            return True
        return super().add_steer(receipt)

    # --- the worker thread -----------------------------------------------------------------

    def run(self) -> None:
        """Run the process (and its resumes); never raises."""
        if not self.mark_running():
            self._report(ChildDone(self))
            return
        status: ChildStatus = ChildStatus.FAILED
        error: str | None = "internal error"
        result: str | None = None
        try:
            status, error, result = self._run_all()
        except Exception as exc:  # a bug must fail one child, not the batch
            self.transcript.write("error", traceback.format_exc())
            status, error = ChildStatus.FAILED, f"internal error: {exc!r}"
        finally:
            try:
                note = self._workspace.release()
            except Exception as exc:
                note = f"workspace not removed: {exc!r}"
            if note:
                self.transcript.write("engine", note)
            self.finalize(status, error, result=result)
            self._report(ChildDone(self))

    def _run_all(self) -> tuple[ChildStatus, str | None, str | None]:
        try:
            cwd = self._workspace.prepare()
        except WorkspaceError as exc:
            return ChildStatus.FAILED, f"workspace: {exc}", None
        self._cwd = cwd
        if self._workspace.mode != "shared":
            self.transcript.write("engine", f"workspace ({self._workspace.mode}): {cwd}")
        values = {
            "goal": self.task.goal,
            "context": self.task.context or "",
            "id": self.task.id,
            "workspace": str(cwd),
        }
        prompt = self.task.goal
        if self.task.context:
            prompt += "\n\nContext:\n" + self.task.context
        self.transcript.write("user", prompt)
        if self.interrupt.is_set():  # stopped while its copy or worktree was being made
            return self._stop_status or ChildStatus.STOPPED, self._stop_reason, None
        end = self._run_once(expand(self._command.argv, values), cwd, prompt)
        while self._spec.steer == "resume" and not self.interrupt.is_set():
            # At the next turn: once the process ended well. --now: it was ended for this.
            if not (end.for_steer or (end.code == 0 and self._steering.waiting)):
                break
            if self._session is None:
                self.transcript.write("engine", "no session id was reported: nothing to resume")
                break
            receipts = self._steering.take()
            if not receipts:
                break
            message = "\n\n".join(r.message for r in receipts)
            for receipt in receipts:
                self.transcript.write("operator", f"delivered: {receipt.message} (resume)")
                self._settle(receipt, SteerState.DELIVERED)
            argv = expand(
                self._command.resume_argv, {**values, "session": self._session, "message": message}
            )
            end = self._run_once(argv, cwd, message)
        return self._outcome(end)

    def _outcome(self, end: RunEnd) -> tuple[ChildStatus, str | None, str | None]:
        if self.interrupt.is_set():
            return self._stop_status or ChildStatus.STOPPED, self._stop_reason, None
        if end.code == 0 and not end.result_error:
            result = end.result if end.result is not None else "\n".join(end.out)
            return ChildStatus.COMPLETED, None, result
        if end.code == 0:
            return ChildStatus.FAILED, f"the CLI reported an error: {end.result}", None
        if end.code is None:
            return ChildStatus.FAILED, "the process could not be started", None
        reason = _status_text(end.code)
        last = [line for line in end.err if line.strip()][-REASON_LINES:]
        return ChildStatus.FAILED, reason + (": " + "\n".join(last) if last else ""), None

    def _run_once(self, argv: list[str], cwd: Path, stdin_text: str) -> RunEnd:
        """One process, from start to the end of its whole tree."""
        spec = self._spec
        end = RunEnd()
        shown = shlex.join(argv)
        if len(shown) > MAX_ARGV_SHOWN:
            shown = shown[:MAX_ARGV_SHOWN] + " …"
        self.transcript.write("engine", f"run: {shown}")
        with self._lock:
            self._activity.hold(self._activity.turns + 1)
            self._activity.call_started(self._clock())
            self._activity.text = "starting " + one_line(Path(argv[0]).name, 40)
            self._version += 1
        try:
            proc = Process(argv, cwd=cwd, env=self._command.env, stdin=spec.stdin)
        except OSError as exc:
            self.transcript.write("error", f"cannot start {argv[0]}: {exc}")
            end.err.append(f"cannot start {argv[0]}: {exc.strerror or exc}")
            end.code = 127
            return end
        reader = reader_for(spec.format)
        turns_sent = 0
        if spec.stdin:
            if spec.steer == "stdin":
                proc.feed(_user_turn(stdin_text), then_close=False)
                turns_sent = 1
            else:
                proc.feed(stdin_text, then_close=True)
        try:
            return self._supervise(proc, reader, spec, stdin_text, turns_sent, end)
        except BaseException:
            # A bug (or a signal) while reading it: the process must not outlive its child.
            proc.signal(signal.SIGKILL)
            self._reap(proc, time.monotonic(), killed=True)
            raise

    def _supervise(
        self,
        proc: Process,
        reader: OutputReader,
        spec: CommandSpec,
        stdin_text: str,
        turns_sent: int,
        end: RunEnd,
    ) -> RunEnd:
        """Read its output until it and its whole tree have ended; stop it when asked."""
        results = 0
        stdin_open = spec.steer == "stdin"
        ended = {"stdout": False, "stderr": False}
        term_at: float | None = None
        killed = False
        last_track = 0.0
        suspended = False  # paused by the operator: the process group is stopped (SIGSTOP)
        while True:
            try:
                line: Line | None = proc.lines.get(timeout=POLL_S)
            except queue.Empty:
                line = None
            while line is not None:
                if line.text is None:
                    ended[line.stream] = True
                elif line.stream == "stderr":
                    end.err.append(line.text)
                    self.transcript.write("stderr", line.text)
                    self._output()
                else:
                    end.out.append(line.text)
                    results += self._stdout(line.text, reader, end)
                try:
                    line = proc.lines.get_nowait()
                except queue.Empty:
                    line = None
            now = time.monotonic()
            if now - last_track >= TRACK_S:
                last_track = now
                proc.track()
            if term_at is None and not self.interrupt.is_set():
                suspended = self._pause_point(proc, suspended)
            if stdin_open and term_at is None and not suspended:
                turns_sent += self._deliver_stdin(proc)
                if results >= turns_sent and self._steering.close_unless_waiting():
                    # Every turn answered and none waits: its input ends, so it exits.
                    proc.close_stdin()
                    stdin_open = False
            if term_at is None:
                if self.interrupt.is_set():
                    self._show("stopping")
                    if suspended:  # a stopped process acts on no SIGTERM until it goes on
                        proc.signal(signal.SIGCONT)
                        suspended = False
                    term_at = self._terminate(proc, "stop")
                elif (
                    spec.steer == "resume"
                    and not suspended
                    and self._steering.now_pending
                    and self._session
                ):
                    end.for_steer = True
                    self._show("stopping for a steer")
                    term_at = self._terminate(proc, "steer (interrupt now): the session resumes")
            exited = proc.poll() is not None
            if exited and term_at is None and not all(ended.values()) and proc.survivors():
                # It has exited but descendants still hold its output open: they end too.
                term_at = self._terminate(proc, "the process exited; its descendants")
            if term_at is not None and not killed and now - term_at >= spec.kill_grace_s:
                proc.signal(signal.SIGKILL)
                killed = True
                self.transcript.write("engine", "SIGKILL sent: it outlived the grace period")
            if exited and all(ended.values()):
                break
            if exited and killed and term_at is not None and now - term_at >= spec.kill_grace_s + 1:
                break  # something we never saw holds the pipes open: stop reading them
        self._reap(proc, term_at, killed)
        end.code = proc.poll()
        self._stopping = False
        if not end.reported and spec.format != "plain":
            self._lose_cost("no usage was reported for a run (it was cut short)")
        with self._lock:
            if self._activity.current_tool is not None:
                self._activity.tool_ended(self._clock())
            self._version += 1
        self.transcript.write("engine", f"process ended: {_status_text(end.code)}")
        return end

    def _pause_point(self, proc: Process, suspended: bool) -> bool:
        """The operator's pause and continue for a process: it has no turn boundary flightdeck
        can see, so its group is suspended at once, and goes on where it stopped."""
        if not suspended and self.pause_wanted and not self.interrupt.is_set():
            proc.signal(signal.SIGSTOP)  # first: once the row says paused, it is stopped
            if not self._take_pause():  # a stop came first, or a continue
                proc.signal(signal.SIGCONT)
                return False
            self.transcript.write("engine", "paused: process group suspended (SIGSTOP)")
            self._report(ChildPaused(self))
            return True
        if suspended and not self.pause_wanted:
            proc.signal(signal.SIGCONT)
            self.mark_running()
            self.transcript.write("engine", "continued: process group resumed (SIGCONT)")
            return False
        return suspended

    def _terminate(self, proc: Process, why: str) -> float:
        """SIGTERM to the group and the tree; returns when, for the grace period."""
        self._stopping = True
        self.transcript.write(
            "engine", f"SIGTERM sent ({why}); SIGKILL in {self._spec.kill_grace_s:g}s"
        )
        proc.signal(signal.SIGTERM)
        return time.monotonic()

    def _reap(self, proc: Process, term_at: float | None, killed: bool) -> None:
        """No survivor: descendants left after the process ended get the same two signals."""
        survivors = proc.survivors()
        if survivors and term_at is None:
            term_at = self._terminate(proc, "descendants outlived the process")
        if survivors and not killed:
            assert term_at is not None
            left = max(0.0, self._spec.kill_grace_s - (time.monotonic() - term_at))
            survivors = proc.wait_gone(left)
            if survivors:
                proc.signal(signal.SIGKILL)
        if survivors:
            survivors = proc.wait_gone(1.0)
        for survivor in survivors:
            self.transcript.write("error", f"process {survivor.pid} could not be killed")
        proc.release()

    # --- output ----------------------------------------------------------------------------

    def _stdout(self, text: str, reader: OutputReader, end: RunEnd) -> int:
        """One stdout line through the format; returns the results (answered turns) in it."""
        results = 0
        for event in reader.feed(text):
            if isinstance(event, Shown):
                self.transcript.write(event.role, event.text)
                self._watch_loops(event)
            elif isinstance(event, ToolStarted):
                name = one_line(self._clean(event.name), 60)
                with self._lock:
                    if self._activity.current_tool is not None:
                        self._activity.tool_ended(self._clock())
                    self._activity.tool_started(name, self._clock())
                    self._version += 1
            elif isinstance(event, ToolEnded):
                with self._lock:
                    if self._activity.current_tool is not None:
                        self._activity.tool_ended(self._clock())
                        self._version += 1
            elif isinstance(event, Report):
                end.reported = True
                self._bill_report(event)
            elif isinstance(event, Session):
                self._session = event.id
            elif isinstance(event, Result):
                end.result, end.result_error = event.text, event.error
                results += 1
        self._output()
        return results

    def _watch_loops(self, event: Shown) -> None:
        """A CLI's tool call and its result feed the loop checks as one turn."""
        if event.role == "tool-call":
            self._cli_call = self._clean(event.text)
        elif event.role == "tool" and self._cli_call is not None:
            name, _, args = self._cli_call.partition(" ")
            self._loops.call(name, args, event.text)
            self._cli_call = None
            self._tool_turn_ended(self._cwd)

    def _output(self) -> None:
        """A line came: activity (inside a tool, the tool stays what is shown)."""
        with self._lock:
            now = self._clock()
            if self._activity.current_tool is None and not self._stopping:
                self._activity.tick("output", now)
            else:
                self._activity.last_activity_ts = now
            self._version += 1

    def _deliver_stdin(self, proc: Process) -> int:
        """Steers waiting, written as user turns on its stdin; returns how many."""
        if not self._steering.waiting:
            return 0
        sent = 0
        for receipt in self._steering.take():
            if proc.write(_user_turn(receipt.message)):
                self.transcript.write("operator", f"delivered: {receipt.message}")
                self._settle(receipt, SteerState.DELIVERED)
                sent += 1
            else:
                reason = "the process no longer reads its input"
                self.transcript.write("operator", missed_note(receipt.message, reason))
                self._settle(receipt, SteerState.MISSED)
        return sent

    # --- usage and cost --------------------------------------------------------------------

    def _bill_report(self, report: Report) -> None:
        usage = report.usage
        if report.cost_usd is not None:
            self._meter.add_cost(usage, report.cost_usd)
            cost: Decimal | None = report.cost_usd
        else:
            cost = self._meter.add(self.route, usage)  # the route's price, if it has one
        with self._lock:
            self._usage += usage
            if cost is None:
                self._cost_lost = True
            else:
                self._reported_usd += cost
            self._cost = None if self._cost_lost else self._reported_usd
            self._version += 1

    def _lose_cost(self, why: str) -> None:
        with self._lock:
            lost = not self._cost_lost
            self._cost_lost = True
            self._cost = None
            self._version += 1
        if lost:
            self.transcript.write("engine", f"cost unknown: {why}")


def _user_turn(text: str) -> str:
    """A user turn in Claude Code's `--input-format stream-json`."""
    message = {"type": "user", "message": {"role": "user", "content": text}}
    return json.dumps(message, ensure_ascii=False) + "\n"


def _status_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:  # a real-time signal has no name
            return f"killed by signal {-code}"
    return f"exit {code}"
