"""Input errors that name the file, line and field (exit code 2 at the CLI)."""

from __future__ import annotations

from pathlib import Path


class InputError(Exception):
    """Bad input: a task file, the config or a CLI argument. Nothing has been written yet."""

    def __init__(
        self, path: Path | str | None, line: int | None, field: str | None, message: str
    ) -> None:
        self.path = str(path) if path is not None else None
        self.line = line
        self.field = field
        self.message = message
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = []
        if self.path is not None:
            parts.append(self.path if self.line is None else f"{self.path}:{self.line}")
        if self.field:
            parts.append(self.field)
        return ": ".join([*parts, self.message])


class SpecError(InputError):
    """A task or batch file is invalid."""


class ConfigError(InputError):
    """flightdeck.toml (or the environment) is invalid."""


class StoreError(InputError):
    """The state database cannot be used: not a database, unreadable, or a newer schema."""
