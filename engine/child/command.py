"""The process runner: a command child's task run as a process (an agent CLI, any program),
reporting the same figures as a model child (activity, current tool, usage and cost or
unknown, transcript, status, result), so the table, meter, steer, stop, slots, caps, budgets
and records work unchanged.

A process it starts is recorded in the store (`ProcessBook`) before it runs: a new owner adopts
it if it still runs when the owner that started it has died (`adopt`), and reads its output on
from there.
"""

from __future__ import annotations

import shlex
import signal
from dataclasses import dataclass, replace
from decimal import Decimal
from pathlib import Path
from typing import Protocol

from flightdeck.engine.agents import tree
from flightdeck.engine.agents.adopt import adoptable
from flightdeck.engine.agents.argv import expand
from flightdeck.engine.agents.formats import reader_for
from flightdeck.engine.agents.formats.codex import CodexJson
from flightdeck.engine.agents.gate import MarkerError
from flightdeck.engine.agents.launch import CommandRoute
from flightdeck.engine.agents.process import Files, OutputError, Process, Record
from flightdeck.engine.agents.workspace import Workspace, WorkspaceError
from flightdeck.engine.child.cliinput import CliInput
from flightdeck.engine.child.clitally import CliTally
from flightdeck.engine.child.kept import Attempt
from flightdeck.engine.child.port import ChildPort, Ended
from flightdeck.engine.child.steering import missed_note
from flightdeck.engine.child.supervise import RunEnd, Supervisor, left_running
from flightdeck.engine.model import ChildStatus, SteerReceipt, SteerState, Usage
from flightdeck.engine.model.session import CliSession
from flightdeck.engine.money import fmt_usd
from flightdeck.engine.records.meter import Meter, route_cost
from flightdeck.engine.sanitize import one_line, sanitize

CANNOT_STEER = "this route cannot be steered"
# What a retry that continues tells the CLI whose session it resumes.
RETRY_MESSAGE = "Your run before this one ended before the task was done; continue it"
REASON_LINES = 5  # stderr lines in a failure's reason
MAX_ARGV_SHOWN = 1000  # characters of the command line in the transcript
# Formats whose output says how the run ended: a process another owner started can be
# adopted (its exit status is for its parent alone to read).
ADOPTABLE = ("claude-stream-json", "codex-json")


class NotRecorded(Exception):
    """A process could not be recorded for a new owner to find: it was not run."""


class ProcessBook(Protocol):
    """Where a child's running process is recorded, for a new owner to find (the store)."""

    def started(
        self, record: Record, usage: Usage, cost: Decimal | None, known: Decimal, thread: Usage
    ) -> str | None:
        """A process started, held until this returns: None once a new owner would find it,
        else why it would not (it never runs); `usage` and `cost`: what the child had spent
        before it (`known`: what is known of that cost); `thread`: what the CLI session it
        resumes had been reported to use."""
        ...

    def read_to(self, record: Record) -> None:
        """How far its output has been read."""
        ...

    def ended(self) -> None:
        """It and its tree have ended."""
        ...

    def session(self, session: CliSession) -> None:
        """The CLI reported its session, or its usage moved (a retry that continues
        resumes it)."""
        ...


@dataclass(frozen=True, slots=True)
class Adoption:
    """A process a dead owner started, to be watched on from where its output was read."""

    record: Record
    usage: Usage  # what the child had spent before that process started
    cost: Decimal | None
    known: Decimal  # what is known of that cost (all of it, unless `cost` is None)
    thread: Usage  # what the CLI session it resumed had been reported to use before it
    # The tool the dead owner last saw it in, and since when: replayed, its output says which
    # tool runs but not since when (the replay's clock is the adoption's).
    tool: tuple[str, float] | None = None
    paused: bool = False  # its group suspended (SIGSTOP) for the operator's pause


