"""`[engine] executor` and `[ray]`: read and checked like every setting (file, line, field), and
a Ray executor asked for where Ray is not installed refused in one line (exit 2). No cluster."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.errors import ConfigError
from flightdeck.engine.inputs.settings import RaySettings, load_settings
from flightdeck.engine.inputs.settings.stored import settings_from_json, settings_json

from helpers import HANG_S, batch, settings

CLI = (sys.executable, "-m", "flightdeck.tui.cli")


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "flightdeck.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_the_ray_table_is_read_and_kept_for_resume(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[engine]\nexecutor = "ray"\n\n[ray]\naddress = "local"\n'
        "num_cpus = 4\nworkers_per_node = 3\nobject_store_mb = 200\n",
    )
    loaded = load_settings(path)
    assert loaded.engine.executor == "ray"
    assert loaded.engine.executor_line == 2
    assert loaded.ray == RaySettings("local", 4, 3, 200)
    assert loaded.ray.address_line == 5
    again = settings_from_json(settings_json(loaded))
    assert (again.engine.executor, again.ray) == ("ray", loaded.ray)
    assert load_settings(write(tmp_path, "")).engine.executor == "threads"


@pytest.mark.parametrize(
    ("text", "line", "field", "words"),
    [
        ('[engine]\nexecutor = "dask"\n', 2, "engine.executor", 'expected "threads" or "ray"'),
        ('[ray]\naddress = "10.0.0.1:6379"\n', 2, "ray.address", 'expected "local" or "auto"'),
        # The natural next try after `ray start` prints a head's address: what to write instead.
        ('[ray]\naddress = "10.0.0.1:6379"\n', 2, "ray.address", 'address = "auto", with RAY_ADDR'),
        # Ray Client needs ray[client], which the extra does not install.
        ('[ray]\naddress = "ray://head:10001"\n', 2, "ray.address", "ray:// (Ray Client) is not"),
        ("[ray]\nworkers_per_node = 0\n", 2, "ray.workers_per_node", "between 1 and 64"),
        ("[ray]\nnum_cpus = 100000\n", 2, "ray.num_cpus", "between 1 and 1024"),
        ("[ray]\nobject_store_mb = 10\n", 2, "ray.object_store_mb", "between 80 and"),
        ("[ray]\nobject_store_mb = 4194304\n", 2, "ray.object_store_mb", "and 1048576"),
        ("[ray]\nworkers_per_node = 1000\n", 2, "ray.workers_per_node", "between 1 and 64"),
        ("[ray]\nnum_cpus = 1e308\n", 2, "ray.num_cpus", "expected an integer"),
        ("[ray]\nnodes = 2\n", 2, "ray.nodes", "unknown key"),
        # They size a cluster "local" starts; "auto" would silently ignore them.
        ('[ray]\naddress = "auto"\nnum_cpus = 2\n', 3, "ray.num_cpus", "ray start --num-cpus"),
        ('[ray]\nobject_store_mb = 99\naddress = "auto"\n', 2, "ray.object_store_mb", "remove"),
    ],
)
def test_bad_ray_settings_name_file_line_and_field(
    tmp_path: Path, text: str, line: int, field: str, words: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_settings(path)
    error = caught.value
    assert (error.line, error.field) == (line, field), str(error)
    assert words in str(error) and str(path) in str(error)


def test_providers_made_in_python_cannot_go_to_a_cluster(tmp_path: Path) -> None:
    from flightdeck.engine.providers.sim import SimProvider

    s = settings()
    s = dataclasses.replace(s, engine=dataclasses.replace(s.engine, executor="ray"))
    with pytest.raises(ConfigError, match="each worker makes its own"):
        Engine(batch(1), s, state_dir=tmp_path, providers={"sim": SimProvider(s.routes["sim"])})
    assert not (tmp_path / "flightdeck.db").exists()


def test_the_ray_executor_without_ray_installed_is_one_line_exit_2(tmp_path: Path) -> None:
    hide = tmp_path / "hide"
    hide.mkdir()
    # As if the extra were not installed: `import ray` fails in the flightdeck process.
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['ray'] = None\n")
    (tmp_path / "tasks.jsonl").write_text('{"goal": "one"}\n')
    env = {**os.environ, "PYTHONPATH": str(hide), "NO_COLOR": "1"}
    config = write(tmp_path, '[engine]\nexecutor = "ray"\n')
    done = run_cli(tmp_path, env, "--config", str(config))
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert f"{config}:2: engine.executor:" in line, line
    assert 'pip install "flightdeck[ray]"' in line, line
    assert not (tmp_path / "state").exists()


def test_executor_ray_on_the_command_line_without_ray_names_the_argument(tmp_path: Path) -> None:
    # A `ray` that cannot be imported, first on the path; the config never names an executor.
    fake = tmp_path / "fake" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text('raise ImportError("no ray here")\n')
    (tmp_path / "tasks.jsonl").write_text('{"goal": "one"}\n')
    config = write(tmp_path, "[engine]\nmax_concurrent = 2\n")
    env = {**os.environ, "PYTHONPATH": str(fake.parent), "NO_COLOR": "1"}
    done = run_cli(tmp_path, env, "--config", str(config), "--executor", "ray")
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("flightdeck: argument --executor: "), line
    assert 'pip install "flightdeck[ray]"' in line and str(config) not in line, line
    assert not (tmp_path / "state").exists()


def test_a_resumed_batch_run_with_executor_ray_without_ray_blames_the_argument_not_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `run --executor ray` keeps executor "ray" with the batch's settings (no line of the file
    # says it); `resume` where Ray is gone named the config file, which never mentions it.
    from flightdeck.engine.executors import check

    config = write(tmp_path, "[engine]\nmax_concurrent = 2\n")
    s = load_settings(config)
    s = dataclasses.replace(s, engine=dataclasses.replace(s.engine, executor="ray"))
    monkeypatch.setitem(sys.modules, "ray", None)  # as if the extra were not installed
    with pytest.raises(ConfigError) as caught:
        check(s, providers_given=False)
    said = str(caught.value)
    assert str(config) not in said, said
    assert said.startswith('engine.executor: "ray" (from run --executor) needs Ray'), said


def run_cli(cwd: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`flightdeck run tasks.jsonl --headless` in `cwd`, its state in `cwd/state`."""
    return subprocess.run(
        [*CLI, "run", "tasks.jsonl", "--headless", "--state-dir", "state", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_local_cluster_ray_cannot_start_is_one_line_exit_2_nothing_left(tmp_path: Path) -> None:
    # An object store larger than this machine's memory: Ray refuses it before starting any
    # process, in a ValueError that named ray.init's arguments and went out as a traceback.
    (tmp_path / "tasks.jsonl").write_text('{"goal": "one"}\n')
    config = write(tmp_path, '[engine]\nexecutor = "ray"\n\n[ray]\nobject_store_mb = 1048576\n')
    # Its own HOME: Ray (and the owner) make ~/.ray/auth_token for a local cluster first.
    env = {**os.environ, "NO_COLOR": "1", "HOME": str(tmp_path)}
    done = run_cli(tmp_path, env, "--config", str(config))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    line = done.stderr.strip().splitlines()[-1]  # after Ray's own warning about its token
    assert line.startswith(f"flightdeck: {config}:4: ray: cannot start a local Ray cluster: "), line
    assert "[ray] object_store_mb and num_cpus" in line, line
    assert not list((tmp_path / "state").glob("batches/*")), "a batch that never started"


RAY_AUTO = '[engine]\nexecutor = "ray"\n\n[ray]\nworkers_per_node = 1\naddress = "auto"\n'


def test_auto_with_no_ray_cluster_running_is_one_line_exit_2_nothing_written(
    tmp_path: Path,
) -> None:
    from ray._private.services import find_gcs_addresses

    if find_gcs_addresses():  # "auto" would join it
        pytest.skip("a Ray cluster runs on this machine")
    (tmp_path / "tasks.jsonl").write_text('{"goal": "one"}\n')
    config = write(tmp_path, RAY_AUTO)
    # No RAY_ADDRESS, and Ray's own folder here: no `ray start` address file to find.
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=str(tmp_path), NO_COLOR="1")
    done = run_cli(tmp_path, env, "--config", str(config))
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"flightdeck: {config}:6: ray.address: "), line
    assert "`ray start --head`" in line and 'address = "local"' in line, line
    assert not (tmp_path / "state").exists()


