"""A child's loop evidence as the events table keeps it (kind "loop", JSON detail), so a view
of the store (attach, the report) sees what the owner flagged."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from flightdeck.engine.model import LoopEvidence

KINDS = ("repeat", "no_output", "no_change")


def evidence_json(evidence: LoopEvidence | None) -> str:
    """The evidence as the events table keeps it (`null`: cleared)."""
    if evidence is None:
        return json.dumps(None)
    return json.dumps(
        {
            "kind": evidence.kind,
            "summary": evidence.summary,
            "calls": list(evidence.calls),
            "ts": evidence.ts,
        },
        ensure_ascii=False,
    )


def evidence_from_json(text: str) -> LoopEvidence | None:
    """The inverse of `evidence_json`; None for a cleared flag or a detail it cannot read."""
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("kind") not in KINDS:
        return None
    calls = data.get("calls")
    return LoopEvidence(
        data["kind"],
        str(data.get("summary", "")),
        tuple(str(c) for c in calls) if isinstance(calls, list) else (),
        float(data.get("ts") or 0.0),
    )


def policy_receipt(detail: str) -> int | None:
    """The steer receipt a "loop_policy" event names (None: a stop, or unreadable)."""
    try:
        step = json.loads(detail)
    except ValueError:
        return None
    found = step.get("receipt") if isinstance(step, dict) else None
    return found if isinstance(found, int) else None


def loop_records(
    events: Iterable[tuple[float, str | None, str, str]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """From a batch's events: each loop flagged (and when progress cleared it), and each step a
    loop policy took, oldest first, as the report lists them."""
    flags: list[dict[str, Any]] = []
    open_flag: dict[str, dict[str, Any]] = {}
    steps: list[dict[str, Any]] = []
    for ts, child, kind, detail in events:
        if child is None:
            continue
        if kind == "loop":
            evidence = evidence_from_json(detail)
            if evidence is None:
                flag = open_flag.pop(child, None)
                if flag is not None:
                    flag["cleared_ts"] = ts
                continue
            flag = {
                "child_id": child,
                "flagged_ts": ts,
                "kind": evidence.kind,
                "summary": evidence.summary,
                "cleared_ts": None,
            }
            open_flag[child] = flag
            flags.append(flag)
        elif kind == "loop_policy":
            try:
                step = json.loads(detail)
            except ValueError:
                continue
            if isinstance(step, dict):
                steps.append({"child_id": child, "ts": ts, **step})
    return flags, steps


def current_loops(events: Iterable[tuple[float, str | None, str, str]]) -> dict[str, LoopEvidence]:
    """Each child's loop evidence as its last "loop" event left it (cleared ones left out)."""
    out: dict[str, LoopEvidence] = {}
    for _ts, child, kind, detail in events:
        if kind != "loop" or child is None:
            continue
        evidence = evidence_from_json(detail)
        if evidence is None:
            out.pop(child, None)
        else:
            out[child] = evidence
    return out
