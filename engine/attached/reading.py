"""Reading a batch whose owner is another process from its store, again and again, cheaply.

A read fetches only the rows the owner wrote since the last read (each write of a child row
raises its change counter, `rev`) and builds a `ChildRow` only for those that changed; the
totals take out each changed row's old figures and add its new ones. So a read of a 5,000-child
batch costs what its running children changed, not what it holds. To the stored rows it adds
what the owner publishes live (records/live.py: calls in flight, retry notices, the route gauges,
the problem sentence), what it keeps as events (events.py: who delegated whom, loop flags, the
cluster node a child ran on ...) and the steer receipts, and works out what reading the cache
saved at the batch's prices (as `flightdeck report` does), so the snapshot has the in-process
view's figures. The discrete facts (a child started or finished, a steer settled, a unit or the
batch finished) are the differences between two reads (facts.py).
"""

from __future__ import annotations

import dataclasses
import logging
import sqlite3
import time
from collections.abc import Callable, Sequence
from typing import Any

from flightdeck.engine.attached.events import BatchEvents
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
    Snapshot,
    SteerReceipt,
    SteerSettled,
    SteerState,
    Totals,
)
from flightdeck.engine.records.live import Live, live_fields, live_from_json
from flightdeck.engine.records.liveness import process_matches
from flightdeck.engine.records.meter import RowTally, cache_saving
from flightdeck.engine.records.rows import (
    RECEIPT_COLUMNS,
    BatchInfo,
    batch_columns,
    batch_info,
    child_columns,
    child_row,
    own_tasks,
    receipt,
    stored_activity,
    stored_spec,
    stored_usage,
)

log = logging.getLogger(__name__)  # under "flightdeck": the TUI shows warnings as notifications
# The children's columns a run changes, in CHILD_COLUMNS order after the id: status (index 7 of
# CHILD_COLUMNS) to cost_usd (20), then started_ts, finished_ts, error (22-24), cost_floor_usd
# (27; NULL in a file from before it, version 7).
_MUTABLE = (
    "id, status, api_calls, tool_calls, retries, turns, current_tool, tool_started_ts, "
    "activity, last_activity_ts, tokens_in, tokens_out, cache_read, cache_write, cost_usd, "
    "started_ts, finished_ts, error, cost_floor_usd"
)
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
        self._mutable = _MUTABLE if version >= 7 else _MUTABLE.replace("cost_floor_usd", "NULL")
        self._fixed_columns = child_columns(version, results=False)
        self._clock = clock
        self.info: BatchInfo | None = None
        self._owner_checked = 0.0
        self._owner_alive = True
        self._events = BatchEvents(conn, batch_id)  # what the rows do not keep
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
        self._receipts: dict[int, SteerReceipt] = {}
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
        died = self._owner_alive and not alive
        self._owner_alive = alive
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
            relinked = self._events.read() | self._read_live()
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
        told = self._events.units_told()
        if events is not None:
            self._facts.units(rows, self._own, events, told)
            self._facts.batch(was, info, events)
        running = info.status is BatchStatus.RUNNING
        waves_ended = self._events.waves_ended()
        # The owner's warning is in its owner.log alone; not said of a batch that had ended
        # before this view.
        if waves_ended is not None and (was is not None or running):
            log.warning("the schedules end, no more waves: %s", waves_ended)
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
            lost_cost_usd=self._events.lost_cost,
            problem=self._live.problem if running else None,
            held=info.held if running else None,
            limits=self._limits_of(info, rows),
            own=self._own,
            scheduled=running and self._schedules and not self._events.schedules_ended,
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
        raw = self._raw
        rows = self._rows
        tally = self._tally
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
            f = self._fixed[cid]
            steers = tuple(by_child.get(cid, ()))
            # Back into CHILD_COLUMNS order, for rows.child_row.
            full = (*f[:7], *m[1:15], f[21], *m[15:18], None, f[26], m[18])
            before = rows.get(cid)
            row = self._built(full, steers, before)
            if before is not None:
                tally.remove(before)
            tally.add(row)
            raw[cid] = m
            rows[cid] = row
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
        # What the row adds is worked out from the columns first, so the row is built once.
        cid, route = full[1], full[5]
        usage = stored_usage(full)
        fields = self._events.fields(cid, full[22])
        fields["usage"] = usage
        if usage.cache_read_tokens:  # priced again only when its usage changed (a call)
            if before is not None and before.usage == usage:
                fields["cache_saved_usd"] = before.cache_saved_usd
            else:
                prices = self._settings_routes().get(route)
                fields["cache_saved_usd"] = cache_saving(usage, prices) if prices else None
        live = self._live
        # An ended child has nothing in flight; an abandoned batch's figures died with it.
        running = self.info is None or self.info.status is BatchStatus.RUNNING
        flight = live.children.get(cid) if running else None
        if flight is not None and not ChildStatus(full[7]).live:
            flight = None
        if flight is not None or route in live.unsteerable:
            fields["activity"] = activity = stored_activity(full)  # the live figures may add to it
            fields.update(live_fields(activity, flight, route not in live.unsteerable))
        return child_row(full, steers, **fields)

    def _written(self) -> list[tuple[Any, ...]]:
        """The _MUTABLE columns, and the change counter, of the children written since the
        last read (inside the transaction), in batch order: of every child at the first read,
        and at each read of a store from before the counter (version 6)."""
        conn = self._conn
        counted = self._version >= 6
        if counted:
            last = self._rev
            self._rev = conn.execute("SELECT max(rev) FROM children").fetchone()[0]
            if last is not None:  # the store's counter, not the batch's: all since the last read
                return conn.execute(
                    f"SELECT {self._mutable}, rev FROM children INDEXED BY children_by_rev"
                    " WHERE rev > ? AND batch_id = ? ORDER BY seq, id",
                    (last, self.batch_id),
                ).fetchall()
        return conn.execute(
            f"SELECT {self._mutable}, {'rev' if counted else '0'} FROM children WHERE batch_id = ?"
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
        before = self._live
        self._live_text = text
        self._live = live_from_json(text) if text is not None else Live()
        if before.unsteerable != self._live.unsteerable:
            return set(self._fixed)
        old, new = before.children, self._live.children
        return {cid for cid in old.keys() | new.keys() if old.get(cid) != new.get(cid)}

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
                f"SELECT {self._fixed_columns} FROM children WHERE batch_id = ?",
                (self.batch_id,),
            ).fetchall()
        else:
            marks = ", ".join("?" * len(ids))
            rows = self._conn.execute(
                f"SELECT {self._fixed_columns} FROM children"
                f" WHERE batch_id = ? AND id IN ({marks})",
                (self.batch_id, *ids),
            ).fetchall()
        for r in rows:
            self._fixed[r[1]] = r

    def _alive_or_abandoned(self, info: BatchInfo, mutable: list[tuple[Any, ...]]) -> BatchInfo:
        """A running batch whose owner is gone is abandoned, its time stopped at the last
        thing recorded of it, its heartbeat or a child's (as records/reader.py has it)."""
        if info.status is not BatchStatus.RUNNING:
            return info
        if self._owner_checked == 0.0 or not self._owner_alive:
            self._owner_checked = time.monotonic()
            self._owner_alive = process_matches(info.owner_pid, info.owner_start)
        if self._owner_alive:
            return info
        seen = (*self._raw.values(), *mutable)  # as last read, and written since
        child = max((max(m[9] or 0.0, m[16] or 0.0) for m in seen), default=0.0)
        last = max(info.heartbeat_ts or 0.0, child)
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
            if r.id in self._events.by_policy:
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
