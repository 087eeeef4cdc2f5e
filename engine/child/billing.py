"""A child's spend: usage billed at its route's price into its figures and the batch's meter,
and a call cut short billed the estimate of what the server read and wrote."""

from __future__ import annotations

from flightdeck.engine.child.progress import Progress
from flightdeck.engine.inputs.settings import Route
from flightdeck.engine.model import Usage
from flightdeck.engine.records.meter import Meter, cache_saving, route_cost


def estimated_note(usage: Usage) -> str:
    """The transcript's line for the tokens billed as an estimate, those only (Anthropic counts
    the input at the stream's start: a stream cut after it leaves only the output uncounted)."""
    sizes = ((usage.input_tokens, "input"), (usage.output_tokens, "output"))
    parts = " and ".join(f"{n} {what}" for n, what in sizes if n)
    return f"call cut short: {parts} tokens billed as an estimate (their count never came)"


def bill(progress: Progress, meter: Meter, route: Route, usage: Usage) -> None:
    """`usage` billed at the route's price: in the child's figures, then the batch's meter (what
    the budgets read; on a worker, it sends the bill home counting it in the figures: see
    executors/cluster/twin.py)."""
    cost = route_cost(usage, route)
    progress.bill(usage, cost, cache_saving(usage, route, cost))
    meter.add_priced(usage, cost)


def bill_cut_short(progress: Progress, meter: Meter, route: Route) -> Usage:
    """A call cut short (a stop, steer --now, its worker lost): the estimate of what the server
    read and wrote beyond what it counted (the prompt, and what streamed), billed; returned."""
    rest = progress.not_billed()
    if rest.total:
        bill(progress, meter, route, rest)
    return rest
