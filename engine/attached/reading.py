"""Reading a batch whose owner is another process from its store, again and again, cheaply.

A read fetches only the rows the owner wrote since the last read (each write of a child row
raises its change counter, `rev`) and builds a `ChildRow` only for those that changed; the
totals take out each changed row's old figures and add its new ones. So a read of a 5,000-child
batch costs what its running children changed, not what it holds. To the stored rows it adds
what the owner publishes live (records/live.py: calls in flight, retry notices, the route gauges,
the problem sentence) and what the store keeps in other tables (who delegated whom, loop flags, the
cluster node a child ran on, steer receipts), and works out what reading the cache saved at the
batch's prices (as `flightdeck report` does), so the snapshot has the in-process view's figures.
The discrete facts (a child started or finished, a steer settled, a unit or the batch finished) are
the differences between two reads (facts.py).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from decimal import Decimal
from typing import Any

from flightdeck.engine.attached.facts import Facts
from flightdeck.engine.attached.limits import stored_limits
from flightdeck.engine.inputs.settings import Route
from flightdeck.engine.inputs.settings.stored import settings_from_json
from flightdeck.engine.model import (
    BatchStatus,
    ChildRow,
    ChildStatus,
    EngineEvent,
    Limits,
    LoopEvidence,
    Snapshot,
    SteerReceipt,
    SteerSettled,
    SteerState,
    Totals,
)
from flightdeck.engine.model.units import UNIT_EVENT
from flightdeck.engine.records.attempts import KEPT_KINDS, Kept
from flightdeck.engine.records.forecast import lost_cost
from flightdeck.engine.records.live import Live, live_fields, live_from_json
from flightdeck.engine.records.liveness import process_matches
from flightdeck.engine.records.loops import evidence_from_json, policy_receipt
from flightdeck.engine.records.meter import RowTally, cache_saving
from flightdeck.engine.records.needlog import NEED_EVENTS, Needs
from flightdeck.engine.records.reader import SCHEDULES_END, depth_of
from flightdeck.engine.records.rows import (
    CHILD_COLUMNS_NO_RESULT,
    RECEIPT_COLUMNS,
    BatchInfo,
    batch_columns,
    batch_info,
    child_row,
    own_tasks,
    receipt,
    stored_spec,
)

log = logging.getLogger(__name__)  # under "flightdeck": the TUI shows warnings as notifications
# The children's columns a run changes, in CHILD_COLUMNS order after the id: status (index 7 of
# CHILD_COLUMNS) to cost_usd (20), then started_ts, finished_ts, error (22-24).
_MUTABLE = (
    "id, status, api_calls, tool_calls, retries, turns, current_tool, tool_started_ts, "
    "activity, last_activity_ts, tokens_in, tokens_out, cache_read, cache_write, cost_usd, "
    "started_ts, finished_ts, error"
)
# The events read into rows (and the loop policies' steers, told from the operator's).
_EVENTS = ", ".join(
    f"'{k}'"
    for k in ("delegate", "loop", "loop_policy", "node", "lost_attempt", *KEPT_KINDS, *NEED_EVENTS)
)
_BATCH_EVENTS = f"'{UNIT_EVENT}', '{SCHEDULES_END}'"  # events of no child read too
OWNER_CHECK_S = 1.0  # a killed owner changes nothing in the store: its pid is looked at this often


class BatchReading:
    """One batch of a store, read on `conn` (a read-only connection of schema `version`)."""

    def __init__(
        self, conn: sqlite3.Connection, batch_id: str, version: int, clock: Callable[[], float]
    ) -> None:
        self._conn = conn
        self.batch_id = batch_id
        self._version = version
        self._batch_columns = batch_columns(version)
        self._clock = clock
        self.info: BatchInfo | None = None
        self._owner_checked = 0.0
        self._owner_alive = True
        self._parents: dict[str, str] = {}  # a delegate's parent, from the "delegate" events
        self._events_seen = 0  # the last event read (delegate and loop events: _read_events)
        self._units_told: set[str] = set()  # groups of the "unit" events read, not yet looked at
        self._lost_cost: Decimal | None = Decimal(0)  # what attempts lost with owners cost
        self._lost: list[tuple[float, str | None, str, str]] = []  # its events, as read
        self._rev: int | None = None  # the store's change counter at the last read (version 6)
        self._raw: dict[str, tuple[Any, ...]] = {}  # each child's _MUTABLE columns, as last read
        self._fixed: dict[str, tuple[Any, ...]] = {}  # each child's full row, first read
        self._tally = RowTally()  # over every row in _rows
        self._totals: Totals | None = None
        self._rows: dict[str, ChildRow] = {}
        self._order: list[ChildRow] = []  # _rows in batch order
        self._at: dict[str, int] = {}  # each child's place in _order
        self._facts = Facts()
        self._own: frozenset[str] | None = None  # the batch's own tasks: its units' members
        self._schedules = False  # whether its spec has schedules (read with _own)
        self._waves_ended: str | None = None  # why (a budget, a cron), read and not yet said
        self._receipts: dict[int, SteerReceipt] = {}
        # Each child's loop evidence, from the owner's "loop" events (the last one wins).
        self._loops: dict[str, LoopEvidence] = {}
        self._looped: dict[str, float] = {}  # when each was last flagged (kept once cleared)
        self._nodes: dict[str, str] = {}  # where each ran, on a cluster ("node" events)
        self._by_policy: set[int] = set()  # steer receipts a loop policy sent, not the operator
        self._needs = Needs()  # what each child needs of the operator, from the events
        self._kept = Kept()  # each child's attempt and changes, from the events
        self._limits: tuple[tuple[str | None, int], Limits | None] | None = None
        self._live_text: str | None = None
        self._live = Live()
        self._routes: dict[str, Route] | None = None  # the batch's settings, for cache savings

    def row(self, child_id: str) -> ChildRow | None:
        """The child's row as last read."""
        return self._rows.get(child_id)

    def owner_died(self) -> bool:
        """Whether the owner of a running batch was found gone since the last look (a kill -9
        writes nothing: only its pid tells)."""
        info = self.info
        now = time.monotonic()
        if info is None or info.status is not BatchStatus.RUNNING:
            return False
        if now - self._owner_checked < OWNER_CHECK_S:
            return False
        self._owner_checked = now
        alive = process_matches(info.owner_pid, info.owner_start)
        died, self._owner_alive = self._owner_alive and not alive, alive
        return died

    def read(self, events: list[EngineEvent] | None = None) -> Snapshot | None:
        """The batch now (None if the store has no such batch); the facts since the last read
        appended to `events`."""
        try:
            return self._read(events)
        except Exception:
            # What this read fetched is lost with it: the next reads every row and builds each
            # again, so nothing it missed stays missed.
            self._rev, self._raw = None, {}
            raise

    def _read(self, events: list[EngineEvent] | None) -> Snapshot | None:
        conn = self._conn
        conn.execute("BEGIN")
        try:
            found = conn.execute(
                f"SELECT {self._batch_columns} FROM batches WHERE id = ?", (self.batch_id,)
            ).fetchone()
            if found is None:
                return None
            # What changes as a child runs; its goal, route, transcript path ... are read once.
            mutable = self._written()
            new_ids = [m[0] for m in mutable if m[0] not in self._fixed]
            if new_ids:
                self._read_fixed(new_ids)
            relinked = self._read_events() | self._read_live()
            controls = conn.execute(
                f"SELECT {RECEIPT_COLUMNS} FROM controls WHERE batch_id = ? AND kind = 'steer'"
                " ORDER BY id",
                (self.batch_id,),
            ).fetchall()
        finally:
            conn.execute("COMMIT")
        info = self._alive_or_abandoned(batch_info(found), mutable)
        was = self.info
        self.info = info
        if was is not None and was.status is not info.status:  # live figures end with the run
            relinked |= set(self._live.children)
        by_child: dict[str, list[SteerReceipt]] = {}
        for r in self._receipts_of(controls, events):
            by_child.setdefault(r.child_id, []).append(r)
        rows, changed = self._rows_of(mutable, by_child, relinked, events)
        if changed or self._totals is None:  # not for a heartbeat or a request
            self._totals = self._tally.totals()
        if self._own is None:  # a batch's spec never changes: read once
            self._own = own_tasks(info.spec_json)
            self._schedules = bool(stored_spec(info.spec_json).get("schedules"))
        if events is not None:
            self._facts.units(rows, self._own, events, self._units_told)
            self._facts.batch(was, info, events)
        self._units_told = set()
        running = info.status is BatchStatus.RUNNING
        if self._waves_ended is not None:  # the owner's warning is in its owner.log alone
            self._schedules = False
            if was is not None or running:  # not for a batch that had ended before this view
                log.warning("the schedules end, no more waves: %s", self._waves_ended)
            self._waves_ended = None
        return Snapshot(
            batch_id=info.id,
            status=info.status,
            started_ts=info.created_ts,
            now=info.finished_ts if info.finished_ts is not None else self._clock(),
            children=rows,
            totals=self._totals,
            pool_size=info.pool_size,
            max_cost_usd=info.max_cost_usd,
            # A dead owner's gauges died with it: frozen, they read as a route still throttled.
            routes=self._live.routes if info.status is not BatchStatus.ABANDONED else (),
            finished_ts=info.finished_ts,
            lost_cost_usd=self._lost_cost,
            problem=self._live.problem if running else None,
            held=info.held if running else None,
            limits=self._limits_of(info, rows),
            own=self._own,
            scheduled=running and self._schedules,  # till a stop-all, a budget or a cron ends them
        )

    def _rows_of(
        self,
        written: list[tuple[Any, ...]],
        by_child: dict[str, list[SteerReceipt]],
        relinked: set[str],
        events: list[EngineEvent] | None,
    ) -> tuple[tuple[ChildRow, ...], bool]:
        """Every child's row, in batch order, built again only where something changed (its
        columns, its steers, its events or live figures); and whether anything did."""
        raw, rows, fixed, tally = self._raw, self._rows, self._fixed, self._tally
        todo: dict[str, tuple[Any, ...]] = {}
        for m in written:
            m = m[:-1]  # without the change counter: a row written again may be the same
            if raw.get(m[0]) != m:
                todo[m[0]] = m
        for cid in by_child.keys() | relinked:  # receipts are never taken back
            if cid in todo or cid not in raw:
                continue
            if cid in relinked or rows[cid].steers != tuple(by_child.get(cid, ())):
                todo[cid] = raw[cid]
        built: list[tuple[ChildRow | None, ChildRow]] = []
        for cid, m in todo.items():
            f = fixed[cid]
            steers = tuple(by_child.get(cid, ()))
            # Back into CHILD_COLUMNS order, for rows.child_row.
            full = (*f[:7], *m[1:15], f[21], *m[15:18], None, f[26])
            before = rows.get(cid)
            row = self._built(full, steers, before)
            if before is not None:
                tally.remove(before)
            tally.add(row)
            raw[cid], rows[cid] = m, row
            built.append((before, row))
        if len(self._order) != len(rows):  # a child added: its place in the batch's order
            self._order = sorted(rows.values(), key=lambda r: (r.seq, r.id))
            self._at = {r.id: i for i, r in enumerate(self._order)}
        else:
            for _, row in built:
                self._order[self._at[row.id]] = row
        if events is not None and built:
            done = sum(tally.counts[s] for s in ChildStatus if s.terminal) + tally.superseded
            self._facts.children(built, done, len(rows), events)
        return tuple(self._order), bool(built)

    def _built(
        self, full: tuple[Any, ...], steers: tuple[SteerReceipt, ...], before: ChildRow | None
    ) -> ChildRow:
        """A child's row from its CHILD_COLUMNS, with what the store keeps elsewhere and what
        the owner publishes live (`before`: the row last built, whose figures may still do)."""
        row = child_row(full, steers)
        cid = row.id
        fields: dict[str, Any] = {}  # one replace of the row: a 1,000-row read builds hundreds
        parent, loop = self._parents.get(cid), self._loops.get(cid)
        looped, node = self._looped.get(cid), self._nodes.get(cid)
        if parent is not None or looped is not None:
            depth = depth_of(cid, self._parents) if parent is not None else 0
            fields.update(parent=parent, depth=depth, loop=loop, looped_ts=looped)
        if node is not None:  # its work ran on a cluster: where
            fields["node"] = node
        fields.update(self._kept.fields(cid))  # its attempt and its changes
        fields.update(self._needs.fields(row))  # its question, its denied call
        if row.usage.cache_read_tokens:  # priced again only when its usage changed (a call)
            if before is not None and before.usage == row.usage:
                fields["cache_saved_usd"] = before.cache_saved_usd
            else:
                route = self._settings_routes().get(row.route)
                fields["cache_saved_usd"] = cache_saving(row.usage, route) if route else None
        live = self._live
        # An ended child has nothing in flight; an abandoned batch's figures died with it.
        running = self.info is None or self.info.status is BatchStatus.RUNNING
        flight = live.children.get(cid) if running and row.status.live else None
        fields.update(live_fields(row, flight, row.route not in live.unsteerable))
        return dataclasses.replace(row, **fields) if fields else row

    def _written(self) -> list[tuple[Any, ...]]:
        """The _MUTABLE columns, and the change counter, of the children written since the
        last read (inside the transaction), in batch order: of every child at the first read,
        and at each read of a store from before the counter (version 6)."""
        conn, counted = self._conn, self._version >= 6
        if counted:
            last, self._rev = self._rev, conn.execute("SELECT max(rev) FROM children").fetchone()[0]
            if last is not None:  # the store's counter, not the batch's: all since the last read
                return conn.execute(
                    f"SELECT {_MUTABLE}, rev FROM children INDEXED BY children_by_rev"
                    " WHERE rev > ? AND batch_id = ? ORDER BY seq, id",
                    (last, self.batch_id),
                ).fetchall()
        return conn.execute(
            f"SELECT {_MUTABLE}, {'rev' if counted else '0'} FROM children WHERE batch_id = ?"
            " ORDER BY seq, id",
            (self.batch_id,),
        ).fetchall()

    def _settings_routes(self) -> dict[str, Route]:
        if self._routes is None:
            info = self.info
            settings_json = info.settings_json if info is not None else None
            self._routes = dict(settings_from_json(settings_json).routes) if settings_json else {}
        return self._routes

    def _read_live(self) -> set[str]:
        """The owner's live figures, if they changed since the last read (inside the
        transaction); the ids of the children whose rows must be built again."""
        if self._version < 4:  # a store from before the live table: nothing published
            return set()
        found = self._conn.execute(
            "SELECT body FROM live WHERE batch_id = ?", (self.batch_id,)
        ).fetchone()
        text = None if found is None else str(found[0])
        if text == self._live_text:
            return set()
        before, self._live_text = self._live, text
        self._live = live_from_json(text) if text is not None else Live()
        if before.unsteerable != self._live.unsteerable:
            return set(self._fixed)
        old, new = before.children, self._live.children
        return {cid for cid in old.keys() | new.keys() if old.get(cid) != new.get(cid)}

    def _read_events(self) -> set[str]:
        """What the owner keeps as events, not in the rows, recorded since the last read
        (inside the transaction): who delegated whom, the loop flags, the node each child was
        placed on (on a cluster), the loop policies' steers, the attempts lost with an owner
        (each resume writes them). The ids of the children whose rows must be built again."""
        found = self._conn.execute(
            "SELECT id, child_id, kind, detail, ts FROM events WHERE batch_id = ? AND id > ?"
            f" AND (kind IN ({_EVENTS}) AND child_id IS NOT NULL OR kind IN ({_BATCH_EVENTS}))"
            " ORDER BY id",
            (self.batch_id, self._events_seen),
        ).fetchall()
        changed = set()
        for event_id, child_id, kind, detail, ts in found:
            self._events_seen = int(event_id)
            if kind == UNIT_EVENT:  # a unit the owner announced (a resumed one: as it began)
                self._units_told.add(str(json.loads(detail)["group"]))
                continue
            if kind == SCHEDULES_END:
                self._waves_ended = str(detail)
                continue
            child_id, detail = str(child_id), str(detail)
            if kind in ("lost_attempt", "retry"):  # each resume's and retry's, as they come
                self._lost.append((float(ts), child_id, kind, detail))
                if kind == "lost_attempt":
                    continue
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
                    self._by_policy.add(receipt_id)
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
            self._lost_cost = lost_cost(self._lost)
        return changed

    def _limits_of(self, info: BatchInfo, rows: Sequence[ChildRow]) -> Limits | None:
        """The live limits the owner recorded, else those the batch's settings began with."""
        key = (info.limits_json, info.pool_size)
        if self._limits is None or self._limits[0] != key:
            self._limits = (key, stored_limits(info, lambda: (r.route for r in rows)))
        return self._limits[1]

    def _read_fixed(self, ids: list[str]) -> None:
        """The columns of these children that never change (inside the read transaction)."""
        if len(ids) > 500:  # the first read: every child, in one go
            rows = self._conn.execute(
                f"SELECT {CHILD_COLUMNS_NO_RESULT} FROM children WHERE batch_id = ?",
                (self.batch_id,),
            ).fetchall()
        else:
            marks = ", ".join("?" * len(ids))
            rows = self._conn.execute(
                f"SELECT {CHILD_COLUMNS_NO_RESULT} FROM children"
                f" WHERE batch_id = ? AND id IN ({marks})",
                (self.batch_id, *ids),
            ).fetchall()
        for r in rows:
            self._fixed[r[1]] = r

    def _alive_or_abandoned(self, info: BatchInfo, mutable: list[tuple[Any, ...]]) -> BatchInfo:
        """A running batch whose owner is gone is abandoned, its time stopped at the last
        heartbeat (as records/reader.py has it)."""
        if info.status is not BatchStatus.RUNNING:
            return info
        if self._owner_checked == 0.0 or not self._owner_alive:
            self._owner_checked = time.monotonic()
            self._owner_alive = process_matches(info.owner_pid, info.owner_start)
        if self._owner_alive:
            return info
        last = info.heartbeat_ts
        if last is None:  # written before heartbeats: the last thing a child did
            seen = (*self._raw.values(), *mutable)  # as last read, and written since
            last = max((max(m[9] or 0.0, m[16] or 0.0) for m in seen), default=0.0)
        return dataclasses.replace(
            info, status=BatchStatus.ABANDONED, finished_ts=max(last, info.created_ts)
        )

    def _receipts_of(
        self, controls: list[tuple[Any, ...]], events: list[EngineEvent] | None
    ) -> list[SteerReceipt]:
        old = self._receipts
        new: dict[int, SteerReceipt] = {}
        for c in controls:
            r = receipt(c)
            if r.id in self._by_policy:
                r = dataclasses.replace(r, by="policy")
            before = old.get(r.id)
            if (
                events is not None
                and r.state is not SteerState.QUEUED
                and (before is None or before.state is SteerState.QUEUED)
            ):
                events.append(SteerSettled(r))
            new[r.id] = r
        self._receipts = new
        return list(new.values())
