"""A controlled EngineView for snapshot tests: one fixed batch state at a frozen time."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal
from pathlib import Path

from flightdeck.engine.commands import Command, SetLimits, Steer, Stop, StopAll
from flightdeck.engine.model import (
    Activity,
    BatchStatus,
    ChildRow,
    ChildStatus,
    EngineEvent,
    Snapshot,
    SteerReceipt,
    SteerState,
    Totals,
    Usage,
)

T0 = 1_800_000_000.0  # the batch started here; the frozen clock reads T0 + ELAPSED
ELAPSED = 135.0
NOW = T0 + ELAPSED


def frozen_clock() -> float:
    return NOW


def child(
    seq: int,
    goal: str,
    status: ChildStatus,
    *,
    folder: Path,
    text: str = "",
    tool: str | None = None,
    calls: int = 0,
    retries: int = 0,
    tokens: tuple[int, int] = (0, 0),
    cost: str | None = "0",
    started: float | None = None,
    last: float | None = None,
    finished: float | None = None,
    error: str | None = None,
    steers: tuple[SteerReceipt, ...] = (),
    retrying: bool = False,
) -> ChildRow:
    """A child row; times are seconds after T0."""
    child_id = f"review-{seq:02d}"
    return ChildRow(
        id=child_id,
        seq=seq,
        goal=goal,
        group=None,
        route="sim",
        model="sim-1",
        status=status,
        activity=Activity(
            api_calls=calls,
            tool_calls=calls // 2,
            retries=retries,
            turns=calls,
            current_tool=tool,
            tool_started_ts=T0 + last - 4 if tool and last is not None else None,
            last_activity_ts=T0 + last if last is not None else None,
            text=text or status.value,
            retrying=retrying,
            retry_reason=(text or None) if retrying else None,
        ),
        usage=Usage(input_tokens=tokens[0], output_tokens=tokens[1]),
        cost_usd=Decimal(cost) if cost is not None else None,
        queued_ts=T0,
        started_ts=T0 + started if started is not None else None,
        finished_ts=T0 + finished if finished is not None else None,
        error=error,
        result=None,
        transcript=str(folder / f"{child_id}.log"),
        steers=steers,
    )


def demo_rows(folder: Path) -> tuple[ChildRow, ...]:
    """Every state the table can show, including hostile text."""
    S = ChildStatus
    delivered = SteerReceipt(1, "review-02", "focus on tests", False, SteerState.DELIVERED, T0 + 90)
    queued = SteerReceipt(2, "review-05", "wrap up", True, SteerState.QUEUED, T0 + 130)
    return (
        child(1, "Review PR #101: retry loop in the HTTP client", S.COMPLETED, folder=folder,
              calls=4, tokens=(5200, 830), cost="0.0085", started=1, last=60, finished=60),
        child(2, "Review PR #102: config loader rewrite", S.RUNNING, folder=folder,
              text="tool: read_file", tool="read_file", calls=5, tokens=(7400, 910),
              cost="0.0110", started=3, last=133, steers=(delivered,)),
        child(3, "Review PR #103: flaky scheduler test", S.RUNNING, folder=folder,
              text="429, retry 2/6 in 3.1s", calls=3, retries=2, tokens=(2100, 300),
              cost="0.0033", started=10, last=131, retrying=True),
        child(4, "Review PR #104: [@click=app.quit]x[/] markup in a goal", S.FAILED,
              folder=folder, calls=2, tokens=(1500, 120), cost="0.0020", started=5,
              last=40, finished=40, error="FatalError: sim: simulated fatal error"),
        child(5, "Review PR #105: database migrations", S.RUNNING, folder=folder,
              text="streaming", calls=2, tokens=(3300, 450), cost="0.0051", started=70,
              last=134, steers=(queued,)),
        child(6, "Review PR #106: docs", S.STOPPED, folder=folder, calls=1,
              tokens=(900, 40), cost="0.0011", started=20, last=50, finished=50,
              error="stopped by operator"),
        child(7, "Review PR #107: cache invalidation", S.QUEUED, folder=folder),
        child(8, "Review PR #108: logging", S.QUEUED, folder=folder),
        child(9, "Review PR #109: stalls mid-stream", S.STALLED, folder=folder, calls=3,
              tokens=(2500, 200), cost="0.0035", started=15, last=100, finished=110,
              error="no activity for 120s"),
        child(10, "Review PR #110: unpriced model", S.COMPLETED, folder=folder, calls=2,
              tokens=(1200, 300), cost=None, started=2, last=30, finished=30),
    )  # fmt: skip


TRANSCRIPT = """\
10:00:03.000  system    │ You are a worker agent supervised by flightdeck.
10:00:03.001  user      │ Review PR #102: config loader rewrite
10:00:03.512  assistant │ I will start by listing the workspace.
10:00:03.540  tool-call │ list_dir {"path": "."}
10:00:03.541  tool      │ config.py
10:01:30.000  operator  │ steer (at next turn): focus on tests
10:01:31.020  operator  │ delivered: focus on tests
10:01:31.700  assistant │ Understood — focus on tests. Reading the test module next.
10:02:13.000  tool-call │ read_file {"path": "tests/test_config.py"}
"""


def totals_of(rows: Sequence[ChildRow]) -> Totals:
    usage = Usage()
    cost = Decimal(0)
    for row in rows:
        usage += row.usage
        cost += row.cost_usd or 0
    count = {s: sum(1 for r in rows if r.status is s) for s in ChildStatus}
    return Totals(
        children=len(rows),
        queued=count[ChildStatus.QUEUED] + count[ChildStatus.GATED],
        running=count[ChildStatus.RUNNING],
        completed=count[ChildStatus.COMPLETED],
        failed=sum(1 for r in rows if r.status.terminal)
        - count[ChildStatus.COMPLETED]
        - count[ChildStatus.STOPPED],
        stopped=count[ChildStatus.STOPPED],
        usage=usage,
        cost_usd=cost,
        cost_unknown=sum(1 for r in rows if r.cost_usd is None),
    )


class StaticView:
    """An EngineView whose batch never changes; commands are recorded, not executed."""

    def __init__(self, folder: Path, rows: tuple[ChildRow, ...] | None = None) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        self.rows = rows if rows is not None else demo_rows(folder)
        for row in self.rows:
            if row.status is not ChildStatus.QUEUED:
                Path(row.transcript).write_text(TRANSCRIPT, encoding="utf-8")
        self.steered: list[tuple[list[str], str, bool]] = []
        self.stopped: list[list[str]] = []
        self.stopped_all = 0
        self.limit_changes: list[dict[str, object]] = []

    read_only: str | None = None
    can_detach: bool = False

    def snapshot(self) -> Snapshot:
        return Snapshot(
            batch_id="20270115-080000-demo",
            status=BatchStatus.RUNNING,
            started_ts=T0,
            now=NOW,
            children=self.rows,
            totals=totals_of(self.rows),
            pool_size=4,
            max_cost_usd=Decimal("0.10"),
        )

    def send(self, command: Command) -> None:
        match command:
            case Steer(ids, message, now):
                self.steered.append((list(ids), message, now))
            case Stop(ids):
                self.stopped.append(list(ids))
            case StopAll():
                self.stopped_all += 1
            case SetLimits(change):
                self.limit_changes.append(dict(change))

    def transcript_path(self, child_id: str) -> Path | None:
        for row in self.rows:
            if row.id == child_id:
                return Path(row.transcript)
        return None

    def secrets(self) -> tuple[str, ...]:
        return ()

    def subscribe(self, fn: Callable[[EngineEvent], None]) -> Callable[[], None]:
        return lambda: None
