"""A real cluster with Ray's token authentication refuses an owner that has no token: one line,
exit 2, whatever Ray's core writes on stderr while it retries (docs/ray.md, "Turning it on")."""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.xdist_group("ray")]

# A head of its own, in a process of its own: Ray reads RAY_AUTH_MODE once per process, so the
# session's cluster (tests/raycluster.py, this process its driver) cannot be made to ask for one.
HEAD = """
import sys
from ray.cluster_utils import Cluster
nodes = Cluster(
    initialize_head=True, head_node_args={"num_cpus": 1, "object_store_memory": 80 * 1024 * 1024}
)
print(nodes.address, flush=True)
sys.stdin.read()
nodes.shutdown()
"""


@contextlib.contextmanager
def head_asking_for_a_token() -> Iterator[str]:
    """A one-node cluster with token authentication; its address. Ended when the block ends."""
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16))
    head = subprocess.Popen(
        [sys.executable, "-c", HEAD],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert head.stdin is not None and head.stdout is not None
    try:
        address = head.stdout.readline().strip()
        assert address, "the head did not start"
        yield address
    finally:
        head.stdin.close()  # it shuts its node down
        try:
            head.wait(120)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
        head.stdout.close()


def test_a_cluster_asking_for_a_token_refuses_the_owner_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "tasks.jsonl").write_text('{"goal": "one"}\n')
    config = tmp_path / "flightdeck.toml"
    config.write_text(
        '[engine]\nexecutor = "ray"\n\n[ray]\nworkers_per_node = 1\naddress = "auto"\n'
    )
    with head_asking_for_a_token() as address:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
        # Two tries instead of Ray's 20 (a second each), each a warning line of Ray's core.
        env.update(RAY_ADDRESS=address, RAY_gcs_server_port_wait_time_s="2", NO_COLOR="1")
        argv = ["run", "tasks.jsonl", "--headless", "--config", str(config), "--state-dir", "st"]
        done = subprocess.run(
            [sys.executable, "-m", "flightdeck.tui.cli", *argv],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"flightdeck: {config}:6: ray.address: cannot join"), line
    assert "RAY_AUTH_MODE=token" in line, line


def test_the_token_a_local_cluster_makes_is_the_users_alone(tmp_path: Path) -> None:
    # Ray makes ~/.ray/auth_token for a new local cluster where there is none, with the umask's
    # modes: whoever reads it can join every cluster it opens, later `ray start` ones too.
    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "tasks.jsonl").write_text('{"goal": "one"}\n')
    (tmp_path / "flightdeck.toml").write_text(
        '[engine]\nexecutor = "ray"\n\n[ray]\naddress = "local"\nnum_cpus = 1\n'
        "workers_per_node = 1\nobject_store_mb = 80\n\n[routes.sim]\ntime_scale = 0.001\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(HOME=str(home), NO_COLOR="1")
    done = subprocess.run(
        [sys.executable, "-m", "flightdeck.tui.cli", "run", "tasks.jsonl", "--headless"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        umask=0o022,
    )
    assert done.returncode == 0, done.stderr
    token = home / ".ray" / "auth_token"
    assert stat.S_IMODE(token.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert len(token.read_text()) == 64 and sorted(p.name for p in token.parent.iterdir()) == [
        "auth_token"
    ]
