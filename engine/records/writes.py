"""What the store's writer thread is handed: writes and callbacks, and how a run of writes goes
to SQLite (merged, coalesced, several rows to a statement, text made valid Unicode)."""

from __future__ import annotations

import functools
import itertools
import logging
import queue
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from flightdeck.engine.model.record import record
from flightdeck.engine.records.rows import INSERT_EVENT, UPSERT_CHILD, UPSERT_CONTROL, UPSERT_QUEUED
from flightdeck.engine.sanitize import valid_text

log = logging.getLogger("flightdeck.engine.records.store")  # the writer's lines, as its own


@record
class Write:
    what: str  # for the log line when it fails; never the parameters (they may be large)
    sql: str
    params: Sequence[Any]
    many: bool = False
    key: tuple[str, str] | None = None  # (batch, child) for update_child coalescing
    # Runs like a `Then` queued right after this write, so a child's final row and its
    # callback are one queued item; it is told whether the write was committed. A write
    # coalesced away still has its callback run, told what became of the one that replaced it.
    then: Callable[[bool], object] | None = None
    # Writes of one `Together` share a group: retried apart from the rest of their batch (a
    # bad write elsewhere in it), they still commit in one transaction.
    group: int | None = None
    # Its parameters, made on the writer thread when it is committed (`params` is empty until
    # then): never made at all when a later write of the same child supersedes it (`coalesce`).
    # None made: nothing to write after all.
    later: Callable[[], Sequence[Any] | None] | None = None
    of: Write | None = None  # the queued write this one was made from (`made`)


@record
class Then:
    """Runs `call` on the writer thread once every write queued before it has been committed
    (or, for a write that can never succeed, given up on and logged)."""

    call: Callable[[], object]


@record
class Together:
    """Writes committed in one transaction: one item on the queue, which the writer never
    splits between two (as it may two items, at its batch's size)."""

    writes: tuple[Write, ...]


Op = Write | Then | None  # None: stop the writer
Queued = Op | Together  # what the writer's queue holds


def take(items: queue.SimpleQueue[Queued], rows: int) -> list[Op]:
    """What the writer commits next: the next item (waited for), then what else is queued, up
    to about `rows` rows; a `Together` whole."""
    ops: list[Op] = []
    taken = 0
    item = items.get()
    while True:
        if isinstance(item, Together):
            ops += item.writes
            taken += len(item.writes)
        else:
            ops.append(item)
            taken += len(item.params) if isinstance(item, Write) and item.many else 1
        if taken >= rows:
            return ops
        try:
            item = items.get_nowait()
        except queue.Empty:
            return ops


# Row inserts that may go several rows to a statement: sqlite3 releases the interpreter lock
# around every step and `executemany` steps once per row, so with many busy worker threads the
# writer waited for the lock after each row. One multi-row INSERT is one step. Chunks come in a
# few fixed sizes, so sqlite3's statement cache keeps them.
MULTI_ROW = frozenset({UPSERT_CHILD, UPSERT_QUEUED, UPSERT_CONTROL, INSERT_EVENT})
CHUNKS = (64, 16, 4, 1)


@functools.lru_cache(maxsize=32)
def rows_sql(sql: str, rows: int) -> str:
    """`sql` (an INSERT with one VALUES tuple) inserting `rows` rows."""
    head, values, tail = sql.partition(" VALUES ")
    # The tuple's own ")", not the first: a value may be a subquery (none holds a "(" or ")"
    # in a string literal, which this count would take for one).
    depths = itertools.accumulate((c == "(") - (c == ")") for c in tail)
    end = next(i for i, depth in enumerate(depths) if depth == 0)
    one, rest = tail[: end + 1], tail[end + 1 :]
    return f"{head}{values}{', '.join([one] * rows)}{rest}"


