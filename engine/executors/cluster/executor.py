"""The Ray executor: children's work on worker actors across a Ray cluster.

It joins the cluster (`[ray] address`: "local" starts one here with `num_cpus`; "auto" joins a
running one: join.py), places `workers_per_node` worker actors on every alive node (no more than
the node has CPUs), checks that each node shares the batch's folders, and
hands each child to the worker with the fewest children. A worker that dies (killed, its node
lost) takes its children with it: each is reported lost (`ChildLost`) and runs again, and a new
worker is started on its node if the node is still alive. Closing kills every worker: nothing of
the batch outlives it on the cluster (the actors are not detached: an owner that dies takes them
with it as well).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import ray
from flightdeck.engine.child.elsewhere import Elsewhere
from flightdeck.engine.child.facts import ChildDone, ChildLost, Report
from flightdeck.engine.child.state import Child
from flightdeck.engine.control.throttle import RouteThrottle
from flightdeck.engine.errors import ConfigError
from flightdeck.engine.executors.cluster.home import ChildRelay, Home, Link
from flightdeck.engine.executors.cluster.join import TOKEN_IMPLIED, connect
from flightdeck.engine.executors.cluster.permits import PermitDesk
from flightdeck.engine.executors.cluster.wire import Dispatch, Setup, ToWorker
from flightdeck.engine.executors.cluster.worker import Worker
from flightdeck.engine.inputs.settings import RaySettings, Route
from flightdeck.engine.model import ChildStatus
from flightdeck.engine.private import open_private
from flightdeck.engine.records.meter import Meter
from flightdeck.engine.sanitize import last_line
from ray.exceptions import GetTimeoutError, RayActorError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

log = logging.getLogger(__name__)

START_S = 120.0  # how long workers may take to start (a node pulling its environment)
CLOSE_S = 10.0  # how long a worker may take to end its children when the batch closes


class RayExecutor:
    """Children's work on Ray worker actors (see the module)."""

    def __init__(
        self,
        ray_settings: RaySettings,
        setup: Setup,
        *,
        report: Report,
        meter: Meter,
        routes: Mapping[str, Route],
        throttles: Mapping[str, RouteThrottle],
        clock: Callable[[], float],
        permit_threads: int,
        source: Path | None = None,
    ) -> None:
        self._settings = ray_settings
        self._source = source
        self._clock = clock
        self._started_ray = False
        self._token_implied = False
        if not ray.is_initialized():
            self._started_ray = True
            self._token_implied = connect(ray_settings, source)
        self._setup = setup
        self._report = report
        self._lock = threading.Lock()
        self._links: list[Link] = []
        self._replacing: set[threading.Thread] = set()  # workers being started for lost ones
        self._waiting: list[Elsewhere] = []  # sent while no worker was alive, one starting
        self._closed = False
        self.known: dict[str, Elsewhere] = {}
        self._desk = PermitDesk(routes, throttles, permit_threads)
        self._home = Home(
            known=self.known,
            report=report,
            meter=meter,
            routes=routes,
            throttles=throttles,
            desk=self._desk,
            broadcast=self._broadcast,
            clock=clock,
        )
        # Threaded (sends and pulls overlap); no CPU held: its children wait on the network.
        self._actor: Any = ray.remote(Worker)
        nodes = alive_nodes()
        self.cpus = int(sum(n.get("Resources", {}).get("CPU", 0) for n in nodes))
        try:
            self._start([n["NodeID"] for n in nodes for _ in range(self._per_node(n))])
        except BaseException:
            self.shutdown()
            raise

    @property
    def workers(self) -> list[tuple[str, Any, tuple[str, ...]]]:
        """(node, actor handle, its children's ids) of each worker alive, oldest first."""
        with self._lock:
            return [(k.name, k.actor, tuple(k.children)) for k in self._links if k.alive]

    def _per_node(self, node: Mapping[str, Any]) -> int:
        cpus = int(node.get("Resources", {}).get("CPU", 1))
        return max(1, min(self._settings.workers_per_node, cpus))

    def _start(self, node_ids: list[str], *, probe: bool = True) -> None:
        """Workers on these nodes (one per entry); ConfigError if a node shares no folder."""
        setup = self._setup if probe else dataclasses.replace(self._setup, probes=())
        actors: list[Any] = []
        for node_id in node_ids:
            strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
            options = self._actor.options(
                scheduling_strategy=strategy, max_concurrency=8, num_cpus=0
            )
            actors.append(options.remote(setup))
        try:
            where = ray.get([a.where.remote() for a in actors], timeout=START_S)
            ray.get([a.sync.remote(self._clock()) for a in actors], timeout=START_S)
        except (RayActorError, GetTimeoutError) as exc:
            for each in actors:
                ray.kill(each)
            raise ConfigError(
                self._source,
                self._settings.address_line,
                "ray.address",
                not_started(exc, token_implied=self._token_implied),
            ) from None
        for actor, (name, node_id, problems, refused) in zip(actors, where, strict=True):
            if problems or refused:
                for each in actors:
                    ray.kill(each)
            if refused:  # a route's key or program this node does not have
                path, line, field, message = refused
                raise ConfigError(
                    path,
                    line,
                    field,
                    f"{message} on node {name}: a worker reads its routes' keys and finds "
                    "their programs on its own node (set them up where `ray start` runs, on "
                    "every node)",
                )
            if problems:
                raise ConfigError(
                    self._source,
                    self._settings.address_line,
                    "ray.address",
                    f"node {name} does not see {', '.join(problems)} as this process does: on "
                    "a cluster of more than one machine the batch's workspace (and, for command "
                    "routes, the state folder) must be on storage every node shares",
                )
            link = Link(actor, name, node_id, self._home, self._lost, ray.get)
            with self._lock:
                closed = self._closed
                if not closed:
                    self._links.append(link)
            if closed:  # the batch ended while it started
                ray.kill(actor)
                continue
            link.start()

    # --- the Executor interface ----------------------------------------------------------------

    def submit(self, child: Child) -> None:
        """Send the child to a worker: the one it is paused on, else the least busy."""
        if not isinstance(child, Elsewhere):
            raise TypeError("the Ray executor runs Elsewhere children")
        with self._lock:
            if self._closed:
                raise RuntimeError("the Ray executor is shut down")
            link = next(
                (k for k in self._links if k.alive and child.task.id in k.children), None
            ) or min(
                (k for k in self._links if k.alive),
                key=lambda k: len(k.children),
                default=None,
            )
            task = child.task
            if link is None:
                if not self._replacing:
                    raise RuntimeError("no Ray worker is left to run it")
                # Every worker was lost at once: the child waits for the one starting.
                self.known[task.id] = child
                self._waiting.append(child)
                return
            self.known[task.id] = child
            link.children[task.id] = child
        child.node = link.name
        child.relay = ChildRelay(link, task.id)
        link.send(
            Dispatch(
                task=task,
                transcript=child.transcript_path,
                queued_ts=child.queued_ts,
                figures=child.progress.mirror() if child.progress.version else None,
                steers=child.steering.pending(),
                pause_wanted=child.pause_wanted,
                leads_gate=child.leads_gate,
            )
        )

    def lend(self, threads: int) -> None:
        """Workers start threads as children need them: nothing to lend."""

    def grow(self, max_workers: int) -> None:
        """Nothing to grow: the owner's pool size bounds what runs."""

    def shutdown(self) -> None:
        """Kill every worker (after letting it end its children's process groups)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            links, self._links = self._links, []
            replacing = list(self._replacing)
        for link in links:
            link.stop()
        closing = [link.actor.close.remote() for link in links]
        try:
            ray.wait(closing, num_returns=len(closing), timeout=CLOSE_S)
        except Exception:
            log.warning("Ray workers did not close cleanly", exc_info=True)
        for link in links:
            try:
                ray.kill(link.actor)
            except Exception:
                log.debug("flightdeck: a Ray worker was gone already", exc_info=True)
        # Ray connects on first use: a replacement started after ray.shutdown() would start a
        # cluster of its own in an owner that is ending. It sees `_closed` and ends, or kills
        # the worker it started.
        for thread in replacing:
            thread.join(CLOSE_S)
        self._desk.shutdown()
        if self._started_ray:
            ray.shutdown()

    # --- workers lost --------------------------------------------------------------------------

    def _broadcast(self, message: ToWorker) -> None:
        with self._lock:
            links = [k for k in self._links if k.alive]
        for link in links:
            link.send(message)

    def _lost(self, link: Link, why: str) -> None:
        """A worker died (its threads' call failed): its children run again elsewhere."""
        with self._lock:
            if link in self._links:
                self._links.remove(link)
            lost = list(link.children)
            link.children.clear()
            closed = self._closed
        if closed:
            return
        log.warning("the Ray worker on %s was lost (%s)", link.name, why)
        thread = threading.Thread(
            target=self._replace, args=(link.node_id,), name="flightdeck-replace", daemon=True
        )
        with self._lock:
            if self._closed:
                return
            # Known as starting before its children are sent again: with no worker left they
            # wait for it (submit), instead of ending unrun.
            self._replacing.add(thread)
        thread.start()
        for child_id in lost:
            self._report(ChildLost(child_id, f"its worker on node {link.name} was lost ({why})"))

    def _replace(self, node_id: str) -> None:
        """A new worker where one was lost, if its node is still alive (and the batch runs)."""
        try:
            alive = any(n["NodeID"] == node_id for n in alive_nodes())
            if alive and not self._closed:
                self._start([node_id], probe=False)  # the node was looked at at the start
        except (Exception, SystemExit):  # SystemExit: Ray shut down under this thread
            log.warning("no new Ray worker on a node that lost one", exc_info=True)
        finally:
            with self._lock:
                self._replacing.discard(threading.current_thread())
            self._place_waiting()

    def _place_waiting(self) -> None:
        """The children that waited for a worker: sent to one now alive, else (none alive and
        none starting) ended failed, saying why; a child stopped meanwhile ends as asked."""
        with self._lock:
            alive = any(k.alive for k in self._links)
            if self._closed or (not alive and self._replacing):
                return
            waiting, self._waiting = self._waiting, []
        for child in waiting:
            if child.stop_status is not None:
                ended = child.ended_elsewhere(child.stop_status, child.stop_reason, None)
            elif alive:
                try:
                    self.submit(child)
                    continue
                except RuntimeError as exc:  # closed, or every worker lost again meanwhile
                    ended = child.ended_elsewhere(ChildStatus.FAILED, str(exc), None)
            else:
                why = "no Ray worker is left to run it: every one was lost, none could start"
                ended = child.ended_elsewhere(ChildStatus.FAILED, why, None)
            if ended:
                self._report(ChildDone(child.task.id))


def not_started(exc: BaseException, *, token_implied: bool = False) -> str:
    """Why no worker started, in one line: a worker that died as it started (its node's Python
    cannot import flightdeck, say: Ray's last line says why), none within START_S, or (Ray
    having sent a token the operator never asked for) a cluster that takes no token."""
    if isinstance(exc, GetTimeoutError):
        return f"the cluster started no flightdeck worker within {START_S:.0f} s"
    said = last_line(str(exc), 300) or type(exc).__name__
    if token_implied and "ModuleNotFoundError" not in said:
        return f"a flightdeck worker could not start on the cluster: {said} ({TOKEN_IMPLIED})"
    return (
        f"a flightdeck worker could not start on the cluster: {said} (each node runs its "
        "workers in the Python `ray start` ran there: install flightdeck, this version, in it "
        "on every node)"
    )


def alive_nodes() -> list[dict[str, Any]]:
    """The cluster's nodes that are alive, as `ray.nodes()` describes them."""
    nodes: list[dict[str, Any]] = ray.nodes()  # type: ignore[no-untyped-call]
    return [n for n in nodes if n.get("Alive")]


def probe_files(folders: list[Path]) -> tuple[tuple[Path, str], ...]:
    """A file with a random token in each folder (made already), which every node must read
    as written; 0600, as every file in the state folder (engine/private.py)."""
    out = []
    for folder in folders:
        path = folder / f".flightdeck-probe-{secrets.token_hex(4)}"
        token = secrets.token_hex(8)
        with os.fdopen(open_private(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL), "w") as f:
            f.write(token)
        out.append((path, token))
    return tuple(out)
