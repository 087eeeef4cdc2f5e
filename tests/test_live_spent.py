"""The header's spent (the totals' live cost: what was billed, and the estimate of the calls in
flight) only rises while a batch spends: the sim's prompt cache billed at its own price, and
the figure sampled at each poll of a run."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from itertools import pairwise
from pathlib import Path

from helpers import Hold, batch, run_to_end, settings, sim_route, start, until


def test_the_live_spent_never_falls_when_a_calls_cached_share_is_billed(tmp_path: Path) -> None:
    # Found by a walkthrough: a call's prompt was priced as fresh input until its usage came;
    # billed, most of it read from the cache at a tenth of the price, the spent shown fell.
    hold = Hold(tmp_path / "hold")
    route = sim_route(tool_turns=2, cache=True, **hold.options())  # three calls
    engine = start(batch(1), settings(route), tmp_path)
    figures: list[Decimal] = []

    def held(call: int) -> Callable[[], bool]:
        """A poll until the child's call `call` is held, each poll's figure kept."""

        def poll() -> bool:
            figures.append(engine.snapshot().totals.live_cost_usd)
            return f"t0000@{call}" in hold.held()

        return poll

    try:
        for call in (0, 1):
            until(held(call), what=f"call {call} held")
            hold.release("t0000", call)
        until(held(2), what="call 2 held")
        engine.stop(["t0000"])  # cut short: billed for its prompt, the cache read in it
        snap = run_to_end(engine)
    finally:
        engine.close()
    figures.append(snap.totals.live_cost_usd)
    row = snap.child("t0000")
    assert row is not None and row.usage.cache_read_tokens > 0  # the cache was read
    assert snap.totals.live_cost_usd == snap.totals.cost_usd == row.cost_usd
    falls = [(before, after) for before, after in pairwise(figures) if after < before]
    assert not falls, falls
