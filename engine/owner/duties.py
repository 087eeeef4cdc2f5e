"""The owner's duties beside the batch: a heartbeat in the batch row, and client requests.

One small thread wakes every POLL_S: it stamps the heartbeat every HEARTBEAT_EVERY_S and applies
the requests other processes recorded (`flightdeck steer/stop`, an attached TUI: commands,
engine/commands.py). Requests are read and applied in slices (at most SLICE a round, and the
heartbeat looked at after each one), so thousands of them pending never hold the heartbeat
back: a client would take a silent owner for a dead one. Polling the database is one indexed
read of a WAL snapshot, cheap at this rate, and works on filesystems that give no change events
(a network share) as well as on a local disk.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

from flightdeck.engine.commands import Nudge, Steer
from flightdeck.engine.records import schema
from flightdeck.engine.records.liveness import HEARTBEAT_EVERY_S
from flightdeck.engine.records.requests import (
    Refusal,
    RequestRow,
    RequestState,
    pending_requests,
    recorded_controls,
)
from flightdeck.engine.records.store import Store
from flightdeck.engine.sanitize import one_line

__all__ = ["POLL_S", "SLICE", "OwnerDuties"]

log = logging.getLogger(__name__)

POLL_S = 0.1  # a stop from another terminal lands well within a second
SLICE = 200  # requests read and applied in one round at most


class OwnerDuties:
    """Heartbeat and request polling for one batch, on a thread of its own."""

    def __init__(
        self,
        db_path: Path,
        batch_id: str,
        store: Store,
        apply: Callable[[RequestRow], None],
        clock: Callable[[], float],
        *,
        poll_s: float = POLL_S,
        heartbeat_s: float = HEARTBEAT_EVERY_S,
    ) -> None:
        self._db_path = db_path
        self._batch_id = batch_id
        self._store = store
        self._apply = apply
        self._clock = clock
        self._poll_s = poll_s
        self._heartbeat_s = heartbeat_s
        self._seen = 0  # the highest request id handed to `apply`
        self._last_beat = float("-inf")
        self._stop = threading.Event()
        self._lock = threading.Lock()  # one round at a time (the thread's, or `drain`'s)
        self._conn: sqlite3.Connection | None = None
        self._thread = threading.Thread(target=self._run, name="flightdeck-owner", daemon=True)

    def start(self) -> None:
        """Beat once and take a first slice of what is already pending, then keep at it on the
        thread."""
        self.poll_now()
        self._thread.start()

    def stop(self) -> None:
        """End the thread; idempotent. Requests still pending stay recorded."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def drain(self) -> None:
        """Rounds until no request is left pending (the batch is closing)."""
        while len(self.poll_now()) == SLICE:
            pass

    def poll_now(self) -> list[RequestRow]:
        """One round: the heartbeat when due, and a slice of the new pending requests applied
        (at most SLICE), the heartbeat looked at again after each."""
        with self._lock:
            self._beat()
            try:
                found = pending_requests(self._connection(), self._batch_id, self._seen, SLICE)
            except sqlite3.Error as exc:  # busy past the timeout, a file gone: next round
                log.warning("cannot read client requests: %s", exc)
                return []
            for row in found:
                self._seen = row.id
                self._take(row)
                self._beat()
            return found

    def _beat(self) -> None:
        now = self._clock()
        if now - self._last_beat >= self._heartbeat_s:
            self._last_beat = now
            self._store.heartbeat(self._batch_id, now)

    def _take(self, row: RequestRow) -> None:
        try:
            if isinstance(row.command, Steer | Nudge) and self._already_applied(row):
                return
            self._apply(row)
        except Exception as exc:  # one bad request must not end the polling
            log.exception("applying client request %d failed", row.id)
            # Settled, so a client waiting on it hears why instead of waiting for ever.
            self._refuse(row.id, f"the owner could not apply it: {one_line(str(exc), 200)}")

    def _refuse(self, request_id: int, reason: str) -> None:
        self._store.settle_request(
            self._batch_id,
            request_id,
            RequestState.REFUSED,
            self._clock(),
            reason=reason,
            refusal=Refusal.ERROR,
        )

    def _already_applied(self, row: RequestRow) -> bool:
        """A steer an earlier owner applied but died before marking: marked now, with the
        receipts it made, never applied twice (its receipts are settled by `resume`)."""
        controls = recorded_controls(self._connection(), self._batch_id, row.id)
        if not controls:
            return False
        self._store.settle_request(
            self._batch_id, row.id, RequestState.APPLIED, self._clock(), control_ids=controls
        )
        return True

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            self._conn = schema.connect(f"{self._db_path.resolve().as_uri()}?mode=ro", uri=True)
        return self._conn

    def _run(self) -> None:
        wait = self._poll_s
        while not self._stop.wait(wait):
            try:
                # A full slice: more are waiting, the next round comes at once.
                wait = 0.0 if len(self.poll_now()) == SLICE else self._poll_s
            except Exception:  # the heartbeat must go on, or the batch looks abandoned
                log.exception("a round of the owner's duties failed")
                wait = self._poll_s