def insert_rows(conn: sqlite3.Connection, sql: str, params: list[Sequence[Any]]) -> None:
    """Insert rows in order, as few statements as the chunk sizes allow."""
    i, n = 0, len(params)
    for size in CHUNKS:
        while n - i >= size:
            chunk = params[i : i + size]
            # Flattened in C: a comprehension ran bytecode for each of 27 values a row.
            conn.execute(rows_sql(sql, size), list(itertools.chain.from_iterable(chunk)))
            i += size


def runs(writes: list[Write]) -> Iterator[tuple[str, list[Sequence[Any]]]]:
    """Consecutive writes of one statement, merged: one executemany instead of a call each."""
    sql: str | None = None
    params: list[Sequence[Any]] = []
    for write in writes:
        if write.sql != sql:
            if sql is not None:
                yield sql, params
            sql, params = write.sql, []
        if write.many:
            params.extend(write.params)
        else:
            params.append(write.params)
    if sql is not None:
        yield sql, params


def made(writes: list[Write]) -> tuple[list[Write], list[Write]]:
    """`writes` with the parameters of each deferred one (`Write.later`) made now (left out
    when there is nothing to write); and apart, the deferred ones whose parameters could not be
    made (each logged)."""
    ready: list[Write] = []
    broken: list[Write] = []
    for write in writes:
        if write.later is None:
            ready.append(write)
            continue
        try:
            params = write.later()
        except Exception:  # a bug in what builds the row: it costs that row, not the others
            log.exception("flightdeck store: %s could not be made", write.what)
            broken.append(write)
            continue
        if params is None:
            continue
        ready.append(
            Write(
                write.what,
                write.sql,
                params,
                key=write.key,
                then=write.then,
                group=write.group,
                of=write,
            )
        )
    return ready, broken


def scrubbed(write: Write) -> Write:
    """The same write with every string made valid Unicode (lone surrogates become U+FFFD)."""

    def row(params: Sequence[Any]) -> tuple[Any, ...]:
        return tuple(valid_text(v) if isinstance(v, str) else v for v in params)

    params = [row(p) for p in write.params] if write.many else row(write.params)
    return Write(write.what, write.sql, params, write.many, write.key)


def units(writes: list[Write]) -> Iterator[list[Write]]:
    """`writes` as they are retried one transaction at a time: each alone, but those of one
    group together (they are queued, so taken, one after another)."""
    unit: list[Write] = []
    for write in writes:
        if unit and (write.group is None or write.group != unit[-1].group):
            yield unit
            unit = []
        unit.append(write)
    if unit:
        yield unit


def fates(writes: list[Write], kept: list[Write], failed: list[Write]) -> dict[int, bool]:
    """Whether each write (by id) is told it was committed: its own fate, or, coalesced away,
    whether a later row of its child was (a row is whole: a later one holds it)."""
    lost = {id(w.of or w) for w in failed}
    attempted = {id(w) for w in kept}
    landed: set[tuple[str, str]] = set()  # children a later row of which was committed
    told: dict[int, bool] = {}
    for write in reversed(writes):
        if id(write) in attempted:
            told[id(write)] = ok = id(write) not in lost
            if ok and write.key is not None:
                landed.add(write.key)
        else:
            told[id(write)] = write.key in landed
    return told


def coalesce(writes: list[Write]) -> list[Write]:
    """Drop update_child writes superseded by a later one for the same child in this batch.
    One of a `Together` is kept: its events need it (a later row may be left out when it is
    made, and one retried alone may fail). So is the last row given whole before a child's
    last row that is made at the commit (`Write.later`): that one may be left out then."""
    last: dict[tuple[str, str], int] = {}
    whole: dict[tuple[str, str], int] = {}  # the last of each child's rows not made later
    keyed = 0
    for i, write in enumerate(writes):
        if write.key is not None:
            last[write.key] = i
            if write.later is None:
                whole[write.key] = i
            keyed += 1
    if len(last) == keyed:
        return writes
    return [
        w
        for i, w in enumerate(writes)
        if w.key is None
        or w.group is not None
        or last[w.key] == i
        or (whole.get(w.key) == i and writes[last[w.key]].later is not None)
    ]
