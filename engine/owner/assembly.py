"""Assembling a batch's parts before it starts: its id, clients, children and records (the
checks it passes first are checks.py's)."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flightdeck.engine.agents.launch import CommandRoute
from flightdeck.engine.agents.workspace import Workspace
from flightdeck.engine.child.delegate import Delegation
from flightdeck.engine.child.facts import Report
from flightdeck.engine.child.kept import Kept
from flightdeck.engine.child.loop import ModelRunner
from flightdeck.engine.child.port import Runner
from flightdeck.engine.child.rowview import queued_row
from flightdeck.engine.child.state import Child
from flightdeck.engine.child.tools import Toolbox
from flightdeck.engine.control.retry import RetryPolicy
from flightdeck.engine.control.throttle import RouteThrottle
from flightdeck.engine.inputs.settings import (
    Route,
    Settings,
)
from flightdeck.engine.inputs.settings.stored import settings_json
from flightdeck.engine.inputs.tasks import Batch, Schedule, Task
from flightdeck.engine.model import BatchStatus, ChildRow
from flightdeck.engine.providers.base import Provider
from flightdeck.engine.records.meter import Meter, starts_known
from flightdeck.engine.records.processes import ProcessLog
from flightdeck.engine.records.rows import (
    BatchInfo,
    QueuedChild,
    process_start_time,
    stored_spec,
)
from flightdeck.engine.records.sink import TranscriptSink

if TYPE_CHECKING:  # a command child's parts (its process, the CLI formats): imported for one
    from flightdeck.engine.child.command import ProcessBook

IO_FOLDER = "io"  # in the batch folder: command children's output and input files


def steady_clock() -> Callable[[], float]:
    """Wall-clock seconds that advance only as `time.monotonic` does.

    The engine's stamps are also its durations: stall and timeout checks, a child's elapsed
    time. A step of the system clock (NTP, a laptop waking) must not make every running child
    look stalled, so the wall clock is read once, here, and never again."""
    offset = time.time() - time.monotonic()
    return lambda: offset + time.monotonic()


def transcript_name(task: Task) -> str:
    """A child's transcript file name inside the batch folder."""
    return f"{task.id}.log"


def transcript_path(batch_dir: Path, task: Task) -> str:
    """A child's transcript file: a str, not a Path (a Path per child interned its name for
    good, about 200 bytes each), and joined plainly (os.path.join's checks cost a child 3 µs)."""
    return f"{batch_dir}{os.sep}{transcript_name(task)}"


def task_json(task: Task) -> dict[str, object]:
    """A task as stored in the batch row: the fields it was given, None ones left out."""
    out: dict[str, object] = {"id": task.id, "goal": task.goal, "seq": task.seq}
    if task.context is not None:
        out["context"] = task.context
    if task.group is not None:
        out["group"] = task.group
    if task.route is not None:
        out["route"] = task.route
    if task.timeout_s is not None:
        out["timeout_s"] = task.timeout_s
    out["source"] = task.source
    out["max_turns"] = task.max_turns
    return out


def build_child(
    task: Task,
    *,
    batch: Batch,
    settings: Settings,
    providers: Mapping[str, Provider],
    commands: Mapping[str, CommandRoute],
    throttles: Mapping[str, RouteThrottle],
    toolbox: Toolbox,
    batch_dir: Path,
    meter: Meter,
    clock: Callable[[], float],
    report: Report,
    queued_ts: float,
    sink: TranscriptSink,
    processes: ProcessLog,
    batch_id: str,
    kind: type[Child] = Child,
    kept: Kept | None = None,
) -> Child:
    """A queued child for one task: one of the batch's, or a child's delegate (`kind`: a
    Child, or one whose work runs elsewhere; `kept`: the operator's retry of one that ended)."""
    route = settings.route(task.route)
    book = tag = None
    if route.command is not None:  # only a command child's processes are booked and tagged
        from flightdeck.engine.agents.book import StoreBook

        book, tag = StoreBook(processes, task.id), f"{batch_id}/{task.id}"
    runner = build_runner(
        task,
        route,
        settings=settings,
        delegate=batch.delegate,
        providers=providers,
        commands=commands,
        throttles=throttles,
        toolbox=toolbox,
        batch_dir=batch_dir,
        meter=meter,
        book=book,
        tag=tag,
    )
    transcript = transcript_path(batch_dir, task)
    return kind(
        task,
        route,
        runner,
        transcript,
        clock,
        report,
        queued_ts,
        sink,
        cost_known=starts_known(route),
        kept=kept,
        secrets=toolbox.secrets,
    )


