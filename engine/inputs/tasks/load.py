"""load_batch: read a batch file, check its structure, and number its tasks in order."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from flightdeck.engine.errors import SpecError
from flightdeck.engine.inputs.messages import (
    CONFIG_KEYS,
    TASK_FILE_KEYS,
    expected,
    key_name,
    kind,
    suggest,
)
from flightdeck.engine.inputs.tasks.checks import check_field
from flightdeck.engine.inputs.tasks.expand import Draft, Room, expand
from flightdeck.engine.inputs.tasks.readers import (
    Source,
    jsonl_objects,
    parse_toml,
    read_text,
)
from flightdeck.engine.inputs.tasks.schedules import load_schedules
from flightdeck.engine.inputs.tasks.values import (
    DEFAULT_MAX_TASK_CHARS,
    DEFAULT_MAX_TASKS,
    DEFAULT_MAX_TURNS,
    ID_PATTERN,
    ID_RULE,
    RESERVED_IDS,
    TASK_FIELDS,
    TEXT_FIELDS,
    Batch,
    Task,
)
from flightdeck.engine.inputs.text import unicode_problem
from flightdeck.engine.inputs.tomlpos import deep_line

_BATCH_KEYS = ("name", "workspace", "delegate")


def load_batch(
    path: Path, *, max_chars: int = DEFAULT_MAX_TASK_CHARS, max_tasks: int = DEFAULT_MAX_TASKS
) -> Batch:
    """Load and validate a batch file; raise SpecError naming file, line and field. A goal,
    context or group longer than `max_chars` characters is an error, as is a file of more
    than `max_tasks` tasks (said at the first one over, before the rest is read)."""
    path = Path(path)
    text = read_text(path)
    try:
        return _load_text(path, text, max_chars, Room(max_tasks))
    except RecursionError:  # a value nested deeper than the parsers' stack (`[[[[…`)
        raise SpecError(path, deep_line(text), None, "nested too deeply to read") from None


def _load_text(path: Path, text: str, max_chars: int, room: Room) -> Batch:
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        drafts = [
            d for raw, src in jsonl_objects(path, text) for d in expand(raw, src, (), {}, room)
        ]
        return _finish(path, _file_name(path), None, drafts, max_chars)
    if suffix == ".toml":
        data, locate = parse_toml(path, text, room.limit)
    elif suffix in (".yaml", ".yml"):
        from flightdeck.engine.inputs.tasks.yamlfile import parse_yaml  # PyYAML: only here

        data, locate, booleans = parse_yaml(path, text, room.limit)
        return _load_document(Source(path, locate, booleans), data, max_chars, room)
    else:
        raise SpecError(path, None, None, "unsupported file type: use .jsonl, .toml, .yaml or .yml")
    return _load_document(Source(path, locate), data, max_chars, room)


def _file_name(path: Path) -> str:
    """A batch's default name: its file's stem, with U+FFFD for bytes that are not UTF-8 (a
    file name may hold any bytes; the name goes to the store and the screen)."""
    return os.fsencode(path.stem).decode("utf-8", "replace")


def _load_document(src: Source, data: object, max_chars: int, room: Room) -> Batch:
    if data is None:
        raise src.error((), None, "the batch is empty: add tasks")
    if isinstance(data, list):  # YAML may be just the list of tasks
        data = {"tasks": data}
    if not isinstance(data, dict):  # only YAML: a TOML document is always a table
        shape = "a list of tasks, or a mapping with a tasks: list"
        raise src.error((), None, f"expected {shape}, got {kind(data)}")
    for key in map(key_name, data):
        if key not in TASK_FILE_KEYS:
            hint = " (task fields go inside a tasks entry)" if key in TASK_FIELDS else ""
            if key in CONFIG_KEYS:  # a flightdeck.toml given as the task file
                hint = ": a config's, not a task file's (give it with --config)"
            raise src.error((key,), key, f"unknown key{suggest(key, TASK_FILE_KEYS)}{hint}")
    header = _table(src, data, "batch")
    for key in map(key_name, header):
        if key not in _BATCH_KEYS:
            field = f"batch.{key}"
            raise src.error(("batch", key), field, f"unknown key{suggest(key, _BATCH_KEYS)}")
    name = header.get("name", _file_name(src.path))
    line = src.line(("batch", "name")) if "name" in header else None
    name_source = f"{src.path}:{line}" if line is not None else ""
    if not isinstance(name, str) or not name.strip():
        raise src.error(("batch", "name"), "batch.name", expected("a non-empty string", name))
    problem = unicode_problem(name)
    if problem:  # only a name the file writes: a default one is made valid below
        raise src.error(("batch", "name"), "batch.name", problem)
    workspace = _workspace(src, header.get("workspace"))
    delegate = header.get("delegate", False)
    if not isinstance(delegate, bool):
        raise src.error(
            ("batch", "delegate"), "batch.delegate", expected("true or false", delegate)
        )
    defaults = _defaults(src, _table(src, data, "defaults"), max_chars)
    schedules = load_schedules(
        src,
        data.get("schedules"),
        defaults,
        lambda drafts: _finish(src.path, name, workspace, drafts, max_chars),
        room.limit,
    )
    entries = data.get("tasks")
    if (entries is None or entries == []) and not schedules:
        raise src.error(("tasks",), "tasks", "the batch has no tasks")
    if not isinstance(entries, list | None):
        toml = src.path.suffix.lower() == ".toml"
        shape = "an array of tables ([[tasks]])" if toml else "a list of tasks"
        raise src.error(("tasks",), "tasks", expected(shape, entries))
    drafts = [
        d
        for i, raw in enumerate(entries or [])
        for d in expand(raw, src, ("tasks", i), defaults, room)
    ]
    if drafts:
        batch = _finish(src.path, name, workspace, drafts, max_chars)
    else:  # only schedules: the tasks come in waves
        batch = Batch(name=name, tasks=(), source=src.path, workspace=workspace)
    if name_source:
        batch = dataclasses.replace(batch, name_source=name_source)
    if schedules:
        batch = dataclasses.replace(batch, schedules=schedules)
    return dataclasses.replace(batch, delegate=delegate) if delegate else batch


def _table(src: Source, data: dict[object, object], key: str) -> dict[object, object]:
    value = data.get(key, {})
    if value is None:  # YAML `defaults:` with every line under it commented out
        return {}
    if not isinstance(value, dict):
        raise src.error((key,), key, expected(f"a table ([{key}])", value))
    return value


def _workspace(src: Source, value: object) -> Path | None:
    if value is None:
        return None
    key = ("batch", "workspace")
    if not isinstance(value, str) or not value.strip():
        raise src.error(key, "batch.workspace", expected("a folder path string", value))
    folder = src.path.parent / Path(value).expanduser()
    if not folder.is_dir():
        what = "a file, not a folder" if folder.exists() else "folder not found"
        raise src.error(key, "batch.workspace", f"{what}: {folder}")
    return folder


def _defaults(src: Source, table: dict[object, object], max_chars: int) -> dict[str, object]:
    out: dict[str, object] = {}
    for raw_key, value in table.items():
        key = key_name(raw_key)
        field = f"defaults.{key}"
        if key in ("id", "goal"):
            raise src.error(("defaults", key), field, "every task needs its own; no default")
        if key in ("for_each", "for_each_file"):  # a task key, but it decomposes one task
            raise src.error(("defaults", key), field, "cannot be a default: set it in a task")
        if key not in TASK_FIELDS:
            raise src.error(("defaults", key), field, f"unknown key{suggest(key, TASK_FIELDS)}")
        problem = check_field(key, value) or _length_problem(value, max_chars)
        if problem:
            raise src.error(("defaults", key), field, problem)
        out[key] = value
    return out


def _finish(
    path: Path, name: str, workspace: Path | None, drafts: list[Draft], max_chars: int
) -> Batch:
    if not drafts:
        raise SpecError(path, None, None, "the batch has no tasks")
    tasks: list[Task] = []
    first: dict[str, Draft] = {}
    # A generated id steps around every id the file gives, even on a later line: "task-0001"
    # for the first task is no duplicate of the user's own "task-0001" further down.
    given_ids = {i for d in drafts if isinstance(i := d.fields.get("id"), str)}
    for seq, draft in enumerate(drafts):
        fields = draft.fields
        given = fields.get("id")
        task_id = given if isinstance(given, str) else _generated_id(seq, given_ids)
        id_key = (*draft.key, "id")
        if not ID_PATTERN.fullmatch(task_id):
            message = (
                f"{draft.label}{task_id!r} is not a valid id: it names a file, so use {ID_RULE}"
            )
            raise draft.src.error(id_key, "id", message)
        if task_id.lower() in RESERVED_IDS:
            message = f"{draft.label}{task_id!r} is reserved: the batch folder's {task_id}.log "
            message += "would be the owner process's log"
            raise draft.src.error(id_key, "id", message)
        if task_id in first:
            other = first[task_id]
            there = other.src.line((*other.key, "id"))
            where = f"{other.src.path}:{there}"
            if other.label:
                where += f" ({other.label.rstrip(': ')})"
            message = f"{draft.label}duplicate id {task_id!r} (first defined at {where})"
            same_node = other.src is draft.src and there == draft.src.line(id_key)
            if same_node and other.label == draft.label:
                # One YAML node twice: a composed alias has no line of its own, only its anchor's.
                # (Two items of one task's for_each share its line too, each with its label.)
                message += ", repeated through a YAML alias of it"
            raise draft.src.error(id_key, "id", message)
        first[task_id] = draft
        _check_length(draft, max_chars)
        line = draft.src.line(draft.key)
        route_source = ""
        if draft.route_at is not None:
            route_key, route_field = draft.route_at
            route_line = draft.src.line(route_key) or line
            route_source = f"{path}:{route_line or ''}:{route_field}"
        timeout = fields.get("timeout_s")
        tasks.append(
            Task(
                id=task_id,
                goal=_str(fields["goal"]),
                seq=seq,
                context=_opt_str(fields.get("context")),
                group=_opt_str(fields.get("group")),
                route=_opt_str(fields.get("route")),
                max_turns=_int(fields.get("max_turns", DEFAULT_MAX_TURNS)),
                timeout_s=float(timeout) if isinstance(timeout, int | float) else None,
                source=f"{path}:{line}" if line is not None else str(path),
                route_source=route_source,
            )
        )
    return Batch(name=name, tasks=tuple(tasks), source=path, workspace=workspace)


def _check_length(draft: Draft, max_chars: int) -> None:
    """SpecError at the first text field of `draft` over `max_chars` characters (after its
    placeholders are filled: an item may be what makes it long)."""
    for name in TEXT_FIELDS:
        problem = _length_problem(draft.fields.get(name), max_chars)
        if problem:
            raise draft.src.error((*draft.key, name), name, draft.label + problem)


def _length_problem(value: object, max_chars: int) -> str | None:
    if isinstance(value, str) and len(value) > max_chars:
        limit = f"the limit of {max_chars:,} ([engine] max_task_chars)"
        return f"too long: {len(value):,} characters, over {limit}"
    return None


def _generated_id(seq: int, taken: set[str]) -> str:
    """`task-0001` for the first task, unless the file gives that id to a task itself."""
    task_id = base = f"task-{seq + 1:04d}"
    suffix = 1
    while task_id in taken:
        suffix += 1
        task_id = f"{base}-{suffix}"
    return task_id


def _str(value: object) -> str:
    assert isinstance(value, str)
    return value


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: object) -> int:
    assert isinstance(value, int)
    return value