def test_auto_where_no_cluster_answers_fails_at_once_before_anything_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    # A port bound but not listening refuses connections, and no one else can take it.
    with socket.socket() as closed:
        closed.bind(("0.0.0.0", 0))
        given = f"127.0.0.1:{closed.getsockname()[1]}"
        monkeypatch.setenv("RAY_ADDRESS", given)
        s = settings()
        s = dataclasses.replace(
            s,
            engine=dataclasses.replace(s.engine, executor="ray"),
            ray=RaySettings("auto", address_line=7),
            source=tmp_path / "flightdeck.toml",
        )
        began = time.monotonic()
        with pytest.raises(ConfigError) as caught:
            Engine(batch(1), s, state_dir=tmp_path / "state")
    error = caught.value
    assert (error.line, error.field) == (7, "ray.address"), str(error)
    assert "no Ray cluster answers at" in error.message
    # Ray names the address as it resolved it (this machine's IP for 127.0.0.1): what was set too.
    assert f"(RAY_ADDRESS={given})" in error.message
    assert time.monotonic() - began < HANG_S  # ray.init alone waits over 10 minutes
    assert not (tmp_path / "state").exists()


def test_auto_where_a_listener_never_answers_is_one_line_exit_2_within_the_bound(
    tmp_path: Path,
) -> None:
    import socket

    from flightdeck.engine.executors.cluster.join import ANSWER_S

    # Something takes the connection (the kernel does, from the backlog) and never says a word:
    # ray.init waited on it for over 10 minutes. 127.0.0.2, as Ray turns 127.0.0.1 into this
    # machine's address, where nothing listens; still loopback only.
    with socket.socket() as silent:
        silent.bind(("127.0.0.2", 0))
        silent.listen()
        given = f"127.0.0.2:{silent.getsockname()[1]}"
        (tmp_path / "tasks.jsonl").write_text('{"goal": "one"}\n')
        config = write(tmp_path, RAY_AUTO)
        env = {**os.environ, "RAY_ADDRESS": given, "NO_COLOR": "1"}
        began = time.monotonic()
        done = run_cli(tmp_path, env, "--config", str(config))
        took = time.monotonic() - began
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(f"flightdeck: {config}:6: ray.address: no Ray cluster answers at"), line
    assert f"(RAY_ADDRESS={given})" in line and "GCS port" in line, line
    assert took < ANSWER_S + 15, took  # the CLI's start and its Ray import, on a busy machine
    assert not (tmp_path / "state").exists()