def build_runner(
    task: Task,
    route: Route,
    *,
    settings: Settings,
    delegate: bool,
    providers: Mapping[str, Provider],
    commands: Mapping[str, CommandRoute],
    throttles: Mapping[str, RouteThrottle],
    toolbox: Toolbox,
    batch_dir: Path,
    meter: Meter,
    book: ProcessBook | None,
    tag: str | None,
) -> Runner:
    """How one task's child runs: a process for a command route, else turns of a model (in the
    owner, or on an executor's worker with its own clients). `tag`: what a command child's
    processes carry in their environment (agents/tree.py's TAG_ENV); `book` and `tag` are
    a command child's (None for a model's)."""
    command = commands.get(route.name)
    if command is not None:
        from flightdeck.engine.agents.process import Files
        from flightdeck.engine.child.command import ProcessRunner

        assert route.command is not None and book is not None and tag is not None
        workspace = Workspace(
            route.command.workspace,
            toolbox.root,
            batch_dir / "workspaces" / task.id,
            keep=route.command.keep_worktrees,
        )
        io = batch_dir / IO_FOLDER
        files = Files(io / f"{task.id}.out", io / f"{task.id}.err", io / f"{task.id}.in")
        return ProcessRunner(command, workspace, meter, files, book, tag)
    # Jitter seeded per task: reruns of a batch back off alike (a sim run replays exactly),
    # while children of one batch still spread out.
    retry = RetryPolicy(
        route.retry,
        scale=route.time_scale,
        throttle=throttles[route.name],
        route=route,
        seed=f"{route.options.get('seed', 0)}:{task.id}",
    )
    budget = settings.budget
    delegation = None
    if (delegate or route.delegate) and task.depth < budget.max_depth:
        delegation = Delegation(budget.max_delegates, settings.engine.max_task_chars)
    own = None
    if route.workspace != "shared":  # its own worktree or copy, whose changes are reviewed
        own = Workspace(
            route.workspace, toolbox.root, batch_dir / "workspaces" / task.id, keep=False
        )
    ask = settings.engine.max_task_chars if route.ask_operator else None
    provider = providers[route.name]
    return ModelRunner(
        route.name, provider, retry, toolbox, meter, delegation, ask_chars=ask, workspace=own
    )


def manifest_children(children: Iterable[Child]) -> str:
    """The children part of the manifest, as JSON.

    ASCII: untrusted names (a C1 byte, a bidi override) stay escaped for `cat`, and a file name
    that is not UTF-8 cannot fail the write."""
    listed = [
        {"id": c.task.id, "route": c.route.name, "transcript": transcript_name(c.task)}
        for c in children
    ]
    return json.dumps(listed)


def queued_rows(children: Iterable[Child]) -> list[QueuedChild]:
    """The store's first row for each child, written before any runs."""
    return [
        QueuedChild(
            c.task.id,
            c.task.seq,
            c.task.goal,
            c.task.group,
            c.route.name,
            c.route.model,
            c.queued_ts,
            c.transcript_path,
        )
        for c in children
    ]


def unstarted_rows(
    batch: Batch, settings: Settings, batch_dir: Path, at: float
) -> tuple[ChildRow, ...]:
    """The batch's tasks as the queued children `start()` makes of them (a snapshot before it)."""
    return tuple(
        queued_row(t, settings.route(t.route), transcript_path(batch_dir, t), at)
        for t in batch.tasks
    )


# -- what a batch keeps in the store for `resume` ----------------------------------------------


def batch_info(
    batch_id: str,
    batch: Batch,
    settings: Settings,
    *,
    workspace: Path,
    state_dir: Path,
    pool_size: int,
    now: float,
) -> BatchInfo:
    """The batch's row as its owner (this process) first records it."""
    return BatchInfo(
        id=batch_id,
        name=batch.name,
        source=str(batch.source) if batch.source else None,
        spec_json=spec_json(batch),
        workspace=str(workspace),
        state_dir=str(state_dir),
        owner_pid=os.getpid(),
        owner_start=process_start_time(),
        pool_size=pool_size,
        max_cost_usd=settings.budget.max_cost_usd,
        status=BatchStatus.RUNNING,
        created_ts=now,
        finished_ts=None,
        heartbeat_ts=now,
        settings_json=settings_json(settings),
    )


def spec_json(batch: Batch) -> str:
    """What a batch's row keeps of it for `resume`: its tasks (`task_json`) as a list, or, when
    it has schedules or delegation on, an object with them beside the tasks."""
    tasks = [task_json(t) for t in batch.tasks]
    if not batch.schedules and not batch.delegate:
        return json.dumps(tasks, ensure_ascii=False)
    schedules = [
        {
            "id": s.id,
            "every_s": s.every_s,
            "cron": s.cron,
            "at_start": s.at_start,
            "source": s.source,
            "tasks": [task_json(t) for t in s.tasks],
        }
        for s in batch.schedules
    ]
    spec = {"tasks": tasks, "schedules": schedules, "delegate": batch.delegate}
    return json.dumps(spec, ensure_ascii=False)


def batch_from_store(info_name: str, spec_json: str, source: str | None, workspace: str) -> Batch:
    """A batch as its row keeps it (`spec_json`), its tasks in their original order."""
    spec = stored_spec(spec_json)
    schedules = tuple(
        Schedule(
            id=s["id"],
            tasks=_tasks(s["tasks"]),
            every_s=s["every_s"],
            cron=s["cron"],
            at_start=s["at_start"],
            source=s["source"],
        )
        for s in spec.get("schedules", ())
    )
    return Batch(
        name=info_name,
        tasks=_tasks(spec["tasks"]),
        source=None if source is None else Path(source),
        workspace=Path(workspace),
        delegate=bool(spec.get("delegate", False)),
        schedules=schedules,
    )


def _tasks(items: list[dict[str, Any]]) -> tuple[Task, ...]:
    fields = {f.name for f in dataclasses.fields(Task)}
    return tuple(
        Task(**{k: v for k, v in t.items() if k in fields})
        for t in sorted(items, key=lambda t: int(t["seq"]))
    )