class ProcessRunner:
    """One task of a command route, run as its process (and the resumes a steer asks for)."""

    keeps_thread = True  # paused, its process group is suspended and this thread waits on it

    def __init__(
        self,
        command: CommandRoute,
        workspace: Workspace,
        meter: Meter,
        files: Files,
        book: ProcessBook,
        tag: str,
    ) -> None:
        self._command = command
        self._spec = command.spec
        self._workspace = workspace
        self._meter = meter
        self._files = files
        self._book = book
        self._tag = tag
        self._session: list[str] = []  # the CLI's session id, once reported
        # What the session's runs were reported to have used, for a resume's reader.
        self._thread_usage = Usage()
        self._told: CliSession | None = None  # the session as recorded in the book
        self.adoption: Adoption | None = None  # set by `resume` before it runs

    @property
    def steerable(self) -> bool:
        """Whether the route reads steers at all."""
        return self._spec.steer != "none"

    @property
    def stop_grace_s(self) -> float:
        """A stop takes up to kill_grace_s (SIGTERM, then SIGKILL) and a moment to reap."""
        return self._spec.kill_grace_s + 1.0

    @property
    def secrets(self) -> tuple[str, ...]:
        """The route's key and the values passed to its processes."""
        return self._command.secrets

    @property
    def prefix_key(self) -> tuple[str, str]:
        """Command children share no prompt prefix flightdeck knows of."""
        return self._command.name, "command"

    @property
    def session(self) -> CliSession | None:
        """The CLI session its runs reported, once one did."""
        return CliSession(self._session[0], self._thread_usage) if self._session else None

    def adopt(self, adoption: Adoption) -> str | None:
        """Watch on a process a dead owner started (`resume`); why it cannot be, or None."""
        if self._spec.format not in ADOPTABLE:
            return f"format {self._spec.format!r} gives no outcome but the exit status"
        if self._spec.stdin and self._spec.steer != "stdin":
            return "its input was a prompt its owner may have died writing"
        why = adoptable(adoption.record)
        if why is None:
            self.adoption = adoption
            self._thread_usage = adoption.thread
        return why

    def refuse_steer(self, child: ChildPort, receipt: SteerReceipt) -> str | None:
        """A route with `steer = "none"` misses every steer, and says so."""
        return CANNOT_STEER if self._spec.steer == "none" else None

    # --- the worker thread -----------------------------------------------------------------

    def run(self, child: ChildPort) -> Ended:
        """Run the process (or watch the adopted one) and its resumes."""
        try:
            return self._run_all(child)
        except NotRecorded as exc:
            return Ended(ChildStatus.FAILED, f"not started: {exc}")
        finally:
            try:
                changes, note = self._workspace.release()
            except Exception as exc:
                changes, note = None, f"workspace not removed: {exc!r}"
            if changes is not None:
                child.changed(changes)
            if note:
                child.transcript.write("engine", note)

    def _run_all(self, c: ChildPort) -> Ended:
        adoption, again = self.adoption, c.retrying
        resume = again is not None and again.resume
        try:
            if adoption is not None:
                cwd = self._workspace.adopt()
            else:
                in_place = resume or c.kept.in_place
                cwd = self._workspace.reuse() if in_place else self._workspace.prepare()
        except WorkspaceError as exc:
            return Ended(ChildStatus.FAILED, f"workspace: {exc}")
        if self._workspace.mode != "shared" and adoption is None:
            left = " (as its lost attempt left it)" if c.kept.in_place and not resume else ""
            said = f"{cwd}{left}{self._workspace.note}"
            c.transcript.write("engine", f"workspace ({self._workspace.mode}): {said}")
        context = c.task.context or ""
        if again is not None and again.resume and not self._resumes(again):
            context = again.prompt + (f"\n\n{context}" if context else "")
        values = {"goal": c.task.goal, "context": context, "id": c.task.id, "workspace": str(cwd)}
        prompt = c.task.goal + (f"\n\nContext:\n{context}" if context else "")
        figures = c.progress.figures()
        tally = CliTally(
            self._meter,
            lambda usage: route_cost(usage, self._command.route, c.progress.model),
            figures.usage if adoption is None else adoption.usage,
            figures.cost_usd if adoption is None else adoption.cost,
            figures.known_usd if adoption is None else adoption.known,
        )
        if adoption is not None:
            end = self._watch_adopted(c, adoption, tally)
        elif again is not None and self._resumes(again) and again.session is not None:
            # The CLI's own session goes on, told how its run before ended.
            self._session[:] = [again.session.id]
            self._thread_usage = again.session.thread
            message = f"{RETRY_MESSAGE} ({again.before})."
            c.transcript.write("user", message)
            more = {**values, "session": again.session.id, "message": message}
            end = self._run_once(c, expand(self._command.resume_argv, more), cwd, message, tally)
        else:
            c.transcript.write("user", again.shown(prompt) if again is not None else prompt)
            if c.interrupt.is_set():  # stopped while its copy or worktree was being made
                return Ended(c.stop_status or ChildStatus.STOPPED, c.stop_reason)
            end = self._run_once(c, expand(self._command.argv, values), cwd, prompt, tally)
        while self._spec.steer == "resume" and not c.interrupt.is_set():
            # At the next turn: once the process ended well. --now: it was ended for this.
            if not (end.for_steer or (_ended_well(end) and c.steering.waiting)):
                break
            if not self._session:
                c.transcript.write("engine", "no session id was reported: nothing to resume")
                break
            steers = c.steering.take()
            if not steers:
                break
            message = "\n\n".join(r.message for r in steers)
            more = {**values, "session": self._session[0], "message": message}
            cut = end.for_steer  # the turn before was ended for these steers
            try:
                argv = expand(self._command.resume_argv, more)
                end = self._run_once(c, argv, cwd, message, tally, steers=steers)
            except NotRecorded as exc:
                # The child ran, and answered: only the resume these steers needed never ran.
                why = f"its session was not resumed: {exc}"
                _missed(c, steers, why)
                if cut:
                    return Ended(ChildStatus.FAILED, f"ended for a steer, then {why}")
                break
            _missed(c, steers, "its session's resume never ran")  # stopped, or could not start
        return self._outcome(c, end)

    def _resumes(self, again: Attempt) -> bool:
        """Whether a retry that continues resumes the CLI's session (else it is told the
        earlier attempt's transcript)."""
        return again.resume and again.session is not None and bool(self._spec.resume_argv)

    def _outcome(self, c: ChildPort, end: RunEnd) -> Ended:
        if c.interrupt.is_set():
            return Ended(c.stop_status or ChildStatus.STOPPED, c.stop_reason)
        if end.result is not None and end.result_error:
            # The CLI's own words: stderr holds its warnings, not why it failed.
            return Ended(ChildStatus.FAILED, f"the CLI reported an error: {end.result}")
        if end.code is None:  # adopted: only its output says how it ended
            if end.result is not None:
                return Ended(ChildStatus.COMPLETED, result=end.result)
            return Ended(ChildStatus.FAILED, "it ended without a result (adopted: no exit status)")
        if end.code == 0:
            result = end.result if end.result is not None else "\n".join(end.out)
            return Ended(ChildStatus.COMPLETED, result=result)
        reason = status_text(end.code)
        # Stored as the row's error, which `report --json` and exports give out as it is: the
        # CLI's escape sequences go here, and a line of only those is no line.
        last = [line for line in map(sanitize, end.err) if line.strip()][-REASON_LINES:]
        return Ended(ChildStatus.FAILED, reason + (": " + "\n".join(last) if last else ""))

    def _run_once(
        self,
        c: ChildPort,
        argv: list[str],
        cwd: Path,
        stdin_text: str,
        tally: CliTally,
        steers: list[SteerReceipt] | None = None,
    ) -> RunEnd:
        """One process, from its start to the end of its whole tree. `steers`, for a steer's
        resume, are settled delivered (and taken out of the list) once it runs."""
        spec = self._spec
        shown = shlex.join(argv)
        if len(shown) > MAX_ARGV_SHOWN:
            shown = shown[:MAX_ARGV_SHOWN] + " …"
        c.transcript.write("engine", f"run: {shown}")
        c.progress.hold(c.progress.turns + 1)
        c.progress.call_started()
        c.progress.show("starting " + one_line(Path(argv[0]).name, 40))
        files = self._files if spec.stdin else Files(self._files.out, self._files.err)
        try:
            # Held until its row is committed: an owner killed before leaves nothing running
            # that `resume` could not find (and end, or adopt).
            proc = Process.spawn(
                argv, cwd=cwd, env=self._command.env, files=files, tag=self._tag, held=True
            )
        except (OutputError, MarkerError) as exc:  # the first writes a full disk refuses:
            # said as the row's, not as a program that could not start
            unrecorded = f"its process could not be recorded (its {exc.what} {exc.filename}: "
            unrecorded += f"{exc.strerror})"
            c.transcript.write("error", f"{_unrun(steers)}: {unrecorded}")
            raise NotRecorded(unrecorded) from None
        except OSError as exc:
            c.transcript.write("error", f"cannot start {argv[0]}: {exc}")
            end = RunEnd(code=127)
            end.err.append(f"cannot start {argv[0]}: {exc.strerror or exc}")
            return end
        try:
            why = self._book.started(
                proc.record(), tally.usage, tally.cost, tally.known, self._thread_usage
            )
        except BaseException:
            proc.release()  # still held: it never runs
            raise
        # A stop while the row was committed (a wait of up to store_retry_s + 15 s): unrun.
        if why is not None or c.interrupt.is_set():
            proc.go(run=False)
            proc.wait_gone(self.stop_grace_s)  # the shell that held it: it exits at once
            proc.release()
            self._book.ended()
            if why is None:
                c.transcript.write("engine", "stopped before its process ran")
                return RunEnd(code=None)  # its end: the stop's (`_outcome`)
            c.transcript.write("error", f"{_unrun(steers)}: {why}")
            raise NotRecorded(why)
        proc.go()
        for receipt in steers or ():
            c.transcript.write("operator", f"delivered: {receipt.message} (resume)")
            c.settle(receipt, SteerState.DELIVERED, "by resuming the session")
        if steers:
            steers.clear()
        try:
            cli = None
            if spec.stdin and spec.steer == "stdin":
                cli = CliInput(proc.write, tag=self._tag)
                proc.feed(cli.prompt(stdin_text), then_close=False)
            elif spec.stdin:
                proc.feed(stdin_text, then_close=True)
            supervisor = self._supervisor(c, proc, tally, cli)
        except BaseException:  # its stdin's thread refused, say: it must not run unwatched
            proc.signal(signal.SIGKILL)
            left_running(c, proc.wait_gone(1.0))
            proc.release()
            self._book.ended()
            raise
        return self._finish(c, proc, supervisor, tally)

    def _watch_adopted(self, c: ChildPort, adoption: Adoption, tally: CliTally) -> RunEnd:
        """A process a dead owner started: its output so far replayed quietly (the transcript
        has it) to know what it spent and said, then watched on as if started here."""
        record = adoption.record
        proc = Process.adopt(replace(record, out_offset=0, err_offset=0), tag=self._tag)
        if proc is None:  # its files are gone since `resume` looked
            c.transcript.write("engine", "the adopted process left no output to read")
            return RunEnd(code=None)
        state = "still runs" if tree.alive(record.root) else "has ended"
        c.transcript.write(
            "engine", f"adopted: process {record.root.pid} {state}; its output is read on from here"
        )
        c.progress.show("adopted")
        cli = CliInput(proc.write, tag=self._tag) if self._spec.steer == "stdin" else None
        supervisor = self._supervisor(c, proc, tally, cli)
        supervisor.replay(proc.read(upto=(record.out_offset, record.err_offset)))
        if adoption.tool is not None:
            c.progress.tool_since(*adoption.tool)
        if adoption.paused:
            supervisor.suspended_already()
        return self._finish(c, proc, supervisor, tally)

    def _supervisor(
        self, c: ChildPort, proc: Process, tally: CliTally, cli: CliInput | None
    ) -> Supervisor:
        if self._spec.format != "plain":  # its turn's usage comes later (Codex's: at its end)
            tally.begin()
            c.progress.spend(tally.usage, tally.cost, tally.known, pending=True)
        return Supervisor(
            c,
            proc,
            self._spec,
            reader_for(self._spec.format, self._thread_usage),
            tally,
            stdin=cli,
            session=self._session,
            record=self._book.read_to,
        )

    def _finish(
        self, c: ChildPort, proc: Process, supervisor: Supervisor, tally: CliTally
    ) -> RunEnd:
        reports = tally.reports
        try:
            end = supervisor.run(self._spec.steer == "resume")
        finally:
            proc.release()
            self._book.ended()
        if isinstance(supervisor.reader, CodexJson):
            self._thread_usage = supervisor.reader.thread_usage
        if self.session is not None and self.session != self._told:
            self._told = self.session
            self._book.session(self._told)
        supervisor.missed("the CLI ended before it read it")
        if tally.reports == reports and self._spec.format != "plain":
            estimate = tally.cut_short()
            c.progress.spend(tally.usage, tally.cost, tally.known)
            if estimate is None:  # what is known stays spent: the row's `$0.0262+?`
                known = tally.known
                said = f"cost {fmt_usd(known)} known, the rest unknown" if known else "cost unknown"
            else:  # what had streamed stays spent: a stop takes none of it back
                said = f"{estimate.total:,} tokens billed as an estimate"
            c.transcript.write("engine", f"{said}: a run ended before it reported its usage")
        c.progress.tool_ended()
        c.transcript.write("engine", f"process ended: {status_text(end.code)}")
        return end


def _unrun(steers: list[SteerReceipt] | None) -> str:
    """How a run that never ran is said: a steer's resume is no start of the child."""
    return "not started" if steers is None else "its session's resume did not run"


def _missed(c: ChildPort, receipts: list[SteerReceipt], why: str) -> None:
    for receipt in receipts:
        c.transcript.write("operator", missed_note(receipt.message, why))
        c.settle(receipt, SteerState.MISSED, why)


def _ended_well(end: RunEnd) -> bool:
    """Whether a run ended so that a steer waiting for its next turn may resume it: exit 0,
    or, for an adopted process (whose exit status only its dead owner could read), a result
    that is no error."""
    if end.code is None:
        return end.result is not None and not end.result_error
    return end.code == 0


def status_text(code: int | None) -> str:
    """How a process ended, in words."""
    if code is None:
        return "exit status unknown (adopted)"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:  # a real-time signal has no name
            return f"killed by signal {-code}"
    return f"exit {code}"