def test_auto_where_something_else_answers_names_the_gcs_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import http.server
    import threading

    from flightdeck.engine.executors.cluster.join import join_address

    # An HTTP server (the dashboard's port, 8265, is the usual slip) answers, in no gRPC:
    # ray.init waited on it as on silence.
    web = http.server.HTTPServer(("127.0.0.2", 0), http.server.BaseHTTPRequestHandler)
    serving = threading.Thread(target=web.serve_forever)
    serving.start()
    try:
        given = f"127.0.0.2:{web.server_address[1]}"
        monkeypatch.setenv("RAY_ADDRESS", given)
        monkeypatch.delenv("RAY_USE_TLS", raising=False)
        with pytest.raises(ConfigError) as caught:
            join_address(RaySettings("auto", address_line=6), tmp_path / "flightdeck.toml")
        assert caught.value.field == "ray.address"
        message = caught.value.message
        assert message.startswith(f"what answers at {given} (RAY_ADDRESS={given}) is not a Ray"), (
            message
        )
        assert "GCS port" in message and "8265" in message, message
        # A cluster with TLS answers plain words in TLS, not gRPC: its answer is enough.
        monkeypatch.setenv("RAY_USE_TLS", "1")
        assert join_address(RaySettings("auto"), None) == given
    finally:
        web.shutdown()
        serving.join()
        web.server_close()


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ("nonsense", "RAY_ADDRESS must be the host:port of a Ray cluster's head, got 'nonsense'"),
        ("ray://head:10001", "RAY_ADDRESS=ray://head:10001: ray:// (Ray Client) is not supported"),
    ],
)
def test_a_ray_address_that_is_no_cluster_address_is_named_as_the_culprit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, given: str, words: str
) -> None:
    # The file says "auto": the error must say it was RAY_ADDRESS that named no cluster.
    from flightdeck.engine.executors.cluster.join import join_address

    monkeypatch.setenv("RAY_ADDRESS", given)
    with pytest.raises(ConfigError) as caught:
        join_address(RaySettings("auto", address_line=6), tmp_path / "flightdeck.toml")
    assert caught.value.field == "ray.address"
    assert words in caught.value.message, caught.value.message


