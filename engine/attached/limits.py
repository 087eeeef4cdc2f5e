"""The live limits a batch's row keeps, for an attached view and the `limits` command."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from flightdeck.engine.inputs.settings.stored import settings_from_json
from flightdeck.engine.model import Limits
from flightdeck.engine.model.livelimits import limits_from_json, limits_of
from flightdeck.engine.records.meter import spend_known
from flightdeck.engine.records.rows import BatchInfo


def stored_limits(info: BatchInfo, routes: Callable[[], Iterable[str]]) -> Limits:
    """The live limits a batch's row keeps (its owner records them from the start), else those
    its settings began with (a batch of an earlier flightdeck: `routes` names its routes)."""
    if info.limits_json:
        return limits_from_json(info.limits_json)
    if info.settings_json is None:  # older still: only its pool size and budget are known
        return Limits(info.pool_size, max_cost_usd=info.max_cost_usd)
    names = dict.fromkeys(sorted(set(routes())))
    return limits_of(settings_from_json(info.settings_json), names, info.pool_size, spend_known)
