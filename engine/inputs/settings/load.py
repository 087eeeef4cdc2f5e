"""load_settings: read flightdeck.toml (and the environment) into Settings."""

from __future__ import annotations

import dataclasses
import os
import re
import tomllib
from collections.abc import Callable, Collection, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

from flightdeck.engine.errors import ConfigError
from flightdeck.engine.inputs.bounds import (
    MAX_DELEGATES,
    MAX_SECONDS,
    MAX_TASKS_LIMIT,
    MAX_TIME_SCALE,
    MAX_TOKENS,
    MAX_TOKENS_PER_S,
    MAX_TURNS_LIMIT,
    MIN_TOKENS_PER_S,
)
from flightdeck.engine.inputs.files import MAX_CONFIG_BYTES, read_text
from flightdeck.engine.inputs.messages import CONFIG_KEYS, TASK_FILE_KEYS, kind
from flightdeck.engine.inputs.settings.checks import Table, ValueChecks
from flightdeck.engine.inputs.settings.cluster import read_ray
from flightdeck.engine.inputs.settings.command import COMMAND_KEYS, read_command
from flightdeck.engine.inputs.settings.loops import read_loops, read_steer
from flightdeck.engine.inputs.settings.values import (
    API_KEY_ENV,
    CONFIG_NAME,
    DEFAULT_ROUTE,
    DESKTOP_NOTIFY,
    EXECUTORS,
    MAX_CONCURRENT,
    PROVIDERS,
    SIM_OPTION_DEFAULTS,
    SIM_PRICE,
    WORKSPACE_MODES,
    Budget,
    EngineSettings,
    LoopSettings,
    Price,
    ProviderName,
    RetrySettings,
    Route,
    Settings,
    TuiSettings,
    default_sim_route,
)
from flightdeck.engine.inputs.tomlpos import Key, TomlLocator, decode_error, deep_line

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def _file_keys(settings: type) -> tuple[str, ...]:
    """The fields a file may set: not those kept for messages (a key's line, compare=False)."""
    return tuple(f.name for f in dataclasses.fields(settings) if f.compare)


_ENGINE_KEYS = _file_keys(EngineSettings)
_ROUTE_KEYS = (
    "provider",
    "model",
    "max_concurrent",
    "rpm",
    "tpm",
    "max_tokens",
    "price",
    "retry",
    "cache_gate_s",
    "delegate",
    "ask_operator",
    "loops",
    "workspace",
)
# A command route is no model call: no rpm/tpm, max_tokens or retry of its own.
_COMMAND_ROUTE_KEYS = ("provider", "model", "max_concurrent", "price", "loops")
_PRICE_KEYS = tuple(Price.__dataclass_fields__)
_RETRY_KEYS = tuple(RetrySettings.__dataclass_fields__)
_BUDGET_KEYS = _file_keys(Budget)
_TUI_KEYS = tuple(TuiSettings.__dataclass_fields__)
_PROVIDER_NAMES: Mapping[str, ProviderName] = MappingProxyType({p: p for p in PROVIDERS})


def load_settings(path: Path | None = None, *, env: Mapping[str, str] | None = None) -> Settings:
    """Read flightdeck.toml (`path`, else ./flightdeck.toml if present, else defaults).

    Unknown keys are errors. Raises ConfigError naming file, line and field. `env` is accepted
    for settings that will come from the environment; FLIGHTDECK_HOME is read by state_dir_from.
    """
    missing = "config file not found"
    if path is None:
        # Only no such name means no config: a folder or a broken link there is said, not skipped.
        if not os.path.lexists(CONFIG_NAME):
            return Settings(routes=MappingProxyType({DEFAULT_ROUTE: _implicit_sim()}))
        path, missing = Path(CONFIG_NAME), "a link to a file that is not there"
    path = Path(path)
    text = read_text(path, ConfigError, MAX_CONFIG_BYTES, missing)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line, message = decode_error(exc, text)
        raise ConfigError(path, line, None, f"invalid TOML: {message}") from None
    except RecursionError:  # a value nested deeper than the parser's stack (`[[[[…`)
        raise ConfigError(path, deep_line(text), None, "nested too deeply to read") from None
    return _Reader(path, TomlLocator(text)).settings(data)


def _implicit_sim() -> Route:
    return default_sim_route(DEFAULT_ROUTE, **SIM_OPTION_DEFAULTS)


def state_dir_from(
    cli: Path | None, settings: Settings, env: Mapping[str, str] | None = None
) -> Path:
    """--state-dir wins, then FLIGHTDECK_HOME, then [engine] state_dir. A FLIGHTDECK_HOME of
    spaces is a ConfigError: it would name a folder called ' ' (empty: it is not set)."""
    env = os.environ if env is None else env
    if cli is not None:
        return cli
    home = env.get("FLIGHTDECK_HOME")
    if home and not home.strip():
        raise ConfigError(None, None, "FLIGHTDECK_HOME", f"must name a folder, got {home!r}")
    if home:
        return Path(home)
    return settings.engine.state_dir


