"""What the owner of a batch keeps as events rather than in its rows, read as they are recorded:
who delegated whom, the loop flags, the node each child was placed on (on a cluster), the loop
policies' steers, what each child needs of the operator, its attempt and changes, the attempts
lost with an owner, the units it announced and the end of its schedules. reading.py adds them to
the rows it builds."""

from __future__ import annotations

import json
import sqlite3
from decimal import Decimal
from typing import Any

from flightdeck.engine.model import LoopEvidence
from flightdeck.engine.model.units import UNIT_EVENT
from flightdeck.engine.records.attempts import KEPT_KINDS, Kept
from flightdeck.engine.records.forecast import lost_cost
from flightdeck.engine.records.loops import evidence_from_json, policy_receipt
from flightdeck.engine.records.needlog import NEED_EVENTS, Needs
from flightdeck.engine.records.reader import ENDS_SCHEDULES, SCHEDULES_END, depth_of

# The events of a child read (and the loop policies' steers, told from the operator's).
_EVENTS = ", ".join(
    f"'{k}'" for k in ("delegate", "loop", "loop_policy", "node", *KEPT_KINDS, *NEED_EVENTS)
)


class BatchEvents:
    """One batch's events on `conn`, read from where the last read ended."""

    def __init__(self, conn: sqlite3.Connection, batch_id: str) -> None:
        self._conn = conn
        self.batch_id = batch_id
        self._seen = 0  # the id of the last event read
        self._parents: dict[str, str] = {}  # a delegate's parent, from the "delegate" events
        # Each child's loop evidence, from the owner's "loop" events (the last one wins).
        self._loops: dict[str, LoopEvidence] = {}
        self._looped: dict[str, float] = {}  # when each was last flagged (kept once cleared)
        self._nodes: dict[str, str] = {}  # where each ran, on a cluster ("node" events)
        self._needs = Needs()  # what each child needs of the operator
        self._kept = Kept()  # each child's attempt and changes
        self._lost: list[tuple[float, str | None, str, str]] = []  # lost attempts and retries
        self.lost_cost: Decimal | None = Decimal(0)  # what attempts lost with owners cost
        self.by_policy: set[int] = set()  # steer receipts a loop policy sent, not the operator
        self.schedules_ended = False  # by a stop-all, a budget or a cron's last date
        self._units_told: set[str] = set()  # groups of the "unit" events, not yet taken
        self._waves_ended: str | None = None  # why (a budget, a cron), not yet taken

    def read(self) -> set[str]:
        """The events recorded since the last read (inside the caller's read transaction); the
        ids of the children whose rows must be built again."""
        found = self._conn.execute(
            f"SELECT id, child_id, kind, detail, ts, {ENDS_SCHEDULES} FROM events"
            f" WHERE batch_id = ? AND id > ? AND (kind IN ({_EVENTS}) AND child_id IS NOT NULL"
            f" OR kind = '{UNIT_EVENT}' OR {ENDS_SCHEDULES}) ORDER BY id",
            (self.batch_id, self._seen),
        ).fetchall()
        changed = set()
        for event_id, child_id, kind, detail, ts, ends_schedules in found:
            self._seen = int(event_id)
            if kind == UNIT_EVENT:  # a unit the owner announced (a resumed one: as it began)
                self._units_told.add(str(json.loads(detail)["group"]))
                continue
            if ends_schedules:
                self.schedules_ended = True
                if kind == SCHEDULES_END:  # a stop-all's is the operator's own: not said
                    self._waves_ended = str(detail)
                continue
            child_id = str(child_id)
            detail = str(detail)
            if kind in ("lost_attempt", "retry"):  # each resume's and retry's, as they come
                self._lost.append((float(ts), child_id, kind, detail))
            if kind in KEPT_KINDS:
                if self._kept.add(child_id, kind, detail):
                    changed.add(child_id)
                continue
            if kind in NEED_EVENTS:
                self._needs.add(child_id, kind, detail, float(ts))
            elif kind == "delegate":
                self._parents[child_id] = detail
            elif kind == "node":
                self._nodes[child_id] = detail
            elif kind == "loop_policy":
                receipt_id = policy_receipt(detail)
                if receipt_id is not None:
                    self.by_policy.add(receipt_id)
                continue
            else:
                evidence = evidence_from_json(detail)
                if evidence is None:
                    self._loops.pop(child_id, None)
                else:
                    self._loops[child_id] = evidence
                    self._looped[child_id] = evidence.ts
            changed.add(child_id)
        if found:  # what the attempts lost with owners cost, retries' carried cost taken out
            self.lost_cost = lost_cost(self._lost)
        return changed

    def units_told(self) -> set[str]:
        """The groups of the units the owner announced since the last call."""
        told = self._units_told
        self._units_told = set()
        return told

    def waves_ended(self) -> str | None:
        """Why a budget or a cron's last date ended the schedules, if read since the last call."""
        why = self._waves_ended
        self._waves_ended = None
        return why

    def fields(self, cid: str, started: float | None) -> dict[str, Any]:
        """What the events add to a child's row (`started`: its started_ts): its parent and
        depth, loop flag, node, attempt and changes, question and denied call."""
        fields: dict[str, Any] = {}
        parent = self._parents.get(cid)
        looped = self._looped.get(cid)
        if parent is not None or looped is not None:
            depth = depth_of(cid, self._parents) if parent is not None else 0
            loop = self._loops.get(cid)
            fields.update(parent=parent, depth=depth, loop=loop, looped_ts=looped)
        node = self._nodes.get(cid)
        if node is not None:  # its work ran on a cluster: where
            fields["node"] = node
        fields.update(self._kept.fields(cid))
        fields.update(self._needs.fields(cid, started))
        return fields
