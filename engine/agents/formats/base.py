"""What a format makes of a CLI's stdout lines: transcript lines, tools, usage, the result."""

from __future__ import annotations

import json
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from flightdeck.engine.model import Usage
from flightdeck.engine.sanitize import cut_at, one_line

UNKNOWN_CHARS = 300  # of an event no reader knows, in its one transcript line


@dataclass(frozen=True, slots=True)
class Shown:
    """A transcript line: `role` is a transcript role (assistant, tool-call, tool, output)."""

    role: str
    text: str


@dataclass(frozen=True, slots=True)
class ToolStarted:
    """The CLI began running a tool: it is the child's current tool."""

    name: str


@dataclass(frozen=True, slots=True)
class ToolEnded:
    """The current tool returned."""


@dataclass(frozen=True, slots=True)
class Waiting:
    """Its turn over, the CLI waits for commands it moved to the background (`what`) before it
    goes on or exits: they run as a tool would; None: they have ended."""

    what: str | None


@dataclass(frozen=True, slots=True)
class Report:
    """What a turn used, as the CLI reported at its end: tokens, its own cost for them (None:
    it gave none) and the API calls it made (None: not said)."""

    usage: Usage
    cost_usd: Decimal | None = None
    calls: int | None = None


@dataclass(frozen=True, slots=True)
class Live:
    """Usage of one API call so far (`key` names the call; a later figure replaces it)."""

    key: str
    usage: Usage


@dataclass(frozen=True, slots=True)
class Retrying:
    """The CLI is retrying a failed call: what it says, for the row and the transcript."""

    text: str


@dataclass(frozen=True, slots=True)
class Model:
    """The model the CLI says it runs."""

    name: str


@dataclass(frozen=True, slots=True)
class Lifecycle:
    """What became of a message written to the CLI's stdin (`uuid`): queued, started,
    completed or cancelled (Claude Code's `command_lifecycle`)."""

    uuid: str
    state: str


@dataclass(frozen=True, slots=True)
class Session:
    """The CLI's session id, which a resume continues."""

    id: str


@dataclass(frozen=True, slots=True)
class Denied:
    """The CLI's permissions denied a tool call (Claude Code's `permission_denials`): the tool
    and its input as one line of JSON."""

    tool: str
    input: str


@dataclass(frozen=True, slots=True)
class Result:
    """The CLI's final answer for a turn; `error`: it says the turn failed."""

    text: str
    error: bool = False


Event = (
    Shown
    | ToolStarted
    | ToolEnded
    | Waiting
    | Report
    | Live
    | Retrying
    | Model
    | Lifecycle
    | Session
    | Denied
    | Result
)


class OutputReader(Protocol):
    """Reads one process's stdout, line by line."""

    def feed(self, line: str) -> list[Event]:
        """The events of one stdout line."""
        ...

    def ended(self) -> list[Event]:
        """The events its process's end implies (a tool it never said ended, closed)."""
        ...


def json_object(line: str) -> dict[str, object] | None:
    """The line as a JSON object, or None when it is not one (a CLI's stray output)."""
    text = line.strip()
    if not text.startswith("{"):
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested past Python's stack
        return None
    return value if isinstance(value, dict) else None


def count(value: object) -> int:
    """A token count from JSON; anything that is not a whole number counts 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def unknown(event: dict[str, object], kind: object) -> Shown:
    """An event of a kind no reader knows yet: kept as one line, never fatal."""
    line = one_line(f"{text_of(kind)}: {text_of(event)}")
    return Shown("event", line if len(line) <= UNKNOWN_CHARS else cut_line(line, UNKNOWN_CHARS))


def cut(text: str, limit: int) -> str:
    """`text` up to about `limit` characters (never inside a key: `cut_at`), and how many more
    there were. Cut before the child redacts it."""
    if len(text) <= limit:  # nearly every line: one test, not a call
        return text
    end = cut_at(text, limit)
    more = len(text) - end
    return text[:end] + (f"\n… ({more} more characters)" if more else "")


def cut_line(text: str, limit: int) -> str:
    """One line cut as `cut` cuts, ending in `…` if it was."""
    end = cut_at(text, limit - 1)
    return text if end == len(text) else text[:end] + "…"


def text_of(value: object) -> str:
    """A JSON value shown as text: strings as they are, the rest as compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)
