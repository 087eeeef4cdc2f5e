"""A child's state: what the coordinator changes (stop, steer, finalize) and readers see.

The agent loop that changes it from a worker thread is `Child`, in loop.py. Shared fields are
guarded by one lock, and readers get frozen `ChildRow` values.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

from flightdeck.engine.child.activity import ActivityState, InFlight
from flightdeck.engine.child.delegate import Delegation
from flightdeck.engine.child.facts import LoopFlagged, ReceiptSettled, Report
from flightdeck.engine.child.loops import LoopDetector, workspace_fingerprint
from flightdeck.engine.child.policy import CallPolicy
from flightdeck.engine.child.steering import Steering, missed_note
from flightdeck.engine.child.tools import Toolbox
from flightdeck.engine.inputs.settings import Route
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.model import (
    ChildRow,
    ChildStatus,
    LoopEvidence,
    SteerReceipt,
    SteerState,
    Usage,
    pausing_text,
)
from flightdeck.engine.providers.base import Provider, TurnStream
from flightdeck.engine.records.meter import Meter, route_cost
from flightdeck.engine.records.sink import TranscriptSink
from flightdeck.engine.records.transcripts import TranscriptWriter
from flightdeck.engine.sanitize import redact

# Characters of a final answer kept in the row (the store, the screen, the report's readers);
# the whole answer is in the transcript. A 100 MB reply must not be copied everywhere.
MAX_RESULT_CHARS = 100_000


class ChildState:
    """A child's state, as the coordinator changes it and readers see it; `Child` runs it."""

    def __init__(
        self,
        task: Task,
        route: Route,
        provider: Provider,
        retry: CallPolicy,
        toolbox: Toolbox,
        transcript_path: str,
        meter: Meter,
        clock: Callable[[], float],
        report: Report,
        queued_ts: float,
        sink: TranscriptSink | None = None,
    ) -> None:
        self.task = task
        self.route = route
        self.transcript_path = transcript_path
        self.queued_ts = queued_ts
        self.interrupt = threading.Event()
        self._provider = provider
        self._retry = retry
        self._tools = toolbox
        self._sink = sink
        self._meter = meter
        self._clock = clock
        self._report = report  # hands facts to the coordinator (thread-safe queue)
        # The route's API key, redacted from all we record and show.
        self._secrets = provider.secrets
        # Everything below is guarded by `_lock`; `_version` lets readers skip unchanged rows.
        self._lock = threading.Lock()
        self._version = 0
        self.status = ChildStatus.QUEUED
        self.started_ts: float | None = None
        self.finished_ts: float | None = None
        self._transcript: TranscriptWriter | None = None
        self._finalizing = False
        self._stream: TurnStream | None = None
        self._stop_status: ChildStatus | None = None
        self._stop_reason: str | None = None
        self._activity = ActivityState()
        self._steering = Steering()
        self._usage = Usage()
        self._cost: Decimal | None = Decimal(0)  # None once any usage has an unknown price
        self._saved: Decimal | None = Decimal(0)  # by cache reads; None: price unknown
        self._in_flight = InFlight()
        self._error: str | None = None
        self._result: str | None = None
        self._row: ChildRow | None = None
        self._row_version = -1
        self._loops = LoopDetector(route.loops)  # fed by the worker thread only
        self._looping: LoopEvidence | None = None
        self._looped_ts: float | None = None  # its last flag's time, kept once it clears
        # Set by the coordinator when it leads a prompt-cache gate: report the first chunk.
        self.leads_gate = False
        # Whether (and how much) it may hand sub-tasks to the engine; set before it starts.
        self.delegation: Delegation | None = None
        # The operator's pause: wanted (set by the coordinator, read at each turn boundary),
        # and the seconds spent paused, which no timeout counts.
        self._pause_wanted = False
        self._paused_at: float | None = None
        self.paused_s = 0.0

    @property
    def transcript(self) -> TranscriptWriter:
        """Opened on first use, so a queued child holds no file descriptor."""
        with self._lock:
            if self._transcript is None:
                self._transcript = TranscriptWriter(
                    self.transcript_path, self._clock, secrets=self._secrets, sink=self._sink
                )
            return self._transcript

    # --- read side -----------------------------------------------------------------------------

    @property
    def version(self) -> int:
        """Changes whenever the child's row would."""
        return self._version + self._steering.version

    def row(self) -> ChildRow:
        """A frozen view; rebuilt only when something changed since the last call."""
        with self._lock:
            version = self.version
            if self._row is not None and self._row_version == version:
                return self._row
            in_flight = self._in_flight.usage()
            flight_cost = route_cost(in_flight, self.route) if in_flight.total else Decimal(0)
            activity = self._activity.frozen()
            if self._pause_wanted and self.status is ChildStatus.RUNNING:
                # Said until the pause is taken, whatever it streams or runs meanwhile.
                text = pausing_text(activity.current_tool)
                activity = dataclasses.replace(activity, text=text)
            row = ChildRow(
                id=self.task.id,
                seq=self.task.seq,
                goal=self.task.goal,
                group=self.task.group,
                route=self.route.name,
                model=self.route.model,
                status=self.status,
                activity=activity,
                usage=self._usage,
                cost_usd=self._cost,
                queued_ts=self.queued_ts,
                started_ts=self.started_ts,
                finished_ts=self.finished_ts,
                error=self._error,
                result=self._result,
                transcript=self.transcript_path,
                steers=self._steering.receipts(),
                in_flight=in_flight,
                in_flight_cost_usd=flight_cost,
                steerable=self.steerable,
                cache_saved_usd=self._saved,
                parent=self.task.parent,
                depth=self.task.depth,
                loop=self._looping,
                looped_ts=self._looped_ts,
            )
            self._row, self._row_version = row, version
            return row

    @property
    def last_activity(self) -> float | None:
        """When the child last showed activity (a chunk, a tool transition, a call)."""
        return self._activity.last_activity_ts

    @property
    def in_tool(self) -> bool:
        """True while one of its tool calls runs."""
        return self._activity.current_tool is not None

    @property
    def held(self) -> bool:
        """Waiting on the route's own limits: a wait flightdeck imposes is never a stall."""
        return self._activity.held

    @property
    def stop_grace_s(self) -> float:
        """Seconds a stop may take beyond the engine's stall_grace_s (a process's kill grace)."""
        return 0.0

    @property
    def steerable(self) -> bool:
        """Whether a steer can reach this child (a command route may not read any)."""
        return True

    @property
    def keeps_thread(self) -> bool:
        """Whether it keeps its worker thread while paused (a suspended process does); a model
        child's run returns, its messages kept, and a continue runs it on a thread again."""
        return False

    @property
    def pause_wanted(self) -> bool:
        """The operator asked for a pause not since taken back by a continue."""
        return self._pause_wanted

    @property
    def stop_status(self) -> ChildStatus | None:
        """The status a requested stop will end in (the first request wins); None if none."""
        return self._stop_status

    @property
    def stop_reason(self) -> str | None:
        """Why the requested stop was asked for; None if none was."""
        return self._stop_reason

    # --- control side (coordinator thread) -----------------------------------------------------

    def request_stop(self, status: ChildStatus, reason: str) -> None:
        """Interrupt: wake any sleep, close the open stream. The worker finalizes."""
        with self._lock:
            if self._stop_status is None:
                self._stop_status, self._stop_reason = status, reason
            self.interrupt.set()
            stream = self._stream
        if stream is not None:
            stream.close()

    def request_pause(self) -> None:
        """The operator's pause: a queued child is paused now (it will not start), a running
        one at its next turn boundary."""
        with self._lock:
            if self._finalizing or self.status.terminal:
                return
            self._pause_wanted = True
            if self.status is ChildStatus.QUEUED:
                self._paused_now()
            self._version += 1  # a running child's row says it is pausing (`row`)

    def cancel_pause(self) -> None:
        """The operator's continue: a pause not taken yet is dropped; a queued child paused
        is queued again. A child paused at a turn boundary runs again once `mark_running`."""
        with self._lock:
            self._pause_wanted = False
            if self._finalizing:
                return
            if self.status is ChildStatus.PAUSED and self.started_ts is None:
                self.status = ChildStatus.QUEUED
                self._activity.text = ""
            elif self.status is ChildStatus.RUNNING:
                self._activity.text = "continued"
            self._version += 1

    def _paused_now(self) -> None:
        """Paused from here (the lock is held)."""
        self.status = ChildStatus.PAUSED
        self._paused_at = self._clock()
        self._activity.text = "paused by the operator"

    def _take_pause(self) -> bool:
        """At a turn boundary (the worker): True, and the child is `paused`, if a pause is
        wanted and no stop came first."""
        with self._lock:
            if not self._pause_wanted or self._finalizing or self.interrupt.is_set():
                return False
            self._paused_now()
            self._version += 1
            return True

    def add_steer(self, receipt: SteerReceipt) -> bool:
        """Queue an operator message; `now` closes the current response so the turn restarts.

        False when the child is already ending: its inbox has been emptied for the last time,
        and the caller settles the receipt as missed."""
        if not self._steering.add(receipt):
            return False
        if receipt.now:
            # `now_pending` is set before this lock is taken, and a stream is only opened
            # under it after checking `now_pending`: either way the response is dropped.
            with self._lock:
                stream = self._stream
            if stream is not None:
                stream.close()
        return True

    def keep_receipt(self, receipt: SteerReceipt) -> None:
        """Show a receipt settled without reaching the inbox (the child had already ended)."""
        self._steering.keep(receipt)

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
            undelivered = self._steering.close()
        reason = missed or f"the child ended ({status.value}) before its next turn"
        for receipt in undelivered:
            self.transcript.write("operator", missed_note(receipt.message, reason))
            self._settle(receipt, SteerState.MISSED)
        if self._secrets:  # a server's error text or the model's answer may echo the key
            error = None if error is None else self._clean(error)
            result = None if result is None else self._clean(result)
        if result is not None:
            result = bounded_result(result, self.transcript_path)
        self.transcript.close("engine", status.value + (f": {error}" if error else ""))
        with self._lock:
            self.status = status
            self.finished_ts = self._clock()
            self._error = error
            self._result = result
            self._activity.ended(status.value)
            self._version += 1
        return True

    def carry(self, usage: Usage, cost: Decimal | None) -> None:
        """Before it runs again (`resume`): what an earlier attempt, lost with its owner
        process, was billed. It stays in this child's usage and cost: spent is spent."""
        with self._lock:
            self._usage += usage
            self._cost = None if cost is None or self._cost is None else self._cost + cost
            self._version += 1

    def mark_running(self) -> bool:
        """Admitted: from now on it holds a slot; False if it has already ended (stopped or
        abandoned while it waited for its thread). Once only: later calls change nothing."""
        now = self._clock()
        with self._lock:
            if self._finalizing:  # a final status must never turn back into RUNNING
                return False
            if self.status is ChildStatus.QUEUED:
                self.status = ChildStatus.RUNNING
                self.started_ts = now
                self._activity.started(now)
                self._version += 1
            elif self.status is ChildStatus.PAUSED and self.started_ts is not None:
                # Continued: the pause counts toward no timeout, and the stall clock starts
                # again now (the time paused was not a stall).
                if self._paused_at is not None:
                    self.paused_s += max(0.0, now - self._paused_at)
                    self._paused_at = None
                self.status = ChildStatus.RUNNING
                self._activity.tick("continued", now)
                self._version += 1
        return True

    def mark_gated(self, leader_id: str) -> None:
        """Held by the prompt-cache gate until `leader_id`'s first response streams; no slot."""
        with self._lock:
            if self.status is ChildStatus.QUEUED and not self._finalizing:
                self.status = ChildStatus.GATED
                self._activity.text = f"gated: cache warm-up, waiting for {leader_id}"
                self._version += 1

    def unmark_gated(self) -> bool:
        """The gate opened: queued again, to be admitted next; False if it ended meanwhile."""
        with self._lock:
            if self.status is not ChildStatus.GATED or self._finalizing:
                return False
            self.status = ChildStatus.QUEUED
            self._activity.text = ""
            self._version += 1
            return True

    # --- shared by both sides ------------------------------------------------------------------

    def _settle(self, receipt: SteerReceipt, state: SteerState) -> None:
        settled = dataclasses.replace(receipt, state=state, settled_ts=self._clock())
        self._steering.keep(settled)
        self._report(ReceiptSettled(settled))

    def _tool_turn_ended(self, workspace: Path | None) -> None:
        """A turn's tool calls have all returned: is it looping now, or no longer? A flag (and
        its clearing) is one transcript line and a fact for the coordinator to record."""
        if not self._loops.enabled:
            return
        fingerprint = None
        if self._loops.settings.still_turns and workspace is not None:
            fingerprint = workspace_fingerprint(workspace)
        with self._lock:
            tokens = self._usage.total
        before = self._looping
        if self._loops.turn_ended(tokens, fingerprint, self._clock()):
            self._loop_changed(before, self._loops.evidence, again=self._loops.again)

    def _answered(self) -> None:
        """The model answered with no tool call: a loop it was in has ended."""
        if self._loops.answered():
            self._loop_changed(self._looping, None)

    def _loop_changed(
        self, before: LoopEvidence | None, found: LoopEvidence | None, again: bool = False
    ) -> None:
        with self._lock:
            self._looping = found
            if found is not None:
                self._looped_ts = found.ts
            self._version += 1
        if again and found is not None:
            # Fresh evidence on what it did after the policy's steer reached it.
            self.transcript.write(
                "engine",
                f"still looping after the loop policy's steer ({found.kind}): {found.summary}",
            )
        elif before is not None and found is not None and before.kind == found.kind:
            return  # the same loop, its calls updated in place
        elif found is not None:
            self.transcript.write("engine", f"looping ({found.kind}): {found.summary}")
        else:
            self.transcript.write("engine", "no longer looping: it made progress")
        self._report(LoopFlagged(self.task.id, found, again))

    def _show(self, text: str) -> None:
        """What the child waits for, without counting as activity (it is held, not idle)."""
        with self._lock:
            self._activity.text = text
            self._version += 1

    def _streamed(self, text: str) -> None:
        """A chunk of the reply streamed: activity, and output the meter counts before it is
        billed."""
        with self._lock:
            self._in_flight.streamed_chars += len(text)
            self._activity.streamed(self._clock())
            self._version += 1

    def _call_ended(self) -> None:
        """The call is over: what it used is billed, or never will be (nothing to estimate)."""
        with self._lock:
            self._in_flight = InFlight()
            self._version += 1

    def _tick(self, text: str) -> None:
        """Activity: a chunk streamed or a tool call announced."""
        with self._lock:
            self._activity.tick(text, self._clock())
            self._version += 1

    def _clean(self, text: str) -> str:
        """`text` without the route's key: a server can echo it in an error or in its output."""
        return redact(text, self._secrets) if self._secrets else text


def bounded_result(text: str, transcript: str) -> str:
    """`text`, or its first MAX_RESULT_CHARS characters and a note of where the rest is."""
    if len(text) <= MAX_RESULT_CHARS:
        return text
    rest = len(text) - MAX_RESULT_CHARS
    return (
        f"{text[:MAX_RESULT_CHARS]}\n\n[cut here: {rest:,} more characters; "
        f"the whole answer is in the transcript, {transcript}]"
    )
