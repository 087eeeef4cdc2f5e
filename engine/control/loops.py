"""A route's loop policy (`[routes.NAME.loops] policy`): what the engine does, on its own, to a
child flagged as looping: nudge it, then steer it now, then stop it, one step every
`policy_wait_s` while it still loops. Coordinator-thread state, no locks."""

from __future__ import annotations

from dataclasses import dataclass

from flightdeck.engine.inputs.settings import LoopSettings, LoopStep
from flightdeck.engine.model import LoopEvidence


@dataclass(slots=True)
class _Looping:
    settings: LoopSettings
    evidence: LoopEvidence
    next_step: int  # index into the policy
    due: float  # when that step is taken


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
        self, child_id: str, evidence: LoopEvidence | None, settings: LoopSettings, now: float
    ) -> None:
        """A child's loop flag changed: a new loop starts its policy over at its first step
        (due at once); progress (None) ends it."""
        if evidence is None or not settings.policy:
            self._looping.pop(child_id, None)
            return
        found = self._looping.get(child_id)
        if found is not None:
            found.evidence = evidence  # the same loop seen another way: the policy goes on
            return
        self._looping[child_id] = _Looping(settings, evidence, 0, now)

    def ended(self, child_id: str) -> None:
        self._looping.pop(child_id, None)

    def due(self, now: float) -> list[Step]:
        """The steps due at `now`, each taken once; the next is scheduled after the wait."""
        out = []
        for child_id, state in list(self._looping.items()):
            if now < state.due:
                continue
            policy = state.settings.policy
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
            if state.next_step >= len(policy):
                del self._looping[child_id]  # nothing left to do but watch
            else:
                state.due = now + state.settings.policy_wait_s
        return out
