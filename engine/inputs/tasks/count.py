"""The tasks of a large YAML or TOML batch file, counted before the document is built: a file
of a million is refused at the first task over `[engine] max_tasks` in the time it takes to
read that far, not after building a million nodes. What is counted here is the entries of
`tasks` (an entry with an inline `for_each` list as its items; in TOML, a schedule's inline
`for_each` too); everything is counted again, exactly, as the tasks are expanded (expand.Room).
A YAML file's count is yamlfile.py's, which only a YAML file imports."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from flightdeck.engine.errors import SpecError
from flightdeck.engine.inputs.tomlpos import Key

# Below this size a document is built at once, quickly, and counted as it is expanded.
SCAN_FROM_BYTES = 1024 * 1024


def too_many(limit: int, label: str = "") -> str:
    """What a batch file of more than `limit` tasks is told."""
    return (
        f"{label}more than {limit:,} tasks, the limit ([engine] max_tasks: raise it there, "
        "or split the batch)"
    )


@dataclass(slots=True)
class TomlCount:
    """Told each key path of a TOML batch file as TomlLocator first finds it: SpecError at the
    first task over `limit`. Key paths, not text, so strings and comments are never counted."""

    path: Path
    limit: int
    done: int = 0  # tasks of the entries before the one in hand
    entry: int = 0  # the entry in hand: 1, or its for_each items so far

    def __call__(self, key: Key, line: int) -> None:
        match key:
            case ("tasks", int()):  # a [[tasks]] table or an item of `tasks = [...]`
                self.done, self.entry = self.done + self.entry, 1
                if self.done + 1 > self.limit:
                    raise SpecError(self.path, line, None, too_many(self.limit))
                return
            case ("tasks", int(), "for_each", int(index)):
                self.entry = index + 1
                total = self.done + self.entry
            case ("schedules", int(), "task", "for_each", int(index)):
                total = index + 1  # a schedule's template is one wave, counted on its own
            case _:
                return
        if total > self.limit:
            label = f"for_each item {index + 1}: "
            raise SpecError(self.path, line, "for_each", too_many(self.limit, label))
