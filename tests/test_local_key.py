"""A route to a server on this machine that names a variable for its key, unset: the server
gets a placeholder (a local server needs no key), and when it answers 401 anyway the child's
error names the variable to set, rather than only "check the API key"."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import flightdeck
from loopback import Loopback, Reply


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_a_401_from_a_local_server_sent_no_key_names_the_unset_variable(
    tmp_path: Path, provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("S27_LOCAL_KEY", raising=False)
    with Loopback() as server:
        server.default = Reply(status=401, message="Unauthorized")
        url = server.openai_url if provider == "openai" else server.anthropic_url
        (tmp_path / "flightdeck.toml").write_text(
            f'[engine]\ndefault_route = "local"\n\n[routes.local]\nprovider = "{provider}"\n'
            f'model = "local-model"\nbase_url = "{url}"\napi_key_env = "S27_LOCAL_KEY"\n'
        )
        (tmp_path / "t.jsonl").write_text('{"id": "c1", "goal": "Say hi."}\n')
        done = flightdeck("run", "t.jsonl", "--headless", cwd=tmp_path)
        assert len(server.received) == 1  # a 401 is not retried
    assert done.returncode == 1, done.stderr
    assert (
        "401 authentication failed (check the API key: S27_LOCAL_KEY is not set or empty, "
        "so no key was sent): Unauthorized" in done.stdout
    )
