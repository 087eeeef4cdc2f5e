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
# How long nodes may take to start. Ray waits 30 s for its GCS's port by default, which a
# machine at a load of 20 can pass; the owner processes the tests start inherit this too.
START_S = 180
WAITS = {"RAY_gcs_server_port_wait_time_s": str(START_S)}


@contextlib.contextmanager
def shared_cluster() -> Iterator[Cluster]:
    """The session's cluster, this process its driver; shut down (and the environment put
    back) when it ends."""
    saved = {name: os.environ.get(name) for name in (KEY_ENV, *WAITS)}
    os.environ.update(WAITS)
    # The nodes' workers read a route's key from the environment they inherit from this process.
    os.environ[KEY_ENV] = "sk-ray-test-key"
    # The usual umask, which the nodes' processes keep: what a worker writes without a mode of
    # its own others could read (test_ray's private-workspace test checks that none is).
    umask = os.umask(0o022)
    try:
        nodes = Cluster(initialize_head=True, head_node_args=NODE)
        nodes.add_node(wait=False, **NODE)
    finally:
        os.umask(umask)
    try:
        nodes.wait_for_nodes(timeout=START_S)
        ray.init(address=nodes.address, log_to_driver=False, configure_logging=False)
        yield nodes
    finally:
        ray.shutdown()
        nodes.shutdown()
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def two_nodes(nodes: Cluster) -> Cluster:
    """The cluster with its second node: added again if a test removed it."""
    if not nodes.worker_nodes:
        umask = os.umask(0o022)
        try:
            nodes.add_node(wait=False, **NODE)
        finally:
            os.umask(umask)
        nodes.wait_for_nodes(timeout=START_S)
    return nodes
