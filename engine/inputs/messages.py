"""Wording shared by input errors: what a value is, and a did-you-mean."""

from __future__ import annotations

import datetime
import difflib
from collections.abc import Collection

# The top-level keys of each kind of file, one loader's own and the other's mistake: a key of
# the other kind says which file was given where (a task file as --config, or the reverse).
TASK_FILE_KEYS = ("batch", "defaults", "tasks", "schedules")
CONFIG_KEYS = ("engine", "routes", "budget", "steer", "tui", "ray")


def expected(what: str, value: object) -> str:
    """ "expected WHAT, got KIND": the usual message for a value of the wrong type."""
    return f"expected {what}, got {kind(value)}"


def kind(value: object) -> str:
    """A short, terminal-safe description of a value: its type and (for scalars) a repr."""
    names = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array"}
    if isinstance(value, dict):
        return "table"
    if value is None:
        return "null"
    name = names.get(type(value), type(value).__name__)
    if isinstance(value, list):
        return name
    if isinstance(value, bytes):  # YAML's !!binary
        return f"binary data ({len(value)} bytes)"
    if isinstance(value, bool):  # as the file wrote it (TOML, JSON and YAML agree)
        return f"boolean {str(value).lower()}"
    if isinstance(value, datetime.date | datetime.time):  # a bare TOML or YAML date or time
        return f"{name} {value.isoformat()}"
    shown = repr(value)  # repr escapes control characters, so untrusted text stays inert
    return f"{name} {shown if len(shown) <= 40 else shown[:37] + '...'}"


def suggest(name: object, choices: Collection[str]) -> str:
    """ " (did you mean 'x'?)" for the closest of `choices`, or ""."""
    close = difflib.get_close_matches(str(name), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def key_name(key: object) -> str:
    """A key as the file wrote it, for messages: YAML's null and booleans are keys too, and
    Python's None and True are no key the file has."""
    if key is None:
        return "~ (null)"
    if isinstance(key, bool):
        return str(key).lower()
    return str(key)
