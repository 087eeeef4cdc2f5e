"""The tasks of a large YAML or TOML batch file, counted before the document is built: a file
of a million is refused at the first task over `[engine] max_tasks` in the time it takes to
read that far, not after building a million nodes. What is counted here is the entries of
`tasks` (an entry with an inline `for_each` list as its items; in TOML, a schedule's inline
`for_each` too); everything is counted again, exactly, as the tasks are expanded (expand.Room)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
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


@dataclass(slots=True)
class _Frame:
    role: str  # "root", "tasks", "task", "for_each" or "other"
    mapping: bool
    key: object = None  # a mapping's key whose value comes next (None: a key comes next)
    expect_key: bool = True
    items: int = 0  # for_each: its items so far


def check_yaml(path: Path, text: str, limit: int, loader: type[yaml.SafeLoader]) -> None:
    """SpecError at the first task over `limit`, from YAML's event stream (nothing built).
    A syntax error is left for the loader to report."""
    if len(text) < SCAN_FROM_BYTES:
        return
    events = loader(text)
    stack: list[_Frame] = []
    done = 0  # tasks counted before the entry in hand
    try:
        while events.check_event():
            event = events.get_event()  # type: ignore[no-untyped-call]
            if isinstance(event, yaml.CollectionEndEvent):
                frame = stack.pop()
                if frame.role == "task":
                    done += max(1, frame.items)
                _value_taken(stack)
                continue
            if not isinstance(event, yaml.NodeEvent):
                continue
            role = _role(stack, event)
            line = event.start_mark.line + 1 if event.start_mark else None
            if role == "task" and done + 1 > limit:
                raise SpecError(path, line, None, too_many(limit))
            if role == "for_each item":
                task = stack[-2]
                task.items += 1
                if done + task.items > limit:
                    label = f"for_each item {task.items}: "
                    raise SpecError(path, line, "for_each", too_many(limit, label))
            if isinstance(event, yaml.CollectionStartEvent):
                stack.append(_Frame(role, isinstance(event, yaml.MappingStartEvent)))
                continue
            if role == "task":
                done += 1  # not a table: expanding it says what is wrong
            if stack and stack[-1].mapping and stack[-1].expect_key:
                stack[-1].key = event.value if isinstance(event, yaml.ScalarEvent) else None
                stack[-1].expect_key = False
                continue
            _value_taken(stack)
    except yaml.YAMLError:
        return  # the loader reads it again and says where
    finally:
        events.dispose()


def _role(stack: list[_Frame], event: yaml.NodeEvent) -> str:
    """What the node this event starts is, in a batch file."""
    if not stack:
        return "tasks" if isinstance(event, yaml.SequenceStartEvent) else "root"
    top = stack[-1]
    if top.mapping and top.expect_key:
        return "other"  # a key
    if top.role == "root" and top.key == "tasks" and isinstance(event, yaml.SequenceStartEvent):
        return "tasks"
    if top.role == "tasks":
        return "task"
    if top.role == "task" and top.key == "for_each" and isinstance(event, yaml.SequenceStartEvent):
        return "for_each"
    if top.role == "for_each":
        return "for_each item"
    return "other"


def _value_taken(stack: list[_Frame]) -> None:
    """A mapping's value has ended: its next node is a key."""
    if stack and stack[-1].mapping:
        stack[-1].expect_key = True
        stack[-1].key = None
