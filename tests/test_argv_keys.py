"""A key pasted into a command route's argv or resume_argv is refused before anything is written:
flightdeck keeps a route's argv with the batch (its settings, for `resume`), on disk. The error
names the file, line and field, and never the key; ordinary argv still loads."""

from __future__ import annotations

import re
from pathlib import Path
from types import MappingProxyType

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.errors import ConfigError
from flightdeck.engine.inputs.keyshapes import looks_like_key
from flightdeck.engine.inputs.settings import (
    CommandSpec,
    EngineSettings,
    Route,
    Settings,
    load_settings,
)
from flightdeck.engine.inputs.tasks import Batch, Task

from helpers import flightdeck

ROOT = Path(__file__).resolve().parent.parent
# Made of parts, so no scanner takes this file for one holding keys; shaped as the real ones.
ANTHROPIC = "sk-ant-api03-" + "Fk3yQ_w-" * 11 + "AA"
OPENAI = "sk-proj-" + "Fk3yZx9" * 20
GITHUB = "ghp_" + "Fk3yZx" * 6
GOOGLE = "AIza" + "SyFk3yZx9_" * 3 + "Fk3yZ"
GROQ = "gsk_" + "Fk3yZx9q" * 7
XAI = "xai-" + "Fk3yZx9q" * 10
HUGGING_FACE = "hf_" + "FkyZxq" * 5 + "Fkyz"
HEAD = '[engine]\ndefault_route = "cli"\n\n[routes.cli]\nprovider = "command"\n'


def write(tmp_path: Path, route: str) -> Path:
    path = tmp_path / "flightdeck.toml"
    path.write_text(HEAD + route, encoding="utf-8")
    return path


