"""`StoreView`: a batch whose owner is another process, as the TUI's `EngineView` reads and
drives it: snapshots read from the store (reading.py), commands sent through it (client.py).

A watcher thread (watch.py) wakes on every change to the database's WAL, and at least every
`poll_s`; each wake asks SQLite's `data_version` whether another connection committed, and only
then reads. The discrete facts found by a read are published to subscribers on that thread. A
command the owner refuses is logged as a warning (the TUI shows it); one that cannot be sent at
all (an unknown child, a message too long) raises CommandError, as it does in-process, and so
does an accept or discard the owner refuses: those are waited for, as in-process.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flightdeck.engine.attached.client import (
    MOOT_ONCE_ENDED,
    Client,
    OwnerGone,
    batch_keys,
    ended_first,
)
from flightdeck.engine.attached.hints import command_line
from flightdeck.engine.attached.reading import BatchReading
from flightdeck.engine.attached.rework import review, send_retry
from flightdeck.engine.attached.spawn import OwnerFailed
from flightdeck.engine.attached.watch import Waker
from flightdeck.engine.commands import Accept, Command, CommandError, Discard, Retry
from flightdeck.engine.errors import BatchEnded, StoreError
from flightdeck.engine.model import BatchStatus, ChildRow, EngineEvent, Snapshot, batch_ended
from flightdeck.engine.records.faults import disk_full
from flightdeck.engine.records.liveness import STALE_AFTER_S
from flightdeck.engine.records.reader import require_state
from flightdeck.engine.records.rows import BatchInfo
from flightdeck.engine.records.schema import connect
from flightdeck.engine.sanitize import one_line

__all__ = ["DB_FILES", "MIN_READ_S", "Listener", "StoreView"]

Listener = Callable[[EngineEvent], None]
DB_FILES = ("flightdeck.db", "flightdeck.db-wal")
# Reads at most this often: the owner records running children every 0.1 s, but a batch of
# instant children commits many times that; each read costs this process (and the machine).
MIN_READ_S = 0.05
# Reads take at most this share of the time: a read of thousands of changing rows costs 100 ms
# of CPU, and the GIL it holds meanwhile is the one the screen's keys wait on.
READ_SHARE = 0.25

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
        require_state(db)
        self.db = db
        self.batch_id = batch_id
        self.clock = clock
        self._conn = connect(f"{db.resolve().as_uri()}?mode=ro", uri=True)
        version = int(self._conn.execute("PRAGMA user_version").fetchone()[0])
        self._reading = BatchReading(self._conn, batch_id, version, clock)
        self._client = Client(db, batch_id)
        self._pending: set[int] = set()  # requests this view sent that the owner has not settled
        self._lock = threading.Lock()  # one read at a time; snapshots are swapped whole
        self._data_version: int | None = None
        self._subscribers: tuple[Listener, ...] = ()
        self._sub_lock = threading.Lock()
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
                max_share=READ_SHARE,
            ).start()

    @property
    def info(self) -> BatchInfo | None:
        """The batch's row as last read (abandoned once its owner is found gone)."""
        return self._reading.info

    def close(self) -> None:
        """Stop watching and close the connections; idempotent."""
        if self._waker is not None:
            self._waker.close()
        with self._lock:
            self._conn.close()
            self._client.close()

    # --- EngineView ---------------------------------------------------------------------------

    can_detach = True  # the owner is another process: the batch runs on without this one

    @property
    def read_only(self) -> str | None:
        info = self.info
        if info is None or info.status is BatchStatus.RUNNING:
            return None
        if info.status is BatchStatus.ABANDONED:
            return self._abandoned(info.owner_pid)
        return batch_ended(info.id, info.status)

    def _abandoned(self, pid: int) -> str:
        return (
            f"batch {self.batch_id} is abandoned (its owner, pid {pid}, is gone): "
            "nothing would apply a steer or a stop; "
            f"{command_line(self.db.parent, 'resume', self.batch_id)} runs it on"
        )

    def snapshot(self) -> Snapshot:
        snap = self._snapshot
        if snap.status is BatchStatus.RUNNING:
            now = self.clock()
            return dataclasses.replace(snap, now=now, problem=self._silent(now) or snap.problem)
        if snap.status is BatchStatus.ABANDONED and disk_full(self.db.parent):
            # An owner that gave up on a full disk could record neither its end nor why (its
            # owner.log is on that disk too): else all this view would say is that it died.
            resume = command_line(self.db.parent, "resume", self.batch_id)
            full = (
                f"the disk of {self.db.parent} is full: the batch's owner is gone and nothing "
                f"can record its end; free some space, then {resume} runs it on"
            )
            return dataclasses.replace(snap, problem=full)
        return snap

    def _silent(self, now: float) -> str | None:
        """An owner alive but silent (stopped with SIGSTOP or a debugger, its disk hung): said
        in the banner, not a screen frozen as if all were well. None while it heartbeats."""
        info = self.info
        beat = None if info is None else info.heartbeat_ts
        if info is None or beat is None or now - beat <= STALE_AFTER_S:
            return None
        why = "stopped (SIGSTOP, a debugger) or its disk hangs"
        if disk_full(self.db.parent):  # the owner says so in its owner.log, which we cannot see
            why = f"the disk of {self.db.parent} is full, so it cannot record"
        return (
            f"the owner (pid {info.owner_pid}) has written nothing for {int(now - beat)} s: "
            f"{why}; nothing here moves, and steers and stops wait, until it goes on"
        )

    def transcript_path(self, child_id: str) -> Path | None:
        row = self._reading.row(child_id)
        return None if row is None else Path(row.transcript)

    def secrets(self) -> tuple[str, ...]:
        """The keys this process holds under the names the batch's settings read them from (the
        owner's own, headers' values among them, are not stored)."""
        return batch_keys(self.info)

    def subscribe(self, fn: Listener) -> Callable[[], None]:
        with self._sub_lock:
            self._subscribers = (*self._subscribers, fn)

        def unsubscribe() -> None:
            with self._sub_lock:
                self._subscribers = tuple(s for s in self._subscribers if s is not fn)

        return unsubscribe

    def send(self, command: Command) -> None:
        """Record `command` for the owner, checked as the owner checks it: CommandError (the
        TUI says why, nothing sent) for one that cannot be applied. A store that cannot take it
        (the disk is full) is said as a warning, which the TUI shows. With no owner alive, a
        retry starts one again. An accept or discard returns once applied (both take a while:
        the TUI sends them off its event loop). With its owner dead, any other command is
        refused (CommandError, with the command that runs the batch on): nothing would apply
        it, as the keys already say (`read_only`). A stop, pause or continue of a batch that
        has ended since the key is no failure: said as a warning, nothing sent."""
        try:
            if isinstance(command, Accept | Discard):
                self._review(command)
                return
            owner = self._client.owner()
            if isinstance(command, Retry) and not owner.alive:
                rid, _ = send_retry(self.db, self.batch_id, command)
            elif owner.status is BatchStatus.ABANDONED:  # died since the key (a dialog open)
                raise CommandError(self._abandoned(owner.pid))
            else:
                rid = self._client.send(command)
        except BatchEnded as exc:
            if command.kind not in MOOT_ONCE_ENDED:
                raise
            # Ended after the key was read: nothing left to act on, a notice (as `flightdeck
            # stop` says it), not a failure that keeps the TUI from going on (stop all, quit).
            verb = command.kind.split("_")[0]  # stop, pause or continue
            log.warning("%s: nothing left to %s", one_line(str(exc)), verb)
            return
        except (LookupError, StoreError, OwnerFailed) as exc:
            log.warning("%s not sent: %s", command.title, str(exc).strip("'\""))
            return
        with self._lock:
            self._pending.add(rid)

    def _review(self, command: Accept | Discard) -> None:
        """An accept or discard applied as `flightdeck merge` and `discard` apply it: by the
        owner while one lives, else here. Refused (a conflict), CommandError, as in-process:
        the TUI said it was merged while the owner refused it. The snapshot read after has
        what was decided, which the TUI says (an accept's commit)."""
        try:
            review(self.db, self.batch_id, command)
        except (OwnerGone, LookupError, StoreError) as exc:  # not applied: said so, not warned
            raise CommandError(str(exc).strip("'\"")) from None
        self.refresh()

    # --- reading --------------------------------------------------------------------------------

    def refresh(self) -> bool:
        """Read what another connection committed since the last read; True if anything
        changed. Called by the watcher thread; tests and benchmarks may call it directly."""
        events: list[EngineEvent] = []
        with self._lock:
            version = int(self._conn.execute("PRAGMA data_version").fetchone()[0])
            if version == self._data_version and not self._reading.owner_died():
                return False
            # Read before the rows: a stop refused as come after its children ended is settled
            # after their final rows (control/endedfirst.py), which the rows then have (an
            # older owner's refusal, which says not why, is judged on them).
            requests = self._requests() if self._pending else []
            snap = self._read(events)
            if snap is None:
                return False
            self._snapshot = snap
            self.reads += 1
            refused = self._refused(requests, snap.children)
        for event in events:
            self._publish(event)
        for what, reason in refused:
            if what is None:  # it came after its children ended: a notice, no failure
                log.warning("%s", reason)
            else:
                log.warning("%s refused: %s", what, reason)
        return True

    def _read(self, events: list[EngineEvent] | None = None) -> Snapshot | None:
        version = int(self._conn.execute("PRAGMA data_version").fetchone()[0])
        snap = self._reading.read(events)
        self._data_version = version  # a read that failed is tried again at the next wake
        return None if snap is None else dataclasses.replace(snap, version=version)

    def _requests(self) -> list[tuple[Any, ...]]:
        """This view's requests not known to be settled, as they stand now."""
        ids = sorted(self._pending)
        marks = ", ".join("?" * len(ids))
        return self._conn.execute(
            "SELECT id, kind, state, reason, child_ids, refusal FROM requests"
            f" WHERE batch_id = ? AND id IN ({marks})",
            (self.batch_id, *ids),
        ).fetchall()

    def _refused(
        self, requests: list[tuple[Any, ...]], children: tuple[ChildRow, ...]
    ) -> list[tuple[str | None, str]]:
        """Of `requests`, those the owner refused, with the reason (and no kind for one that
        came after its children ended: `ended_first`); the settled ones are not asked again."""
        out: list[tuple[str | None, str]] = []
        for rid, kind, state, reason, child_ids, refusal in requests:
            if state != "pending":
                self._pending.discard(rid)
            if state == "refused":
                ids = json.loads(child_ids or "[]")
                moot = ended_first(str(kind), ids, refusal, lambda: children)
                out.append((None if moot else str(kind).replace("_", " "), str(reason or "")))
        return out

    def _publish(self, event: EngineEvent) -> None:
        for fn in self._subscribers:
            try:
                fn(event)
            except Exception:  # a broken subscriber must not stop the watching
                log.exception("attach subscriber failed on %s", type(event).__name__)
