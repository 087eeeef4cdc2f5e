"""A command child's environment: an allowlist, never the whole environment of flightdeck."""

from __future__ import annotations

from collections.abc import Mapping

from flightdeck.engine.inputs.settings import Route

# What any program needs to find itself, its home and its locale.
ALLOWED = ("PATH", "HOME", "LANG", "TERM")


def child_env(route: Route, env: Mapping[str, str]) -> dict[str, str]:
    """PATH, HOME, LANG, TERM, the route's api_key_env and its env_pass names, where set."""
    assert route.command is not None
    names = [*ALLOWED, *route.command.env_pass]
    key_name = route.options.get("api_key_env")
    if key_name:
        names.append(str(key_name))
    return {name: env[name] for name in names if name in env}
