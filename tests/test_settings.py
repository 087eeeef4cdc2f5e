"""flightdeck.toml: defaults, a full round trip, and one precise error per bad key."""

from __future__ import annotations

import contextlib
import os
import threading
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.errors import ConfigError
from flightdeck.engine.inputs.files import MAX_CONFIG_BYTES, read_text
from flightdeck.engine.inputs.settings import (
    SIM_OPTION_DEFAULTS,
    SIM_PRICE,
    Budget,
    EngineSettings,
    Price,
    RetrySettings,
    load_settings,
    state_dir_from,
)

from helpers import HANG_S

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def write(folder: Path, text: str, name: str = "flightdeck.toml") -> Path:
    path = folder / name
    path.write_text(text, encoding="utf-8")
    return path


def error_at(path: Path, line: int | None, field: str | None) -> ConfigError:
    """Load `path`, expecting one ConfigError at exactly this line and field."""
    with pytest.raises(ConfigError) as info:
        load_settings(path)
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), line, field), str(err)
    where = f"{path}:{line}" if line is not None else str(path)
    assert str(err).startswith(f"{where}: {field + ': ' if field else ''}")
    return err


# --- happy paths ---------------------------------------------------------------------------


def test_defaults_when_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    settings = load_settings()
    assert settings.source is None
    assert settings.engine == EngineSettings()
    assert settings.budget == Budget()
    assert list(settings.routes) == ["sim"]
    sim = settings.route(None)
    assert (sim.provider, sim.model, sim.price) == ("sim", "sim-1", SIM_PRICE)
    assert dict(sim.options) == dict(SIM_OPTION_DEFAULTS)


def test_finds_flightdeck_toml_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, "[engine]\nmax_concurrent = 3\n")
    monkeypatch.chdir(tmp_path)
    settings = load_settings()
    assert settings.engine.max_concurrent == 3
    assert settings.source == Path("flightdeck.toml")


@pytest.mark.parametrize("kind", ["directory", "dangling symlink"])
def test_a_flightdeck_toml_that_is_no_file_is_said_not_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    # A folder named flightdeck.toml (or a link to nothing) ran the batch on the defaults.
    if kind == "directory":
        (tmp_path / "flightdeck.toml").mkdir()
    else:
        (tmp_path / "flightdeck.toml").symlink_to(tmp_path / "gone.toml")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as caught:
        load_settings()
    said = {"directory": "Is a directory", "dangling symlink": "a link to a file that is not there"}
    assert str(caught.value) == f"flightdeck.toml: {said[kind]}"