def refused(tmp_path: Path, route: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load_settings(write(tmp_path, route))
    return info.value


def shows_no_key(text: str, key: str) -> bool:
    """Not the key, nor any 10 characters of it in a row."""
    return all(key[i : i + 10] not in text for i in range(len(key) - 9))


PASTED = [
    # (the route's lines, the line and field refused, the key)
    (f'argv = ["mycli", "--api-key", "{ANTHROPIC}", "{{goal}}"]\n', 6, "argv.2", ANTHROPIC),
    (f'argv = ["mycli", "--api-key={OPENAI}", "{{goal}}"]\n', 6, "argv.1", OPENAI),
    (
        f'argv = ["mycli",\n  "-H",\n  "Authorization: Bearer {OPENAI}",\n  "{{goal}}"]\n',
        8,
        "argv.2",
        OPENAI,
    ),
    (f'argv = ["env", "GH_TOKEN={GITHUB}", "gh", "{{goal}}"]\n', 6, "argv.1", GITHUB),
    (f'argv = ["gemini", "--key", "{GOOGLE}", "{{goal}}"]\n', 6, "argv.2", GOOGLE),
    (f'argv = ["mycli", "--groq-key={GROQ}", "{{goal}}"]\n', 6, "argv.1", GROQ),
    (f'argv = ["mycli", "--key", "{XAI}", "{{goal}}"]\n', 6, "argv.2", XAI),
    (f'argv = ["env", "HF_TOKEN={HUGGING_FACE}", "hf", "{{goal}}"]\n', 6, "argv.1", HUGGING_FACE),
    (
        'argv = ["mycli", "{goal}"]\nformat = "codex-json"\n'
        f'resume_argv = ["mycli", "resume", "{{session}}", "--api-key={ANTHROPIC}"]\n',
        8,
        "resume_argv.3",
        ANTHROPIC,
    ),
]


@pytest.mark.parametrize(
    ("route", "line", "field", "key"),
    PASTED,
    ids=[
        "whole",
        "api-key=",
        "bearer",
        "env-github",
        "google",
        "groq",
        "xai",
        "hugging-face",
        "resume_argv",
    ],
)
def test_a_key_in_argv_is_refused_at_its_line_without_showing_it(
    tmp_path: Path, route: str, line: int, field: str, key: str
) -> None:
    err = refused(tmp_path, route)
    assert (err.line, err.field) == (line, f"routes.cli.{field}"), str(err)
    assert "looks like an API key" in err.message and "api_key_env" in err.message
    assert shows_no_key(str(err), key), str(err)


def test_the_documented_agent_routes_still_load(tmp_path: Path) -> None:
    # The Claude Code and Codex argv of docs/agents.md and the shipped example, as they are.
    page = (ROOT / "docs" / "agents.md").read_text(encoding="utf-8")
    block = re.findall(r"```toml\n(.*?)```", page, re.S)[0]  # the routes; the second, a part
    path = tmp_path / "flightdeck.toml"
    path.write_text(block, encoding="utf-8")
    assert {"claude-code", "codex", "lint"} <= set(load_settings(path).routes)
    example = load_settings(ROOT / "examples" / "agents" / "flightdeck.toml")
    assert {"claude-code", "codex"} <= set(example.routes)


ORDINARY = [
    "{goal}",
    "--task={id}",
    "./tools/review.sh",
    "/home/dev/desk-setup-2024-final-version-b/run.sh",
    "features.shell_snapshot=false",
    "sandbox_mode=workspace-write",
    "--skip-git-repo-check",
    'model_providers.x={{name="x", base_url="http://127.0.0.1:8080/v1"}}',
    "sk-some-long-hyphenated-project-name",  # no digit: a name, not a token
    "/data/sk-learn-model-2024-final",  # no capital: a path, not a token
    "gsk_pipeline_config_2024",
    "xai-grok-2-latest",
    "--run=sk-2024-experiment-run-12-final-v2-b",
    "task-sk-0123456789abcdefghij",  # sk- inside a word starts no key
    "3f2a9c1e4b5d6f708192a3b4c5d6e7f8091a2b3c",  # a git sha
    "ghp_short",
    "hf_transfer_enabled_for_every_download",
    "hf_" + "modelcardsfromthehubreadfirstly" + "abc",  # no capital: a name, not a token
    "--model=claude-sonnet-4-5-20250929",
]


@pytest.mark.parametrize("arg", ORDINARY)
def test_ordinary_arguments_are_not_taken_for_keys(arg: str) -> None:
    assert not looks_like_key(arg)


def cli_route(argv: tuple[str, ...], name: str = "cli") -> Route:
    return Route(name=name, provider="command", model="cli", command=CommandSpec(argv=argv))


def test_a_key_in_the_argv_of_a_route_built_in_python_is_refused(tmp_path: Path) -> None:
    batch = Batch(name="b", tasks=(Task(id="t", goal="g", seq=0),))
    # The batch uses `cli` only, but stores every route: a key in `other` is refused as well.
    for routes in (
        (cli_route(("true", f"--api-key={ANTHROPIC}")),),
        (cli_route(("true",)), cli_route(("true", "-k", GITHUB), "other")),
    ):
        settings = Settings(
            engine=EngineSettings(default_route="cli"),
            routes=MappingProxyType({r.name: r for r in routes}),
        )
        with pytest.raises(ConfigError) as info:
            Engine(batch, settings, state_dir=tmp_path / "state", env={"PATH": "/usr/bin:/bin"})
        field = "routes.cli.argv.1" if len(routes) == 1 else "routes.other.argv.2"
        assert info.value.field == field, str(info.value)
        assert "looks like an API key" in str(info.value)
        assert shows_no_key(str(info.value), ANTHROPIC) and shows_no_key(str(info.value), GITHUB)
        assert not (tmp_path / "state").exists()  # nothing written


def test_run_refuses_a_key_in_argv_with_one_line_and_writes_no_batch(tmp_path: Path) -> None:
    config = write(tmp_path, f'argv = ["true",\n        "--api-key",\n        "{ANTHROPIC}"]\n')
    (tmp_path / "tasks.jsonl").write_text('{"goal": "one"}\n', encoding="utf-8")
    done = flightdeck(
        "run", "tasks.jsonl", "--headless", "--state-dir", "state", "--config", str(config),
        cwd=tmp_path,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert f"{config}:8: routes.cli.argv.2: looks like an API key" in line, line
    assert shows_no_key(done.stdout + done.stderr, ANTHROPIC)
    batches = tmp_path / "state" / "batches"
    assert not batches.exists() or not any(batches.iterdir())
