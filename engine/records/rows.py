"""Row mapping: the store's SQL statements, and values to and from their sqlite rows."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, NamedTuple

from flightdeck.engine.model import (
    Activity,
    BatchStatus,
    ChildRow,
    ChildStatus,
    SteerReceipt,
    SteerState,
    Usage,
)
from flightdeck.engine.money import ZERO_USD
from flightdeck.engine.records.schema import NEXT_REV

BATCH_COLUMNS = (
    "id, name, source, spec_json, workspace, state_dir, owner_pid, owner_start, pool_size, "
    "max_cost_usd, status, created_ts, finished_ts, heartbeat_ts, settings_json, held, "
    "limits_json"
)
# What a version 1 or 2 file (read, never migrated, by a reader) has of them.
BATCH_COLUMNS_V2 = BATCH_COLUMNS.replace("held, limits_json", "NULL, NULL")
BATCH_COLUMNS_V1 = BATCH_COLUMNS_V2.replace("heartbeat_ts, settings_json", "NULL, NULL")


def batch_columns(version: int) -> str:
    """BATCH_COLUMNS as a file of schema `version` has them (NULL for what it lacks)."""
    return BATCH_COLUMNS if version >= 3 else BATCH_COLUMNS_V2 if version == 2 else BATCH_COLUMNS_V1


CHILD_COLUMNS = (
    "batch_id, id, seq, goal, grp, route, model, status, api_calls, tool_calls, retries, turns, "
    "current_tool, tool_started_ts, activity, last_activity_ts, tokens_in, tokens_out, "
    "cache_read, cache_write, cost_usd, queued_ts, started_ts, finished_ts, error, result, "
    "transcript, cost_floor_usd"
)
# The same, with NULL for the result: what a reader that never shows answers selects.
CHILD_COLUMNS_NO_RESULT = CHILD_COLUMNS.replace(" result,", " NULL,")


def child_columns(version: int, *, results: bool = True) -> str:
    """CHILD_COLUMNS (CHILD_COLUMNS_NO_RESULT without `results`) as a file of schema `version`
    has them: NULL for what it lacks."""
    columns = CHILD_COLUMNS if results else CHILD_COLUMNS_NO_RESULT
    return columns if version >= 7 else columns.replace("cost_floor_usd", "NULL")


CONTROL_COLUMNS = "id, batch_id, child_id, kind, message, now, state, created_ts, settled_ts"
RECEIPT_COLUMNS = "id, child_id, message, now, state, created_ts, settled_ts, reason"


def upsert(
    table: str, columns: str, keys: tuple[str, ...], fixed: Mapping[str, str] | None = None
) -> str:
    """An upsert of every column; `fixed` columns take an SQL literal instead of a parameter."""
    names = [c.strip() for c in columns.split(",")]
    if unknown := set(fixed or {}) - set(names):
        raise ValueError(f"not columns of {table}: {sorted(unknown)}")
    updates = ", ".join(f"{c} = excluded.{c}" for c in names if c not in keys)
    marks = ", ".join((fixed or {}).get(n, "?") for n in names)
    return (
        f"INSERT INTO {table} ({columns}) VALUES ({marks}) "
        f"ON CONFLICT ({', '.join(keys)}) DO UPDATE SET {updates}"
    )


UPSERT_BATCH = upsert("batches", BATCH_COLUMNS, ("id",))
# Each write of a child row raises its change counter (schema.NEXT_REV, which says why).
UPSERT_CHILD = upsert("children", CHILD_COLUMNS + ", rev", ("batch_id", "id"), {"rev": NEXT_REV})
# A child that has not started: everything but what its task says is the same for all, so it
# is written as literals and a queued row binds 9 values instead of 27. A test keeps the rows
# equal to the full upsert's.
_NOT_STARTED = {
    "status": f"'{ChildStatus.QUEUED.value}'",
    **dict.fromkeys(("api_calls", "tool_calls", "retries", "turns"), "0"),
    **dict.fromkeys(("tokens_in", "tokens_out", "cache_read", "cache_write"), "0"),
    **dict.fromkeys(("current_tool", "tool_started_ts", "last_activity_ts"), "NULL"),
    **dict.fromkeys(("started_ts", "finished_ts", "error", "result"), "NULL"),
    "activity": "''",
    "cost_usd": "'0'",
    "cost_floor_usd": "NULL",
    "rev": NEXT_REV,
}
UPSERT_QUEUED = upsert("children", CHILD_COLUMNS + ", rev", ("batch_id", "id"), _NOT_STARTED)
UPSERT_CONTROL = upsert("controls", CONTROL_COLUMNS, ("batch_id", "id"))
# A client's steer: its receipt names the request that made it, so a request the owner applied
# but did not get to mark before it died is found applied, not applied again, by `resume`.
UPSERT_CONTROL_REQUEST = upsert("controls", CONTROL_COLUMNS + ", request_id", ("batch_id", "id"))
UPSERT_CONTROL_REASON = upsert("controls", CONTROL_COLUMNS + ", reason", ("batch_id", "id"))
UPSERT_CONTROL_BOTH = upsert(
    "controls", CONTROL_COLUMNS + ", request_id, reason", ("batch_id", "id")
)
HEARTBEAT = "UPDATE batches SET heartbeat_ts = ? WHERE id = ?"
SET_LIVE = (
    "INSERT INTO live (batch_id, body) VALUES (?, ?) "
    "ON CONFLICT (batch_id) DO UPDATE SET body = excluded.body"
)
SET_HELD = "UPDATE batches SET held = ? WHERE id = ?"
SET_LIMITS = "UPDATE batches SET pool_size = ?, limits_json = ? WHERE id = ?"
SETTLE_REQUEST = (
    "UPDATE requests SET state = ?, reason = ?, refusal = ?, control_ids = ?, settled_ts = ?, "
    "payload = COALESCE(?, payload) WHERE batch_id = ? AND id = ? AND state = 'pending'"
)
INSERT_EVENT = "INSERT INTO events (batch_id, child_id, ts, kind, detail) VALUES (?, ?, ?, ?, ?)"
FINISH_BATCH = "UPDATE batches SET status = ?, finished_ts = ? WHERE id = ?"
REOPEN_BATCH = "UPDATE batches SET status = 'running', finished_ts = NULL WHERE id = ?"
SETTLE_LIVE = (
    "UPDATE children SET status = ?, finished_ts = coalesce(finished_ts, ?), current_tool = NULL, "
    f"rev = {NEXT_REV} WHERE batch_id = ? AND status IN ('queued', 'gated', 'running', 'paused')"
)


@dataclass(frozen=True, slots=True)
class BatchInfo:
    """One batch as stored, plus summary fields filled in when read back."""

    id: str
    name: str
    source: str | None
    spec_json: str
    workspace: str
    state_dir: str
    owner_pid: int
    owner_start: float | None
    pool_size: int
    max_cost_usd: Decimal | None
    status: BatchStatus
    created_ts: float
    finished_ts: float | None
    heartbeat_ts: float | None = None  # the owner's last sign of life (None: never written)
    settings_json: str | None = None  # the settings it started with, for `resume`
    held: str | None = None  # why admission is held, as `Snapshot.held` (None: it is not)
    limits_json: str | None = None  # limits changed while it ran (JSON), over its settings'
    children: int = 0
    completed: int = 0
    failed: int = 0  # failed, timed out or stalled (or unknown, after a crash)
    stopped: int = 0
    cost_usd: Decimal = Decimal(0)  # the exact sum of what is known of the costs
    cost_unknown: int = 0  # children whose cost is unknown (in part: `cost_floor_usd`)


class QueuedChild(NamedTuple):
    """A child as first recorded, before it runs: all `Store.add_queued` needs, without a full
    `ChildRow` (and its `Activity` and `Usage`) for each of thousands of queued children."""

    id: str
    seq: int
    goal: str
    group: str | None
    route: str
    model: str
    queued_ts: float
    transcript: str


def process_start_time(pid: int | None = None) -> float | None:
    """When `pid` (default: this process) started, in epoch seconds (psutil's create_time);
    None if unknown. With the pid it tells this process from a later one given the same pid."""
    import psutil  # here: rows are imported by every reader, this only by an owner

    try:
        return float(psutil.Process(os.getpid() if pid is None else pid).create_time())
    except (psutil.Error, OSError):
        return None


# -- values to parameters, in column order ----------------------------------------------------


def _text(value: Decimal | None) -> str | None:
    # Decimals are stored as their exact text, never as SQL floats.
    return None if value is None else str(value)


def _decimal(value: str | None) -> Decimal | None:
    return None if value is None else Decimal(value)


def batch_params(info: BatchInfo) -> tuple[Any, ...]:
    """The parameters of UPSERT_BATCH."""
    return (
        info.id,
        info.name,
        info.source,
        info.spec_json,
        info.workspace,
        info.state_dir,
        info.owner_pid,
        info.owner_start,
        info.pool_size,
        _text(info.max_cost_usd),
        info.status.value,
        info.created_ts,
        info.finished_ts,
        info.heartbeat_ts,
        info.settings_json,
        info.held,
        info.limits_json,
    )


def child_params(batch_id: str, row: ChildRow) -> tuple[Any, ...]:
    """The parameters of UPSERT_CHILD."""
    act, use = row.activity, row.usage
    return (
        batch_id,
        row.id,
        row.seq,
        row.goal,
        row.group,
        row.route,
        row.model,
        row.status.value,
        act.api_calls,
        act.tool_calls,
        act.retries,
        act.turns,
        act.current_tool,
        act.tool_started_ts,
        act.text,
        act.last_activity_ts,
        use.input_tokens,
        use.output_tokens,
        use.cache_read_tokens,
        use.cache_write_tokens,
        _text(row.cost_usd),
        row.queued_ts,
        row.started_ts,
        row.finished_ts,
        row.error,
        row.result,
        row.transcript,
        _text(row.cost_floor_usd) if row.cost_floor_usd else None,
    )


def running_params(batch_id: str, row: Callable[[], ChildRow]) -> tuple[Any, ...] | None:
    """The parameters of UPSERT_CHILD for the row `row()` gives now, as a running child's: an
    end the child has reached is its final row's to record (running, no finish, error or
    result). The four are cut out of the tuple (`dataclasses.replace` of a row is far slower).
    None (nothing written) for a child queued again since (a lost worker's): the row that
    queues it comes with its `lost_attempt` event, never before it; and for one whose row is
    held by another thread past `row`'s bound (TimeoutError): the main thread, stopped there by
    a signal whose handler waits for the writer, would hold every write behind it."""
    try:
        now = row()
    except TimeoutError:
        return None
    if now.status is ChildStatus.QUEUED or (
        now.status is ChildStatus.PAUSED and now.started_ts is None
    ):
        return None
    params = child_params(batch_id, now)
    if not now.status.terminal:
        return params
    return (*params[:7], ChildStatus.RUNNING.value, *params[8:23], None, None, None, *params[26:])


def queued_params(batch_id: str, c: QueuedChild) -> tuple[Any, ...]:
    """The parameters of UPSERT_QUEUED."""
    return (batch_id, c.id, c.seq, c.goal, c.group, c.route, c.model, c.queued_ts, c.transcript)


def control_write(
    batch_id: str, receipt: SteerReceipt, kind: str, request_id: int | None, reason: str | None
) -> tuple[str, tuple[Any, ...]]:
    """The upsert of a steer or stop command (with the request that made it and why it was
    missed, if known: `reason`, else how it was delivered) and its parameters."""
    params = control_params(batch_id, receipt, kind)
    reason = reason or receipt.how
    if request_id is None and reason is None:
        return UPSERT_CONTROL, params
    if request_id is not None and reason is not None:
        return UPSERT_CONTROL_BOTH, (*params, request_id, reason)
    if reason is None:
        return UPSERT_CONTROL_REQUEST, (*params, request_id)
    return UPSERT_CONTROL_REASON, (*params, reason)


def control_params(batch_id: str, receipt: SteerReceipt, kind: str) -> tuple[Any, ...]:
    """The parameters of UPSERT_CONTROL."""
    return (
        receipt.id,
        batch_id,
        receipt.child_id,
        kind,
        receipt.message,
        int(receipt.now),
        receipt.state.value,
        receipt.created_ts,
        receipt.settled_ts,
    )


# -- rows to values ----------------------------------------------------------------------------


def batch_info(
    r: Sequence[Any],
    *,
    children: int = 0,
    completed: int = 0,
    failed: int = 0,
    stopped: int = 0,
    cost_usd: Decimal = Decimal(0),
    cost_unknown: int = 0,
) -> BatchInfo:
    """A BATCH_COLUMNS row, with its summary fields."""
    return BatchInfo(
        id=r[0],
        name=r[1],
        source=r[2],
        spec_json=r[3],
        workspace=r[4],
        state_dir=r[5],
        owner_pid=r[6],
        owner_start=r[7],
        pool_size=r[8],
        max_cost_usd=_decimal(r[9]),
        status=BatchStatus(r[10]),
        created_ts=r[11],
        finished_ts=r[12],
        heartbeat_ts=r[13],
        settings_json=r[14],
        held=r[15],
        limits_json=r[16],
        children=children,
        completed=completed,
        failed=failed,
        stopped=stopped,
        cost_usd=cost_usd,
        cost_unknown=cost_unknown,
    )


def stored_spec(spec_json: str) -> dict[str, Any]:
    """A batch row's spec as a dict: `tasks`, and `schedules` and `delegate` when it has them
    (a batch of tasks alone keeps the list of its tasks)."""
    data = json.loads(spec_json)
    return data if isinstance(data, dict) else {"tasks": data}


def own_tasks(spec_json: str) -> frozenset[str]:
    """The ids of a batch's own tasks (not a schedule's waves, nor delegates): the members of
    its completion units are among them."""
    return frozenset(str(t["id"]) for t in stored_spec(spec_json)["tasks"])


def child_row(r: Sequence[Any], steers: tuple[SteerReceipt, ...], **fields: Any) -> ChildRow:
    """A CHILD_COLUMNS row, with the child's steer receipts; `fields` are what a reader adds
    (set in the one build: a 1,000-row read would otherwise build each row twice). Its
    `activity` and `usage`, if given, replace what the columns say."""
    activity = fields.pop("activity", None)
    usage = fields.pop("usage", None)
    return ChildRow(
        id=r[1],
        seq=r[2],
        goal=r[3],
        group=r[4],
        route=r[5],
        model=r[6],
        status=ChildStatus(r[7]),
        activity=stored_activity(r) if activity is None else activity,
        usage=stored_usage(r) if usage is None else usage,
        cost_usd=_decimal(r[20]),
        queued_ts=r[21],
        started_ts=r[22],
        finished_ts=r[23],
        error=r[24],
        result=r[25],
        transcript=r[26],
        steers=steers,
        cost_floor_usd=ZERO_USD if r[27] is None else Decimal(r[27]),
        **fields,
    )


def stored_activity(r: Sequence[Any]) -> Activity:
    """A CHILD_COLUMNS row's activity."""
    return Activity(
        api_calls=r[8],
        tool_calls=r[9],
        retries=r[10],
        turns=r[11],
        current_tool=r[12],
        tool_started_ts=r[13],
        last_activity_ts=r[15],
        text=r[14],
    )


def stored_usage(r: Sequence[Any]) -> Usage:
    """A CHILD_COLUMNS row's billed usage."""
    return Usage(
        input_tokens=r[16], output_tokens=r[17], cache_read_tokens=r[18], cache_write_tokens=r[19]
    )


def receipt(r: Sequence[Any]) -> SteerReceipt:
    """A RECEIPT_COLUMNS row."""
    return SteerReceipt(
        id=r[0],
        child_id=r[1],
        message=r[2],
        now=bool(r[3]),
        state=SteerState(r[4]),
        created_ts=r[5],
        settled_ts=r[6],
        # The reason column: how a delivered steer was delivered, or why one was missed.
        how=r[7] if r[4] != SteerState.QUEUED.value else None,
    )
