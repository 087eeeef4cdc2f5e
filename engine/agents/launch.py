"""A command route made ready at start: its program found on PATH, its environment, its key.

One per route, shared by its children, built before anything is written so a missing program
or key fails cleanly; the process runner (child/command.py) runs its processes.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

from flightdeck.engine.agents.env import child_env
from flightdeck.engine.errors import ConfigError
from flightdeck.engine.inputs.settings import CommandSpec, Route
from flightdeck.engine.sanitize import MIN_SECRET_LEN


class CommandRoute:
    """The route's resolved programs, the environment its processes get, and its key."""

    def __init__(
        self, route: Route, env: Mapping[str, str], source: Path | str | None = None
    ) -> None:
        assert route.command is not None
        self.route = route
        self.name = route.name
        self.model = route.model
        self.spec: CommandSpec = route.command
        self._source = source
        self.env = child_env(route, env)
        key_name = route.options.get("api_key_env")
        self.secrets: tuple[str, ...] = ()
        if key_name:
            key = env.get(str(key_name), "").strip()
            if not key:
                raise ConfigError(
                    source,
                    route.key_line,
                    f"routes.{route.name}.api_key_env",
                    f"environment variable {key_name} is not set",
                )
            self.secrets = (key,)
        # What env_pass hands the process is often a token too (GITHUB_TOKEN): redacted alike.
        passed = (env.get(name, "").strip() for name in self.spec.env_pass)
        self.secrets += tuple(v for v in passed if len(v) >= MIN_SECRET_LEN)
        base = Path(source).parent if source is not None else Path.cwd()
        self.argv = self._resolved(self.spec.argv, "argv", base)
        self.resume_argv = (
            self._resolved(self.spec.resume_argv, "resume_argv", base)
            if self.spec.resume_argv
            else ()
        )

    def _resolved(self, argv: tuple[str, ...], field: str, base: Path) -> tuple[str, ...]:
        """`argv` with its program as an absolute path: a name found on the PATH the process
        gets, a relative path taken from the settings file's folder."""
        program = argv[0]
        if "/" in program:
            program = str((base / Path(program).expanduser()).absolute())
        found = shutil.which(program, path=self.env.get("PATH", ""))
        where = None
        if found is None:
            where = "is not an executable file" if "/" in program else "was not found on PATH"
        elif not _starts(found):  # started under /bin/sh (gate.py), it would run as a script
            where = "is neither a binary nor a script with a #! line"
        if where is not None or found is None:
            raise ConfigError(
                self._source,
                self.spec.lines.get(field),
                f"routes.{self.name}.{field}",
                f"program {argv[0]!r} {where}",
            )
        return (str(Path(found).absolute()), *argv[1:])


def _starts(path: str) -> bool:
    """Whether `execve` can start the file: an ELF binary or a script with a `#!` line."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
    except OSError:
        return True  # unreadable yet executable: the system may still run it; exec will say
    return head.startswith((b"#!", b"\x7fELF"))