def test_a_cluster_that_asks_for_a_token_refuses_the_owner_in_one_line_saying_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What ray.init raises joining a cluster with token authentication (RAY_AUTH_MODE=token,
    # Ray's default for a `ray start` where ~/.ray/auth_token exists) from a process without
    # RAY_AUTH_MODE=token: seen on a real cluster, after Ray's 20 s of retries.
    import ray
    from flightdeck.engine.executors.cluster import join

    def refused(**_: object) -> None:
        try:
            raise RuntimeError(
                "Failed to connect to GCS. Last connection error: Traceback (most recent call "
                "last):\n  File ...\nray.exceptions.AuthenticationError: RPC error: "
                "InvalidAuthToken: Authentication token is missing or incorrect. Note: "
                "RAY_AUTH_MODE is currently 'disabled' (not 'token')."
            )
        except RuntimeError as exc:
            raise ConnectionError("Failed to connect to Ray cluster at 10.0.0.5:6379") from exc

    monkeypatch.setattr(join, "join_address", lambda *_: "10.0.0.5:6379")
    monkeypatch.setattr(join, "errors_to_log", lambda: None)  # Ray's driver left as it is
    monkeypatch.setattr(ray, "init", refused)
    with pytest.raises(ConfigError) as caught:
        join.connect(RaySettings("auto", address_line=6), tmp_path / "flightdeck.toml")
    error = caught.value
    assert (error.line, error.field) == (6, "ray.address"), str(error)
    assert error.message.startswith("cannot join the Ray cluster at 10.0.0.5:6379: it asks")
    assert "RAY_AUTH_MODE=token" in error.message and "\n" not in error.message


def test_auto_joins_as_rays_own_auto_does_which_takes_a_token_clusters_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ray takes the token (~/.ray/auth_token) of a cluster with token authentication only when
    # ray.init is given "auto" (or nothing), never an address: "auto" must reach it as "auto".
    # (Checked on a real `ray start` cluster with a token: joined; given its address: refused.)
    import ray
    from flightdeck.engine.executors.cluster import join

    given: list[object] = []
    monkeypatch.setattr(join, "join_address", lambda *_: "10.0.0.5:6379")
    monkeypatch.setattr(join, "errors_to_log", lambda: None)
    monkeypatch.setattr(ray, "init", lambda **kw: given.append(kw["address"]))
    join.connect(RaySettings("auto", address_line=6), tmp_path / "flightdeck.toml")
    assert given == ["auto"]
