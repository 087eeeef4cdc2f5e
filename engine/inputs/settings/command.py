"""The fields of a `provider = "command"` route: its argv templates, workspace, output format,
steer mode and environment, each checked at its line."""

from __future__ import annotations

import string
from collections.abc import Collection
from types import MappingProxyType
from typing import Any

from flightdeck.engine.inputs.keyshapes import KEY_IN_ARGV, looks_like_key
from flightdeck.engine.inputs.messages import kind
from flightdeck.engine.inputs.settings.checks import Table, ValueChecks
from flightdeck.engine.inputs.settings.values import (
    ARGV_PLACEHOLDERS,
    OUTPUT_FORMATS,
    RESUME_PLACEHOLDERS,
    SESSION_FORMATS,
    STEER_MODES,
    WORKSPACE_MODES,
    CommandSpec,
)
from flightdeck.engine.inputs.tomlpos import Key

# The keys a command route takes besides provider, model, max_concurrent and price.
COMMAND_KEYS = (
    "argv",
    "stdin",
    "workspace",
    "keep_worktrees",
    "env_pass",
    "api_key_env",
    "format",
    "kill_grace_s",
    "steer",
    "resume_argv",
)


def placeholders(arg: str) -> list[str]:
    """The `{name}` fields of one template argument (`{{` and `}}` are literal braces);
    ValueError for a malformed one, or a field with a conversion or format spec."""
    names = []
    for _, name, spec, conversion in string.Formatter().parse(arg):
        if name is None:
            continue
        if spec or conversion:
            raise ValueError(f"{{{name}}}: only plain {{name}} placeholders are substituted")
        names.append(name)
    return names


def read_command(checks: ValueChecks, key: Key, table: Table) -> CommandSpec:
    """The route's CommandSpec; ConfigError at the line of the first bad field."""
    values: dict[str, Any] = {}
    values["argv"] = _argv(checks, (*key, "argv"), table.get("argv"), ARGV_PLACEHOLDERS)
    for name in ("stdin", "keep_worktrees"):
        if name in table:
            values[name] = checks.flag((*key, name), table[name])
    for name, choices in (
        ("workspace", WORKSPACE_MODES),
        ("format", OUTPUT_FORMATS),
        ("steer", STEER_MODES),
    ):
        if name in table:
            values[name] = checks.choice((*key, name), table[name], choices)
    if "kill_grace_s" in table:
        values["kill_grace_s"] = checks.number(
            (*key, "kill_grace_s"), table["kill_grace_s"], zero_ok=True
        )
    if "env_pass" in table:
        values["env_pass"] = _names(checks, (*key, "env_pass"), table["env_pass"])
    if "resume_argv" in table:
        resume = _argv(checks, (*key, "resume_argv"), table["resume_argv"], RESUME_PLACEHOLDERS)
        if not any("session" in placeholders(arg) for arg in resume):
            raise checks.error((*key, "resume_argv"), "must name the session: {session}")
        values["resume_argv"] = resume
    spec = CommandSpec(**values)
    _consistent(checks, key, spec, table)
    lines = {name: checks.locator.line(*key, name) for name in ("argv", "resume_argv")}
    lines["workspace"] = checks.locator.line(*key, "workspace") or checks.locator.line(*key)
    return CommandSpec(**values, lines=MappingProxyType(lines))


def _consistent(checks: ValueChecks, key: Key, spec: CommandSpec, table: Table) -> None:
    """The steer mode needs what it works through."""
    if spec.steer == "stdin" and (not spec.stdin or spec.format != "claude-stream-json"):
        raise checks.error(
            (*key, "steer"),
            'steer = "stdin" sends user turns as Claude stream-json: it needs stdin = true '
            'and format = "claude-stream-json" (and --input-format stream-json in argv)',
        )
    if spec.steer == "stdin" and "--replay-user-messages" not in spec.argv:
        raise checks.error(
            (*key, "argv"),
            'steer = "stdin" needs --replay-user-messages in argv: Claude Code then says when '
            "each message it was sent starts and ends (command_lifecycle), which is how "
            "flightdeck knows a steer went into the running turn and when all are answered",
        )
    if (
        spec.steer == "stdin"
        and spec.resume_argv
        and (
            "--replay-user-messages" not in spec.resume_argv
            or any("message" in placeholders(arg) for arg in spec.resume_argv)
        )
    ):
        # Its run too gets its message (and steers) as user turns on the input, which a CLI
        # reading a prompt from argv takes as more prompt, waiting for an end that never comes.
        raise checks.error(
            (*key, "resume_argv"),
            'with steer = "stdin", a resumed run gets its message on stdin as a user turn: '
            "resume_argv needs --input-format stream-json and --replay-user-messages, as argv "
            "has, and no {message}",
        )
    if spec.steer == "resume":
        if not spec.resume_argv:
            raise checks.error((*key, "resume_argv"), 'required for steer = "resume"')
        if spec.format not in SESSION_FORMATS:
            shown = ", ".join(repr(f) for f in SESSION_FORMATS)
            raise checks.error(
                (*key, "steer"),
                f'steer = "resume" needs the session id a format reports: format = {shown}',
            )
    elif "resume_argv" in table and spec.format not in SESSION_FORMATS:
        # Without steer = "resume", a retry that continues resumes the session with it.
        shown = ", ".join(repr(f) for f in SESSION_FORMATS)
        raise checks.error(
            (*key, "resume_argv"),
            f"resumes the session a format reports: it needs format = {shown}",
        )


def _argv(
    checks: ValueChecks, key: Key, value: object, allowed: Collection[str]
) -> tuple[str, ...]:
    if value is None:
        raise checks.error(key, "required: the program and its arguments, as a list of strings")
    if not isinstance(value, list):
        raise checks.error(key, f"expected a list of strings, got {kind(value)}")
    if not value:
        raise checks.error(key, "must name a program: the list is empty")
    for i, arg in enumerate(value):
        if not isinstance(arg, str):
            raise checks.error((*key, i), f"expected a string, got {kind(arg)}")
        if looks_like_key(arg):  # first: no later message may quote it
            raise checks.error((*key, i), KEY_IN_ARGV)
        try:
            names = placeholders(arg)
        except ValueError as exc:
            raise checks.error((*key, i), f"bad placeholder: {exc}") from None
        for name in names:
            if name not in allowed:
                known = ", ".join(f"{{{n}}}" for n in allowed)
                raise checks.error((*key, i), f"unknown placeholder {{{name}}} (known: {known})")
    if not value[0].strip():  # said apart: "not a placeholder" named nothing it was
        raise checks.error((*key, 0), "the program is empty: give its name or path")
    if placeholders(value[0]):
        raise checks.error((*key, 0), "the program must be a name or path, not a placeholder")
    return tuple(value)


def _names(checks: ValueChecks, key: Key, value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise checks.error(key, f"expected a list of environment variable names, got {kind(value)}")
    return tuple(checks.env_name((*key, i), name) for i, name in enumerate(value))
