"""Checks of one TOML value each: return the checked value or raise ConfigError at its line."""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Mapping
from decimal import Decimal
from pathlib import Path
from types import MappingProxyType
from typing import Any
from urllib.parse import urlsplit

from flightdeck.engine.errors import ConfigError
from flightdeck.engine.inputs.bounds import MAX_COUNT, MAX_MONEY, MAX_SECONDS
from flightdeck.engine.inputs.messages import kind, suggest
from flightdeck.engine.inputs.tomlpos import Key, TomlLocator

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

Table = dict[str, object]


class ValueChecks:
    """Checks values of one parsed TOML file; every error names the file, line and dotted key."""

    def __init__(self, path: Path, locator: TomlLocator) -> None:
        self.path = path
        self.locator = locator

    def error(self, key: Key, message: str) -> ConfigError:
        field = ".".join(str(part) for part in key) or None
        return ConfigError(self.path, self.locator.line(*key), field, message)

    def known(self, key: Key, table: Table, allowed: Collection[str]) -> None:
        for name in table:
            if name not in allowed:
                raise self.error((*key, name), f"unknown key{suggest(name, allowed)}")

    def table(self, key: Key, value: object) -> Table:
        if not isinstance(value, dict):
            raise self.error(key, f"expected a table, got {kind(value)}")
        return value

    def string(self, key: Key, value: object) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.error(key, f"expected a non-empty string, got {kind(value)}")
        return value

    def integer(
        self, key: Key, value: object, low: int, high: int | None = None, also: str = ""
    ) -> int:
        """An integer in [low, high]; without `high`, at most MAX_COUNT (said as "at least
        low" when it is the low bound that is missed)."""
        if not isinstance(value, int) or isinstance(value, bool):
            expected = f"an integer {also}".strip()
            raise self.error(key, f"expected {expected}, got {kind(value)}")
        if value < low or value > (MAX_COUNT if high is None else high):
            if high is None:
                bound = f"at least {low}" if value < low else f"at most {MAX_COUNT:,}"
            else:
                bound = f"between {low} and {high}"
            raise self.error(key, f"must be {bound}, got {value}")
        return value

    def number(
        self,
        key: Key,
        value: object,
        *,
        zero_ok: bool = False,
        hint: str = "",
        low: float = 0.0,
        high: float = MAX_SECONDS,
    ) -> float:
        """A number in [low, high] (0 itself only with `zero_ok`); `high` defaults to the
        longest duration in seconds the code can wait."""
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise self.error(key, f"expected a number, got {kind(value)}")
        if not math.isfinite(value):  # TOML has inf and nan
            raise self.error(key, f"must be a finite number, got {value}")
        if value < low or (value == 0 and not zero_ok):
            bound = f"at least {low:g}" if low else "0 or more" if zero_ok else "greater than 0"
            raise self.error(key, f"must be {bound}, got {value}{hint}")
        if value > high:
            most = f"{high:,.0f}" if high == int(high) else f"{high:g}"
            raise self.error(key, f"must be at most {most}, got {value}")
        return float(value)

    def fraction(self, key: Key, value: object) -> float:
        rate = self.number(key, value, zero_ok=True, high=1e308)
        if rate > 1:
            raise self.error(key, f"must be between 0 and 1 (a probability), got {value}")
        return rate

    def money(self, key: Key, value: object) -> Decimal:
        self.number(key, value, zero_ok=True, high=float(MAX_MONEY))
        return Decimal(str(value))  # via str, so 0.15 stays 0.15 and not 0.1499999...

    def flag(self, key: Key, value: object) -> bool:
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {kind(value)}")
        return value

    def choice(self, key: Key, value: object, choices: Collection[str]) -> Any:
        """`value`, one of `choices` (a Literal's values: typed as the caller's field)."""
        if not isinstance(value, str) or value not in choices:
            shown = ", ".join(repr(c) for c in choices)
            raise self.error(key, f"expected one of {shown}, got {kind(value)}")
        return value

    def folder(self, key: Key, value: object) -> str:
        """An existing folder, relative to the settings file's own."""
        folder = self.path.parent / Path(self.string(key, value)).expanduser()
        if not folder.is_dir():
            raise self.error(key, f"no such folder: {folder}")
        return str(folder)

    def url(self, key: Key, value: object) -> str:
        url = self.string(key, value)
        if not url.startswith(("http://", "https://")):
            raise self.error(key, f"expected an http:// or https:// URL, got {kind(value)}")
        # The SDK's client, made at the route's first turn, refuses what does not parse: said
        # here, before the batch starts, not as each child's internal error.
        if _CONTROL.search(url):
            raise self.error(key, "holds a control character, which no URL can")
        try:
            parts = urlsplit(url)
            host = parts.hostname
            parts.port  # noqa: B018  # checked as it is read: a number from 0 to 65535
        except ValueError as exc:
            raise self.error(key, f"not a URL a client can use: {exc}") from None
        if not host:
            raise self.error(key, "names no host")
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
                raise self.error((*key, name), f"expected a string, got {kind(text)}")
        return MappingProxyType({name: str(text) for name, text in table.items()})
