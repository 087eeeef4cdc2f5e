"""`flightdeck run` on a terminal and `run --detach` check the batch in their own process before
they start the owner that runs it (owner/checks.py: the checks `Engine` runs as it is made). Bad
input fails there: exit 2, the engine's own words, nothing written. And a provider's client is
not made there (its SDK is the owner's to load), yet its key is checked and its secrets known."""

from __future__ import annotations

import threading
from pathlib import Path
from types import MappingProxyType

import pytest
from flightdeck.engine import providers
from flightdeck.engine.api import Engine, load_batch, load_settings
from flightdeck.engine.errors import FatalError, InputError
from flightdeck.engine.inputs.settings import Route
from flightdeck.engine.model import ChildStatus
from flightdeck.engine.providers import Provider, make_provider
from flightdeck.engine.providers.base import TurnRequest
from flightdeck.tui.cli import main
from flightdeck.tui.exitcodes import ExitCode

from helpers import batch, run_to_end, settings, start

KEY_ENV = "FD_CHECKS_KEY"
KEY = "sk-checks-0123456789abcdef"
GPT = '[routes.gpt]\nprovider = "openai"\nmodel = "gpt-4o-mini"\napi_key_env = "FD_CHECKS_KEY"\n'

# Each a batch the engine refuses, and the field its error names.
REFUSED = {
    "a key not set": ('[engine]\ndefault_route = "gpt"\n' + GPT, "t0", {}, "api_key_env"),
    "an unknown route": ('[engine]\ndefault_route = "nope"\n' + GPT, "t0", {}, "route"),
    "a key in a task's id": ('[engine]\ndefault_route = "gpt"\n' + GPT, KEY, {KEY_ENV: KEY}, "id"),
    "a cost cap no price can keep": (
        '[engine]\ndefault_route = "gpt"\n[budget]\nmax_cost_usd = 1.0\n'
        + GPT.replace("gpt-4o-mini", "no-such-model-anywhere"),
        "t0",
        {KEY_ENV: KEY},
        "max_cost_usd",
    ),
    # A port that is no number: the SDK's client refused it when the batch was made; made at
    # the route's first turn, it let the batch start and each child fail as an internal error.
    "a base_url no client can use": (
        '[engine]\ndefault_route = "local"\n[routes.local]\nprovider = "openai"\n'
        'model = "llama3"\nbase_url = "http://localhost:11434:v1"\n',
        "t0",
        {},
        "base_url",
    ),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_run_detach_refuses_what_the_engine_refuses_in_its_words_and_writes_nothing(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    case: str,
) -> None:
    config, task_id, env, field = REFUSED[case]
    (tmp_path / "flightdeck.toml").write_text(config)
    (tmp_path / "tasks.jsonl").write_text(f'{{"id": "{task_id}", "goal": "g"}}\n')
    monkeypatch.delenv(KEY_ENV, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    state = tmp_path / "state"
    with pytest.raises(InputError) as engine_said:  # the paths as the command line gives them
        Engine(load_batch(Path("tasks.jsonl")), load_settings(None), state_dir=state)
    assert engine_said.value.field.endswith(field)

    code = main(["run", "--detach", "tasks.jsonl", "--state-dir", str(state)])

    assert code == ExitCode.USAGE
    err = capsys.readouterr().err
    assert str(engine_said.value) in err
    assert KEY not in err
    assert not state.exists()


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_an_sdk_client_is_made_at_its_first_turn_once_with_the_secrets_it_has(
    provider: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Made with the batch, the client's SDK import (1.3-1.6 s for openai's) came before the
    # batch was recorded and shown. Its key is checked, and its secrets known, from the start.
    headers = {"Authorization": "Bearer gw-0123456789", "X-Gateway-Key": "gk-9876543210"}
    options = {"api_key_env": KEY_ENV, "base_url": "https://gw.example.com/v1", "headers": headers}
    route = Route(name="r", provider=provider, model="m", options=MappingProxyType(options))
    with pytest.raises(InputError, match=f"{KEY_ENV} is not set"):
        make_provider(route, {})
    made: list[Provider] = []
    real = providers._sdk_client
    both_in = threading.Barrier(2)

    def counted(route: Route, key: str) -> Provider:
        client = real(route, key)
        made.append(client)
        return client

    monkeypatch.setattr(providers, "_sdk_client", counted)
    first = make_provider(route, {KEY_ENV: KEY})
    assert made == []
    assert {KEY, "gw-0123456789", "gk-9876543210"} <= set(first.secrets)

    def turn() -> None:
        both_in.wait()
        first.open(TurnRequest("", (), (), 8)).close()  # lazy: sent when iterated, never here

    threads = [threading.Thread(target=turn) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    first.close()
    assert len(made) == 1  # two first turns at once: one client
    assert made[0].secrets == first.secrets


def test_no_client_is_made_after_the_route_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    # A turn's thread abandoned when the batch closed could come to its first turn after the
    # close and make a client, and its connections, that nothing would close.
    options = {"api_key_env": KEY_ENV, "base_url": "http://127.0.0.1:9/v1"}
    route = Route(name="gpt", provider="openai", model="m", options=MappingProxyType(options))
    made: list[Route] = []
    monkeypatch.setattr(providers, "_sdk_client", lambda route, key: made.append(route))
    first = make_provider(route, {KEY_ENV: KEY})
    first.close()
    with pytest.raises(FatalError, match="route gpt: the batch has closed"):
        first.open(TurnRequest("", (), (), 8))
    assert made == []


def test_a_client_the_sdk_will_not_make_fails_its_children_with_one_line(tmp_path: Path) -> None:
    # Made with the batch, such a client failed the start with a traceback; made at the first
    # turn, each child said "internal error" with a traceback in its transcript. A base_url the
    # SDK refuses, in a route built in Python (a settings file's is refused as it loads).
    options = {"api_key_env": KEY_ENV, "base_url": "http://localhost:11434:v1"}
    route = Route(name="gpt", provider="openai", model="gpt-x", options=MappingProxyType(options))
    engine = start(batch(2, route="gpt"), settings(route), tmp_path, env={KEY_ENV: KEY})
    snap = run_to_end(engine)
    said = "route gpt: its openai client could not be made: InvalidURL: Invalid port: '11434:v1'"
    for row in snap.children:
        assert row.status is ChildStatus.FAILED
        assert row.error is not None and said in row.error
        transcript = (engine.batch_dir / f"{row.id}.log").read_text()
        assert said in transcript and "Traceback" not in transcript
