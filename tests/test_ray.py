"""The Ray executor on a real local Ray cluster (the session's two nodes, tests/raycluster.py):
children's work on worker actors, decided and recorded by the owner (this process).

Children are held where they are needed by the loopback server (a reply stalled until the test
releases it), which the workers reach like any model server: nothing relies on a child being slow
enough."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
import ray
from flightdeck.engine.api import Engine
from flightdeck.engine.errors import ConfigError
from flightdeck.engine.inputs.settings import CommandSpec, Route, Settings
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.model import ChildStatus, SteerState, Usage
from flightdeck.engine.records.meter import route_cost
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.report import build_report

from helpers import HANG_S, batch, ended, run_to_end, settings, sim_route, start, tasks_batch, until
from loopback import Loopback, Received, Reply, ToolUse, route_for

# The session's cluster of two nodes (conftest's ray_nodes), one worker on each.
pytestmark = [
    pytest.mark.ray,
    pytest.mark.xdist_group("ray"),
    pytest.mark.slow,
    pytest.mark.usefixtures("ray_nodes"),
]

FAKES = Path(__file__).parent / "fakes"
LIST_DIR = (ToolUse("call-1", "list_dir", {"path": "."}),)


def on_ray(s: Settings) -> Settings:
    return dataclasses.replace(s, engine=dataclasses.replace(s.engine, executor="ray"))


def goal_of(received: Received) -> str:
    return str(received.body["messages"][1]["content"])


def operator_said(received: Received) -> list[str]:
    return [
        str(m["content"])
        for m in received.body["messages"]
        if str(m.get("content") or "").startswith("[operator]")
    ]


class Script:
    """Replies by child (its goal): the first request of each held child stalls until
    released; `then` says what the later ones get."""

    def __init__(self, held: set[str], then: Callable[[str, int, Received], Reply]) -> None:
        self.held = held
        self.then = then
        self.seen: dict[str, list[Received]] = {}

    def __call__(self, received: Received) -> Reply:
        goal = goal_of(received)
        count = len(self.seen.setdefault(goal, []))
        self.seen[goal].append(received)
        if count == 0 and goal in self.held:
            return Reply(text="thinking about it at length", chunk_chars=4, stall_after_chunks=1)
        return self.then(goal, count, received)

    def asked(self, goal: str) -> int:
        return len(self.seen.get(goal, []))


def lines(path: str) -> list[str]:
    try:
        return Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:  # not started yet
        return []


def test_a_sim_batch_on_ray_ends_as_on_threads(tmp_path: Path) -> None:
    route = sim_route(tool_turns=2, cache=False)  # the sim's cache is per client: off for both
    tasks = batch(40)
    ray_snap = run_to_end(start(tasks, on_ray(settings(route, pool=8)), tmp_path / "r"), 120)
    threads = run_to_end(start(tasks, settings(route, pool=8), tmp_path / "t"), 120)

    def figures(c: Any) -> tuple[Any, ...]:
        a = c.activity
        return (c.status, c.usage, c.cost_usd, a.api_calls, a.tool_calls, a.turns, c.result)

    assert {c.id: figures(c) for c in ray_snap.children} == {
        c.id: figures(c) for c in threads.children
    }
    assert ray_snap.totals.completed == 40
    assert ray_snap.totals.cost_usd == threads.totals.cost_usd > 0
    assert all(c.node for c in ray_snap.children) and not any(c.node for c in threads.children)
    # The transcripts read alike: the same roles in the same order, for every child.
    for mine, theirs in zip(ray_snap.children, threads.children, strict=True):
        roles = [
            [ln.split("│")[0][13:].strip() for ln in lines(c.transcript)] for c in (mine, theirs)
        ]
        assert roles[0] == roles[1], mine.id
    # The report, from the store: the same figures, and where each child ran.
    with StoreReader(tmp_path / "r" / "state" / "flightdeck.db") as reader:
        report = build_report(reader)
    with StoreReader(tmp_path / "t" / "state" / "flightdeck.db") as reader:
        other = build_report(reader)
    assert report["totals"] == other["totals"]
    assert {c["id"]: c["cost_usd"] for c in report["children"]} == {
        c["id"]: c["cost_usd"] for c in other["children"]
    }
    assert all(c["node"] for c in report["children"])


def test_what_a_child_on_a_worker_writes_in_the_batchs_own_workspace_is_private(
    tmp_path: Path,
) -> None:
    from test_private import assert_private

    write = ToolUse("call-1", "write_file", {"path": "notes/today.md", "content": "reviewed"})

    def reply(received: Received) -> Reply:
        if any(m.get("role") == "tool" for m in received.body["messages"]):
            return Reply(text="written")
        return Reply(text="writing it down", tools=(write,))

    with Loopback(reply) as server:
        route = route_for(server, "openai", read_timeout_s=60.0)
        snap = run_to_end(start(batch(1), on_ray(settings(route, pool=1)), tmp_path))
    [child] = snap.children
    assert child.status is ChildStatus.COMPLETED and child.node
    state = tmp_path / "state"
    written = state / "batches" / snap.batch_id / "workspace" / "notes" / "today.md"
    assert written.read_text() == "reviewed"
    # The workers' umask is 022 (the cluster fixture): the tool's own modes make it private.
    assert_private(state)


def test_steer_steer_now_stop_pause_and_continue_reach_children_on_workers(
    tmp_path: Path,
) -> None:
    goals = {name: f"Review the {name} module" for name in ("now", "next", "stop", "pause")}

    def then(goal: str, count: int, received: Received) -> Reply:
        if operator_said(received):
            return Reply(text="done, as the operator said")
        if goal in (goals["next"], goals["pause"]) and count == 1:
            return Reply(text="looking around", tools=LIST_DIR)
        return Reply(text="done")

    script = Script(set(goals.values()), then)
    with Loopback(script) as server:
        route = route_for(server, "openai", read_timeout_s=60.0)
        tasks = tasks_batch(
            [Task(id=name, goal=goal, seq=i) for i, (name, goal) in enumerate(goals.items())]
        )
        engine = start(tasks, on_ray(settings(route, pool=4)), tmp_path)
        try:
            until(lambda: all(script.asked(g) for g in goals.values()), 60, what="all held")
            snap = engine.snapshot()
            assert all(c.status is ChildStatus.RUNNING and c.node for c in snap.children)

            # steer --now: the held response is cut and the turn restarts with the message
            engine.steer(["now"], "focus on the tests", now=True)
            until(lambda: status(engine, "now") is ChildStatus.COMPLETED, HANG_S, what="now done")
            [again] = script.seen[goals["now"]][1:]
            assert operator_said(again) == ["[operator] focus on the tests"]

            t0 = time.monotonic()
            engine.stop(["stop"])
            until(lambda: status(engine, "stop") is ChildStatus.STOPPED, HANG_S, what="stopped")
            stopped_in = time.monotonic() - t0

            engine.steer(["next"], "check the docs too")
            engine.pause(["pause"])
            until(lambda: engine.snapshot().child("pause").pausing, HANG_S, what="pausing")
            server.release()  # the held replies end; each child retries its first turn
            until(lambda: status(engine, "pause") is ChildStatus.PAUSED, HANG_S, what="paused")
            asked = script.asked(goals["pause"])
            until(lambda: status(engine, "next") is ChildStatus.COMPLETED, HANG_S, what="next done")
            assert script.asked(goals["pause"]) == asked  # paused: no call while it is
            engine.continue_(["pause"])
            assert engine.wait(60)
            snap = engine.snapshot()
        finally:
            engine.close()
    assert stopped_in < 10  # within 1 s when idle (tests/bench/bench_ray.py measures it)
    by_id = {c.id: c for c in snap.children}
    assert {i: c.status for i, c in by_id.items()} == {
        "now": ChildStatus.COMPLETED,
        "next": ChildStatus.COMPLETED,
        "stop": ChildStatus.STOPPED,
        "pause": ChildStatus.COMPLETED,
    }
    assert [r.state for r in by_id["now"].steers] == [SteerState.DELIVERED]
    assert [r.state for r in by_id["next"].steers] == [SteerState.DELIVERED]
    last = script.seen[goals["next"]][-1]
    assert operator_said(last) == ["[operator] check the docs too"]
    # The paused child went on with its conversation: its last call carried its first turn.
    assert len(script.seen[goals["pause"]][-1].body["messages"]) >= 4
    text = "\n".join(lines(by_id["pause"].transcript))
    assert "paused before turn 2" in text and "continued at turn 2" in text
    assert "response interrupted by the operator" in "\n".join(lines(by_id["now"].transcript))


def status(engine: Engine, child_id: str) -> ChildStatus | None:
    row = engine.snapshot().child(child_id)
    return None if row is None else row.status


def command_route(*argv: str, steer: str = "none") -> Route:
    spec = CommandSpec(argv=argv, kill_grace_s=1.0, steer=steer)  # type: ignore[arg-type]
    return Route(name="cmd", provider="command", model="cmd", command=spec)


def test_a_routes_key_unset_on_the_nodes_is_one_config_error_naming_the_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Set here, in the owner, after the nodes started: their workers do not have it.
    monkeypatch.setenv("FLIGHTDECK_OWNER_ONLY_KEY", "sk-owner-only-1234")
    route = dataclasses.replace(
        command_route("true"),
        options=MappingProxyType({"api_key_env": "FLIGHTDECK_OWNER_ONLY_KEY"}),
        key_line=7,
    )
    engine = Engine(batch(1, route="cmd"), on_ray(settings(route, pool=2)), state_dir=tmp_path)
    try:
        with pytest.raises(ConfigError) as caught:
            engine.start()
    finally:
        engine.close()
    error = caught.value
    assert error.field == "routes.cmd.api_key_env" and error.line == 7
    assert error.message.startswith("environment variable FLIGHTDECK_OWNER_ONLY_KEY is not set")
    assert "on node " in error.message and "`ray start`" in error.message
    assert "sk-owner-only" not in str(error)
    assert "\n" not in str(error)
    assert list((tmp_path / "batches").iterdir()) == []  # a batch that never started


def test_a_route_no_task_names_needs_nothing_on_the_nodes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As on threads, a route the batch does not use is never started nor looked for: the
    # shipped examples/agents config names Claude Code and Codex routes that `--executor ray`
    # refused for ANTHROPIC_API_KEY, unset on the nodes, though no task names them.
    monkeypatch.setenv("FLIGHTDECK_OWNER_ONLY_KEY", "sk-owner-only-1234")
    unused = dataclasses.replace(
        command_route("no-such-cli-anywhere"),
        name="unused",
        options=MappingProxyType({"api_key_env": "FLIGHTDECK_OWNER_ONLY_KEY"}),
    )
    snap = run_to_end(start(batch(2), on_ray(settings(sim_route(), unused, pool=2)), tmp_path))
    assert [c.status for c in snap.children] == [ChildStatus.COMPLETED] * 2


def test_an_owner_whose_ray_is_not_the_clusters_is_refused_in_one_line_exit_2(
    ray_nodes: Any, tmp_path: Path
) -> None:
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"goal": "one"}\n')
    config = tmp_path / "flightdeck.toml"
    config.write_text(
        '[engine]\nexecutor = "ray"\n\n[ray]\nworkers_per_node = 1\naddress = "auto"\n'
    )
    # This process's Ray, as another version would report itself when joining.
    code = (
        "import sys, ray; ray.__version__ = '2.0.0'; from flightdeck.tui.cli import main; "
        "sys.exit(main(sys.argv[1:]))"
    )
    state = tmp_path / "state"
    argv = ["run", str(tasks), "--config", str(config), "--headless", "--state-dir", str(state)]
    done = subprocess.run(
        [sys.executable, "-c", code, *argv],
        env=dict(os.environ, RAY_ADDRESS=ray_nodes.address, NO_COLOR="1", COLUMNS="400"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"flightdeck: {config}:6: ray.address: cannot join"), line
    assert "Version mismatch" in line and "2.0.0" in line and ray.__version__ in line, line


@pytest.mark.parametrize("mode", ["--headless", "--detach"])
def test_a_batch_the_cluster_refused_leaves_no_folder_and_no_row_behind(
    ray_nodes: Any, tmp_path: Path, mode: str
) -> None:
    # The cluster answers, so the run gets as far as making the batch's folder (and, detached,
    # starting its owner), then refuses to take the owner: a batch that never started. Every
    # process the run starts (its owner too) has this Ray report another version.
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text("import ray\nray.__version__ = '2.0.0'\n")
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"goal": "one"}\n')
    config = tmp_path / "flightdeck.toml"
    config.write_text(
        '[engine]\nexecutor = "ray"\n\n[ray]\nworkers_per_node = 1\naddress = "auto"\n'
    )
    state = tmp_path / "state"
    env = dict(
        os.environ,
        RAY_ADDRESS=ray_nodes.address,
        PYTHONPATH=os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
        NO_COLOR="1",
        COLUMNS="400",
    )

    def cli(*argv: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "flightdeck.tui.cli", *argv, "--state-dir", str(state)]
        return subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)

    done = cli("run", str(tasks), "--config", str(config), mode)
    assert (done.returncode, done.stdout) == (2, ""), done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"flightdeck: {config}:6: ray.address: cannot join"), line
    assert "Version mismatch" in line and "2.0.0" in line, line
    assert list((state / "batches").iterdir()) == []  # no folder of it, not even an empty one
    with StoreReader(state / "flightdeck.db") as reader:
        assert reader.batches() == []
    listed = cli("ls")
    assert listed.returncode == 0, listed.stderr
    assert not re.search(r"\d{8}-\d{6}-[0-9a-f]{4}", listed.stdout), listed.stdout


def test_what_the_cluster_publishes_to_drivers_goes_to_the_owners_log_not_its_stdout(
    ray_nodes: Any,
) -> None:
    # A node lost publishes "Raylet is terminated ... Last 20 lines of the Raylet logs:" (and
    # those lines) to every driver: one such message, published as Ray does, to an owner.
    # It waits for the message to be logged (a fixed sleep missed it on a busy machine).
    code = """
