"""A route's loop policy (`[routes.NAME.loops] policy`): what the engine does, on its own, to a
child flagged as looping: nudge it, then steer it now, then stop it. The first step is taken
when the child is flagged; each next one only on fresh evidence, the child flagged looping again
by what it did after the previous step's steer reached it, and no sooner than `policy_wait_s`
after that delivery. A child that changes course or answers is never escalated.
Coordinator-thread state, no locks."""

from __future__ import annotations

from dataclasses import dataclass

from flightdeck.engine.inputs.settings import LoopSettings, LoopStep
from flightdeck.engine.model import LoopEvidence


@dataclass(slots=True)
class _Looping:
    settings: LoopSettings
    evidence: LoopEvidence
    next_step: int  # index into the policy; past its end: all taken, only watched
    fresh: bool = True  # evidence the next step may act on (none yet since the last steer)
    delivered: float | None = None  # when the last step's steer reached the child


@dataclass(frozen=True, slots=True)
class Step:
    """A step due now: which child, what to do, and the evidence it acts on."""

    child_id: str
    step: LoopStep
    evidence: LoopEvidence
    number: int  # 1-based, of `of`
    of: int


class LoopPolicies:
    """Children flagged as looping whose route has a policy, and the step each is due."""

    def __init__(self) -> None:
        self._looping: dict[str, _Looping] = {}

    def flagged(
        self,
        child_id: str,
        evidence: LoopEvidence | None,
        settings: LoopSettings,
        again: bool = False,
    ) -> None:
        """A child's loop flag changed: a new loop starts its policy at its first step (due at
        once); evidence found `again` after a step's steer lets the next step come; progress
        (None) ends it."""
        if evidence is None or not settings.policy:
            self._looping.pop(child_id, None)
            return
        found = self._looping.get(child_id)
        if found is None:
            if not again:  # fresh evidence after a policy that ended (a pause): not restarted
                self._looping[child_id] = _Looping(settings, evidence, 0)
            return
        found.evidence = evidence  # the same loop seen another way, or seen again
        found.fresh = found.fresh or again

    def delivered(self, child_id: str, now: float) -> None:
        """The policy's steer reached the child: the wait for the next step starts here."""
        found = self._looping.get(child_id)
        if found is not None:
            found.delivered = now

    def ended(self, child_id: str) -> None:
        self._looping.pop(child_id, None)

    def due(self, now: float) -> list[Step]:
        """The steps due at `now`, each taken once; after a steer the next waits for its
        delivery, fresh evidence, and `policy_wait_s`."""
        out = []
        for child_id, state in self._looping.items():
            policy = state.settings.policy
            if state.next_step >= len(policy) or not state.fresh:
                continue
            if state.next_step > 0 and (
                state.delivered is None or now < state.delivered + state.settings.policy_wait_s
            ):
                continue
            out.append(
                Step(
                    child_id,
                    policy[state.next_step],
                    state.evidence,
                    state.next_step + 1,
                    len(policy),
                )
            )
            state.next_step += 1
            state.fresh, state.delivered = False, None
        return out