def state_dir_error(
    state_dir: Path, settings: Settings | None, reason: str, env: Mapping[str, str] | None = None
) -> ConfigError:
    """The state folder in use cannot be used (`reason`): said at the config's [engine]
    state_dir line when it is the folder that line names (and FLIGHTDECK_HOME is not set),
    else as `state_dir` (--state-dir, FLIGHTDECK_HOME). Only the folder used is judged: a
    config's folder overridden is never looked at."""
    where = Path(state_dir).absolute()
    message = f"cannot use {where}: {reason}"
    env = os.environ if env is None else env
    line = (
        None if settings is None or env.get("FLIGHTDECK_HOME") else settings.engine.state_dir_line
    )
    if settings is not None and line is not None and where == settings.engine.state_dir.absolute():
        return ConfigError(settings.source, line, "engine.state_dir", message)
    return ConfigError(None, None, "state_dir", message)


class _Reader(ValueChecks):
    """Reads a parsed flightdeck.toml into Settings."""

    def settings(self, data: Table) -> Settings:
        for name in data:
            if name in TASK_FILE_KEYS:  # a task file given as the config: said as that
                raise self.error(
                    (name,),
                    "unknown key: a task file's, not a config's (the task file is `run`'s "
                    "argument; --config takes a flightdeck.toml)",
                )
        self.known((), data, CONFIG_KEYS)
        routes: dict[str, Route] = {}
        for name, table in self.table(("routes",), data.get("routes", {})).items():
            routes[name] = self.route(name, self.table(("routes", name), table))
        routes.setdefault(DEFAULT_ROUTE, _implicit_sim())
        return Settings(
            engine=self.engine(self.table(("engine",), data.get("engine", {})), routes),
            routes=MappingProxyType(routes),
            budget=self.budget(self.table(("budget",), data.get("budget", {}))),
            canned=read_steer(self, self.table(("steer",), data.get("steer", {}))),
            tui=self.tui(self.table(("tui",), data.get("tui", {}))),
            ray=read_ray(self, self.table(("ray",), data.get("ray", {}))),
            source=self.path,
        )

    def engine(self, table: Table, routes: Collection[str]) -> EngineSettings:
        self.known(("engine",), table, _ENGINE_KEYS)
        values: dict[str, Any] = {}
        if "max_concurrent" in table:
            value = table["max_concurrent"]
            key: Key = ("engine", "max_concurrent")
            values["max_concurrent"] = (
                "auto"
                if value == "auto"
                else self.integer(key, value, 1, MAX_CONCURRENT, also='or "auto"')
            )
        if "executor" in table:
            key = ("engine", "executor")
            value = table["executor"]
            if value not in EXECUTORS:
                raise self.error(key, f'expected "threads" or "ray", got {kind(value)}')
            values["executor"] = value
            values["executor_line"] = self.locator.line(*key)
        if "state_dir" in table:
            folder = Path(self.string(("engine", "state_dir"), table["state_dir"])).expanduser()
            # Relative to the config file, so a project's config works from any directory.
            values["state_dir"] = self.path.parent / folder
            values["state_dir_line"] = self.locator.line("engine", "state_dir")
        if "default_route" in table:
            name = self.string(("engine", "default_route"), table["default_route"])
            if name not in routes:
                known = ", ".join(routes)
                message = f"no route named {name!r} (configured: {known})"
                raise self.error(("engine", "default_route"), message)
            values["default_route"] = name
        if "max_task_chars" in table:
            key = ("engine", "max_task_chars")
            values["max_task_chars"] = self.integer(key, table["max_task_chars"], 1)
        if "max_tasks" in table:
            key = ("engine", "max_tasks")
            values["max_tasks"] = self.integer(key, table["max_tasks"], 1, MAX_TASKS_LIMIT)
        for name in ("stall_after_s", "tool_stall_after_s", "stall_grace_s", "store_retry_s"):
            if name in table:
                values[name] = self.number(("engine", name), table[name])
        return EngineSettings(**values)

    def route(self, name: str, table: Table) -> Route:
        key: Key = ("routes", name)
        if not _NAME.fullmatch(name):
            raise self.error(key, "route names use letters, digits, '.', '_' or '-'")
        provider = self.provider(key, table.get("provider", "sim" if name == "sim" else None))
        if provider == "command":
            return self.command_route(name, table)
        checks, others = (_SIM_OPTIONS, _HTTP_OPTIONS)
        if provider != "sim":
            checks, others = others, checks
        for option in table:
            if option in others and option not in checks:
                raise self.error((*key, option), f"not an option of provider {provider!r}")
        self.known(key, table, (*_ROUTE_KEYS, *checks))
        if "model" in table:
            model = self.string((*key, "model"), table["model"])
        elif provider == "sim":
            model = "sim-1"
        else:
            raise self.error((*key, "model"), f"required for provider {provider!r}")
        highs = {"max_concurrent": MAX_CONCURRENT, "max_tokens": MAX_TOKENS}
        limits: dict[str, Any] = {
            limit: self.integer((*key, limit), table[limit], 1, highs.get(limit))
            for limit in ("max_concurrent", "rpm", "tpm", "max_tokens")
            if limit in table
        }
        price = SIM_PRICE if provider == "sim" else None
        if "price" in table:
            price = self.price((*key, "price"), self.table((*key, "price"), table["price"]))
        retry = RetrySettings()
        if "retry" in table:
            retry = self.retry((*key, "retry"), self.table((*key, "retry"), table["retry"]))
        options = dict(SIM_OPTION_DEFAULTS) if provider == "sim" else {}
        if provider != "sim" and "base_url" not in table:
            # Only the variable's name is kept: the key itself is read when a client is made.
            # The default variable is for the provider's own endpoint: a route with a base_url
            # must name its variable, or OPENAI_API_KEY would be sent to someone else's server.
            options["api_key_env"] = API_KEY_ENV[provider]
        for option, check in checks.items():
            if option in table:
                options[option] = check(self, (*key, option), table[option])
        gate = 0.0
        if "cache_gate_s" in table:
            gate = self.number((*key, "cache_gate_s"), table["cache_gate_s"], zero_ok=True)
            if gate and provider == "sim" and not options.get("cache", True):
                raise self.error(
                    (*key, "cache_gate_s"),
                    "this route caches no prompts (cache = false): there is nothing to warm up",
                )
        return Route(
            name=name,
            provider=provider,
            model=model,
            price=price,
            retry=retry,
            options=MappingProxyType(options),
            key_line=self.locator.line(*key, "api_key_env"),
            cache_gate_s=gate,
            delegate=self.flag((*key, "delegate"), table["delegate"])
            if "delegate" in table
            else False,
            ask_operator=self.flag((*key, "ask_operator"), table["ask_operator"])
            if "ask_operator" in table
            else False,
            loops=self.loops(key, table),
            workspace=self.choice((*key, "workspace"), table["workspace"], WORKSPACE_MODES)
            if "workspace" in table
            else "shared",
            **limits,
        )

    def command_route(self, name: str, table: Table) -> Route:
        """A route that runs each task as a process (engine/agents)."""
        key: Key = ("routes", name)
        allowed = (*_COMMAND_ROUTE_KEYS, *COMMAND_KEYS)
        for option in table:
            if option not in allowed and option in (*_ROUTE_KEYS, *_SIM_OPTIONS, *_HTTP_OPTIONS):
                raise self.error((*key, option), "not an option of provider 'command'")
        self.known(key, table, allowed)
        spec = read_command(self, key, table)
        options: dict[str, object] = {}
        if "api_key_env" in table:
            options["api_key_env"] = self.env_name((*key, "api_key_env"), table["api_key_env"])
        price = None
        if "price" in table:
            price = self.price((*key, "price"), self.table((*key, "price"), table["price"]))
        limits: dict[str, Any] = {}
        if "max_concurrent" in table:
            limits["max_concurrent"] = self.integer(
                (*key, "max_concurrent"), table["max_concurrent"], 1, MAX_CONCURRENT
            )
        model = Path(spec.argv[0]).name
        if "model" in table:
            model = self.string((*key, "model"), table["model"])
        return Route(
            name=name,
            provider="command",
            model=model,
            price=price,
            options=MappingProxyType(options),
            key_line=self.locator.line(*key, "api_key_env") or self.locator.line(*key),
            command=spec,
            loops=self.loops(key, table),
            **limits,
        )

    def loops(self, key: Key, table: Table) -> LoopSettings:
        if "loops" not in table:
            return LoopSettings()
        return read_loops(self, (*key, "loops"), self.table((*key, "loops"), table["loops"]))

    def provider(self, key: Key, value: object) -> ProviderName:
        choices = ", ".join(repr(p) for p in PROVIDERS)
        if value is None:
            raise self.error((*key, "provider"), f"required: one of {choices}")
        provider = _PROVIDER_NAMES.get(value) if isinstance(value, str) else None
        if provider is None:
            raise self.error((*key, "provider"), f"expected one of {choices}, got {kind(value)}")
        return provider

    def price(self, key: Key, table: Table) -> Price:
        self.known(key, table, _PRICE_KEYS)
        for required in ("input_per_mtok", "output_per_mtok"):
            if required not in table:
                raise self.error((*key, required), "required (US dollars per million tokens)")
        money = {name: self.money((*key, name), value) for name, value in table.items()}
        return Price(**money)

    def retry(self, key: Key, table: Table) -> RetrySettings:
        self.known(key, table, _RETRY_KEYS)
        values: dict[str, Any] = {}
        if "attempts" in table:
            values["attempts"] = self.integer((*key, "attempts"), table["attempts"], 1, 20)
        for name in ("base_s", "max_s", "max_wait_s"):
            if name in table:
                values[name] = self.number((*key, name), table[name])
        out = RetrySettings(**values)
        if out.max_s < out.base_s:
            raise self.error((*key, "max_s"), f"must be at least base_s ({out.base_s})")
        return out

    def budget(self, table: Table) -> Budget:
        self.known(("budget",), table, _BUDGET_KEYS)
        values: dict[str, Any] = {}
        if "max_cost_usd" in table:
            values["max_cost_usd"] = self.money(("budget", "max_cost_usd"), table["max_cost_usd"])
            values["cost_line"] = self.locator.line("budget", "max_cost_usd")
        if "soft_cost_usd" in table:
            key = ("budget", "soft_cost_usd")
            soft = values["soft_cost_usd"] = self.money(key, table["soft_cost_usd"])
            values["soft_cost_line"] = self.locator.line(*key)
            hard = values.get("max_cost_usd")
            if hard is not None and soft > hard:
                raise self.error(key, f"must be at most max_cost_usd ({hard}), got {soft}")
        for name, low, high in (
            ("max_runs", 1, None),
            ("max_depth", 0, None),
            ("max_delegates", 1, MAX_DELEGATES),
        ):
            if name in table:
                values[name] = self.integer(("budget", name), table[name], low, high)
        return Budget(**values)

    def tui(self, table: Table) -> TuiSettings:
        self.known(("tui",), table, _TUI_KEYS)
        values: dict[str, Any] = {}
        if "digest_idle_s" in table:
            values["digest_idle_s"] = self.number(
                ("tui", "digest_idle_s"), table["digest_idle_s"], zero_ok=True, hint=" (0: never)"
            )
        if "notify_every_s" in table:
            values["notify_every_s"] = self.number(
                ("tui", "notify_every_s"), table["notify_every_s"], zero_ok=True
            )
        if "bell" in table:
            values["bell"] = self.flag(("tui", "bell"), table["bell"])
        if "desktop" in table:
            value = table["desktop"]
            if value not in DESKTOP_NOTIFY:
                choices = ", ".join(repr(c) for c in DESKTOP_NOTIFY)
                raise self.error(
                    ("tui", "desktop"), f"expected one of {choices}, got {kind(value)}"
                )
            values["desktop"] = value
        return TuiSettings(**values)


