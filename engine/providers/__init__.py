"""Model clients behind one Protocol (base.py); `make_provider` picks one for a route."""

from __future__ import annotations

import ipaddress
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from flightdeck.engine.errors import ConfigError, FatalError
from flightdeck.engine.inputs.settings import API_KEY_ENV, Route
from flightdeck.engine.providers.base import (
    LOCAL_PLACEHOLDER_KEY,
    Provider,
    TurnRequest,
    TurnStream,
    sdk_secrets,
)
from flightdeck.engine.sanitize import redact

__all__ = [
    "LOCAL_PLACEHOLDER_KEY",
    "Provider",
    "api_key",
    "is_local",
    "make_provider",
]


def make_provider(
    route: Route, env: Mapping[str, str] | None = None, *, source: Path | str | None = None
) -> Provider:
    """The client for `route`. An SDK's is made at its first turn (`FirstCall`), its key read
    and checked now: ConfigError (naming `source`, the settings file) when it is missing."""
    if route.provider == "sim":
        from flightdeck.engine.providers.sim import SimProvider

        return SimProvider(route)
    if route.provider not in API_KEY_ENV:
        raise ConfigError(source, None, f"routes.{route.name}.provider", "unknown provider")
    return FirstCall(route, api_key(route, os.environ if env is None else env, source))


class FirstCall:
    """An SDK's client made at the route's first turn, not with the batch: the owner records
    its batch, which `flightdeck run` then shows, without first waiting on the SDK's import
    (openai's takes 1.3-1.6 s of CPU). Its secrets are known from the start."""

    def __init__(self, route: Route, key: str) -> None:
        self.name: str = route.provider
        self.model = route.model
        self.secrets = sdk_secrets(route.provider, key, route.options.get("headers"))
        self._route, self._key = route, key
        self._lock = threading.Lock()  # children's first turns come on many threads at once
        self._client: Provider | None = None
        self._closed = False  # a turn's thread abandoned at the batch's end may come late

    def open(self, request: TurnRequest) -> TurnStream:
        """A turn of the client, made first if need be."""
        return self.client().open(request)

    def client(self) -> Provider:
        """The SDK's client, made once. FatalError, naming the route, if it cannot be made (an
        OPENAI_BASE_URL in the environment the SDK refuses, say): each child of the route
        fails with that line, as a call refused for good would."""
        with self._lock:
            if self._closed:  # made now, nothing would ever close it
                raise FatalError(f"route {self._route.name}: the batch has closed")
            if self._client is None:
                try:
                    self._client = _sdk_client(self._route, self._key)
                except Exception as exc:
                    said = redact(f"{type(exc).__name__}: {exc}", self.secrets)
                    raise FatalError(
                        f"route {self._route.name}: its {self.name} client could not be made: "
                        + said
                    ) from exc
            return self._client

    def close(self) -> None:
        """Release the client's connections, if it was made."""
        with self._lock:
            client, self._closed = self._client, True
        if client is not None:
            client.close()


def _sdk_client(route: Route, key: str) -> Provider:
    if route.provider == "openai":
        from flightdeck.engine.providers.openai import OpenAIProvider

        return OpenAIProvider(route, key)
    from flightdeck.engine.providers.anthropic import AnthropicProvider

    return AnthropicProvider(route, key)


def api_key(route: Route, env: Mapping[str, str], source: Path | str | None = None) -> str:
    """The key from the environment variable the route names; never stored or shown."""
    named = route.options.get("api_key_env")
    base_url = route.options.get("base_url")
    if not named and base_url is not None and not is_local(base_url):
        raise ConfigError(
            source,
            route.key_line,
            f"routes.{route.name}.api_key_env",
            "a route with a base_url must name the environment variable that holds its key "
            f"(the default {API_KEY_ENV[route.provider]} is only sent to the provider itself)",
        )
    name = str(named or API_KEY_ENV[route.provider])
    key = env.get(name, "").strip() if named or base_url is None else ""
    if key and not _HEADER_SAFE.fullmatch(key):
        # It goes in an HTTP header: every call would fail, after its retries, with a
        # UnicodeEncodeError. Said now, naming the variable; the value is never shown.
        raise ConfigError(
            source,
            route.key_line,
            f"routes.{route.name}.api_key_env",
            f"environment variable {name} holds a character an HTTP header cannot carry "
            "(a key is visible ASCII: letters, digits and punctuation); set it again",
        )
    if key:
        return key
    if is_local(base_url):
        return LOCAL_PLACEHOLDER_KEY
    empty = name in env and (named or base_url is None)  # exported, with nothing in it
    raise ConfigError(
        source,
        route.key_line,
        f"routes.{route.name}.api_key_env",
        f"environment variable {name} is {'set but empty' if empty else 'not set'}",
    )


_HEADER_SAFE = re.compile(r"[\x21-\x7e]+")


def is_local(base_url: object) -> bool:
    """Whether `base_url` points at this machine (localhost or a loopback address)."""
    if not isinstance(base_url, str):
        return False
    host = urlsplit(base_url).hostname or ""
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
