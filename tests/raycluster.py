"""One Ray cluster for the whole test session: two nodes of `ray.cluster_utils.Cluster` on this
machine, started when a Ray test first asks for it (conftest's `ray_cluster`), shared by
tests/test_ray.py and tests/test_ray_nodes.py (which run on one xdist worker: loadgroup).

Starting a cluster is most of what the Ray tests cost: one start for the session instead of one
per module. A test that removes a node (test_ray_nodes) leaves one fewer; `two_nodes` adds one
back for whichever test runs next."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import ray
from ray.cluster_utils import Cluster

from loopback import KEY_ENV

# One CPU a node: the executor places one worker on each (workers_per_node is bounded by CPUs),
# two workers in all. Flightdeck's messages are small: little object store is needed.
NODE = {"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}
KEY = "sk-ray-test-key"  # the routes' key (loopback.KEY_ENV), in the nodes' environment
# How long nodes may take to start. Ray waits 30 s for its GCS's port by default, which a
# machine at a load of 20 can pass; the owner processes the tests start inherit this too.
START_S = 180
# Ray runs its workers at niceness 15, which suits a node of its own. Here they share two cores
# with the rest of the suite (and whatever else runs): at a load of 7 a worker took 8-121 s to
# start, past the executor's 120 s for its workers. At 0 they take their turn like the rest.
WAITS = {"RAY_gcs_server_port_wait_time_s": str(START_S), "RAY_worker_niceness": "0"}


@contextlib.contextmanager
def shared_cluster() -> Iterator[Cluster]:
    """The session's cluster, this process its driver; shut down (and the environment put
    back) when it ends."""
    saved = {name: os.environ.get(name) for name in WAITS}
    os.environ.update(WAITS)
    try:
        with starting():
            nodes = Cluster(initialize_head=True, head_node_args=NODE)
            nodes.add_node(wait=False, **NODE)
        nodes.wait_for_nodes(timeout=START_S)
        ray.init(address=nodes.address, log_to_driver=False, configure_logging=False)
        try:
            yield nodes
        finally:
            ray.shutdown()
            nodes.shutdown()
    finally:
        restore(saved)


def two_nodes(nodes: Cluster) -> Cluster:
    """The cluster with its second node: added again if a test removed it."""
    if not nodes.worker_nodes:
        with starting():
            nodes.add_node(wait=False, **NODE)
        nodes.wait_for_nodes(timeout=START_S)
    return nodes


@contextlib.contextmanager
def starting() -> Iterator[None]:
    """What a node's processes inherit from this one as they start, and keep: a route's key
    (the workers read it from their environment) and the usual umask (what a worker writes
    without a mode of its own others could read: test_ray's private-workspace test checks
    that none is). Only while they start: the tests after the Ray tests see neither."""
    saved = {KEY_ENV: os.environ.get(KEY_ENV)}
    os.environ[KEY_ENV] = KEY
    umask = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(umask)
        restore(saved)


def restore(saved: dict[str, str | None]) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