import logging, threading
import ray
from ray._private.utils import publish_error_to_driver
from flightdeck.engine.executors.cluster.join import connect
from flightdeck.engine.inputs.settings import RaySettings

logging.basicConfig(format="log: %(message)s")
seen = threading.Event()

class Seen(logging.Handler):
    def emit(self, record):
        if "Raylet is terminated" in record.getMessage():
            seen.set()

logging.getLogger().addHandler(Seen())  # after basicConfig's: called once that one wrote it
connect(RaySettings("auto"), None)
gcs = ray._private.worker.global_worker.gcs_client
publish_error_to_driver("test", "Raylet is terminated.\\n[state-dump] a line", gcs)
seen.wait(90)
ray.shutdown()
"""
    done = subprocess.run(
        [sys.executable, "-c", code],
        env=dict(os.environ, RAY_ADDRESS=ray_nodes.address),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Raylet is terminated" not in done.stdout and "state-dump" not in done.stdout
    assert "log: Ray (raylet): Raylet is terminated." in done.stderr, done.stderr
    assert "state-dump" not in done.stderr


def pids_of(transcript: str) -> tuple[int, int] | None:
    for line in lines(transcript):
        if "root " in line and "grandchild " in line:
            words = line.split("│", 1)[1].split()
            return int(words[1]), int(words[3])
    return None


def test_a_command_childs_tree_is_killed_on_its_node_when_stopped(tmp_path: Path) -> None:
    holder = str(FAKES / "tree_holder.py")
    route = command_route("python3", holder, str(tmp_path / "{id}.ran"))
    engine = start(batch(1, route="cmd"), on_ray(settings(route, pool=2)), tmp_path)
    try:
        child = engine.snapshot().children[0]
        until(lambda: pids_of(child.transcript) is not None, 60, what="its pids")
        found = pids_of(child.transcript)
        assert found is not None
        root, grandchild = found
        assert not ended(root) and not ended(grandchild)
        engine.stop([child.id])
        assert engine.wait(HANG_S)
    finally:
        engine.close()
    assert status(engine, child.id) is ChildStatus.STOPPED
    # It ignores SIGTERM; its grandchild left its group for a session of its own: both killed.
    until(lambda: ended(root) and ended(grandchild), 60, what="the tree gone")


def test_a_worker_killed_mid_run_loses_no_child(tmp_path: Path) -> None:
    tasks = batch(8, goal="Check part {i}")
    held = {t.goal for t in tasks.tasks}
    script = Script(held, lambda goal, count, received: Reply(text="done"))
    with Loopback(script) as server:
        route = route_for(server, "openai", read_timeout_s=60.0)
        engine = start(tasks, on_ray(settings(route, pool=8)), tmp_path)
        try:
            until(lambda: all(script.asked(g) for g in held), 60, what="all eight held")
            executor: Any = engine._pool
            (node, actor, victims), *_ = executor.workers
            assert victims, "the first worker runs some of them"
            ray.kill(actor)
            until(
                lambda: all(script.asked(engine.snapshot().child(c).goal) >= 2 for c in victims),
                60,
                what="the lost children asked again",
            )
            server.release()
            assert engine.wait(90)
            snap = engine.snapshot()
        finally:
            engine.close()
    assert snap.totals.completed == 8, [(c.id, c.status, c.error) for c in snap.children]
    for child_id in victims:
        text = "\n".join(lines(snap.child(child_id).transcript))  # type: ignore[union-attr]
        assert f"its worker on node {node} was lost" in text
        assert "it restarts from the start" in text
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
        report = build_report(reader)
        lost = [e for e in reader.events(engine.batch_id) if e[2] == "lost_attempt"]
    assert sorted(e[1] for e in lost) == sorted(victims)
    assert all(json.loads(e[3])["rerun"] for e in lost)
    assert report["recovery"]["rerun"] == len(victims)


def test_children_whose_workers_were_all_lost_at_once_wait_for_a_new_one_and_run_again(
    tmp_path: Path,
) -> None:
    tasks = batch(4, goal="Check part {i}")
    held = {t.goal for t in tasks.tasks}
    script = Script(held, lambda goal, count, received: Reply(text="done"))
    with Loopback(script) as server:
        route = route_for(server, "openai", read_timeout_s=60.0)
        engine = start(tasks, on_ray(settings(route, pool=4)), tmp_path)
        try:
            until(lambda: all(script.asked(g) for g in held), 60, what="all four held")
            executor: Any = engine._pool
            for _, actor, _ in executor.workers:  # every worker: none is left to take them
                ray.kill(actor)
            until(lambda: all(script.asked(g) >= 2 for g in held), 90, what="all asked again")
            server.release()
            assert engine.wait(120)
            snap = engine.snapshot()
        finally:
            engine.close()
    assert snap.totals.completed == 4, [(c.id, c.status, c.error) for c in snap.children]
    assert all(script.asked(g) == 2 for g in held)  # each ran again, once


def test_what_attempts_lost_with_a_worker_cost_is_counted_live_as_the_report_counts_it(
    tmp_path: Path,
) -> None:
    # Each child is billed a first call (a tool call), then held on its second; a worker is
    # killed there. The in-process snapshot (the headless summary's `lost attempts:` line,
    # the meter) counted only owners lost before a resume, never these.
    asked: dict[str, int] = {}
    lock = threading.Lock()

    def respond(received: Received) -> Reply:
        goal = goal_of(received)
        with lock:
            count = asked[goal] = asked.get(goal, 0) + 1
        if count == 1:
            return Reply(text="looking first", tools=LIST_DIR)
        if count == 2:
            return Reply(text="thinking about it at length", chunk_chars=4, stall_after_chunks=1)
        return Reply(text="done")

    def seen(goal: str) -> int:
        with lock:
            return asked.get(goal, 0)

    tasks = batch(4, goal="Check part {i}")
    with Loopback(respond) as server:
        route = route_for(server, "openai", read_timeout_s=60.0)
        engine = start(tasks, on_ray(settings(route, pool=4)), tmp_path)
        try:
            goals = [t.goal for t in tasks.tasks]
            until(lambda: all(seen(g) >= 2 for g in goals), 60, what="each held on its 2nd call")
            until(  # the first call's bill has come home from the workers
                lambda: all(c.cost_usd for c in engine.snapshot().children), 60, what="billed"
            )
            executor: Any = engine._pool
            (_, actor, victims), *_ = executor.workers
            assert victims, "the first worker runs some of them"
            ray.kill(actor)
            lost_goals = [engine.snapshot().child(c).goal for c in victims]  # type: ignore[union-attr]
            until(lambda: all(seen(g) >= 3 for g in lost_goals), 60, what="the lost ones again")
            server.release()
            assert engine.wait(90)
            snap = engine.snapshot()
        finally:
            engine.close()
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
        recovery = build_report(reader)["recovery"]
    assert recovery["rerun"] == len(victims)
    assert snap.lost_cost_usd is not None and snap.lost_cost_usd > 0
    assert float(snap.lost_cost_usd) == recovery["lost_cost_usd"]  # a float in the report
    assert snap.totals.completed == 4


def test_the_call_in_flight_when_a_worker_is_lost_is_billed_to_the_lost_attempt(
    tmp_path: Path,
) -> None:
    # Found by a walk-through: a worker killed mid-call dropped the call's estimate (the
    # prompt the server read, what streamed) from the spend, where a stop bills it: the meter
    # fell from $0.0072 to $0.0046. Each child's first call streams one chunk and stalls.
    tasks = batch(2, goal="Check part {i}")
    goals = {t.goal for t in tasks.tasks}
    script = Script(goals, lambda *_: Reply(text="done"))
    with Loopback(script) as server:
        route = route_for(server, "openai", read_timeout_s=60.0)
        engine = start(tasks, on_ray(settings(route, pool=2)), tmp_path)
        try:

            def flying() -> dict[str, Any]:
                rows = engine.snapshot().children
                return {c.id: c for c in rows if c.in_flight.output_tokens and c.in_flight_cost_usd}

            until(lambda: len(flying()) == 2, 60, what="both streaming, their figures home")
            executor: Any = engine._pool
            (_, actor, victims), *_ = executor.workers
            assert victims, "the first worker runs some of them"
            held = {c: flying()[c] for c in victims}
            ray.kill(actor)
            until(lambda: any(script.asked(g) > 1 for g in goals), 60, what="asked again")
            server.release()
            assert engine.wait(90)
            snap = engine.snapshot()
        finally:
            engine.close()
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
        lost = {
            e[1]: json.loads(e[3]) for e in reader.events(engine.batch_id) if e[2] == "lost_attempt"
        }
    assert set(lost) == set(victims)
    for child_id, row in held.items():
        # Nothing was billed before the cut: the lost attempt's spend is its estimate, whole.
        assert row.usage.total == 0 and row.in_flight.total > 0
        assert lost[child_id]["cost_usd"] == str(row.in_flight_cost_usd), lost[child_id]
    assert snap.lost_cost_usd == sum(r.in_flight_cost_usd for r in held.values())


def test_a_call_billed_just_before_its_worker_is_lost_is_not_billed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A worker sends a bill home at once (the meter) and its child's figures only every 0.1 s.
    # Lost in between, the owner's figures still showed the billed call in flight, and the lost
    # attempt billed its estimate on top: the meter counted that call twice. Here the figures
    # sent after the bill never reach the owner (the worker dies first, as it may): they are
    # dropped at the owner's door until the worker is killed.
    from flightdeck.engine.executors.cluster import home
    from flightdeck.engine.executors.cluster.wire import Billed, Figures

    answer = threading.Event()
    asked: list[Received] = []

    def respond(received: Received) -> Reply:
        asked.append(received)
        if len(asked) == 1:  # the first call, answered once its figures show it in flight
            answer.wait(60)
            return Reply(text="looking first", tools=LIST_DIR)
        if len(asked) == 2:  # the second, held until the worker is gone
            return Reply(text="thinking about it at length", chunk_chars=4, stall_after_chunks=1)
        return Reply(text="done")  # the attempt run again

    apply = home.Link._apply
    dying: list[home.Link] = []  # the link whose child was billed: its figures never come
    billed = threading.Event()

    def door(link: home.Link, item: Any) -> None:
        if isinstance(item, Figures) and link in dying:
            return
        apply(link, item)
        if isinstance(item, Billed) and not dying:
            dying.append(link)
            billed.set()

    monkeypatch.setattr(home.Link, "_apply", door)
    with Loopback(respond) as server:
        route = route_for(server, "openai", read_timeout_s=60.0)
        engine = start(batch(1, goal="Check part {i}"), on_ray(settings(route, pool=1)), tmp_path)
        try:
            (child_id,) = [c.id for c in engine.snapshot().children]

            def row() -> Any:
                return engine.snapshot().child(child_id)

            until(lambda: row().in_flight.input_tokens > 0, 60, what="its first call, home")
            answer.set()
            until(billed.is_set, 60, what="its first call billed at home")
            ray.kill(dying[0].actor)
            assert engine.wait(90)
            snap = engine.snapshot()
            meter = engine.meter.totals()
        finally:
            answer.set()
            engine.close()
    call = route_cost(Usage(input_tokens=120, output_tokens=12), route)  # each reply's usage
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
        (lost,) = [
            json.loads(e[3]) for e in reader.events(engine.batch_id) if e[2] == "lost_attempt"
        ]
    assert len(asked) == 3 and snap.totals.completed == 1
    # The lost attempt spent its first call, billed; its second had nothing home to estimate.
    assert lost["cost_usd"] == str(call), lost
    assert meter.cost_usd == snap.totals.cost_usd == 2 * call


def test_a_batch_ending_while_a_lost_worker_is_replaced_waits_for_the_replacement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ray connects on first use: a replacement that got to `.remote()` after the batch's
    # ray.shutdown() would start a cluster of its own in an owner that is ending.
    from flightdeck.engine.executors.cluster import executor as cluster

    tasks = batch(2, goal="Check part {i}")
    held = {t.goal for t in tasks.tasks}
    script = Script(held, lambda goal, count, received: Reply(text="done"))
    looking, gate = threading.Event(), threading.Event()
    nodes = cluster.alive_nodes

    def nodes_held() -> list[dict[str, Any]]:  # the replacement, held where it looks
        looking.set()
        gate.wait(60)
        return nodes()

    with Loopback(script) as server:
        route = route_for(server, "openai", read_timeout_s=60.0)
        engine = start(tasks, on_ray(settings(route, pool=2)), tmp_path)
        closing = threading.Thread(target=engine.close)
        try:
            until(lambda: all(script.asked(g) for g in held), 60, what="both held")
            executor: Any = engine._pool
            (_, actor, victims), *_ = executor.workers
            assert victims, "the first worker runs one of them"
            monkeypatch.setattr(cluster, "alive_nodes", nodes_held)
            ray.kill(actor)
            until(looking.is_set, 60, what="the lost worker's replacement under way")
            server.release()
            assert engine.wait(90)
            closing.start()
            closing.join(1.0)  # time enough to end, if it did not wait
            assert closing.is_alive(), "the batch ended with a replacement under way"
        finally:
            gate.set()
            closing.join(60)
    assert not closing.is_alive()
    assert engine.snapshot().totals.completed == 2
    assert executor.workers == []


def test_a_killed_workers_command_children_do_not_outlive_it(tmp_path: Path) -> None:
    holder = str(FAKES / "tree_holder.py")
    route = command_route("python3", holder, str(tmp_path / "{id}.ran"))
    engine = start(batch(1, route="cmd"), on_ray(settings(route, pool=2)), tmp_path)
    try:
        child = engine.snapshot().children[0]
        until(lambda: pids_of(child.transcript) is not None, 60, what="its pids")
        found = pids_of(child.transcript)
        assert found is not None
        executor: Any = engine._pool
        [actor] = [a for _, a, placed in executor.workers if child.id in placed]
        ray.kill(actor)  # SIGKILL: no code of the worker runs; its guard ends the tree
        until(lambda: ended(found[0]) and ended(found[1]), HANG_S, what="the tree gone")
        # It runs again on a worker left (the marker file says so: it prints and ends).
        assert engine.wait(60)
    finally:
        engine.close()
    row = engine.snapshot().children[0]
    said = "\n".join(lines(row.transcript))
    assert row.status is ChildStatus.COMPLETED, (row.error, said)
    assert "ran again" in said


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # Textual runs on asyncio


async def app_until(pilot: Any, condition: Callable[[], object], what: str) -> None:
    """Let the app run until `condition()` holds (60 s at most)."""
    deadline = time.monotonic() + 60
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for: {what}"
        await pilot.pause(0.02)


@pytest.mark.anyio
async def test_the_tui_attached_to_a_ray_batch_shows_its_rows_and_transcripts(
    tmp_path: Path,
) -> None:
    from flightdeck.engine.attached.view import StoreView
    from flightdeck.engine.commands import Steer, Stop
    from flightdeck.tui.app import FlightdeckApp
    from flightdeck.tui.screens.main import UiOptions

    tasks = batch(3, goal="Audit package {i}")
    held = {t.goal for t in tasks.tasks}
    script = Script(held, lambda goal, count, received: Reply(text=f"audited: {goal}"))
    with Loopback(script) as server:
        route = route_for(server, "openai", read_timeout_s=60.0)
        engine = start(tasks, on_ray(settings(route, pool=3)), tmp_path)
        view: StoreView | None = None
        try:
            # The batch's row is queued to the store's writer at start: committed first (under
            # load the view asked too early, and the engine left running broke the session's
            # cluster at its end).
            assert engine.flush(60)
            view = StoreView(tmp_path / "state" / "flightdeck.db", engine.batch_id)
            options = UiOptions(poll_s=0.05, transcript_poll_s=0.05, cursor_blink=False)
            app = FlightdeckApp(view, options)
            async with app.run_test(size=(160, 50)) as pilot:
                table = app.main.table
                await app_until(pilot, lambda: len(table.shown) == 3, "three rows")
                await app_until(
                    pilot,
                    lambda: all(r.status is ChildStatus.RUNNING for r in table.rows_by_id.values()),
                    "all three running on the cluster",
                )
                assert all(r.node for r in table.rows_by_id.values())
                table.select("t0001")
                await app_until(
                    pilot,
                    lambda: any("Audit package 1" in ln for ln in app.main.transcript.lines),
                    "its transcript, written by the owner from what its worker sent",
                )
                detail = app.main.query_one("#detail")
                await app_until(pilot, lambda: "node " in str(detail.render()), "its node")
                # Commands sent as a client sends them (recorded in the store, applied by the
                # owner) reach the children on their workers.
                view.send(Stop(("t0002",)))
                await app_until(
                    pilot,
                    lambda: table.rows_by_id["t0002"].status is ChildStatus.STOPPED,
                    "t0002 stopped",
                )
                first = tasks.tasks[0].goal
                # Its held first request at the server, so the steer --now cuts that response
                # (RUNNING alone can come before a loaded worker has sent it).
                await app_until(pilot, lambda: script.asked(first) == 1, "t0000's first request")
                view.send(Steer(("t0000",), "mind the tests", now=True))
                await app_until(
                    pilot,
                    lambda: (
                        [r.state for r in table.rows_by_id["t0000"].steers]
                        == [SteerState.DELIVERED]
                    ),
                    "the steer --now delivered on its worker",
                )
                # Delivered to the child, which then asks the server again with it.
                await app_until(
                    pilot,
                    lambda: operator_said(script.seen[first][-1]) == ["[operator] mind the tests"],
                    "the steer in t0000's next request",
                )
                server.release()
                done = ChildStatus.COMPLETED
                await app_until(
                    pilot,
                    lambda: (
                        {i: r.status for i, r in table.rows_by_id.items()}
                        == {"t0000": done, "t0001": done, "t0002": ChildStatus.STOPPED}
                    ),
                    "two completed, one stopped",
                )
                await app_until(
                    pilot,
                    lambda: any(
                        "audited: Audit package 1" in ln for ln in app.main.transcript.lines
                    ),
                    "the answer in the transcript pane",
                )
        finally:
            if view is not None:
                view.close()
            engine.close()


def test_children_on_workers_delegate_and_their_delegates_run_on_the_cluster(
    tmp_path: Path,
) -> None:
    # Four parents and two slots: a parent waiting on its delegates (on its worker) holds none.
    route = dataclasses.replace(
        sim_route(tool_turns=0, delegate_rate=1.0, delegates=3, cache=False), delegate=True
    )
    s = on_ray(settings(route, pool=2))
    s = dataclasses.replace(s, budget=dataclasses.replace(s.budget, max_depth=1))
    snap = run_to_end(start(batch(4), s, tmp_path), 120)
    rows = {c.id: c for c in snap.children}
    assert len(rows) == 4 + 4 * 3
    assert {c.status for c in snap.children} == {ChildStatus.COMPLETED}
    assert all(c.node for c in snap.children)
    for i in range(4):
        parent = rows[f"t{i:04d}"]
        text = "\n".join(lines(parent.transcript))
        for k in (1, 2, 3):  # each delegate's answer came back to its parent's worker
            assert rows[f"t{i:04d}.{k}"].parent == parent.id
            assert f"[t{i:04d}.{k}] completed" in text


def test_a_parent_run_again_after_its_worker_was_lost_takes_no_slot_when_its_old_delegates_end(
    tmp_path: Path,
) -> None:
    # Two slots. The parent's first run delegates one part and waits on its worker, which is
    # killed: it runs again (the same child) and delegates three parts, the first held. Once
    # the old part ends, the other two run in turn in the slot it left: the old run's call
    # took a slot for the parent, still waiting on its new parts, and kept it from the third.
    held = {"old part": threading.Event(), "new part a": threading.Event()}
    asked: dict[str, int] = {}
    lock = threading.Lock()

    def split(*goals: str) -> Reply:
        parts = [{"goal": g} for g in goals]
        return Reply(text="splitting", tools=(ToolUse("call-1", "delegate", {"tasks": parts}),))

    def respond(received: Received) -> Reply:
        goal = goal_of(received)
        with lock:
            count = asked[goal] = asked.get(goal, 0) + 1
        if goal == "Split this":
            replies = {1: split("old part"), 2: split("new part a", "new part b", "new part c")}
            return replies.get(count, Reply(text="all parts done"))
        gate = held.get(goal)
        if gate is not None:
            gate.wait(60)
        return Reply(text=f"{goal}: done")

    def seen(goal: str) -> int:
        with lock:
            return asked.get(goal, 0)

    with Loopback(respond) as server:
        route = dataclasses.replace(route_for(server, "openai", read_timeout_s=60.0), delegate=True)
        s = on_ray(settings(route, pool=2))
        s = dataclasses.replace(s, budget=dataclasses.replace(s.budget, max_depth=1))
        engine = start(batch(1, goal="Split this"), s, tmp_path)
        try:
            until(lambda: seen("old part") > 0, 60, what="the first run's part, held")
            executor: Any = engine._pool
            actor = next(a for _, a, ids in executor.workers if "t0000" in ids)
            ray.kill(actor)
            until(lambda: seen("new part a") > 0, 60, what="the second run's first part, held")
            assert seen("new part b") == 0  # both slots taken: the old part and new part a
            held["old part"].set()
            until(
                lambda: seen("new part c") > 0, HANG_S, what="the third new part, in the freed slot"
            )
            held["new part a"].set()
            snap = run_to_end(engine, 90)
        finally:
            for gate in held.values():
                gate.set()
            engine.close()
    parent = snap.child("t0000")
    assert parent is not None and parent.status is ChildStatus.COMPLETED, parent
    assert [c.id for c in snap.children if c.superseded] == ["t0000.1"]


def process_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]


def test_a_command_child_on_a_worker_pauses_and_continues(tmp_path: Path) -> None:
    script = tmp_path / "wait.py"
    script.write_text(
        "import os, sys, time\nprint('pid', os.getpid(), flush=True)\n"
        "while not os.path.exists(sys.argv[1]):\n    time.sleep(0.05)\nprint('released')\n"
    )
    go = tmp_path / "go"
    route = command_route("python3", str(script), str(go))
    engine = start(batch(1, route="cmd"), on_ray(settings(route, pool=2)), tmp_path / "s")
    try:
        child = engine.snapshot().children[0]

        def pid() -> int | None:
            found = [ln.split()[-1] for ln in lines(child.transcript) if "│ pid " in ln]
            return int(found[0]) if found else None

        until(lambda: pid() is not None, 60, what="its pid")
        process = pid()
        assert process is not None
        engine.pause([child.id])
        until(lambda: status(engine, child.id) is ChildStatus.PAUSED, HANG_S, what="paused")
        # its group suspended, on its node (the signal lands a moment after the row says so)
        until(lambda: process_state(process) == "T", HANG_S, what="its group stopped")
        engine.continue_([child.id])
        until(lambda: status(engine, child.id) is ChildStatus.RUNNING, HANG_S, what="running")
        until(lambda: process_state(process) != "T", HANG_S, what="resumed")
        go.touch()
        assert engine.wait(HANG_S)
    finally:
        engine.close()
    row = engine.snapshot().children[0]
    assert row.status is ChildStatus.COMPLETED
    text = "\n".join(lines(row.transcript))
    assert "process group suspended (SIGSTOP)" in text and "resumed (SIGCONT)" in text


def test_an_owner_that_dies_takes_its_workers_children_with_it_and_resume_runs_them_here(
    tmp_path: Path,
) -> None:
    import signal
    import subprocess
    import sys

    # The owner, a real `flightdeck run` process, starts a local cluster of its own.
    holder = FAKES / "tree_holder.py"
    (tmp_path / "flightdeck.toml").write_text(
        '[engine]\ndefault_route = "cmd"\nexecutor = "ray"\n\n'
        '[ray]\naddress = "local"\nnum_cpus = 1\nworkers_per_node = 1\n\n'
        f'[routes.cmd]\nprovider = "command"\nargv = ["python3", "{holder}", "{{id}}.ran"]\n'
        "kill_grace_s = 1\n",
        encoding="utf-8",
    )
    (tmp_path / "tasks.jsonl").write_text('{"id": "c1", "goal": "hold a tree"}\n')
    state = tmp_path / "state"
    run = ("run", "tasks.jsonl", "--headless", "--state-dir", str(state))
    owner = subprocess.Popen(
        [sys.executable, "-m", "flightdeck.tui.cli", *run],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert owner.stdout is not None
        batch_id = owner.stdout.readline().split()[1]
        transcript = str(state / "batches" / batch_id / "c1.log")
        until(lambda: pids_of(transcript) is not None, 120, what="its tree on the owner's cluster")
        found = pids_of(transcript)
        assert found is not None
        owner.send_signal(signal.SIGKILL)
        owner.wait(HANG_S)
        # Its cluster ends with it; the worker's guard ends the tree its child started.
        until(lambda: ended(found[0]) and ended(found[1]), 60, what="the tree gone with its owner")
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        assert owner.stdout is not None
        owner.stdout.close()
    engine = Engine.resume(state, batch_id)  # on this module's cluster: ray is initialized here
    engine.start()
    snap = run_to_end(engine, 120)
    [row] = snap.children
    assert row.status is ChildStatus.COMPLETED and row.node
    assert "ran again" in "\n".join(lines(row.transcript))


def test_a_child_on_a_worker_asks_the_operator_and_goes_on_with_the_answer(
    tmp_path: Path,
) -> None:
    # The question crosses home; the answer goes back to the worker, where its call waits (the
    # call holds an Event, which never crosses: sent whole, it failed the worker's pull).
    route = dataclasses.replace(sim_route(tool_turns=0, cache=False), ask_operator=True)
    engine = start(
        batch(2, goal="[sim:ask] ship item {i}"), on_ray(settings(route, pool=1)), tmp_path
    )
    try:
        until(
            lambda: all(c.question is not None for c in engine.snapshot().children),
            what="both children asking (one slot: a child that asks holds none)",
            timeout=120,
        )
        engine.answer(["t0000", "t0001"], "yes, ship it on Friday")
        snap = run_to_end(engine, 120)
    finally:
        engine.close()
    assert {c.status for c in snap.children} == {ChildStatus.COMPLETED}
    assert all(c.node for c in snap.children)
    for c in snap.children:
        assert "yes, ship it on Friday" in (c.result or "")
