"""Joining a cluster of its own, started here in another process: one that asks for a token
the owner was not given, one whose nodes cannot import flightdeck. Each refused in one line,
exit 2, whatever Ray writes while it tries (docs/ray.md, "Turning it on"); and a local
cluster's token is the user's alone, its processes ending with the batch."""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import until

pytestmark = [pytest.mark.ray, pytest.mark.xdist_group("ray")]

# A head of its own, in a process of its own: Ray reads RAY_AUTH_MODE once per process, and the
# session's cluster (tests/raycluster.py, this process its driver) is every other test's.
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
def own_head(**env: str) -> Iterator[str]:
    """A one-node cluster started with this environment added; its address. Ended when the
    block ends."""
    head = subprocess.Popen(
        [sys.executable, "-c", HEAD],
        env={**without_token(), **env},
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


def without_token() -> dict[str, str]:
    """This environment, without Ray's token settings."""
    return {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}


def ray_processes(folder: Path) -> list[str]:
    """The processes whose command line names `folder` (a Ray node's name their session's)."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            line = (proc / "cmdline").read_bytes()
        except OSError:  # ended meanwhile
            continue
        if str(folder).encode() in line:
            found.append(line.replace(b"\0", b" ").decode(errors="replace"))
    return found


def run_owner(folder: Path, config: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """`flightdeck run tasks.jsonl --headless` in `folder` with this config and environment,
    its state in `st`, to its end."""
    argv = ["run", "tasks.jsonl", "--headless", "--config", str(config), "--state-dir", "st"]
    return subprocess.run(
        [sys.executable, "-m", "flightdeck.tui.cli", *argv],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_cluster_asking_for_a_token_refuses_the_owner_in_one_line(tmp_path: Path) -> None:
    (tmp_path / "tasks.jsonl").write_text('{"goal": "one"}\n')
    config = tmp_path / "flightdeck.toml"
    config.write_text(
        '[engine]\nexecutor = "ray"\n\n[ray]\nworkers_per_node = 1\naddress = "auto"\n'
    )
    with own_head(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16)) as address:
        env = without_token()
        # Two tries instead of Ray's 20 (a second each), each a warning line of Ray's core.
        env.update(RAY_ADDRESS=address, RAY_gcs_server_port_wait_time_s="2", NO_COLOR="1")
        done = run_owner(tmp_path, config, env)
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"flightdeck: {config}:6: ray.address: cannot join"), line
    assert "RAY_AUTH_MODE=token" in line, line


def test_a_local_batch_keeps_its_token_private_and_leaves_no_ray_process(tmp_path: Path) -> None:
    # Ray makes ~/.ray/auth_token for a new local cluster where there is none, with the umask's
    # modes: whoever reads it can join every cluster it opens, later `ray start` ones too.
    home = tmp_path / "home"
    # Ray's own folder, short: tmp_path would make its sockets' paths too long for AF_UNIX.
    rays = Path(tempfile.mkdtemp(prefix="fd-ray-"))
    home.mkdir()
    (tmp_path / "tasks.jsonl").write_text('{"goal": "one"}\n')
    (tmp_path / "flightdeck.toml").write_text(
        '[engine]\nexecutor = "ray"\n\n[ray]\naddress = "local"\nnum_cpus = 1\n'
        "workers_per_node = 1\nobject_store_mb = 80\n\n[routes.sim]\ntime_scale = 0.001\n"
    )
    env = without_token()
    env.update(HOME=str(home), NO_COLOR="1", RAY_TMPDIR=str(rays))
    try:
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
        # The cluster the batch started ended with it; Ray keeps its session folder (its logs),
        # as it does every session's (docs/ray.md, "Turning it on").
        until(lambda: not ray_processes(rays), what=f"Ray's processes of {rays} to end")
        assert [p.name[:8] for p in (rays / "ray").glob("session_2*")] == ["session_"]
    finally:
        shutil.rmtree(rays, ignore_errors=True)
    assert "Token authentication" not in done.stderr  # Ray's notice to opt out: ours to choose
    token = home / ".ray" / "auth_token"
    assert stat.S_IMODE(token.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert len(token.read_text()) == 64 and sorted(p.name for p in token.parent.iterdir()) == [
        "auth_token"
    ]


def test_nodes_that_cannot_import_flightdeck_are_one_line_exit_2(tmp_path: Path) -> None:
    # The head's Python (so its workers') cannot import flightdeck, as where `ray start` ran
    # in another environment: the workers die as they start, which was a traceback, exit 1.
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['flightdeck'] = None\n")
    (tmp_path / "tasks.jsonl").write_text('{"goal": "one"}\n')
    config = tmp_path / "flightdeck.toml"
    config.write_text(
        '[engine]\nexecutor = "ray"\n\n[ray]\nworkers_per_node = 1\naddress = "auto"\n'
    )
    with own_head(PYTHONPATH=str(hide)) as address:
        env = {**without_token(), "RAY_ADDRESS": address, "NO_COLOR": "1"}
        done = run_owner(tmp_path, config, env)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith(f"flightdeck: {config}:6: ray.address: a flightdeck worker could not"), (
        line
    )
    assert "No module named 'flightdeck" in line and "install flightdeck" in line, line
    assert not list((tmp_path / "st").glob("batches/*")), "a batch that never started"
