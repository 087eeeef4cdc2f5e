"""The settings a batch ran with, as JSON in its row: `resume` needs only the store, not a
flightdeck.toml that may have changed since, and a report can price what the batch read."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import Any

from flightdeck.engine.inputs.settings.values import (
    API_KEY_ENV,
    Budget,
    CannedSteers,
    CommandSpec,
    EngineSettings,
    LoopSettings,
    Price,
    RaySettings,
    RetrySettings,
    Route,
    Settings,
)
from flightdeck.engine.sanitize import MIN_SECRET_LEN


def settings_json(settings: Settings) -> str:
    """The settings a batch runs with, as JSON for its row: `resume` needs only the store, not
    a flightdeck.toml that may have changed since. Keys are never in it: a route names the
    environment variable its key is read from."""
    return json.dumps(
        {
            "engine": {
                f.name: _plain(getattr(settings.engine, f.name))
                for f in dataclasses.fields(EngineSettings)
            },
            "routes": {name: _route_json(r) for name, r in settings.routes.items()},
            "budget": {
                f.name: _plain(getattr(settings.budget, f.name)) for f in dataclasses.fields(Budget)
            },
            "canned": dataclasses.asdict(settings.canned),
            "ray": dataclasses.asdict(settings.ray),
            "source": None if settings.source is None else str(settings.source),
        },
        ensure_ascii=False,
    )


def settings_from_json(text: str) -> Settings:
    """The inverse of `settings_json`."""
    data = json.loads(text)
    eng = dict(data["engine"])
    eng["state_dir"] = Path(eng["state_dir"])
    budget = dict(data["budget"])
    for name in ("max_cost_usd", "soft_cost_usd"):  # soft_cost_usd: absent before it existed
        if budget.get(name) is not None:
            budget[name] = Decimal(budget[name])
    routes = {name: _route_from(name, r) for name, r in data["routes"].items()}
    return Settings(
        engine=EngineSettings(**eng),
        routes=MappingProxyType(routes),
        budget=Budget(**budget),
        # Settings stored before canned steers and loop checks existed have the defaults.
        canned=CannedSteers(**data.get("canned", {})),
        ray=RaySettings(**data.get("ray", {})),  # absent before the Ray executor existed
        source=None if data["source"] is None else Path(data["source"]),
    )


def _decimal(text: str | None) -> Decimal | None:
    return None if text is None else Decimal(text)


def _plain(value: object) -> object:
    if isinstance(value, Decimal | Path):
        return str(value)
    return value


def _route_json(route: Route) -> dict[str, object]:
    price = route.price
    return {
        "provider": route.provider,
        "model": route.model,
        "max_concurrent": route.max_concurrent,
        "rpm": route.rpm,
        "tpm": route.tpm,
        "max_tokens": route.max_tokens,
        "price": None
        if price is None
        else {f.name: _plain(getattr(price, f.name)) for f in dataclasses.fields(Price)},
        "retry": dataclasses.asdict(route.retry),
        "cache_gate_s": route.cache_gate_s,
        "delegate": route.delegate,
        "ask_operator": route.ask_operator,
        "options": {k: _option_json(k, v) for k, v in route.options.items()},
        "key_line": route.key_line,
        "command": None if route.command is None else _command_json(route.command),
        "loops": dataclasses.asdict(route.loops),
        "workspace": route.workspace,
    }


def _command_json(spec: CommandSpec) -> dict[str, object]:
    out: dict[str, object] = {}
    for f in dataclasses.fields(CommandSpec):
        value = getattr(spec, f.name)
        out[f.name] = dict(value) if isinstance(value, Mapping) else value
    return out


def _command_from(data: Mapping[str, Any] | None) -> CommandSpec | None:
    if data is None:
        return None
    # JSON has lists where the spec keeps tuples, and dicts where it keeps read-only maps.
    fields: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else MappingProxyType(v) if isinstance(v, dict) else v
        for k, v in data.items()
    }
    return CommandSpec(**fields)


def _option_json(name: str, value: object) -> object:
    # A header's value may be a key (a gateway's Authorization): only its name is kept.
    if name == "headers" and isinstance(value, Mapping):
        return dict.fromkeys(value, None)
    return dict(value) if isinstance(value, Mapping) else value


def unkept_headers(settings: Settings) -> list[str]:
    """The routes of stored settings whose headers' values were not kept (see _option_json)."""
    return [
        name
        for name, route in settings.routes.items()
        if any(v is None for v in dict(route.options.get("headers") or {}).values())
    ]


def _route_from(name: str, data: Mapping[str, Any]) -> Route:
    price = data["price"]
    options = {
        k: MappingProxyType(v) if isinstance(v, dict) else v for k, v in data["options"].items()
    }
    return Route(
        name=name,
        provider=data["provider"],
        model=data["model"],
        max_concurrent=data["max_concurrent"],
        rpm=data["rpm"],
        tpm=data["tpm"],
        max_tokens=data["max_tokens"],
        price=None
        if price is None
        else Price(
            input_per_mtok=Decimal(price["input_per_mtok"]),
            output_per_mtok=Decimal(price["output_per_mtok"]),
            cache_read_per_mtok=_decimal(price["cache_read_per_mtok"]),
            cache_write_per_mtok=_decimal(price["cache_write_per_mtok"]),
        ),
        retry=RetrySettings(**data["retry"]),
        cache_gate_s=data.get("cache_gate_s", 0.0),
        delegate=data.get("delegate", False),
        ask_operator=data.get("ask_operator", False),
        options=MappingProxyType(options),
        key_line=data["key_line"],
        command=_command_from(data.get("command")),
        loops=_loops_from(data.get("loops")),
        workspace=data.get("workspace", "shared"),
    )


def _loops_from(data: Mapping[str, Any] | None) -> LoopSettings:
    if data is None:
        return LoopSettings()
    return LoopSettings(**{**data, "policy": tuple(data.get("policy", ()))})


def stored_keys(settings: Settings, env: Mapping[str, str]) -> tuple[str, ...]:
    """The keys `env` holds under the names the settings' routes read theirs from (a model
    route's `api_key_env` or its provider's default, a command route's `api_key_env` and
    `env_pass`): what a client redacts from the text it records for the owner, which redacts
    every key of the batch again, its headers' values too (those are not stored)."""
    names: list[str] = []
    for route in settings.routes.values():
        if route.command is not None:
            names += route.command.env_pass
        named = route.options.get("api_key_env") or API_KEY_ENV.get(route.provider)
        if named:
            names.append(str(named))
    values = (env.get(name, "").strip() for name in dict.fromkeys(names))
    return tuple(v for v in values if len(v) >= MIN_SECRET_LEN)
