"""What a Ray join says: standard error held while Ray joins a cluster (`core_lines_held`),
Ray's core lines dropped when the join fails and everything else written out after it; a
refusal in one sanitized line. No cluster: the lines are written to fd 2 by the test, as Ray's
core writes them, and the errors are made as Ray raises them."""

from __future__ import annotations

import os
import sys
import tempfile

import pytest
from flightdeck.engine.executors.cluster.join import core_lines_held, refused

CORE = b"[2026-12-06 14:59:20,984 W 23126 23126] gcs_client.cc:104: Failed to connect\n"


def open_fds() -> set[str]:
    return set(os.listdir("/proc/self/fd"))


def test_a_failed_join_drops_the_cores_lines_and_keeps_the_rest(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(ConnectionError), core_lines_held():
        os.write(2, CORE + b"a line of someone else's\n")
        raise ConnectionError("refused")
    assert capfd.readouterr().err == "a line of someone else's\n"


def test_a_join_that_succeeds_lets_every_line_out(capfd: pytest.CaptureFixture[str]) -> None:
    with core_lines_held():
        os.write(2, CORE + b"a line of someone else's\n")
    assert capfd.readouterr().err == CORE.decode() + "a line of someone else's\n"


def test_no_temp_file_lets_the_lines_out_as_they_come_and_leaks_no_fd(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    def full(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tempfile, "TemporaryFile", full)
    before = open_fds()
    with core_lines_held():
        os.write(2, CORE)
    assert open_fds() == before
    assert capfd.readouterr().err == CORE.decode()


def test_a_process_without_sys_stderr_joins_all_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stderr", None)  # pythonw, or a daemon that closed it
    ran = False
    with core_lines_held():
        ran = True
    assert ran


def test_a_refusal_is_the_last_line_of_rays_reason_sanitized() -> None:
    cause = RuntimeError("Failed to connect to GCS.\n\n  Timed out \x1b[2Jafter 20 s \n\n")
    try:
        raise ConnectionError("could not connect") from cause
    except ConnectionError as exc:
        said = refused("10.0.0.5:6379", exc)
    assert said == "cannot join the Ray cluster at 10.0.0.5:6379: Timed out after 20 s"


def invalid_token() -> ConnectionError:
    """A join the cluster refused for its token, as Ray raises it."""
    cause = RuntimeError("Failed to connect to GCS.\n  Status: InvalidAuthToken: bad token\n")
    try:
        raise ConnectionError("Failed to connect to Ray cluster") from cause
    except ConnectionError as exc:
        return exc


def test_a_refused_token_says_it_was_the_wrong_one_not_to_turn_tokens_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Token mode on (RAY_AUTH_MODE=token, which Ray also sets itself on finding
    # ~/.ray/auth_token): the token was sent and refused; "set RAY_AUTH_MODE=token" misleads.
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    said = refused("10.0.0.5:6379", invalid_token())
    assert "refused the token this process sent" in said
    assert "set RAY_AUTH_MODE=token" not in said
    monkeypatch.delenv("RAY_AUTH_MODE")
    assert "set RAY_AUTH_MODE=token" in refused("10.0.0.5:6379", invalid_token())


def test_token_mode_with_no_token_says_none_was_found() -> None:
    from ray.exceptions import AuthenticationError

    said = refused("10.0.0.5:6379", AuthenticationError("no authentication token was found"))
    assert said.endswith(
        "no token was found: put the cluster's token in ~/.ray/auth_token, "
        "or set RAY_AUTH_TOKEN where flightdeck runs"
    )
