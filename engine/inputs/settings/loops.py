"""`[routes.NAME.loops]` (when a child counts as looping, the escalation policy) and
`[steer.canned]` (the messages one key sends), each value checked at its line."""

from __future__ import annotations

import string
from typing import Any

from flightdeck.engine.inputs.messages import kind, suggest
from flightdeck.engine.inputs.settings.checks import Table, ValueChecks
from flightdeck.engine.inputs.settings.values import (
    CANNED_PLACEHOLDERS,
    LOOP_STEPS,
    CannedSteers,
    LoopSettings,
    LoopStep,
)
from flightdeck.engine.inputs.tomlpos import Key

LOOP_KEYS = tuple(LoopSettings.__dataclass_fields__)
_CANNED_KEYS = tuple(CannedSteers.__dataclass_fields__)


def read_loops(checks: ValueChecks, key: Key, table: Table) -> LoopSettings:
    """A route's `loops` table."""
    checks.known(key, table, LOOP_KEYS)
    values: dict[str, Any] = {}
    for name in ("repeat_calls", "stale_turns", "still_turns"):
        if name in table:
            values[name] = checks.integer((*key, name), table[name], 0, 1000)
    for name in ("repeat_calls", "stale_turns", "still_turns"):
        if values.get(name) == 1:
            # One call, or one turn, is no loop: every first call would be flagged.
            raise checks.error((*key, name), "must be 0 (off) or at least 2, got 1")
    if "policy_wait_s" in table:
        values["policy_wait_s"] = checks.number((*key, "policy_wait_s"), table["policy_wait_s"])
    if "policy" in table:
        values["policy"] = _policy(checks, (*key, "policy"), table["policy"])
    return LoopSettings(**values)


def _policy(checks: ValueChecks, key: Key, value: object) -> tuple[LoopStep, ...]:
    choices = ", ".join(repr(s) for s in LOOP_STEPS)
    if not isinstance(value, list):
        raise checks.error(key, f"expected a list of steps ({choices}), got {kind(value)}")
    steps: list[LoopStep] = []
    for item in value:
        step = next((s for s in LOOP_STEPS if s == item), None)
        if step is None:
            hint = suggest(item, LOOP_STEPS) if isinstance(item, str) else ""
            raise checks.error(key, f"unknown step {kind(item)}{hint} (steps: {choices})")
        if step in steps:
            raise checks.error(key, f"step {step!r} is listed twice")
        steps.append(step)
    if "stop" in steps and steps[-1] != "stop":
        raise checks.error(key, "'stop' ends a child: it can only be the last step")
    return tuple(steps)


def read_steer(checks: ValueChecks, table: Table) -> CannedSteers:
    """The `[steer]` table: only `[steer.canned]` so far."""
    checks.known(("steer",), table, ("canned",))
    canned = checks.table(("steer", "canned"), table.get("canned", {}))
    checks.known(("steer", "canned"), canned, _CANNED_KEYS)
    values: dict[str, str] = {}
    for name, text in canned.items():
        values[name] = template(checks, ("steer", "canned", name), text)
    return CannedSteers(**values)


def template(checks: ValueChecks, key: Key, value: object) -> str:
    """A message with `{summary}`-style placeholders: unknown names are errors now, at load,
    not when the key is pressed (`{{` and `}}` are literal braces)."""
    text = checks.string(key, value)
    try:
        parts = [(f, spec, conv) for _, f, spec, conv in string.Formatter().parse(text)]
    except ValueError as exc:  # a lone `{` or `}`
        raise checks.error(key, f"{exc} (write {{{{ and }}}} for literal braces)") from None
    allowed = ", ".join("{" + p + "}" for p in CANNED_PLACEHOLDERS)
    for name, spec, conv in parts:
        if name is None:
            continue
        if name not in CANNED_PLACEHOLDERS:
            shown = "{" + name + "}"
            raise checks.error(key, f"unknown placeholder {shown} (placeholders: {allowed})")
        if spec or conv:
            raise checks.error(key, f"placeholders take no format or conversion ({allowed})")
    return text


def fill(text: str, *, summary: str, kind: str, child_id: str) -> str:
    """A canned message with its placeholders filled (checked by `template` at load)."""
    return text.format(summary=summary, kind=kind, id=child_id)