_Check = Callable[[ValueChecks, Key, object], object]

_SIM_OPTIONS: Mapping[str, _Check] = MappingProxyType(
    {
        "time_scale": lambda r, k, v: r.number(k, v, high=MAX_TIME_SCALE),
        "latency_ms": lambda r, k, v: r.number(k, v, zero_ok=True, high=MAX_SECONDS * 1000),
        "tokens_per_s": lambda r, k, v: r.number(
            k,
            v,
            hint=" (for instant output use a large number such as 1e9)",
            low=MIN_TOKENS_PER_S,
            high=MAX_TOKENS_PER_S,
        ),
        "seed": lambda r, k, v: r.integer(k, v, -(2**63), 2**63 - 1),
        "error_rate": ValueChecks.fraction,
        "retry_after_s": lambda r, k, v: r.number(k, v, zero_ok=True),
        "server_error_rate": ValueChecks.fraction,
        "stall_rate": ValueChecks.fraction,
        "fail_rate": ValueChecks.fraction,
        "tool_turns": lambda r, k, v: r.integer(k, v, 0, MAX_TURNS_LIMIT),
        "delegate_rate": ValueChecks.fraction,
        "delegates": lambda r, k, v: r.integer(k, v, 1, MAX_DELEGATES),
        "read_timeout_s": lambda r, k, v: r.number(k, v),
        "cache": ValueChecks.flag,
        "hold_dir": ValueChecks.folder,
    }
)

_HTTP_OPTIONS: Mapping[str, _Check] = MappingProxyType(
    {
        "base_url": ValueChecks.url,
        "api_key_env": ValueChecks.env_name,
        "connect_timeout_s": lambda r, k, v: r.number(k, v),
        "read_timeout_s": lambda r, k, v: r.number(k, v),
        "headers": ValueChecks.headers,
    }
)
