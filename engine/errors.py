"""Every error flightdeck raises on purpose, under one root.

Our exception hierarchy:

* FlightdeckError
  * LocatedError - names the file, line and field it is about
    * InputError - something the operator gave cannot be used
      * SpecError - a task or batch file is invalid
      * ConfigError - flightdeck.toml (or the environment) is invalid
    * StoreError - the state database cannot be used
  * ProviderError - a model call failed
    * RateLimited - 429 / 529: try again later
    * TransientError - a connection, a 5xx or a stream broke
      * BrokenStream - a stream ended without its end marker, or sent a malformed chunk
    * FatalError - bad key, exhausted quota, bad request: retrying cannot help
  * ToolError - a tool call failed; the message goes back to the model
  * CommandError - an operator command that cannot be applied as given (also a ValueError)
    * AlreadyEnded - every child it names had ended before it came: nothing left to do
    * BatchEnded - its batch had ended before it could be recorded: nothing left to apply it

The command line reports every LocatedError the same way: one line naming the file, exit code 2.
Beside their raisers live UsageError (a bad command-line argument, an InputError) and
StoreVersionError (a StoreError).
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from pathlib import Path

from flightdeck.engine.sanitize import quoted


class FlightdeckError(Exception):
    """Base of every error flightdeck raises on purpose."""


# --- located: task files, the config, the state database -------------------------------------


class LocatedError(FlightdeckError):
    """An error about a file: its path, and the line and field when there are some."""

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
            path = _shown(self.path)
            parts.append(path if self.line is None else f"{path}:{self.line}")
        if self.field:
            parts.append(_shown(self.field))
        return ": ".join([*parts, self.message])


def _shown(name: str) -> str:
    """A file name or key from the operator's input, escaped when it holds characters a terminal
    would not show (sanitized, `"\x1b[2J"` would be an empty name, and name nothing)."""
    return name if name.isprintable() else repr(name)


class InputError(LocatedError):
    """Bad input: a task file, the config or a CLI argument. Nothing has been written yet."""


class SpecError(InputError):
    """A task or batch file is invalid."""


class ConfigError(InputError):
    """flightdeck.toml (or the environment) is invalid."""


class StoreError(LocatedError):
    """The state database cannot be used: not a database, unreadable, or a newer schema."""


# --- provider: one model call -----------------------------------------------------------------


class ProviderError(FlightdeckError):
    """Base of every error a provider raises."""

    retryable = False

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class RateLimited(ProviderError):
    """429 / 529: try again later; `retry_after` in seconds when the server said."""

    retryable = True


class TransientError(ProviderError):
    """Connection reset, 5xx, a stream that broke or stalled mid-response."""

    retryable = True


class BrokenStream(TransientError):
    """A 200 stream that is no answer: it ended without its end marker (OpenAI's
    `finish_reason`, Anthropic's `message_stop`) or carried a chunk that cannot be read (bad
    JSON, an event of the wrong shape). The SDKs raise nothing for the first; retried like a
    dropped connection, and what streamed is never taken as the final text."""


class FatalError(ProviderError):
    """Bad key, exhausted quota, bad request: retrying cannot help."""


# --- tool: one tool call ----------------------------------------------------------------------


class ToolError(FlightdeckError):
    """A tool failed; the message goes back to the model, not to the operator's terminal."""


# --- command: one operator command -------------------------------------------------------------


class CommandError(FlightdeckError, ValueError):
    """An operator command that cannot be applied as given: an unknown child, a message too long
    or not valid text, a bad limit. Nothing of it was applied; `field` names what is wrong."""

    def __init__(self, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


class AlreadyEnded(CommandError):
    """A stop, pause or continue that came after every child it names had ended on its own:
    not applied, yet no failure, since nothing was left for it to act on."""


class BatchEnded(CommandError):
    """A command for a batch that had ended when it would have been recorded: nothing is left
    to apply it (to a stop, pause or continue, nothing is left to act on either: no failure)."""


def check_known(ids: Iterable[str], known: Container[str], batch_id: str) -> None:
    """CommandError (`no_child`) if one of `ids` is no child of the batch."""
    unknown = [i for i in dict.fromkeys(ids) if i not in known]
    if unknown:
        raise no_child(unknown, batch_id)


def check_asking(ids: Iterable[str], asking: Container[str]) -> None:
    """CommandError if one of `ids` asks nothing now. One message answers one question, so an
    id named by mistake answers none of them, and the refusal says who still waits for one."""
    named = list(dict.fromkeys(ids))
    idle = [i for i in named if i not in asking]
    if not idle:
        return
    why = f"no question of {_listed(idle)} waits for an answer"
    if waiting := [i for i in named if i in asking]:
        wait = "waits" if len(waiting) == 1 else "wait"
        why += f"; nothing was answered: {_listed(waiting)} still {wait} for one"
    raise CommandError(why, "child_ids")


def _listed(ids: Sequence[str]) -> str:
    return ", ".join(quoted(i) for i in ids[:5]) + (" …" if len(ids) > 5 else "")


def no_child(unknown: Sequence[str], batch_id: str) -> CommandError:
    """How every command says that ids name no child of the batch."""
    return CommandError(f"no child with id {_listed(unknown)} in batch {batch_id}", "child_ids")


__all__ = [
    "BrokenStream",
    "CommandError",
    "ConfigError",
    "FatalError",
    "FlightdeckError",
    "InputError",
    "LocatedError",
    "ProviderError",
    "RateLimited",
    "SpecError",
    "StoreError",
    "ToolError",
    "TransientError",
    "check_asking",
    "check_known",
    "no_child",
]
