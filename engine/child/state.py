"""What a child is: its task and route, status, steer inbox and receipts, the facts it reports,
and the frozen rows readers see; halt.py decides its stop and pause. How it runs is its `runner`
(port.py): a model runner (loop.py) or a process runner (command.py), on the worker thread that
calls `run`."""

from __future__ import annotations

import dataclasses
import threading
import traceback
from collections.abc import Callable
from decimal import Decimal

from flightdeck.engine.child.facts import ChildDone, ChildFact, ChildPaused, ReceiptSettled, Report
from flightdeck.engine.child.halt import Halt, Move
from flightdeck.engine.child.kept import Attempt, Kept
from flightdeck.engine.child.loopwatch import LoopWatch
from flightdeck.engine.child.operator import OperatorNeeds
from flightdeck.engine.child.policy import StopRequested
from flightdeck.engine.child.port import PAUSED, Closable, Ended, Runner, Transcript
from flightdeck.engine.child.progress import Progress
from flightdeck.engine.child.result import bounded_result
from flightdeck.engine.child.rowview import Standing, build_row
from flightdeck.engine.child.steering import Steering, missed_note
from flightdeck.engine.inputs.settings import Route
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.interrupt import Interrupt
from flightdeck.engine.model import ChildRow, ChildStatus, SteerReceipt, SteerState, Usage
from flightdeck.engine.providers.base import Interrupted
from flightdeck.engine.records.meter import cache_saving
from flightdeck.engine.records.sink import TranscriptSink
from flightdeck.engine.records.transcripts import TranscriptWriter
from flightdeck.engine.review.values import Changes
from flightdeck.engine.sanitize import redact, sanitize


