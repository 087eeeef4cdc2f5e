"""Two Ray nodes on this machine (`ray.cluster_utils.Cluster`): a node removed mid-run loses
no child. On the session's cluster (tests/raycluster.py), which it leaves one node short: the
next test to ask for it gets the node back."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import ray
from flightdeck.engine.model import ChildStatus
from flightdeck.engine.records.reader import StoreReader
from ray.cluster_utils import Cluster

from helpers import batch, settings, start, until
from loopback import Loopback, Received, Reply, route_for

pytestmark = [pytest.mark.ray, pytest.mark.xdist_group("ray"), pytest.mark.slow]


def test_a_node_removed_mid_run_loses_no_child(ray_nodes: Cluster, tmp_path: Path) -> None:
    cluster = ray_nodes  # the session's (conftest): the next test to ask gets its node back
    tasks = batch(8, goal="Check part {i}")
    asked: dict[str, int] = {}
    release = []

    def reply(received: Received) -> Reply:
        goal = str(received.body["messages"][1]["content"])
        asked[goal] = asked.get(goal, 0) + 1
        if not release:  # held until the node is gone and every child has asked again
            return Reply(text="thinking at length", chunk_chars=4, stall_after_chunks=1)
        return Reply(text="done")

    with Loopback(reply) as server:
        route = route_for(server, "openai", read_timeout_s=90.0)
        s = settings(route, pool=8)
        s = dataclasses.replace(s, engine=dataclasses.replace(s.engine, executor="ray"))
        engine = start(tasks, s, tmp_path)
        try:
            until(lambda: len(asked) == 8, 90, what="all eight held")
            executor: Any = engine._pool
            here = ray.get_runtime_context().get_node_id()[:6]
            [(node, _, victims)] = [w for w in executor.workers if not w[0].endswith(here)]
            assert victims, "the second node runs some of them"
            [other] = cluster.worker_nodes
            cluster.remove_node(other)
            goals = {engine.snapshot().child(c).goal for c in victims}  # type: ignore[union-attr]
            until(lambda: all(asked[g] >= 2 for g in goals), 90, what="asked again elsewhere")
            release.append(True)
            server.release()
            assert engine.wait(90)
            snap = engine.snapshot()
        finally:
            engine.close()
    assert snap.totals.completed == 8, [(c.id, c.status, c.error) for c in snap.children]
    assert all(c.status is ChildStatus.COMPLETED for c in snap.children)
    for child_id in victims:
        row = snap.child(child_id)
        assert row is not None and row.node is not None and not row.node.endswith(node[-6:])
        text = Path(row.transcript).read_text(encoding="utf-8")
        assert f"its worker on node {node} was lost" in text
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
        lost = [e[1] for e in reader.events(engine.batch_id) if e[2] == "lost_attempt"]
    assert sorted(lost) == sorted(victims)
