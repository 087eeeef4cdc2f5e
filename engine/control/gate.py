"""The prompt-cache warm-up gate: one child leads, its siblings wait until the cache is warm.

Siblings send the same system prompt and tools. Launched together, each first request misses
the provider's cache and pays the whole prefix; a cache entry is readable once the response
that writes it starts streaming. So for each route (with `cache_gate_s`) and prompt prefix,
the first child admitted leads, and the others wait as `gated`, holding no slot, until the
leader's first chunk, its end, or the cap, whichever comes first. Once open, a gate stays open.
Coordinator thread only.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from flightdeck.engine.child.state import Child
from flightdeck.engine.model import ChildStatus

Key = tuple[str, str]  # (route name, prompt-prefix digest)


@dataclass
class _Gate:
    leader: Child
    deadline: float
    waiting: list[Child] = field(default_factory=list)


class CacheGate:
    """Open and closed gates, per route and prefix, and the children held behind each."""

    def __init__(self) -> None:
        self._closed: dict[Key, _Gate] = {}
        self._open: set[Key] = set()

    def holds(self, child: Child, now: float) -> bool:
        """Whether `child`, about to be admitted, must wait instead. The first child of a
        gated route and prefix becomes its leader (and is told to report its first chunk)."""
        cap = child.route.cache_gate_s
        if not cap:
            return False
        key = child.runner.prefix_key
        if key in self._open:
            return False
        gate = self._closed.get(key)
        if gate is None:
            self._closed[key] = _Gate(child, now + cap)
            child.leads_gate = True
            return False
        gate.waiting.append(child)
        child.mark_gated(gate.leader.task.id)
        return True

    def first_chunk(self, child: Child) -> list[Child]:
        """The leader's first response began streaming: its siblings may go."""
        return self._open_led_by(child)

    def ended(self, child: Child) -> list[Child]:
        """An admitted child ended: if it led a closed gate (it failed, or was stopped before
        streaming), the gate opens rather than holding its siblings for the cap."""
        return self._open_led_by(child)

    def expired(self, now: float) -> list[Child]:
        """The children of every gate whose cap has passed."""
        released: list[Child] = []
        for key in [k for k, g in self._closed.items() if now >= g.deadline]:
            released += self._release(key)
        return released

    def drain(self) -> Iterator[Child]:
        """Take every gated child (a budget ran out: none of them will start)."""
        for gate in self._closed.values():
            yield from gate.waiting
            gate.waiting = []

    def _open_led_by(self, child: Child) -> list[Child]:
        if not self._closed:  # no gate, or every gate open: no digest of its prefix needed
            return []
        key = child.runner.prefix_key
        gate = self._closed.get(key)
        if gate is None or gate.leader is not child:
            return []
        return self._release(key)

    def _release(self, key: Key) -> list[Child]:
        gate = self._closed.pop(key)
        self._open.add(key)
        gate.leader.leads_gate = False
        # A child paused while gated is handed back too (admission parks it): never dropped.
        return [c for c in gate.waiting if c.unmark_gated() or c.status is ChildStatus.PAUSED]