class Child:
    """One task's child: the coordinator owns it, one worker thread at a time runs it."""

    # A batch keeps every child to its end: without an instance dict a child weighs 1.3 KB less.
    __slots__ = (
        "_began",
        "_clock",
        "_error",
        "_finalizing",
        "_lock",
        "_open_transcript",
        "_report",
        "_result",
        "_row",
        "_row_version",
        "_secrets",
        "_sink",
        "_transcript",
        "_version",
        "finished_ts",
        "halt",
        "interrupt",
        "kept",
        "leads_gate",
        "loops",
        "node",
        "operator",
        "progress",
        "queued_ts",
        "route",
        "runner",
        "started_ts",
        "status",
        "steering",
        "task",
        "transcript_path",
    )

    def __init__(
        self,
        task: Task,
        route: Route,
        runner: Runner,
        transcript_path: str,
        clock: Callable[[], float],
        report: Report,
        queued_ts: float,
        sink: TranscriptSink | None = None,
        *,
        cost_known: bool = True,
        open_transcript: Callable[[], Transcript] | None = None,
        kept: Kept | None = None,  # a retry's attempt (and the changes it works on from)
        secrets: tuple[str, ...] | None = None,  # the batch's keys; default: its route's
    ) -> None:
        self.task = task
        self.route = route
        self.runner = runner
        self.transcript_path = transcript_path
        self.queued_ts = queued_ts
        self.interrupt = Interrupt()
        self._sink = sink
        self._open_transcript = open_transcript  # else a TranscriptWriter on the path
        self._clock = clock
        self._report = report  # hands facts to the coordinator (thread-safe queue)
        # Every key the batch holds, redacted from all we record and show (any output may echo one)
        self._secrets = runner.secrets if secrets is None else secrets
        self.progress = Progress(clock, cost_known=cost_known)
        self.kept = kept or Kept()
        self.steering = Steering()
        self.loops = LoopWatch(
            task.id,
            route.loops,
            write=self._loop_line,  # bound methods: a lambda and its cell weigh twice as much
            report=report,
            tokens=self._usage_total,
            clock=clock,
        )
        # Everything below is guarded by `_lock`; `_version` lets readers skip unchanged rows.
        self._lock = threading.Lock()
        self._version = 0
        self.status = ChildStatus.QUEUED
        self.started_ts: float | None = None
        self._began: float | None = None  # its process's start, when it was adopted (resume)
        self.finished_ts: float | None = None
        self._transcript: Transcript | None = None
        self.node: str | None = None  # where its work runs, when not in this process
        self._finalizing = False
        self.halt = Halt()  # its stop and pause (halt.py)
        self._error: str | None = None
        self._result: str | None = None
        self._row: ChildRow | None = None
        self._row_version = -1
        self.leads_gate = False  # set by the coordinator: it leads a prompt-cache gate
        self.operator = OperatorNeeds()  # what it needs of the operator (coordinator thread)

    @property
    def transcript(self) -> Transcript:
        """Opened on first use, so a queued child holds no file descriptor."""
        with self._lock:
            if self._transcript is None and self._open_transcript is not None:
                self._transcript = self._open_transcript()
            elif self._transcript is None:  # after its end, a line's file is not kept open
                path, ended = self.transcript_path, self.status.terminal
                self._transcript = TranscriptWriter(
                    path, self._clock, secrets=self._secrets, sink=self._sink, closed=ended
                )
            return self._transcript

    def _loop_line(self, role: str, text: str) -> None:
        self.transcript.write(role, text)

    def _usage_total(self) -> int:
        return self.progress.usage_total

    @property
    def version(self) -> int:
        """Changes whenever the child's row would."""
        figures = self.progress.version + self.loops.version + self.kept.version
        return self._version + self.steering.version + figures + self.operator.version

    def row(self, wait: float = -1) -> ChildRow:
        """A frozen view; rebuilt only when something changed since the last call. TimeoutError
        if its lock is not free within `wait` seconds (the store's writer, `running_params`)."""
        if not self._lock.acquire(timeout=wait):
            raise TimeoutError(f"{self.task.id}'s row is held by another thread")
        try:
            version = self.version
            if self._row is not None and self._row_version == version:
                return self._row
            standing = Standing(
                self.status,
                self.queued_ts,
                self.started_ts,
                self.finished_ts,
                self._error,
                self._result,
                self.transcript_path,
                self.runner.steerable,
                self.node,
                pausing=self.halt.pause_wanted,
            )
            row = build_row(
                self.task,
                self.route,
                self.progress.figures(),
                standing,
                steers=self.steering.receipts(),
                loops=self.loops,
                kept=self.kept,
                operator=self.operator,
            )
            self._row, self._row_version = row, version
            return row
        finally:
            self._lock.release()

    @property
    def last_activity(self) -> float | None:
        """When the child last showed activity (a chunk, a tool transition, a call)."""
        return self.progress.last_activity

    @property
    def in_tool(self) -> bool:
        """True while one of its tool calls runs."""
        return self.progress.current_tool is not None

    @property
    def held(self) -> bool:
        """Waiting on the route's own limits: a wait flightdeck imposes is never a stall."""
        return self.progress.held

    @property
    def pause_wanted(self) -> bool:
        """The operator asked for a pause not since taken back by a continue."""
        return self.halt.pause_wanted

    @property
    def stop_status(self) -> ChildStatus | None:
        """The status a requested stop will end in (the first request wins); None if none."""
        return self.halt.stop_status

    @property
    def stop_reason(self) -> str | None:
        """Why the requested stop was asked for; None if none was."""
        return self.halt.stop_reason

    @property
    def paused_s(self) -> float:
        """Seconds it spent paused (no timeout counts them)."""
        return self.halt.paused_s

    @property
    def retrying(self) -> Attempt | None:
        """The operator's retry this run is (None: its first attempt)."""
        return self.kept.retrying

    # --- the worker thread ---------------------------------------------------------------------

    def run(self) -> None:
        """Run its work on this thread through its runner; never raises."""
        if not self.mark_running():
            # It ended while it waited for a worker thread (stopped, abandoned).
            self._report(ChildDone(self.task.id))
            return
        try:
            end = self.runner.run(self)
        except (StopRequested, Interrupted):
            end = Ended(self.halt.stop_status or ChildStatus.STOPPED, self.halt.stop_reason)
        except Exception as exc:  # a bug must fail one child, not the batch
            self.transcript.write("error", traceback.format_exc())
            end = Ended(ChildStatus.FAILED, f"internal error: {exc!r}")
        if end is PAUSED:
            self._report(ChildPaused(self.task.id))
            return
        assert isinstance(end, Ended)
        self.loops.ended()  # not on a pause: a continued child's next turns are judged with it
        try:
            self.finalize(end.status, end.error, result=end.result, missed=end.missed)
        finally:
            self._report(ChildDone(self.task.id))

    # --- what a runner uses (port.py) ----------------------------------------------------------

    def report(self, fact: ChildFact) -> None:
        """Hand a fact to the coordinator."""
        self._report(fact)

    def changed(self, changes: Changes) -> None:
        """At its end: what it changed in its own workspace, its files' names redacted."""
        self.kept.changed(changes.renamed(self.clean) if self._secrets else changes)

    def clock(self) -> float:
        """The engine's clock."""
        return self._clock()

    def clean(self, text: str) -> str:
        """`text` without the batch's keys: a server can echo one in an error or its output."""
        return redact(text, self._secrets) if self._secrets else text

    def open_call(self, call: Closable) -> bool:
        """The call a stop or a steer --now closes; False (closed now) if one came first."""
        with self._lock:
            if self.halt.open(call, self.closing()):
                return True
        call.close()
        return False

    def close_call(self) -> bool:
        """The call is over; True when a stop or a steer --now closed it under the runner."""
        with self._lock:
            self.halt.call = None
            return self.closing()

    def closing(self) -> bool:
        """True when the open call is to be dropped (a stop, or a steer --now)."""
        return self.interrupt.is_set() or self.steering.now_pending

    def settle(self, receipt: SteerReceipt, state: SteerState, note: str = "") -> None:
        """A steer was delivered or missed; its receipt is kept and reported."""
        now = self._clock()
        settled = dataclasses.replace(receipt, state=state, settled_ts=now, how=note or None)
        self.steering.keep(settled)
        self._report(ReceiptSettled(settled))

    def take_pause(self) -> bool:
        """At a turn boundary (the worker): True, and the child is `paused`, if a pause is
        wanted and no stop came first."""
        with self._lock:
            ending = self._finalizing or self.interrupt.is_set()
            return self._apply(self.halt.take(ending, self._clock()))

    # --- control side (coordinator thread) -----------------------------------------------------

    def request_stop(self, status: ChildStatus, reason: str) -> None:
        """Interrupt: wake any sleep, close the open call. The worker finalizes."""
        with self._lock:
            call = self.halt.stop(status, reason)
            self.interrupt.set()
        if call is not None:
            call.close()

    def request_pause(self) -> None:
        """The operator's pause: a queued child is paused now (it will not start), a running
        one at its next turn boundary."""
        with self._lock:
            self._apply(self.halt.pause(self.status, self._finalizing, self._clock()))

    def cancel_pause(self) -> None:
        """The operator's continue: a pause not taken yet is dropped; a queued child paused
        is queued again. A child paused at a turn boundary runs again once `mark_running`."""
        with self._lock:
            started = self.started_ts is not None
            self._apply(self.halt.cancel(self.status, started, self._finalizing))

    def show_waiting(self, waiting: bool) -> None:
        """The operator's continue of a paused child that waits for a slot (`waiting`), or
        its pause again before it got one: said in its row, so a continue is seen to land."""
        with self._lock:
            self._apply(self.halt.waiting(self.status, waiting))

    def _apply(self, move: Move | None) -> bool:
        """A change of status decided (by `halt`, say), applied under the lock; False: none."""
        if move is None:
            return False
        if move.status is not None:
            self.status = move.status
        if move.shows is not None:
            (self.progress.tick if move.ticks else self.progress.show)(move.shows)
        self._version += 1
        return True

    def add_steer(self, receipt: SteerReceipt) -> bool:
        """Queue an operator message; `now` closes the current call so the turn restarts.

        False when the child is already ending: its inbox has been emptied for the last time,
        and the caller settles the receipt as missed. A runner that cannot take it (a command
        that reads no steer) misses it at once, and says why."""
        refused = self.runner.refuse_steer(self, receipt)
        if refused is not None:
            self.transcript.write("operator", missed_note(receipt.message, refused))
            self.settle(receipt, SteerState.MISSED, refused)
            return True
        if not self.steering.add(receipt):
            return False
        if receipt.now:
            # `now_pending` is set before this lock is taken, and a call is only opened
            # under it after checking `now_pending`: either way the response is dropped.
            with self._lock:
                call = self.halt.call
            if call is not None:
                call.close()
        return True

    def keep_receipt(self, receipt: SteerReceipt) -> None:
        """Show a receipt settled without reaching the inbox (the child had already ended)."""
        self.steering.keep(receipt)

    def finalize(
        self,
        status: ChildStatus,
        error: str | None = None,
        *,
        result: str | None = None,
        missed: str | None = None,
    ) -> bool:
        """Record the final status (and the final answer) once; False if already final (first
        caller wins: a final answer that loses to the watchdog is not recorded). `missed` says
        why steers still in the inbox were not delivered."""
        with self._lock:
            if self.status.terminal or self._finalizing:
                return False
            self._finalizing = True
            undelivered = self.steering.close()
        for receipt in undelivered:
            reason = missed or f"the child ended ({status.value}) before its next turn"
            self.transcript.write("operator", missed_note(receipt.message, reason))
            self.settle(receipt, SteerState.MISSED, reason)
        # Stored as it is (report --json, exports): a server's or CLI's words, not their escapes.
        error = None if error is None else sanitize(error)
        if self._secrets:  # a server's error text or the model's answer may echo the key
            error = None if error is None else self.clean(error)
            result = None if result is None else self.clean(result)
        result = None if result is None else bounded_result(result, self.transcript_path)
        self.transcript.close("engine", status.value + (f": {error}" if error else ""))
        with self._lock:
            if self._sink is not None:  # no file held: a later line makes one that lets go
                self._transcript = None
            self.status = status
            self.finished_ts = self._clock()
            self._error = error
            self._result = result
            self._version += 1
        self.progress.ended(status.value, ran=self.started_ts is not None)
        return True

    def carry(self, usage: Usage, cost: Decimal | None, known: Decimal) -> None:
        """Before it runs again (`resume`): what an earlier attempt was billed (`known`: what
        is known of its `cost`). It stays in this child's usage and cost: spent is spent."""
        self.progress.carry(usage, cost, known, cache_saving(usage, self.route))

    def adopted(self, started_ts: float | None, paused: bool) -> None:
        """Before it runs (`resume`): its process, which a dead owner started at `started_ts`,
        is watched on (its run began then); one the operator had `paused` is paused again."""
        self._began = started_ts
        self.halt.pause_wanted = paused  # its supervisor suspends it at once, until continued

    def mark_running(self) -> bool:
        """Admitted: from now on it holds a slot; False if it has already ended (stopped or
        abandoned while it waited for its thread). Once only: later calls change nothing."""
        now = self._clock()
        with self._lock:
            if self._finalizing:  # a final status must never turn back into RUNNING
                return False
            if self.status is ChildStatus.QUEUED:
                self.status = ChildStatus.RUNNING
                self.started_ts = now if self._began is None else self._began
                self.progress.started()
                self._version += 1
            elif self.status is ChildStatus.PAUSED and self.started_ts is not None:
                self._apply(self.halt.continued(now))
        return True

    def mark_gated(self, leader_id: str) -> None:
        """Held by the prompt-cache gate until `leader_id`'s first response streams; no slot."""
        with self._lock:
            if self.status is ChildStatus.QUEUED and not self._finalizing:
                why = f"gated: cache warm-up, waiting for {leader_id}"
                self._apply(Move(ChildStatus.GATED, why))

    def unmark_gated(self) -> bool:
        """The gate opened: queued again, to be admitted next; False if it ended meanwhile."""
        with self._lock:
            gated = self.status is ChildStatus.GATED and not self._finalizing
            return self._apply(Move(ChildStatus.QUEUED, "") if gated else None)