def test_full_config_round_trip(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
[engine]
max_concurrent = "auto"
state_dir = "state"
default_route = "fast"
stall_after_s = 30
tool_stall_after_s = 90.5
stall_grace_s = 2

[routes.fast]
provider = "openai"
model = "gpt-4o-mini"
base_url = "http://localhost:11434/v1"
api_key_env = "LOCAL_KEY"
connect_timeout_s = 5
read_timeout_s = 60
headers = { "X-Team" = "evals" }
max_concurrent = 4
rpm = 500
tpm = 200000
max_tokens = 2048
price = { input_per_mtok = 0.15, output_per_mtok = 0.60, cache_read_per_mtok = 0.075 }
retry = { attempts = 3, base_s = 0.5, max_s = 8, max_wait_s = 120 }

[routes.claude]
provider = "anthropic"
model = "claude-3-5-haiku-latest"

[routes.sim]
time_scale = 0.01
latency_ms = 0
tokens_per_s = 1e9
seed = 42
error_rate = 0.1
retry_after_s = 0
server_error_rate = 0.05
stall_rate = 0.01
fail_rate = 0
tool_turns = 2

[budget]
max_cost_usd = 12.34
max_runs = 100
max_depth = 0
""",
    )
    settings = load_settings(path)
    assert settings.source == path
    assert settings.engine == EngineSettings(
        max_concurrent="auto",
        state_dir=tmp_path / "state",
        default_route="fast",
        stall_after_s=30.0,
        tool_stall_after_s=90.5,
        stall_grace_s=2.0,
    )
    assert settings.budget == Budget(Decimal("12.34"), 100, 0)
    assert list(settings.routes) == ["fast", "claude", "sim"]

    fast = settings.route(None)
    assert (fast.name, fast.provider, fast.model) == ("fast", "openai", "gpt-4o-mini")
    assert (fast.max_concurrent, fast.rpm, fast.tpm, fast.max_tokens) == (4, 500, 200000, 2048)
    assert fast.price == Price(Decimal("0.15"), Decimal("0.60"), Decimal("0.075"), None)
    assert fast.retry == RetrySettings(attempts=3, base_s=0.5, max_s=8.0, max_wait_s=120.0)
    assert dict(fast.options) == {
        "base_url": "http://localhost:11434/v1",
        "api_key_env": "LOCAL_KEY",
        "connect_timeout_s": 5.0,
        "read_timeout_s": 60.0,
        "headers": {"X-Team": "evals"},
    }
    with pytest.raises(TypeError):
        fast.options["headers"]["X-Team"] = "changed"

    claude = settings.routes["claude"]
    assert claude.price is None  # looked up in genai-prices later
    assert claude.options == {"api_key_env": "ANTHROPIC_API_KEY"}
    assert claude.retry == RetrySettings()

    sim = settings.routes["sim"]
    assert (sim.provider, sim.model, sim.price) == ("sim", "sim-1", SIM_PRICE)
    assert sim.time_scale == 0.01
    assert dict(sim.options) == {
        "time_scale": 0.01,
        "latency_ms": 0.0,
        "tokens_per_s": 1e9,
        "seed": 42,
        "error_rate": 0.1,
        "retry_after_s": 0.0,
        "server_error_rate": 0.05,
        "stall_rate": 0.01,
        "fail_rate": 0.0,
        "tool_turns": 2,
    }


def test_prices_stay_exact_decimals(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        '[routes.cheap]\nprovider = "sim"\n'
        "price = { input_per_mtok = 0.15, output_per_mtok = 3 }\n",
    )
    price = load_settings(path).routes["cheap"].price
    assert price is not None
    assert (price.input_per_mtok, price.output_per_mtok) == (Decimal("0.15"), Decimal("3"))


def test_implicit_sim_route_is_added_next_to_configured_ones(tmp_path: Path) -> None:
    path = write(tmp_path, '[routes.gpt]\nprovider = "openai"\nmodel = "gpt-4o"\n')
    routes = load_settings(path).routes
    assert list(routes) == ["gpt", "sim"]
    assert routes["sim"].price == SIM_PRICE


def test_a_second_sim_route_gets_sim_defaults(tmp_path: Path) -> None:
    path = write(tmp_path, '[routes.sim-slow]\nprovider = "sim"\ntokens_per_s = 5\n')
    slow = load_settings(path).routes["sim-slow"]
    assert (slow.model, slow.price, slow.options["tokens_per_s"]) == ("sim-1", SIM_PRICE, 5.0)
    assert slow.options["latency_ms"] == SIM_OPTION_DEFAULTS["latency_ms"]


def test_state_dir_precedence(tmp_path: Path) -> None:
    settings = load_settings(write(tmp_path, '[engine]\nstate_dir = "s"\n'))
    assert state_dir_from(None, settings, env={}) == tmp_path / "s"
    assert state_dir_from(None, settings, env={"FLIGHTDECK_HOME": "/h"}) == Path("/h")
    assert state_dir_from(Path("/c"), settings, env={"FLIGHTDECK_HOME": "/h"}) == Path("/c")


def test_example_config_loads_without_keys() -> None:
    settings = load_settings(EXAMPLES / "flightdeck.toml", env={})
    assert settings.engine.max_concurrent == 8
    sim = settings.routes["sim"]
    assert sim.max_concurrent == 5
    assert {k: sim.options[k] for k in ("latency_ms", "tokens_per_s", "seed")} == {
        "latency_ms": 1500.0,
        "tokens_per_s": 12.0,
        "seed": 6,
    }
    assert (sim.options["error_rate"], sim.options["fail_rate"]) == (0.12, 0.015)
    assert {r.provider for r in settings.routes.values()} == {"sim"}


# --- one precise error per malformed config ---------------------------------------------------


def test_missing_config_file(tmp_path: Path) -> None:
    assert "not found" in str(error_at(tmp_path / "nope.toml", None, None))


def test_unknown_route_key_names_the_dotted_field(tmp_path: Path) -> None:
    path = write(tmp_path, '[routes.fast]\nprovider = "sim"\nrpmm = 10\n')
    assert "unknown key (did you mean 'rpm'?)" in str(error_at(path, 3, "routes.fast.rpmm"))


def test_unknown_table(tmp_path: Path) -> None:
    path = write(tmp_path, "# comment\n\n[egnine]\nmax_concurrent = 2\n")
    assert "did you mean 'engine'?" in str(error_at(path, 3, "egnine"))


def test_unknown_engine_key(tmp_path: Path) -> None:
    path = write(tmp_path, "[engine]\nmax_concurrent = 2\nstall_after = 3\n")
    error_at(path, 3, "engine.stall_after")


@pytest.mark.parametrize(
    ("table", "key"),
    [("engine", "executor_line"), ("budget", "cost_line"), ("budget", "soft_cost_line")],
)
def test_a_field_kept_for_messages_is_no_key_of_the_file(
    tmp_path: Path, table: str, key: str
) -> None:
    # The settings' own record of a line number, never a setting: unknown, as any other.
    path = write(tmp_path, f"[{table}]\n{key} = 3\n")
    assert "unknown key" in str(error_at(path, 2, f"{table}.{key}"))


def test_bad_provider(tmp_path: Path) -> None:
    path = write(tmp_path, '[routes.x]\nmodel = "m"\nprovider = "openia"\n')
    err = error_at(path, 3, "routes.x.provider")
    assert "expected one of 'sim', 'openai', 'anthropic', 'command', got string 'openia'" in str(
        err
    )


def test_provider_required_except_for_sim(tmp_path: Path) -> None:
    path = write(tmp_path, '[routes.fast]\nmodel = "m"\n')
    assert "required" in str(error_at(path, 1, "routes.fast.provider"))


def test_model_required_for_real_providers(tmp_path: Path) -> None:
    path = write(tmp_path, '[routes.a]\nprovider = "anthropic"\n')
    assert "required for provider 'anthropic'" in str(error_at(path, 1, "routes.a.model"))


def test_negative_rpm(tmp_path: Path) -> None:
    path = write(tmp_path, "[routes.sim]\n\nrpm = -5\n")
    assert "must be at least 1, got -5" in str(error_at(path, 3, "routes.sim.rpm"))


def test_engine_max_concurrent_zero(tmp_path: Path) -> None:
    path = write(tmp_path, "[engine]\nmax_concurrent = 0\n")
    assert "between 1 and 1024, got 0" in str(error_at(path, 2, "engine.max_concurrent"))


def test_engine_max_concurrent_has_an_upper_bound(tmp_path: Path) -> None:
    """A mistyped 100000 would start a thread per child alive: refused, not attempted."""
    write(tmp_path, "[engine]\nmax_concurrent = 1024\n")
    assert load_settings(tmp_path / "flightdeck.toml").engine.max_concurrent == 1024
    path = write(tmp_path, "[engine]\nmax_concurrent = 100000\n")
    assert "between 1 and 1024, got 100000" in str(error_at(path, 2, "engine.max_concurrent"))


def test_engine_max_task_chars(tmp_path: Path) -> None:
    assert load_settings(write(tmp_path, "")).engine.max_task_chars == 1_000_000
    path = write(tmp_path, "[engine]\nmax_task_chars = 5000\n")
    assert load_settings(path).engine.max_task_chars == 5000
    path = write(tmp_path, "[engine]\nmax_task_chars = 0\n")
    assert "must be at least 1, got 0" in str(error_at(path, 2, "engine.max_task_chars"))


def test_engine_max_concurrent_wrong_word(tmp_path: Path) -> None:
    path = write(tmp_path, '[engine]\nmax_concurrent = "lots"\n')
    err = error_at(path, 2, "engine.max_concurrent")
    assert 'expected an integer or "auto", got string' in str(err)


def test_route_max_concurrent_zero(tmp_path: Path) -> None:
    path = write(tmp_path, "[routes.sim]\nmax_concurrent = 0\n")
    error_at(path, 2, "routes.sim.max_concurrent")


@pytest.mark.parametrize(
    ("price", "field", "message"),
    [
        ("{ input_per_mtok = -1, output_per_mtok = 1 }", "input_per_mtok", "0 or more, got -1"),
        ('{ input_per_mtok = 1, output_per_mtok = "2" }', "output_per_mtok", "expected a number"),
        ("{ input_per_mtok = 1 }", "output_per_mtok", "required"),
        ("{ input_per_mtok = 1, output_per_mtok = 1, cache = 1 }", "cache", "unknown key"),
        ("{ input_per_mtok = nan, output_per_mtok = 1 }", "input_per_mtok", "got nan"),
        ("3", "", "expected a table, got integer 3"),
    ],
)
def test_bad_price(tmp_path: Path, price: str, field: str, message: str) -> None:
    path = write(tmp_path, f'[routes.r]\nprovider = "sim"\n\nprice = {price}\n')
    dotted = f"routes.r.price.{field}" if field else "routes.r.price"
    assert message in str(error_at(path, 4, dotted))


@pytest.mark.parametrize("value", ["inf", "-inf", "nan"])
@pytest.mark.parametrize(
    ("table", "key"),
    [
        ("routes.sim", "time_scale"),  # "must be greater than 0, got inf"
        ("routes.sim", "latency_ms"),
        ("routes.sim", "error_rate"),
        ("routes.sim", "cache_gate_s"),
        ("engine", "stall_after_s"),
        ("budget", "max_cost_usd"),
        ("tui", "digest_idle_s"),
    ],
)
def test_a_number_that_is_not_finite_is_said_so(
    tmp_path: Path, table: str, key: str, value: str
) -> None:
    path = write(tmp_path, f"[{table}]\n{key} = {value}\n")
    said = str(error_at(path, 2, f"{table}.{key}"))
    assert said.endswith(f": must be a finite number, got {value}"), said


def test_max_wait_s_must_be_a_positive_number(tmp_path: Path) -> None:
    path = write(tmp_path, '[routes.r]\nprovider = "sim"\nretry = { max_wait_s = 0 }\n')
    assert "greater than 0, got 0" in str(error_at(path, 3, "routes.r.retry.max_wait_s"))


def test_sim_option_on_a_real_provider(tmp_path: Path) -> None:
    path = write(tmp_path, '[routes.o]\nprovider = "openai"\nmodel = "m"\ntime_scale = 0.1\n')
    assert "not an option of provider 'openai'" in str(error_at(path, 4, "routes.o.time_scale"))


def test_tokens_per_s_zero_suggests_a_large_number(tmp_path: Path) -> None:
    path = write(tmp_path, "[routes.sim]\ntokens_per_s = 0\n")
    assert "large number" in str(error_at(path, 2, "routes.sim.tokens_per_s"))


def test_a_lower_bound_is_allowed_itself(tmp_path: Path) -> None:
    # tokens_per_s = 0.01 was refused with "must be at least 0.01, got 0.01".
    path = write(tmp_path, "[routes.sim]\ntokens_per_s = 0.01\n")
    assert load_settings(path).route("sim").options["tokens_per_s"] == 0.01


def test_rate_above_one(tmp_path: Path) -> None:
    path = write(tmp_path, "[routes.sim]\nerror_rate = 1.5\n")
    assert "between 0 and 1" in str(error_at(path, 2, "routes.sim.error_rate"))


def test_api_key_pasted_as_env_name_is_not_echoed(tmp_path: Path) -> None:
    secret = "sk-proj-abc123secret"
    path = write(
        tmp_path, f'[routes.o]\nprovider = "openai"\nmodel = "m"\napi_key_env = "{secret}"\n'
    )
    err = error_at(path, 4, "routes.o.api_key_env")
    assert secret not in str(err)


def test_base_url_needs_a_scheme(tmp_path: Path) -> None:
    path = write(
        tmp_path, '[routes.o]\nprovider = "openai"\nmodel = "m"\nbase_url = "localhost:8000"\n'
    )
    error_at(path, 4, "routes.o.base_url")


@pytest.mark.parametrize(
    ("url", "said"),
    [
        ("http://localhost:11434:v1", "not a URL a client can use"),  # no number for a port
        ("http://[::1:8000/v1", "not a URL a client can use"),  # an unclosed IPv6 bracket
        ("http://localhost:99999/v1", "not a URL a client can use"),  # out of range
        ("http:///v1", "names no host"),
        ("http://local\\u0000host/v1", "control character"),
    ],
)
def test_base_url_a_client_cannot_use_is_said_at_its_line(
    tmp_path: Path, url: str, said: str
) -> None:
    # The SDK's client is made at its route's first turn: a URL it refuses let the batch start
    # and each child fail as an internal error (InvalidURL), where it had failed the start.
    path = write(tmp_path, f'[routes.o]\nprovider = "openai"\nmodel = "m"\nbase_url = "{url}"\n')
    assert said in error_at(path, 4, "routes.o.base_url").message


def test_retry_attempts_out_of_range(tmp_path: Path) -> None:
    path = write(tmp_path, "[routes.sim]\nretry = { attempts = 21 }\n")
    assert "between 1 and 20" in str(error_at(path, 2, "routes.sim.retry.attempts"))


def test_default_route_must_exist(tmp_path: Path) -> None:
    path = write(tmp_path, '[engine]\ndefault_route = "fast"\n')
    assert "configured: sim" in str(error_at(path, 2, "engine.default_route"))


def test_bad_route_name(tmp_path: Path) -> None:
    path = write(tmp_path, '[routes."a b"]\nprovider = "sim"\n')
    error_at(path, 1, "routes.a b")


def test_budget_values(tmp_path: Path) -> None:
    path = write(tmp_path, "[budget]\nmax_cost_usd = 1\nmax_runs = 0\n")
    error_at(path, 3, "budget.max_runs")
    path = write(tmp_path, "[budget]\nmax_cost_usd = -0.5\n")
    error_at(path, 2, "budget.max_cost_usd")


def test_soft_budget_values(tmp_path: Path) -> None:
    path = write(tmp_path, "[budget]\nmax_cost_usd = 5\nsoft_cost_usd = 4.5\n")
    assert load_settings(path).budget.soft_cost_usd == Decimal("4.5")
    path = write(tmp_path, "[budget]\nmax_cost_usd = 5\nsoft_cost_usd = 6\n")
    assert "at most max_cost_usd (5)" in str(error_at(path, 3, "budget.soft_cost_usd"))
    path = write(tmp_path, "[budget]\nsoft_cost_usd = -1\n")
    error_at(path, 2, "budget.soft_cost_usd")
    path = write(tmp_path, '[budget]\nsoft_cost_usd = "ten"\n')
    error_at(path, 2, "budget.soft_cost_usd")


def test_wrong_type_for_a_table(tmp_path: Path) -> None:
    path = write(tmp_path, 'engine = "fast"\n')
    assert "expected a table, got string 'fast'" in str(error_at(path, 1, "engine"))


def test_toml_syntax_error(tmp_path: Path) -> None:
    path = write(tmp_path, "[engine]\nmax_concurrent = 4\nstall_after_s = = 3\n")
    assert "invalid TOML" in str(error_at(path, 3, None))


def test_default_openai_key_is_never_sent_to_another_server(tmp_path: Path) -> None:
    from flightdeck.engine.providers import make_provider

    config = tmp_path / "flightdeck.toml"
    config.write_text(
        '[routes.router]\nprovider = "openai"\nmodel = "m"\nbase_url = "https://example.invalid/v1"\n'
    )
    route = load_settings(config).routes["router"]
    assert "api_key_env" not in route.options
    with pytest.raises(ConfigError) as err:
        make_provider(route, {"OPENAI_API_KEY": "sk-should-not-travel"}, source=config)
    assert "routes.router.api_key_env" in str(err.value)
    assert "sk-should-not-travel" not in str(err.value)


def test_a_byte_order_mark_before_the_config_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "flightdeck.toml"
    path.write_bytes(b"\xef\xbb\xbf[engine]\nmax_concurrent = 3\n")
    assert load_settings(path).engine.max_concurrent == 3


@pytest.mark.parametrize(
    ("table", "line"),
    [
        ('[routes.gpt]\nprovider = "openai"\nmodel = "gpt-4o-mini"\n', 3),
        ('\n[routes.gpt]\nprovider = "openai"\nmodel = "m"\napi_key_env = "MY_KEY"\n', 7),
    ],
)
def test_a_missing_key_names_the_line_of_its_route(tmp_path: Path, table: str, line: int) -> None:
    from flightdeck.engine.providers import api_key

    path = tmp_path / "flightdeck.toml"
    path.write_text("[engine]\nmax_concurrent = 2\n" + table)
    route = load_settings(path).routes["gpt"]
    with pytest.raises(ConfigError) as caught:
        api_key(route, {}, path)
    err = caught.value
    assert (err.line, err.field) == (line, "routes.gpt.api_key_env"), str(err)
    assert str(err).startswith(f"{path}:{line}: routes.gpt.api_key_env: environment variable")


def test_a_config_nested_past_the_parsers_stack_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "flightdeck.toml"
    path.write_text("[engine]\nx = " + "[" * 100_000 + "\n")
    with pytest.raises(ConfigError, match="nested too deeply") as caught:
        load_settings(path)
    assert str(caught.value).startswith(f"{path}:2: nested too deeply to read")


def test_tui_settings_round_trip_and_errors_name_the_line(tmp_path: Path) -> None:
    from flightdeck.engine.inputs.settings import TuiSettings

    assert load_settings(write(tmp_path, "")).tui == TuiSettings()
    path = write(
        tmp_path,
        '[tui]\ndigest_idle_s = 0\nbell = false\ndesktop = "osc777"\nnotify_every_s = 5\n',
    )
    assert load_settings(path).tui == TuiSettings(0.0, False, "osc777", 5.0)
    cases = [
        ("[tui]\n\ndigest_idle_s = -1\n", 3, "tui.digest_idle_s", "must be 0 or more"),
        ('[tui]\nbell = "yes"\n', 2, "tui.bell", "expected true or false"),
        ('[tui]\ndesktop = "growl"\n', 2, "tui.desktop", "expected one of 'off', 'osc777'"),
        ("[tui]\nnotify_every = 5\n", 2, "tui.notify_every", "did you mean 'notify_every_s'?"),
    ]
    for text, line, field, message in cases:
        assert message in str(error_at(write(tmp_path, text), line, field))


def test_a_sim_hold_dir_is_a_folder_beside_the_config(tmp_path: Path) -> None:
    (tmp_path / "gates").mkdir()
    path = write(tmp_path, '[routes.sim]\nhold_dir = "gates"\n')
    assert load_settings(path).route("sim").options["hold_dir"] == str(tmp_path / "gates")
    path = write(tmp_path, '[routes.sim]\ntime_scale = 0.1\nhold_dir = "nowhere"\n')
    err = error_at(path, 3, "routes.sim.hold_dir")
    assert "no such folder" in str(err)


@pytest.mark.parametrize(
    ("line", "field", "message"),
    [
        ("[routes.sim]\ntime_scale = 1e308", "routes.sim.time_scale", "at most 100, got 1e+308"),
        ("[routes.sim]\nlatency_ms = 1e300", "routes.sim.latency_ms", "at most 10,000,000,000"),
        ("[routes.sim]\ntokens_per_s = 1e-300", "routes.sim.tokens_per_s", "at least 0.01"),
        ("[routes.sim]\nretry_after_s = 1e20", "routes.sim.retry_after_s", "at most 10,000,000"),
        ("[routes.sim]\ndelegates = 1000000", "routes.sim.delegates", "between 1 and 1000"),
        ("[routes.sim]\ntool_turns = 100000", "routes.sim.tool_turns", "between 0 and 200"),
        ("[engine]\nstall_after_s = 1e10", "engine.stall_after_s", "at most 10,000,000"),
        # Just over, the value whole: it read "got 1e+07", as if it were the bound.
        ("[engine]\nstall_after_s = 10000001", "engine.stall_after_s", "got 10000001"),
        ("[routes.sim]\nrpm = 10000000000", "routes.sim.rpm", "at most 1,000,000,000"),
        ("[routes.sim]\nmax_tokens = 99999999", "routes.sim.max_tokens", "between 1 and 10000000"),
        ("[budget]\nmax_cost_usd = 1e300", "budget.max_cost_usd", "at most 1,000,000,000"),
        ("[tui]\ndigest_idle_s = 1e300", "tui.digest_idle_s", "at most 10,000,000"),
        ("[routes.sim]\nretry = { max_wait_s = 1e300 }", "routes.sim.retry.max_wait_s", "at most"),
        # A command route's too (found by an audit: 5000 ran).
        (
            '[routes.c]\nprovider = "command"\nargv = ["true"]\nmax_concurrent = 5000',
            "routes.c.max_concurrent",
            "between 1 and 1024, got 5000",
        ),
    ],
)
def test_every_number_is_bounded_by_what_the_code_can_use(
    tmp_path: Path, line: str, field: str, message: str
) -> None:
    # time_scale = 1e308 used to pass, and fail at run time with OverflowError in a thread.
    path = write(tmp_path, line + "\n")
    assert message in str(error_at(path, line.count("\n") + 1, field))


def test_the_largest_values_allowed_make_waits_the_code_can_make() -> None:
    import threading

    from flightdeck.engine.inputs.bounds import MAX_SECONDS, MAX_TIME_SCALE, MIN_TOKENS_PER_S

    longest = [
        MAX_SECONDS * 1000 / 1000 * MAX_TIME_SCALE * 1.4,  # the sim's first token
        MAX_SECONDS * MAX_TIME_SCALE,  # its read timeout, a Retry-After
        MAX_TIME_SCALE / MIN_TOKENS_PER_S * 4096,  # a chunk at the slowest rate
    ]
    assert max(longest) < threading.TIMEOUT_MAX
    assert threading.Event().wait(min(0.001, max(longest))) is False  # no OverflowError


def test_a_config_that_is_not_utf8_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "flightdeck.toml"
    path.write_bytes(b"[engine]\nmax_concurrent = 3\n# caf\xe9\n")
    assert "not valid UTF-8 text" in str(error_at(path, 3, None))


def test_a_config_over_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "flightdeck.toml"
    with path.open("wb") as fh:  # sparse: nothing is written but the length
        fh.truncate(MAX_CONFIG_BYTES + 1)
    assert "too large: over 16 MiB" in str(error_at(path, None, None))


def test_a_config_read_from_a_pipe_is_bounded_too(tmp_path: Path) -> None:
    # `--config <(generate)`: a pipe has no size to look at first, so the read itself stops.
    fifo = tmp_path / "flightdeck.toml"
    os.mkfifo(fifo)

    def write() -> None:  # blocks until the reader opens the pipe
        with fifo.open("wb") as fh, contextlib.suppress(BrokenPipeError):
            fh.write(b"# padding\n" * 100)

    writer = threading.Thread(target=write, daemon=True)  # never left holding the process
    writer.start()
    try:
        with pytest.raises(ConfigError, match="too large: over 0 MiB"):
            read_text(fifo, ConfigError, max_bytes=64)
    finally:
        writer.join(HANG_S)


@pytest.mark.parametrize("key", ["batch", "tasks", "defaults"])
def test_a_task_file_given_as_the_config_is_said_as_that(tmp_path: Path, key: str) -> None:
    # `flightdeck run x --config demo.toml` with the task file: "batch: unknown key" alone
    # left the operator to guess which file was which.
    table = "[[tasks]]" if key == "tasks" else f"[{key}]"
    path = write(tmp_path, f"# a task file\n{table}\ngoal = 'x'\n", "demo.toml")
    message = str(error_at(path, 2, key))
    assert "a task file's, not a config's" in message and "--config takes" in message
