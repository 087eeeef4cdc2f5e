"""A `ray start` cluster started without token authentication, joined with "auto" from its own
machine once ~/.ray/auth_token exists (as after a "local" batch): Ray sends that token on its
own, and the cluster starts no worker for such a driver. The one line must say so, not blame
flightdeck's install (docs/ray.md, "Turning it on"). No cluster: Ray finds a cluster on this
machine by scanning its processes, which a shared test machine makes ambiguous."""

from __future__ import annotations

import types
from typing import Any

import pytest

pytest.importorskip("ray")  # the optional extra

from flightdeck.engine.executors.cluster import executor, join
from flightdeck.engine.inputs.settings import RaySettings
from ray.exceptions import ActorDiedError

NEVER_RAN = "The actor never ran - it was cancelled before it started running."


def joined(monkeypatch: pytest.MonkeyPatch, turned_on: bool) -> bool:
    """What connect says after a ray.init that, like Ray's for a cluster it found on this
    machine with a token file there, sets RAY_AUTH_MODE=token in this process (or not)."""

    def init(**_: Any) -> None:
        if turned_on:
            monkeypatch.setenv("RAY_AUTH_MODE", "token")

    monkeypatch.setattr(join, "ray", types.SimpleNamespace(init=init))
    monkeypatch.setattr(join, "join_address", lambda *_: "127.0.0.1:6379")
    monkeypatch.setattr(join, "errors_to_log", lambda: None)
    return join.connect(RaySettings("auto"), None)


def test_a_token_ray_sent_on_its_own_is_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    assert joined(monkeypatch, turned_on=True)
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    assert not joined(monkeypatch, turned_on=False)
    # The operator's own choice is theirs: the line need not explain it.
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    assert not joined(monkeypatch, turned_on=True)


def test_workers_a_tokenless_cluster_never_ran_name_the_token_not_the_install() -> None:
    lost = ActorDiedError()
    lost.error_msg = f"The actor died unexpectedly.\n{NEVER_RAN}"  # as Ray ends its message
    said = executor.not_started(lost, token_implied=True)
    assert NEVER_RAN in said and "RAY_AUTH_MODE=disabled" in said, said
    assert "install flightdeck" not in said and "\n" not in said, said
    # Without a token Ray chose to send, the cause is the nodes' Python, as before.
    assert "install flightdeck" in executor.not_started(lost), executor.not_started(lost)
    # A node that cannot import flightdeck says so whoever sent what token.
    lost.error_msg = "ModuleNotFoundError: No module named 'flightdeck'"
    assert "install flightdeck" in executor.not_started(lost, token_implied=True)
