"""The operator's commands (engine/commands.py) applied, a loop policy's steps in their place,
and the engine's own stop of everything.

Run on the coordinator thread, on the batch's children, routes and pool (slots.py; as pauses.py
is): a command is applied between two steps, so it never races admission. `apply` is the one
place a command is dispatched, whether it was sent in this process or by a client.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from flightdeck.engine.child.state import Child
from flightdeck.engine.child.steering import missed_note
from flightdeck.engine.commands import (
    Accept,
    Answer,
    CommandError,
    Continue,
    ContinueAdmission,
    Discard,
    Dismiss,
    Nudge,
    Pause,
    PauseAdmission,
    Retry,
    SetLimits,
    Steer,
    Stop,
    StopAll,
)
from flightdeck.engine.control.arrivals import Arrivals
from flightdeck.engine.control.attempts import Attempts
from flightdeck.engine.control.endedfirst import EndedFirst
from flightdeck.engine.control.inbox import Order, ReceiptIds, Reviewed
from flightdeck.engine.control.loops import LoopPolicies, Step
from flightdeck.engine.control.pauses import Pauses
from flightdeck.engine.control.pool import SPARE_WORKERS
from flightdeck.engine.control.questions import Questions
from flightdeck.engine.control.recorder import Recorder
from flightdeck.engine.control.reviews import ReviewDesk
from flightdeck.engine.control.slots import Ends, Slots
from flightdeck.engine.control.softbudget import SoftBudget
from flightdeck.engine.control.throttle import RouteThrottle
from flightdeck.engine.errors import AlreadyEnded
from flightdeck.engine.inputs.settings import CannedSteers
from flightdeck.engine.inputs.settings.loops import fill
from flightdeck.engine.model import (
    ChildStatus,
    EngineEvent,
    Limits,
    LoopEvidence,
    SteerReceipt,
    SteerSettled,
    SteerState,
)
from flightdeck.engine.model.livelimits import ROUTE_FIELDS, changed
from flightdeck.engine.records.loops import evidence_json
from flightdeck.engine.records.transcripts import TranscriptWriter

log = logging.getLogger(__name__)


class Controls:
    """What the operator (or a loop policy) asks of running and queued children."""

    def __init__(
        self,
        slots: Slots,
        ends: Ends,
        *,
        recorder: Recorder,
        receipt_ids: ReceiptIds,
        clock: Callable[[], float],
        canned: CannedSteers,
        throttles: Mapping[str, RouteThrottle],
        soft: SoftBudget,
        pauses: Pauses,
        arrivals: Arrivals,
        questions: Questions,
        attempts: Attempts,
        desk: ReviewDesk | None,  # where accept and discard are applied (None: nowhere)
        publish: Callable[[EngineEvent], None],
        limits: Callable[[], Limits],  # the live limits in force
        hold: Callable[[], str | None],  # why admission is held now, every hold in a sentence
        announce: Callable[[], None],  # the live limits changed: told to attached views
    ) -> None:
        self._slots = slots
        self._ends = ends
        self._recorder = recorder
        self._receipt_ids = receipt_ids
        self._clock = clock
        self._canned = canned
        self._throttles = throttles
        self._soft = soft
        self._pauses = pauses
        self._arrivals = arrivals
        self._questions = questions
        self._attempts = attempts
        self._desk = desk
        self._publish = publish
        self._limits = limits
        self._hold = hold
        self._announce = announce
        self.loop_policies = LoopPolicies()
        # Children a stop-all found still queued or running; any makes the batch `stopped`.
        self.stopped_by_stop_all = 0
        self._ended_first = EndedFirst(slots)

    def apply(self, order: Order) -> None:
        """One of the operator's commands, from this process or a client's request; the
        request (if any) settled after what it made is queued to the store."""
        try:
            receipts = self._dispatch(order)
        except AlreadyEnded as exc:  # nothing left to act on: not applied, yet no failure
            if not self._ended_first.hold(order, str(exc), order.command.targets):
                self._settle(order, (), str(exc), ended=True)
            return
        except CommandError as exc:  # checked by the sender; the batch changed since
            self._settle(order, (), str(exc))
            return
        if receipts is not None:  # None: applied elsewhere, settled once it is (`reviewed`)
            self._settle(order, receipts, None)

    def _settle(
        self, order: Order, receipts: tuple[int, ...], refused: str | None, *, ended: bool = False
    ) -> None:
        """The order's request and its in-process sender told it was applied, or refused
        (`ended`: only because its children had ended first, a notice of why it did nothing,
        else an error)."""
        if order.answer is not None:
            order.answer.settle(refused)
        if order.request_id is not None:
            self._recorder.settle_request(
                order.request_id, receipts, refused, order.command, ended=ended
            )
        elif refused is not None and order.answer is None and ended:
            log.warning("%s", refused)  # shown by the TUI that sent it, not as an error
        elif refused is not None and order.answer is None:
            log.error("flightdeck engine: %s not applied: %s", order.command.title, refused)

    def finished(self, child_id: str) -> None:
        """A child's final row was handed to the store: the refusals that waited for it (a
        stop, pause or continue that came after it ended) are settled after it."""
        for order, reason in self._ended_first.finished(child_id):
            self._settle(order, (), reason, ended=True)

    def reviewed(self, done: Reviewed) -> None:
        """An accept or discard was applied (each child's changes as decided), or refused."""
        slots = self._slots
        for child_id, changes in done.decided.items():
            child = slots.by_id.get(child_id)
            if child is not None:
                child.kept.changed(changes)
            elif child_id in slots.carried:
                row = dataclasses.replace(slots.carried[child_id], changes=changes)
                slots.carried = {**slots.carried, child_id: row}
        self._settle(done.order, (), done.refused)

    def _dispatch(self, order: Order) -> tuple[int, ...] | None:
        """The one dispatch of every command: the steer receipts it made (None: it is applied
        off this thread, and settled once it is)."""
        slots = self._slots
        match order.command:
            case Steer(ids, message, now):
                return self.steer(order.receipt_ids, ids, message, now, order.request_id)
            case Nudge(ids):
                return self.nudge(ids, order.request_id)
            case Stop(ids):
                # a parent's delegates are its own work: they stop with it
                if not self.stop(self._arrivals.subtree(ids), "stopped by operator"):
                    # Each ended on its own before the stop came: it did nothing, and its
                    # request must not read applied.
                    raise self._ended_first.refusal(ids, "stop", "stopped")
            case StopAll():
                # Only a stop-all that stopped something makes the batch `stopped`: one that
                # came as the last child ended (Engine.close() on the way out) changes nothing.
                self.stopped_by_stop_all += self.stop(
                    [c.task.id for c in slots.children], "stopped by operator (stop all)"
                )
                if self._arrivals.scheduled:  # a scheduled batch ends only this way
                    # The batch's own stop (no child): its report said `stopped` and "No steers
                    # or stops" when no wave was running.
                    why = "stopped by operator (stop all): the schedules end, no more waves"
                    self._recorder.record_event(None, "stop", why)
                    self._arrivals.end_schedules()
                    self.stopped_by_stop_all += 1
            case Pause(ids):
                self._ended_first.check(ids, "pause", "paused")  # as a stop: it would do nothing
                for child_id in ids:  # the operator has it now: no policy step behind
                    self.loop_policies.ended(child_id)  # their back (`n` still works)
                self._pauses.pause(ids)
            case Continue(ids):
                self._ended_first.check(ids, "continue", "continued")
                self._pauses.continue_(ids)
            case PauseAdmission() | ContinueAdmission() as command:
                if self._pauses.hold_admission(isinstance(command, PauseAdmission)):
                    self._recorder.record_held(self._hold())
            case SetLimits(change):
                self.set_limits(change)
            case Retry(ids, resume):
                self._attempts.retry(ids, resume)
            case Accept() | Discard():
                if self._desk is None:
                    raise CommandError("this batch has no workspace to review changes in")
                self._desk.submit(order, slots.all_rows())
                return None
            case Answer(ids, message):
                self._questions.answer(ids, message)
            case Dismiss(ids):
                self.dismiss(ids)
            case command:
                raise CommandError(f"this owner cannot apply a {command.kind!r} command")
        return ()

    # --- steers and stops ----------------------------------------------------------------------

    def steer(
        self,
        receipt_ids: tuple[int, ...],
        ids: tuple[str, ...],
        message: str,
        now: bool,
        request_id: int | None = None,
    ) -> tuple[int, ...]:
        slots = self._slots
        ts = self._clock()
        for rid, child_id in zip(receipt_ids, ids, strict=True):
            receipt = SteerReceipt(rid, child_id, message, now, SteerState.QUEUED, ts)
            child = slots.by_id.get(child_id)
            if child is None:  # an earlier owner finished it (a resumed batch)
                self._missed_carried(child_id, receipt, request_id)
                continue
            when = "interrupt now" if now else "at next turn"
            if child.status.terminal:
                self._missed(child, receipt, ts, request_id)
                continue
            child.transcript.write("operator", f"steer ({when}): {message}")
            self._recorder.record_receipt(receipt, request_id)
            self._recorder.record_event(child_id, "steer", message)
            if not child.add_steer(receipt):  # it began to end after the check above
                self._missed(child, receipt, self._clock(), request_id)
        return receipt_ids

    def nudge(self, ids: tuple[str, ...], request_id: int | None) -> tuple[int, ...]:
        """The canned loop steer, its evidence filled in, to each child flagged as looping: a
        steer as the operator's, at its next turn."""
        made: list[int] = []
        for child_id in ids:
            child = self._slots.by_id.get(child_id)
            loop = child.row().loop if child is not None else None
            if loop is None:
                continue
            message = fill(
                self._canned.loop, summary=loop.summary, kind=loop.kind, child_id=child_id
            )
            rid = self._receipt_ids.next()
            made += self.steer((rid,), (child_id,), message, False, request_id)
        return tuple(made)

    def _missed(
        self, child: Child, receipt: SteerReceipt, settled_ts: float, request_id: int | None
    ) -> None:
        """A steer the child can no longer take (it has ended): shown, recorded, settled."""
        reason = "the child had ended"
        if child.status.terminal:  # else it is still writing its final line
            reason += f": {child.status.value}"
        elif child.steering.closed_why:  # or it runs on, reading no more steers
            reason = child.steering.closed_why
        child.transcript.write("operator", missed_note(receipt.message, reason))
        missed = dataclasses.replace(
            receipt, state=SteerState.MISSED, settled_ts=settled_ts, how=reason
        )
        child.keep_receipt(missed)
        self._recorder.record_receipt(missed, request_id)
        self._publish(SteerSettled(missed))

    def _missed_carried(self, child_id: str, receipt: SteerReceipt, request_id: int | None) -> None:
        """A steer for a child an earlier owner finished (a resumed batch): settled missed at
        once, as for any child that has ended."""
        row = self._slots.carried[child_id]  # the sender checked it is a child of this batch
        reason = f"the child had ended: {row.status.value}"
        missed = dataclasses.replace(
            receipt, state=SteerState.MISSED, settled_ts=receipt.created_ts, how=reason
        )
        self._recorder.record_receipt(missed, request_id)
        writer = TranscriptWriter(row.transcript, self._clock)
        writer.write("operator", missed_note(receipt.message, reason))
        writer.close()

    def stop(self, ids: Iterable[str], reason: str) -> int:
        """Stop these children; returns how many were not already final."""
        slots = self._slots
        stopped = 0
        for child_id in ids:
            child = slots.by_id.get(child_id)
            if child is None or child.status.terminal:
                continue
            if child_id not in slots.alive:
                # The operator's action, as a running child's stop is, then the engine's line.
                child.transcript.write("operator", "stop requested")
                self._recorder.record_event(child_id, "stop", reason)
                # A child paused at a turn boundary has no thread to stop: it ends at once.
                when = " while paused" if child.started_ts is not None else " before start"
                if child.finalize(ChildStatus.STOPPED, reason + when):
                    self._ends.finish(child)
                    stopped += 1
                continue
            slots.interrupt(child, ChildStatus.STOPPED, reason)
            child.transcript.write("operator", "stop requested")
            self._recorder.record_event(child_id, "stop", reason)
            stopped += 1
        return stopped

    def stop_everything(self, reason: str) -> None:
        """The engine's own stop (not the operator's): running children are interrupted,
        queued ones end without starting."""
        slots = self._slots
        for child in slots.children:
            if child.status.terminal:
                continue
            if child.task.id in slots.alive:
                slots.interrupt(child, ChildStatus.STOPPED, reason)
            elif child.finalize(ChildStatus.STOPPED, reason + " before start"):
                self._ends.finish(child)

    def dismiss(self, ids: tuple[str, ...]) -> None:
        """Clear these children's entries in the "needs you" queue (engine/triage/needs.py)."""
        ts = self._clock()
        for child_id in dict.fromkeys(ids):
            self._recorder.record_event(child_id, "dismiss", "")
            child = self._slots.by_id.get(child_id)
            if child is not None:  # else an earlier owner's: the event alone says it
                child.operator.dismissed(ts)

    # --- the loop policy -----------------------------------------------------------------------

    def looped(self, child_id: str, evidence: LoopEvidence | None, again: bool) -> None:
        """A child's loop flag changed (flagged, or cleared by progress): kept in the events
        table (an attached view shows it from there), and its route's policy starts or ends."""
        slots = self._slots
        child = slots.by_id.get(child_id)
        if child is None:
            return
        self._recorder.record_event(child_id, "loop", evidence_json(evidence))
        if _held(child):  # the operator has it: no policy acts behind their back
            self.loop_policies.ended(child_id)
        elif child_id in slots.alive:
            self.loop_policies.flagged(child_id, evidence, child.route.loops, again)

    def loop_steps(self) -> None:
        """The loop policies' steps that are due: each recorded as the policy's own."""
        slots = self._slots
        for step in self.loop_policies.due(self._clock()):
            child = slots.by_id.get(step.child_id)
            if child is None or step.child_id not in slots.alive or child.stop_status:
                continue
            if _held(child):  # paused since the step was due: its policy ends, no step used up
                self.loop_policies.ended(step.child_id)
                continue
            self._policy_step(child, step)

    def _policy_step(self, child: Child, step: Step) -> None:
        slots = self._slots
        ev = step.evidence
        where = f"loop policy (step {step.number} of {step.of}, {step.step})"
        detail: dict[str, object] = {"step": step.step, "number": step.number, "of": step.of}
        if step.step == "stop":
            reason = f"stopped by the loop policy: it looped ({ev.summary})"
            child.transcript.write("engine", f"{where}: {reason}")
            self._recorder.record_event(
                child.task.id, "loop_policy", json.dumps({**detail, "reason": reason})
            )
            slots.interrupt(child, ChildStatus.STOPPED, reason)
            return
        now = step.step == "steer_now"
        message = fill(self._canned.loop, summary=ev.summary, kind=ev.kind, child_id=child.task.id)
        receipt = SteerReceipt(
            self._receipt_ids.next(),
            child.task.id,
            message,
            now,
            SteerState.QUEUED,
            self._clock(),
            by="policy",
        )
        when = "interrupt now" if now else "at next turn"
        child.transcript.write("engine", f"{where}: steer ({when}): {message}")
        self._recorder.record_receipt(receipt, None)
        self._recorder.record_event(
            child.task.id,
            "loop_policy",
            json.dumps({**detail, "message": message, "receipt": receipt.id}, ensure_ascii=False),
        )
        if not child.add_steer(receipt):
            self._missed(child, receipt, self._clock(), None)

    # --- live limits ---------------------------------------------------------------------------

    def set_limits(self, change: Mapping[str, Any]) -> None:
        """Apply the operator's change at once: a lower limit only stops admitting until under
        it (nothing is interrupted); a higher one admits at the next step, on more threads.
        LimitError (nothing changed) if the limits changed since the sender checked it."""
        slots = self._slots
        new = changed(self._limits(), change)
        if new.pool_size != slots.pool_size:
            slots.pool_size = new.pool_size
            slots.pool.grow(new.pool_size + SPARE_WORKERS)
        for caps in new.routes:
            state = slots.queues.routes[caps.route]
            fields = {f: getattr(caps, f) for f in ROUTE_FIELDS}
            if all(getattr(state.route, f) == v for f, v in fields.items()):
                continue
            state.route = dataclasses.replace(state.route, **fields)
            throttle = self._throttles.get(caps.route)
            if throttle is not None:
                throttle.retune(state.route)
        if "soft_cost_usd" in change:
            self._soft.set(new.soft_cost_usd)
            # Now, not at the next step: the hold it makes is in the store before the request
            # is settled, so `limits` can say so with its "applied".
            self._soft.watch()
        self._recorder.record_event(
            None, "limits", json.dumps({"change": _plain(change), "by": "operator"})
        )
        self._announce()


def _plain(change: Mapping[str, Any]) -> dict[str, Any]:
    """A change as JSON takes it (dollars as strings)."""
    plain: dict[str, Any] = json.loads(json.dumps(dict(change), default=str))
    return plain


def _held(child: Child) -> bool:
    """Paused by the operator, or about to be (it pauses at its next turn boundary)."""
    return child.pause_wanted or child.status is ChildStatus.PAUSED
