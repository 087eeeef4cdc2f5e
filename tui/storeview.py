"""`StoreView`: the `EngineView` of a batch whose owner is another process, read from the store.

A watcher thread (watch.py) wakes on every change to the database's WAL, and at least every
`poll_s`; each wake asks SQLite's `data_version` whether another connection committed, and only
then reads. A read fetches the raw rows (cheap: SQLite's C loop) and builds a `ChildRow` only
for the rows that changed, so a 1,000-child batch costs little more than its running ones.
The discrete facts (a child started or finished, a steer settled, the batch finished) are the
differences between two reads, published to subscribers on the watcher thread.

Commands go into the store's requests table (records/requests.py), which the owner applies; a
command it refuses, or one that cannot be recorded, is logged as a warning (the TUI shows it).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from decimal import Decimal
from pathlib import Path
from typing import Any

from flightdeck.engine.errors import StoreError
from flightdeck.engine.inputs.settings import DEFAULT_LOOP_STEER
from flightdeck.engine.inputs.settings.stored import settings_from_json
from flightdeck.engine.limits import changed, limits_from_json, limits_of
from flightdeck.engine.model import (
    BatchFinished,
    BatchStatus,
    ChildFinished,
    ChildRow,
    ChildStarted,
    ChildStatus,
    EngineEvent,
    GroupFinished,
    Limits,
    LoopEvidence,
    Snapshot,
    SteerReceipt,
    SteerSettled,
    SteerState,
    Totals,
)
from flightdeck.engine.records import requests
from flightdeck.engine.records.forecast import lost_cost
from flightdeck.engine.records.liveness import process_matches
from flightdeck.engine.records.loops import evidence_from_json, policy_receipt
from flightdeck.engine.records.meter import totals_of
from flightdeck.engine.records.reader import depth_of
from flightdeck.engine.records.rows import (
    BATCH_COLUMNS,
    BATCH_COLUMNS_V1,
    BATCH_COLUMNS_V2,
    CHILD_COLUMNS_NO_RESULT,
    RECEIPT_COLUMNS,
    BatchInfo,
    batch_info,
    child_row,
    receipt,
)
from flightdeck.engine.records.schema import SCHEMA_VERSION, connect
from flightdeck.tui.view import Listener
from flightdeck.tui.watch import Waker

DB_FILES = ("flightdeck.db", "flightdeck.db-wal")
# The children's columns a run changes, in CHILD_COLUMNS order after the id: status (index 7 of
# CHILD_COLUMNS) to cost_usd (20), then started_ts, finished_ts, error (22-24).
_MUTABLE = (
    "id, status, api_calls, tool_calls, retries, turns, current_tool, tool_started_ts, "
    "activity, last_activity_ts, tokens_in, tokens_out, cache_read, cache_write, cost_usd, "
    "started_ts, finished_ts, error"
)
_TERMINAL = frozenset(s.value for s in ChildStatus if s.terminal)
# Reads at most this often: the owner records running children every 0.1 s, but a batch of
# instant children commits many times that; each read costs this process (and the machine).
MIN_READ_S = 0.05
OWNER_CHECK_S = 1.0  # a killed owner changes nothing in the store: its pid is looked at this often

log = logging.getLogger(__name__)  # under "flightdeck": the TUI shows warnings as notifications


class StoreView:
    """`EngineView` over the store of a batch run by an owner process elsewhere."""

    def __init__(
        self,
        db: Path,
        batch_id: str,
        *,
        poll_s: float = 0.25,
        watch: bool = True,
        force_polling: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.db = db
        self.batch_id = batch_id
        self.clock = clock
        self._conn = connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
        version = int(self._conn.execute("PRAGMA user_version").fetchone()[0])
        # A version 1 or 2 file (an old state folder, never opened to write since) reads the
        # same, without what later versions added.
        self._batch_columns = {SCHEMA_VERSION: BATCH_COLUMNS, 2: BATCH_COLUMNS_V2}.get(
            version, BATCH_COLUMNS_V1
        )
        self._owner_checked = 0.0
        self._owner_alive = True
        self._pending: set[int] = set()  # requests this view sent that the owner has not settled
        self._lock = threading.Lock()  # one read at a time; snapshots are swapped whole
        self._data_version: int | None = None
        self._parents: dict[str, str] = {}  # a delegate's parent, from the "delegate" events
        self._events_seen = 0  # the last event read (delegate and loop events: _read_events)
        self._lost_cost: Decimal | None = Decimal(0)  # what attempts lost with owners cost
        self._lost_read = False
        self._raw: dict[str, tuple[Any, ...]] = {}  # each child's _MUTABLE columns, as last read
        self._fixed: dict[str, tuple[Any, ...]] = {}  # each child's full row, first read
        self._totals: Totals | None = None
        self._rows: dict[str, ChildRow] = {}
        self._units_told: set[str] = set()  # groups whose unit result was published
        self._order: tuple[ChildRow, ...] = ()
        self._receipts: dict[int, SteerReceipt] = {}
        # Each child's loop evidence, from the owner's "loop" events (the last one wins).
        self._loops: dict[str, LoopEvidence] = {}
        self._looped: dict[str, float] = {}  # when each was last flagged (kept once cleared)
        self._nodes: dict[str, str] = {}  # where each ran, on a cluster ("node" events)
        self._by_policy: set[int] = set()  # steer receipts a loop policy sent, not the operator
        self._subscribers: tuple[Listener, ...] = ()
        self._sub_lock = threading.Lock()
        self.info: BatchInfo | None = None
        self._limits: tuple[tuple[str | None, int], Limits | None] | None = None
        self.reads = 0  # reads that found a change (for the benchmark)
        first = self._read()
        if first is None:
            self._conn.close()
            raise LookupError(f"no batch {batch_id!r} in {db}")
        self._snapshot = first
        self._waker: Waker | None = None
        if watch:
            self._waker = Waker(
                db.parent,
                DB_FILES,
                self.refresh,
                poll_s=poll_s,
                force_polling=force_polling,
                min_interval_s=MIN_READ_S,
            ).start()

    def close(self) -> None:
        """Stop watching and close the connection; idempotent."""
        if self._waker is not None:
            self._waker.close()
        with self._lock:
            self._conn.close()

    # --- EngineView ---------------------------------------------------------------------------

    can_detach = True  # the owner is another process: the batch runs on without this one

    @property
    def read_only(self) -> str | None:
        info = self.info
        if info is None or info.status is BatchStatus.RUNNING:
            return None
        if info.status is BatchStatus.ABANDONED:
            return (
                f"batch {info.id} is abandoned (its owner, pid {info.owner_pid}, is gone): "
                f"nothing would apply a steer or a stop; flightdeck resume {info.id} runs it on"
            )
        return f"batch {info.id} has ended ({info.status.value}): nothing left to steer or stop"

    def snapshot(self) -> Snapshot:
        snap = self._snapshot
        if snap.status is BatchStatus.RUNNING:
            return _replace_now(snap, self.clock())
        return snap

    @property
    def loop_steer(self) -> str:
        # The owner's settings, as it started with them (not a flightdeck.toml changed since).
        info = self.info
        if info is None or not info.settings_json:
            return DEFAULT_LOOP_STEER
        return settings_from_json(info.settings_json).canned.loop

    def transcript_path(self, child_id: str) -> Path | None:
        row = self._rows.get(child_id)
        return None if row is None else Path(row.transcript)

    def subscribe(self, fn: Listener) -> Callable[[], None]:
        with self._sub_lock:
            self._subscribers = (*self._subscribers, fn)

        def unsubscribe() -> None:
            with self._sub_lock:
                self._subscribers = tuple(s for s in self._subscribers if s is not fn)

        return unsubscribe

    def steer(self, child_ids: Sequence[str], message: str, now: bool) -> None:
        self._send(
            "steer",
            lambda: requests.submit_steer(self.db, self.batch_id, child_ids, message, now=now),
        )

    def stop(self, child_ids: Sequence[str]) -> None:
        self._send("stop", lambda: requests.submit_stop(self.db, self.batch_id, child_ids))

    def stop_all(self) -> None:
        self._send("stop all", lambda: requests.submit_stop_all(self.db, self.batch_id))

    def set_limits(self, change: Mapping[str, object]) -> None:
        """Ask the owner to change the live limits; LimitError (nothing sent) for a bad one."""
        limits = self._snapshot.limits
        if limits is not None:
            changed(limits, change)  # the owner checks again; this says why before sending
        self._send(
            "limits",
            lambda: requests.submit(
                self.db, self.batch_id, requests.RequestKind.LIMITS, payload=dict(change)
            ),
        )

    def pause(self, child_ids: Sequence[str], resume: bool) -> None:
        kind = requests.RequestKind.CONTINUE if resume else requests.RequestKind.PAUSE
        self._send(kind.value, lambda: requests.submit(self.db, self.batch_id, kind, child_ids))

    def pause_admission(self, on: bool) -> None:
        kind = (
            requests.RequestKind.PAUSE_ADMISSION if on else requests.RequestKind.CONTINUE_ADMISSION
        )
        what = "pause admission" if on else "continue admission"
        self._send(what, lambda: requests.submit(self.db, self.batch_id, kind))

    def _send(self, what: str, submit: Callable[[], int]) -> None:
        """Record a command for the owner; one that cannot be recorded (the batch ended in the
        meantime, the disk is full) is said as a warning, which the TUI shows."""
        try:
            rid = submit()
        except (LookupError, ValueError, StoreError) as exc:
            log.warning("%s not sent: %s", what, str(exc).strip("'\""))
            return
        with self._lock:
            self._pending.add(rid)

    # --- reading --------------------------------------------------------------------------------

    def refresh(self) -> bool:
        """Read what another connection committed since the last read; True if anything
        changed. Called by the watcher thread; tests and benchmarks may call it directly."""
        events: list[EngineEvent] = []
        with self._lock:
            version = int(self._conn.execute("PRAGMA data_version").fetchone()[0])
            if version == self._data_version and not self._owner_died():
                return False
            snap = self._read(events)
            if snap is None:
                return False
            self._snapshot = snap
            self.reads += 1
            refused = self._refused() if self._pending else []
        for event in events:
            self._publish(event)
        for what, reason in refused:
            log.warning("%s refused: %s", what, reason)
        return True

    def _owner_died(self) -> bool:
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

    def _refused(self) -> list[tuple[str, str]]:
        """This view's requests the owner refused since the last read, with the reason."""
        ids = sorted(self._pending)
        marks = ", ".join("?" * len(ids))
        rows = self._conn.execute(
            f"SELECT id, kind, state, reason FROM requests WHERE batch_id = ? AND id IN ({marks})",
            (self.batch_id, *ids),
        ).fetchall()
        out = []
        for rid, kind, state, reason in rows:
            if state != "pending":
                self._pending.discard(rid)
            if state == "refused":
                out.append((str(kind).replace("_", " "), str(reason or "")))
        return out

    def _read(self, events: list[EngineEvent] | None = None) -> Snapshot | None:
        conn = self._conn
        conn.execute("BEGIN")
        try:
            self._data_version = int(conn.execute("PRAGMA data_version").fetchone()[0])
            found = conn.execute(
                f"SELECT {self._batch_columns} FROM batches WHERE id = ?", (self.batch_id,)
            ).fetchone()
            if found is None:
                return None
            # What changes as a child runs; its goal, route, transcript path ... are read once.
            mutable = conn.execute(
                f"SELECT {_MUTABLE} FROM children WHERE batch_id = ? ORDER BY seq, id",
                (self.batch_id,),
            ).fetchall()
            if not self._lost_read:  # written when an owner resumes, before it runs: read once
                lost = conn.execute(
                    "SELECT ts, child_id, kind, detail FROM events "
                    "WHERE batch_id = ? AND kind = 'lost_attempt'",
                    (self.batch_id,),
                ).fetchall()
                self._lost_cost, self._lost_read = lost_cost(lost), True
            new_ids = [m[0] for m in mutable if m[0] not in self._fixed]
            if new_ids:
                self._read_fixed(new_ids)
            relinked = self._read_events()
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
        receipts = self._receipts_of(controls, events)
        by_child: dict[str, list[SteerReceipt]] = {}
        for r in receipts:
            by_child.setdefault(r.child_id, []).append(r)
        old_raw, old_rows, fixed = self._raw, self._rows, self._fixed
        new_raw: dict[str, tuple[Any, ...]] = {}
        new_rows: dict[str, ChildRow] = {}
        order: list[ChildRow] = []
        done: int | None = None  # counted only when a child finished since the last read
        changed = len(mutable) != len(old_rows)
        for m in mutable:
            cid = m[0]
            steers = tuple(by_child.get(cid, ())) if by_child else ()
            row = old_rows.get(cid)
            if row is None or old_raw.get(cid) != m or row.steers != steers or cid in relinked:
                f = fixed[cid]
                # Back into CHILD_COLUMNS order, for rows.child_row.
                full = (*f[:7], *m[1:15], f[21], *m[15:18], None, f[26])
                before = row
                row = child_row(full, steers)
                parent, loop = self._parents.get(cid), self._loops.get(cid)
                looped, node = self._looped.get(cid), self._nodes.get(cid)
                if parent is not None or looped is not None or node is not None:
                    depth = depth_of(cid, self._parents) if parent is not None else 0
                    row = dataclasses.replace(
                        row, parent=parent, depth=depth, loop=loop, looped_ts=looped, node=node
                    )
                changed = True
                if events is not None:
                    if done is None and row.status.terminal:
                        done = sum(1 for x in mutable if x[1] in _TERMINAL)
                    _facts(before, row, done or 0, len(mutable), events)
            new_raw[cid] = m
            new_rows[cid] = row
            order.append(row)
        self._raw, self._rows, self._order = new_raw, new_rows, tuple(order)
        if events is not None:
            self._units(order, events)
        if (
            events is not None
            and was is not None
            and was.status is BatchStatus.RUNNING
            and info.status is not BatchStatus.RUNNING
        ):
            events.append(BatchFinished(info.id, info.status))
        rows = self._order
        # A heartbeat or a request: no row changed, nor did the totals.
        if changed or self._totals is None:
            self._totals = totals_of(rows)
        totals = self._totals
        return Snapshot(
            batch_id=info.id,
            status=info.status,
            started_ts=info.created_ts,
            now=info.finished_ts if info.finished_ts is not None else self.clock(),
            children=rows,
            totals=totals,
            pool_size=info.pool_size,
            max_cost_usd=info.max_cost_usd,
            version=self._data_version,
            finished_ts=info.finished_ts,
            lost_cost_usd=self._lost_cost,
            held=info.held if info.status is BatchStatus.RUNNING else None,
            limits=self._limits_of(info, rows),
        )

    def _read_events(self) -> set[str]:
        """What the owner keeps as events, not in the rows, recorded since the last read
        (inside the transaction): who delegated whom, the loop flags, and the loop policies'
        steers. The ids of the children whose rows must be built again."""
        found = self._conn.execute(
            "SELECT id, child_id, kind, detail FROM events WHERE batch_id = ? AND id > ?"
            " AND kind IN ('delegate', 'loop', 'loop_policy', 'node') AND child_id IS NOT NULL"
            " ORDER BY id",
            (self.batch_id, self._events_seen),
        ).fetchall()
        changed = set()
        for event_id, child_id, kind, detail in found:
            self._events_seen = int(event_id)
            child_id, detail = str(child_id), str(detail)
            if kind == "delegate":
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
        return changed

    def _limits_of(self, info: BatchInfo, rows: Sequence[ChildRow]) -> Limits | None:
        """The live limits the owner recorded, else those the batch's settings began with."""
        key = (info.limits_json, info.pool_size)
        if self._limits is None or self._limits[0] != key:
            limits: Limits | None = None
            if info.limits_json:
                limits = limits_from_json(info.limits_json)
            elif info.settings_json:
                settings = settings_from_json(info.settings_json)
                routes = dict.fromkeys(sorted({r.route for r in rows}))
                limits = limits_of(settings, routes, info.pool_size)
            self._limits = (key, limits)
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
            last = max((max(m[9] or 0.0, m[16] or 0.0) for m in mutable), default=0.0)
        return dataclasses.replace(
            info, status=BatchStatus.ABANDONED, finished_ts=max(last, info.created_ts)
        )

    def _units(self, order: list[ChildRow], events: list[EngineEvent]) -> None:
        """A group whose last member ended since the last read: its unit's result, once (as
        the engine publishes it in-process)."""
        ended = {e.row.group for e in events if isinstance(e, ChildFinished) and e.row.group}
        for group in sorted(ended - self._units_told):
            members = _unit_members(order, group)
            if all(r.status.terminal for r in members):
                self._units_told.add(group)
                events.append(GroupFinished.of(group, members))

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

    def _publish(self, event: EngineEvent) -> None:
        for fn in self._subscribers:
            try:
                fn(event)
            except Exception:  # a broken subscriber must not stop the watching
                log.exception("attach subscriber failed on %s", type(event).__name__)


def _unit_members(order: list[ChildRow], group: str) -> list[ChildRow]:
    return sorted((r for r in order if r.group == group), key=lambda r: r.seq)


def _facts(
    before: ChildRow | None, row: ChildRow, done: int, total: int, events: list[EngineEvent]
) -> None:
    """The facts between two reads of one child."""
    was = before.status if before is not None else ChildStatus.QUEUED
    # A child paused mid-run and continued has started already.
    continued = was is ChildStatus.PAUSED and before is not None and before.started_ts is not None
    if was is not ChildStatus.RUNNING and not continued and row.status is ChildStatus.RUNNING:
        events.append(ChildStarted(row.id, row.started_ts or 0.0))
    if was.live and row.status.terminal:
        events.append(ChildFinished(row, done, total))


def _replace_now(snap: Snapshot, now: float) -> Snapshot:
    return dataclasses.replace(snap, now=now)
