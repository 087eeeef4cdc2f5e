"""flightdeck.toml + environment: routes, limits, prices, budgets, paths."""

from __future__ import annotations

import difflib
import math
import os
import re
import tomllib
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import Any, Literal

from flightdeck.engine.errors import ConfigError
from flightdeck.engine.inputs.tomlpos import Key, TomlLocator, decode_error

ProviderName = Literal["sim", "openai", "anthropic"]

DEFAULT_ROUTE = "sim"
DEFAULT_STATE_DIR = Path(".flightdeck")
# One worker thread per child alive. Past a few hundred threads one interpreter spends its time
# switching between them, and a mistyped 100000 would try to start that many: refused as input.
MAX_CONCURRENT = 1024
CONFIG_NAME = "flightdeck.toml"
PROVIDERS: tuple[ProviderName, ...] = ("sim", "openai", "anthropic")
API_KEY_ENV: Mapping[str, str] = MappingProxyType(
    {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY"}
)
# What a sim route's options hold when the config leaves them out (tool_turns, cache and
# read_timeout_s stay absent: the provider derives or defaults them).
SIM_OPTION_DEFAULTS: Mapping[str, object] = MappingProxyType(
    {
        "time_scale": 1.0,
        "latency_ms": 400.0,
        "tokens_per_s": 60.0,
        "seed": 0,
        "error_rate": 0.0,
        "retry_after_s": 2.0,
        "server_error_rate": 0.0,
        "stall_rate": 0.0,
        "fail_rate": 0.0,
    }
)


@dataclass(frozen=True, slots=True)
class Price:
    """US dollars per million tokens."""

    input_per_mtok: Decimal
    output_per_mtok: Decimal
    cache_read_per_mtok: Decimal | None = None  # None: same as input
    cache_write_per_mtok: Decimal | None = None  # None: same as input


@dataclass(frozen=True, slots=True)
class RetrySettings:
    attempts: int = 6  # total tries, the first included
    base_s: float = 1.0  # first backoff ceiling; doubles per retry (full jitter)
    max_s: float = 30.0  # cap on one backoff


@dataclass(frozen=True, slots=True)
class Route:
    """A named way to reach a model: provider, model, limits, price, provider options."""

    name: str
    provider: ProviderName
    model: str
    max_concurrent: int | None = None
    rpm: int | None = None
    tpm: int | None = None
    max_tokens: int = 1024
    price: Price | None = None  # None: look the model up in genai-prices
    retry: RetrySettings = field(default_factory=RetrySettings)
    # Provider-specific options, already validated (sim: time_scale, latency_ms, ...;
    # openai/anthropic: base_url, api_key_env, connect_timeout_s, read_timeout_s).
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    # Where it was configured, for messages: the line of api_key_env if given, else of
    # [routes.NAME] (None for a route not read from a file).
    key_line: int | None = field(default=None, compare=False)

    @property
    def time_scale(self) -> float:
        """Multiplier on every simulated delay (sim only; 1.0 elsewhere)."""
        return float(self.options.get("time_scale", 1.0)) if self.provider == "sim" else 1.0


@dataclass(frozen=True, slots=True)
class EngineSettings:
    max_concurrent: int | Literal["auto"] = "auto"
    state_dir: Path = DEFAULT_STATE_DIR
    default_route: str = DEFAULT_ROUTE
    stall_after_s: float = 120.0  # idle (no chunk, no call) outside a tool
    tool_stall_after_s: float = 600.0  # idle inside a tool
    stall_grace_s: float = 5.0  # after interrupting a stalled child, before finalizing it


@dataclass(frozen=True, slots=True)
class Budget:
    max_cost_usd: Decimal | None = None
    max_runs: int | None = None
    max_depth: int | None = None
    # The line of max_cost_usd in the settings file, for messages (None: not from a file).
    cost_line: int | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class Settings:
    engine: EngineSettings = field(default_factory=EngineSettings)
    routes: Mapping[str, Route] = field(default_factory=lambda: MappingProxyType({}))
    budget: Budget = field(default_factory=Budget)
    source: Path | None = None

    def route(self, name: str | None) -> Route:
        return self.routes[name or self.engine.default_route]


SIM_PRICE = Price(
    input_per_mtok=Decimal("1.00"),
    output_per_mtok=Decimal("4.00"),
    cache_read_per_mtok=Decimal("0.10"),
    cache_write_per_mtok=Decimal("1.25"),
)


def default_sim_route(name: str = DEFAULT_ROUTE, **options: Any) -> Route:
    """The built-in simulated route used when no config names one."""
    return Route(
        name=name,
        provider="sim",
        model="sim-1",
        price=SIM_PRICE,
        options=MappingProxyType(dict(options)),
    )


def load_settings(path: Path | None = None, *, env: Mapping[str, str] | None = None) -> Settings:
    """Read flightdeck.toml (`path`, else ./flightdeck.toml if present, else defaults).

    Unknown keys are errors. Raises ConfigError naming file, line and field. `env` is accepted
    for settings that will come from the environment; FLIGHTDECK_HOME is read by state_dir_from.
    """
    if path is None:
        if not Path(CONFIG_NAME).is_file():
            return Settings(routes=MappingProxyType({DEFAULT_ROUTE: _implicit_sim()}))
        path = Path(CONFIG_NAME)
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")  # an editor's byte order mark is not TOML
    except FileNotFoundError:
        raise ConfigError(path, None, None, "config file not found") from None
    except UnicodeDecodeError:
        raise ConfigError(path, None, None, "not valid UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(path, None, None, exc.strerror or str(exc)) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line, message = decode_error(exc, text)
        raise ConfigError(path, line, None, f"invalid TOML: {message}") from None
    return _Reader(path, TomlLocator(text)).settings(data)


def _implicit_sim() -> Route:
    return default_sim_route(DEFAULT_ROUTE, **SIM_OPTION_DEFAULTS)


def state_dir_from(
    cli: Path | None, settings: Settings, env: Mapping[str, str] | None = None
) -> Path:
    """--state-dir wins, then FLIGHTDECK_HOME, then [engine] state_dir."""
    env = os.environ if env is None else env
    if cli is not None:
        return cli
    if env.get("FLIGHTDECK_HOME"):
        return Path(env["FLIGHTDECK_HOME"])
    return settings.engine.state_dir


# --- reading flightdeck.toml --------------------------------------------------------------

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TOP_KEYS = ("engine", "routes", "budget")
_ENGINE_KEYS = tuple(EngineSettings.__dataclass_fields__)
_ROUTE_KEYS = ("provider", "model", "max_concurrent", "rpm", "tpm", "max_tokens", "price", "retry")
_PRICE_KEYS = tuple(Price.__dataclass_fields__)
_RETRY_KEYS = tuple(RetrySettings.__dataclass_fields__)
_BUDGET_KEYS = tuple(Budget.__dataclass_fields__)
_PROVIDER_NAMES: Mapping[str, ProviderName] = MappingProxyType({p: p for p in PROVIDERS})

_Table = dict[str, object]


class _Reader:
    """Validates a parsed flightdeck.toml; every error names the file, line and dotted key."""

    def __init__(self, path: Path, locator: TomlLocator) -> None:
        self.path = path
        self.locator = locator

    def error(self, key: Key, message: str) -> ConfigError:
        field = ".".join(str(part) for part in key) or None
        return ConfigError(self.path, self.locator.line(*key), field, message)

    def settings(self, data: _Table) -> Settings:
        self.known((), data, _TOP_KEYS)
        routes: dict[str, Route] = {}
        for name, table in self.table(("routes",), data.get("routes", {})).items():
            routes[name] = self.route(name, self.table(("routes", name), table))
        routes.setdefault(DEFAULT_ROUTE, _implicit_sim())
        return Settings(
            engine=self.engine(self.table(("engine",), data.get("engine", {})), routes),
            routes=MappingProxyType(routes),
            budget=self.budget(self.table(("budget",), data.get("budget", {}))),
            source=self.path,
        )

    def engine(self, table: _Table, routes: Collection[str]) -> EngineSettings:
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
        if "state_dir" in table:
            folder = Path(self.string(("engine", "state_dir"), table["state_dir"])).expanduser()
            # Relative to the config file, so a project's config works from any directory.
            values["state_dir"] = self.path.parent / folder
        if "default_route" in table:
            name = self.string(("engine", "default_route"), table["default_route"])
            if name not in routes:
                known = ", ".join(routes)
                message = f"no route named {name!r} (configured: {known})"
                raise self.error(("engine", "default_route"), message)
            values["default_route"] = name
        for name in ("stall_after_s", "tool_stall_after_s", "stall_grace_s"):
            if name in table:
                values[name] = self.number(("engine", name), table[name])
        return EngineSettings(**values)

    def route(self, name: str, table: _Table) -> Route:
        key: Key = ("routes", name)
        if not _NAME.fullmatch(name):
            raise self.error(key, "route names use letters, digits, '.', '_' or '-'")
        provider = self.provider(key, table.get("provider", "sim" if name == "sim" else None))
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
        limits = {
            limit: self.integer((*key, limit), table[limit], 1)
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
        return Route(
            name=name,
            provider=provider,
            model=model,
            price=price,
            retry=retry,
            options=MappingProxyType(options),
            key_line=self.locator.line(*key, "api_key_env"),
            **limits,
        )

    def provider(self, key: Key, value: object) -> ProviderName:
        choices = ", ".join(repr(p) for p in PROVIDERS)
        if value is None:
            raise self.error((*key, "provider"), f"required: one of {choices}")
        provider = _PROVIDER_NAMES.get(value) if isinstance(value, str) else None
        if provider is None:
            raise self.error((*key, "provider"), f"expected one of {choices}, got {_kind(value)}")
        return provider

    def price(self, key: Key, table: _Table) -> Price:
        self.known(key, table, _PRICE_KEYS)
        for required in ("input_per_mtok", "output_per_mtok"):
            if required not in table:
                raise self.error((*key, required), "required (US dollars per million tokens)")
        money = {name: self.money((*key, name), value) for name, value in table.items()}
        return Price(**money)

    def retry(self, key: Key, table: _Table) -> RetrySettings:
        self.known(key, table, _RETRY_KEYS)
        values: dict[str, Any] = {}
        if "attempts" in table:
            values["attempts"] = self.integer((*key, "attempts"), table["attempts"], 1, 20)
        for name in ("base_s", "max_s"):
            if name in table:
                values[name] = self.number((*key, name), table[name])
        out = RetrySettings(**values)
        if out.max_s < out.base_s:
            raise self.error((*key, "max_s"), f"must be at least base_s ({out.base_s})")
        return out

    def budget(self, table: _Table) -> Budget:
        self.known(("budget",), table, _BUDGET_KEYS)
        values: dict[str, Any] = {}
        if "max_cost_usd" in table:
            values["max_cost_usd"] = self.money(("budget", "max_cost_usd"), table["max_cost_usd"])
            values["cost_line"] = self.locator.line("budget", "max_cost_usd")
        for name, low in (("max_runs", 1), ("max_depth", 0)):
            if name in table:
                values[name] = self.integer(("budget", name), table[name], low)
        return Budget(**values)

    # --- value checks: each returns the checked value or raises at its line ---

    def known(self, key: Key, table: _Table, allowed: Collection[str]) -> None:
        for name in table:
            if name not in allowed:
                raise self.error((*key, name), f"unknown key{_suggest(name, allowed)}")

    def table(self, key: Key, value: object) -> _Table:
        if not isinstance(value, dict):
            raise self.error(key, f"expected a table, got {_kind(value)}")
        return value

    def string(self, key: Key, value: object) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, f"expected a non-empty string, got {_kind(value)}")
        return value

    def integer(
        self, key: Key, value: object, low: int, high: int | None = None, also: str = ""
    ) -> int:
        if not isinstance(value, int) or isinstance(value, bool):
            expected = f"an integer {also}".strip()
            raise self.error(key, f"expected {expected}, got {_kind(value)}")
        if value < low or (high is not None and value > high):
            bound = f"at least {low}" if high is None else f"between {low} and {high}"
            raise self.error(key, f"must be {bound}, got {value}")
        return value

    def number(self, key: Key, value: object, *, zero_ok: bool = False, hint: str = "") -> float:
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise self.error(key, f"expected a number, got {_kind(value)}")
        if not math.isfinite(value) or value < 0 or (value == 0 and not zero_ok):
            bound = "0 or more" if zero_ok else "greater than 0"
            raise self.error(key, f"must be {bound}, got {value}{hint}")
        return float(value)

    def fraction(self, key: Key, value: object) -> float:
        rate = self.number(key, value, zero_ok=True)
        if rate > 1:
            raise self.error(key, f"must be between 0 and 1 (a probability), got {value}")
        return rate

    def money(self, key: Key, value: object) -> Decimal:
        self.number(key, value, zero_ok=True)
        return Decimal(str(value))  # via str, so 0.15 stays 0.15 and not 0.1499999...

    def flag(self, key: Key, value: object) -> bool:
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {_kind(value)}")
        return value

    def url(self, key: Key, value: object) -> str:
        url = self.string(key, value)
        if not url.startswith(("http://", "https://")):
            raise self.error(key, f"expected an http:// or https:// URL, got {_kind(value)}")
        return url

    def env_name(self, key: Key, value: object) -> str:
        if not isinstance(value, str) or not _ENV_NAME.fullmatch(value):
            # The value is not echoed: it may be the key itself pasted in by mistake.
            raise self.error(key, "expected the NAME of an environment variable holding the key")
        return value

    def headers(self, key: Key, value: object) -> Mapping[str, str]:
        table = self.table(key, value)
        for name, text in table.items():
            if not isinstance(text, str):
                raise self.error((*key, name), f"expected a string, got {_kind(text)}")
        return MappingProxyType({name: str(text) for name, text in table.items()})


_Check = Callable[[_Reader, Key, object], object]

_SIM_OPTIONS: Mapping[str, _Check] = MappingProxyType(
    {
        "time_scale": lambda r, k, v: r.number(k, v),
        "latency_ms": lambda r, k, v: r.number(k, v, zero_ok=True),
        "tokens_per_s": lambda r, k, v: r.number(
            k, v, hint=" (for instant output use a large number such as 1e9)"
        ),
        "seed": lambda r, k, v: r.integer(k, v, -(2**63)),
        "error_rate": _Reader.fraction,
        "retry_after_s": lambda r, k, v: r.number(k, v, zero_ok=True),
        "server_error_rate": _Reader.fraction,
        "stall_rate": _Reader.fraction,
        "fail_rate": _Reader.fraction,
        "tool_turns": lambda r, k, v: r.integer(k, v, 0),
        "read_timeout_s": lambda r, k, v: r.number(k, v),
        "cache": _Reader.flag,
    }
)

_HTTP_OPTIONS: Mapping[str, _Check] = MappingProxyType(
    {
        "base_url": _Reader.url,
        "api_key_env": _Reader.env_name,
        "connect_timeout_s": lambda r, k, v: r.number(k, v),
        "read_timeout_s": lambda r, k, v: r.number(k, v),
        "headers": _Reader.headers,
    }
)


def _kind(value: object) -> str:
    """A short, terminal-safe description of a TOML value: its type and (for scalars) a repr."""
    if isinstance(value, dict):
        return "table"
    if isinstance(value, list):
        return "array"
    names = {bool: "boolean", int: "integer", float: "float", str: "string"}
    shown = repr(value)  # repr escapes control characters
    name = names.get(type(value), type(value).__name__)
    return f"{name} {shown if len(shown) <= 40 else shown[:37] + '...'}"


def _suggest(name: str, choices: Collection[str]) -> str:
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


__all__ = [
    "API_KEY_ENV",
    "CONFIG_NAME",
    "PROVIDERS",
    "SIM_OPTION_DEFAULTS",
    "SIM_PRICE",
    "Budget",
    "ConfigError",
    "EngineSettings",
    "Price",
    "RetrySettings",
    "Route",
    "Settings",
    "default_sim_route",
    "load_settings",
    "state_dir_from",
]
