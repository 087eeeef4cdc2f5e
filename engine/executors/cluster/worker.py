"""A worker on a cluster node: a Ray actor running many children's work on its threads.

It builds each child's runner from the batch's settings and its own node's clients (a route's
key is read from this process's environment, never sent), runs it against a `Twin`, applies the
owner's commands to the twins in the order sent, and hands back what they did when the owner
pulls. It decides nothing: the owner admits, caps, paces, budgets and records.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flightdeck.engine.agents.launch import CommandRoute
from flightdeck.engine.child.facts import ReceiptSettled
from flightdeck.engine.child.steering import missed_note
from flightdeck.engine.child.tools import Toolbox
from flightdeck.engine.control.workers import WorkerPool
from flightdeck.engine.errors import ConfigError
from flightdeck.engine.executors.cluster.guard import Guard, GuardBook
from flightdeck.engine.executors.cluster.permits import RelayThrottle
from flightdeck.engine.executors.cluster.twin import Outbox, RelayMeter, Twin
from flightdeck.engine.executors.cluster.wire import (
    AskEnded,
    DelegatesEnded,
    Dispatch,
    Fact,
    Granted,
    Held,
    Limited,
    Lines,
    Pause,
    Refused,
    RoutePaused,
    Setup,
    Steer,
    Stop,
    ToWorker,
    pack_from,
    unpack_to,
)
from flightdeck.engine.model import ChildStatus, SteerReceipt, SteerState
from flightdeck.engine.owner import assembly
from flightdeck.engine.providers import make_provider
from flightdeck.engine.records.events import Write
from flightdeck.engine.records.meter import starts_known

log = logging.getLogger(__name__)

MAX_THREADS = 4096  # the owner decides how many run; this only bounds a runaway
FIGURES_EVERY_S = 0.1  # running children's figures go home at most this often
PULL_WAIT_S = 0.25  # a pull with nothing to say returns after this long

Located = tuple[str | None, int | None, str | None, str]  # a ConfigError, as it crosses home


def probe_problems(probes: Sequence[tuple[Path, str]]) -> list[str]:
    """The folders this node does not share with the owner: a file written there by the owner
    cannot be read here as written."""
    problems = []
    for path, token in probes:
        try:
            seen = path.read_text()
        except OSError:
            seen = None
        if seen != token:
            problems.append(str(path.parent))
    return problems


class Worker:
    """The actor's body (made a Ray actor by executor.py)."""

    def __init__(self, setup: Setup) -> None:
        self._setup = setup
        self.sync(setup.owner_now)
        settings = setup.settings
        self._outbox = Outbox()
        models = {n: r for n, r in settings.routes.items() if r.command is None}
        # A route this node cannot serve (its key's variable unset here, its program not on
        # this node's PATH) is told to the owner by `where`, which refuses the node in one line.
        self._refused: Located | None = None
        try:
            self._providers = {name: make_provider(route) for name, route in models.items()}
            self._commands = {
                name: CommandRoute(route, os.environ, settings.source)
                for name, route in settings.routes.items()
                if route.command is not None
            }
        except ConfigError as exc:
            self._refused = (exc.path, exc.line, exc.field, exc.message)
            self._providers, self._commands = {}, {}
        secrets = tuple(s for p in self._providers.values() for s in p.secrets)
        secrets += tuple(s for c in self._commands.values() for s in c.secrets)
        self._toolbox = Toolbox(setup.workspace, secrets=secrets, private=setup.private)
        self._throttles = {
            name: RelayThrottle(route, self._outbox.put) for name, route in models.items()
        }
        self._pool = WorkerPool(MAX_THREADS, name="flightdeck-worker")
        self._guard = Guard()
        self._twins: dict[str, Twin] = {}
        self._last_figures = 0.0

    # --- what the owner calls ------------------------------------------------------------------

    def sync(self, owner_now: float) -> None:
        """Stamp on the owner's clock (read just now there) from here on."""
        self._offset = owner_now - time.monotonic()

    def _clock(self) -> float:
        return self._offset + time.monotonic()

    def where(self) -> tuple[str, str, list[str], Located | None]:
        """(node name, node id, folders it does not share with the owner, why a route cannot
        run here: a ConfigError's path, line, field and message)."""
        import ray

        node_id = ray.get_runtime_context().get_node_id()
        name = f"{socket.gethostname()}:{node_id[:6]}"
        return name, node_id, probe_problems(self._setup.probes), self._refused

    def send(self, packed: list[tuple[Any, ...]]) -> None:
        """Apply the owner's messages (`wire.pack_to`), in order."""
        for message in unpack_to(packed):
            try:
                self._apply(message)
            except Exception:  # one bad message must not cost the others
                log.exception("flightdeck worker: a message failed: %r", type(message))

    def pull(self) -> list[tuple[Any, ...]]:
        """What the children did since the last pull (`wire.pack_from`; waits a little for
        something)."""
        wait = min(PULL_WAIT_S, FIGURES_EVERY_S) if self._twins else PULL_WAIT_S
        out = self._outbox.take(wait)
        now = time.monotonic()
        if now - self._last_figures >= FIGURES_EVERY_S:
            self._last_figures = now
            out += [f for twin in list(self._twins.values()) if (f := twin.figures())]
        return pack_from(out)

    def close(self) -> None:
        """The batch is over: stop what runs, end the command children's groups."""
        for twin in list(self._twins.values()):
            twin.request_stop(ChildStatus.STOPPED, "the owner closed")
        self._guard.close()
        for provider in self._providers.values():
            provider.close()

    # --- the owner's messages ------------------------------------------------------------------

    def _apply(self, message: ToWorker) -> None:
        twin = self._twins.get(getattr(message, "child_id", ""))
        match message:
            case Dispatch():
                self._dispatch(message)
            case Steer(child_id, receipt):
                if twin is None or not twin.add_steer(receipt):
                    self._missed(child_id, receipt, twin)
            case Stop(_, status, reason) if twin is not None:
                twin.request_stop(status, reason)
            case Pause(_, wanted) if twin is not None:
                twin.request_pause() if wanted else twin.cancel_pause()
            case Granted() | Held() | Refused():
                for throttle in self._throttles.values():
                    throttle.answer(message)
            case Limited(route, requests, tokens) if route in self._throttles:
                self._throttles[route].paced(requests, tokens)
            case RoutePaused(route, seconds) if route in self._throttles:
                self._throttles[route].pause(seconds)
            case DelegatesEnded(number, results, refused):
                for each in list(self._twins.values()):
                    call = each.calls.pop(number, None)
                    if call is not None:
                        call.refuse(refused) if refused is not None else call.finish(results)
            case AskEnded(number, answer, refused):
                for each in list(self._twins.values()):
                    ask = each.asks.pop(number, None)
                    if ask is not None:
                        ask.refuse(refused) if refused is not None else ask.settle(answer or "")

    def _dispatch(self, order: Dispatch) -> None:
        task = order.task
        twin = self._twins.get(task.id)
        if twin is None:  # new here (else a paused model child, continued: its runner kept)
            setup = self._setup
            route = setup.settings.route(task.route)
            tag = self._guard.tag(f"{setup.batch_id}/{task.id}")
            meter = RelayMeter(self._outbox, task.id)
            runner = assembly.build_runner(
                task,
                route,
                settings=setup.settings,
                delegate=setup.delegate,
                providers=self._providers,
                commands=self._commands,
                throttles=self._throttles,
                toolbox=self._toolbox,
                batch_dir=setup.batch_dir,
                meter=meter,
                book=GuardBook(self._guard, tag),
                tag=tag,
            )
            twin = Twin(
                task,
                route,
                runner,
                order.transcript,
                self._clock,
                order.queued_ts,
                self._outbox,
                cost_known=starts_known(route),
                secrets=self._toolbox.secrets,
            )
            if order.figures is not None:
                twin.progress.follow(order.figures)
            meter.progress = twin.progress
            for receipt in order.steers:
                twin.steering.add(receipt)
            self._twins[task.id] = twin
        twin.leads_gate = order.leads_gate
        self._pool.submit(functools.partial(self._run, twin))

    def _run(self, twin: Twin) -> None:
        try:
            twin.run()  # never raises; reports its end (Done) or its pause
        finally:
            if twin.status.terminal:
                self._twins.pop(twin.task.id, None)

    def _missed(self, child_id: str, receipt: SteerReceipt, twin: Twin | None) -> None:
        """A steer that reached a child already ending, or gone from here: missed, said so."""
        reason = "the child ended before its next turn"
        note = missed_note(receipt.message, reason)
        if twin is not None:
            twin.transcript.write("operator", note)
            twin.settle(receipt, SteerState.MISSED, reason)
            return
        now = self._clock()
        self._outbox.put(Lines(child_id, (Write(child_id, now, "operator", note),)))
        settled = dataclasses.replace(receipt, state=SteerState.MISSED, settled_ts=now, how=reason)
        self._outbox.put(Fact(ReceiptSettled(settled)))
