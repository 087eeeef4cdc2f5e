"""Task and Batch: load and validate task files (JSONL, TOML, YAML), with decomposition.

A TOML or YAML batch has an optional `[batch]` table (name, workspace), optional `[defaults]`
(any task field but id and goal) and a `tasks` array. An entry with `for_each = [...]` or
`for_each_file = "items.txt"` (or `.jsonl`) becomes one task per item; `{item}`, `{index}`
(1-based) and, for table items, their keys are substituted in id, goal, context and group.
A JSONL batch is one task object per line; blank lines and `#` lines are skipped.
"""

from __future__ import annotations

import datetime
import difflib
import json
import math
import os
import re
import tomllib
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

import yaml
from flightdeck.engine.errors import SpecError
from flightdeck.engine.inputs.tomlpos import Key, TomlLocator, decode_error

DEFAULT_MAX_TURNS = 8
MAX_TURNS_LIMIT = 200

ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# {name} is a placeholder; {{ and }} are a literal brace, as in str.format.
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{(\w+)\}")
# A high then a low surrogate: what YAML makes of an escaped pair such as "\ud83d\ude00".
_SURROGATE_PAIR = re.compile(r"[\ud800-\udbff][\udc00-\udfff]")
_MERGE_TAG = "tag:yaml.org,2002:merge"

TASK_FIELDS = ("id", "goal", "context", "group", "route", "max_turns", "timeout_s")
_DECOMPOSE = ("for_each", "for_each_file")
_TEMPLATED = ("id", "goal", "context", "group")
_TOP_KEYS = ("batch", "defaults", "tasks")
_BATCH_KEYS = ("name", "workspace")

Locate = Callable[[Key], int | None]


@dataclass(frozen=True, slots=True)
class Task:
    """One unit of work for one child."""

    id: str
    goal: str
    seq: int  # position in the batch: FIFO order
    context: str | None = None
    group: str | None = None
    route: str | None = None  # None: the settings' default route
    max_turns: int = DEFAULT_MAX_TURNS
    timeout_s: float | None = None
    source: str = ""  # "file:line" where the task was defined, for messages
    route_source: str = ""  # "file:line:field" where its route was set ("" if not set)


@dataclass(frozen=True, slots=True)
class Batch:
    """A validated batch: its tasks in order and where they came from."""

    name: str
    tasks: tuple[Task, ...]
    source: Path | None = None
    workspace: Path | None = None  # None: a fresh folder under the state dir


@dataclass(frozen=True, slots=True)
class _Source:
    """A file and a way to find the line of a key path in it, for error messages."""

    path: Path
    locate: Locate

    def line(self, key: Key) -> int | None:
        return self.locate(key)

    def error(self, key: Key, field: str | None, message: str) -> SpecError:
        return SpecError(self.path, self.locate(key), field, message)


@dataclass(frozen=True, slots=True)
class _Draft:
    """A validated task before ids and positions are assigned."""

    fields: dict[str, object]
    src: _Source
    key: Key
    label: str  # "" or "for_each item 3: ", prefixed to messages about one expanded item
    route_at: tuple[Key, str] | None = None  # where its route was set: the task or [defaults]


def load_batch(path: Path) -> Batch:
    """Load and validate a batch file; raise SpecError naming file, line and field."""
    path = Path(path)
    text = _read_text(path)
    suffix = path.suffix.lower()
    if suffix == ".jsonl":
        drafts = [d for raw, src in _jsonl_objects(path, text) for d in _expand(raw, src, (), {})]
        return _finish(path, _file_name(path), None, drafts)
    if suffix == ".toml":
        data, locate = _parse_toml(path, text)
    elif suffix in (".yaml", ".yml"):
        data, locate = _parse_yaml(path, text)
    else:
        raise SpecError(path, None, None, "unsupported file type: use .jsonl, .toml, .yaml or .yml")
    return _load_document(_Source(path, locate), data)


def _file_name(path: Path) -> str:
    """A batch's default name: its file's stem, with U+FFFD for bytes that are not UTF-8 (a
    file name may hold any bytes; the name goes to the store and the screen)."""
    return os.fsencode(path.stem).decode("utf-8", "replace")


def check_routes(batch: Batch, route_names: Collection[str], default: str) -> None:
    """Raise SpecError at the first task whose route (or the default) is not configured."""
    for task in batch.tasks:
        name = task.route or default
        if name in route_names:
            continue
        where, _, line = task.source.rpartition(":")
        if not (where and line.isdigit()):  # no line known: source is just the path
            where, line = task.source, ""
        field = "route"
        if task.route is not None and task.route_source:  # the line of the route setting
            where, line, field = task.route_source.rsplit(":", 2)
        known = ", ".join(sorted(route_names)) or "none"
        if task.route is None:
            message = f"no route given and the default route {name!r} is not configured"
        else:
            message = f"unknown route {name!r}{_suggest(name, route_names)}"
        line_number = int(line) if line else None
        raise SpecError(where, line_number, field, f"{message} (configured: {known})")


# --- reading the three formats -------------------------------------------------------------


def _read_text(path: Path) -> str:
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise SpecError(path, None, None, "file not found") from None
    except OSError as exc:
        raise SpecError(path, None, None, exc.strerror or str(exc)) from None
    try:
        # utf-8-sig: an editor's byte order mark is not part of the first line
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise SpecError(path, line, None, "not valid UTF-8 text") from None


def _jsonl_objects(path: Path, text: str) -> list[tuple[object, _Source]]:
    """Each non-blank, non-comment line as (parsed JSON, a source pinned to that line)."""
    out: list[tuple[object, _Source]] = []
    for number, line in enumerate(_lines(text), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            value = _JSON.decode(stripped)
        except json.JSONDecodeError as exc:
            message = f"invalid JSON: {exc.msg} (column {exc.colno})"
            raise SpecError(path, number, None, message) from None
        except _DuplicateKeyError as exc:
            # json keeps the last of two equal keys: a typo'd copy would vanish silently.
            raise SpecError(path, number, exc.key, "duplicate key") from None
        if not isinstance(value, dict):
            raise SpecError(path, number, None, f"expected a JSON object, got {_kind(value)}")
        out.append((value, _Source(path, _fixed(number))))
    return out


def _lines(text: str) -> list[str]:
    """Lines as a text editor counts them. `str.splitlines` also splits at U+2028, U+2029 and
    U+0085, which JSON strings may hold unescaped, and would miscount every line after one."""
    return [line.removesuffix("\r") for line in text.split("\n")]


class _DuplicateKeyError(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for key, value in pairs:
        if key in out:
            raise _DuplicateKeyError(key)
        out[key] = value
    return out


# One decoder for every line: json.loads with a hook would build a new one per call.
_JSON = json.JSONDecoder(object_pairs_hook=_unique_keys)


def _fixed(line: int) -> Locate:
    """A locator for JSONL: every key of the object is on its one line."""
    return lambda _key: line


def _parse_toml(path: Path, text: str) -> tuple[object, Locate]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line, message = decode_error(exc, text)
        raise SpecError(path, line, None, f"invalid TOML: {message}") from None
    locator = TomlLocator(text)
    return data, lambda key: locator.line(*key)


class _YamlLoader(yaml.SafeLoader):
    """SafeLoader whose merge keys (`<<`) follow YAML's rule: keys written in the mapping win,
    then the earlier of the merged mappings. PyYAML 6.0.4 lets a later one win for a key it has
    not interned, and leaves overridden pairs in the node, which _yaml_lines calls duplicates."""

    def flatten_mapping(self, node: yaml.MappingNode) -> None:
        sources = [v for k, v in node.value if k.tag == _MERGE_TAG]
        if sources:
            # Dropped first, so a mapping merged into itself (via a cycle) ends the recursion.
            node.value = [(k, v) for k, v in node.value if k.tag != _MERGE_TAG]
            taken = {_yaml_key(k) for k, _ in node.value}
            merged = []
            for mapping in _merge_sources(node, sources):
                self.flatten_mapping(mapping)
                for k, v in mapping.value:
                    if _yaml_key(k) not in taken:
                        taken.add(_yaml_key(k))
                        merged.append((k, v))
            node.value = merged + node.value
        super().flatten_mapping(node)  # no merge key is left: this types `=` keys only


def _merge_sources(node: yaml.MappingNode, values: list[yaml.Node]) -> list[yaml.MappingNode]:
    """The mappings that `<<: *a` or `<<: [*a, *b]` merge, in order."""
    out: list[yaml.MappingNode] = []
    for value in values:
        items = value.value if isinstance(value, yaml.SequenceNode) else [value]
        for item in items:
            if not isinstance(item, yaml.MappingNode):
                what = "a mapping" if item is not value else "a mapping or list of mappings"
                found = "scalar" if isinstance(item, yaml.ScalarNode) else "sequence"
                problem = f"expected {what} for merging, but found {found}"
                context = "while constructing a mapping"
                raise yaml.constructor.ConstructorError(
                    context, node.start_mark, problem, item.start_mark
                )
            out.append(item)
    return out


def _yaml_key(node: yaml.Node) -> object:
    # A tag tells 1 from "1"; a key that is itself a collection is compared by identity.
    return (node.tag, node.value) if isinstance(node, yaml.ScalarNode) else id(node)


def _parse_yaml(path: Path, text: str) -> tuple[object, Locate]:
    loader = _YamlLoader(text)
    try:
        node = loader.get_single_node()
        data: object = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        message = " ".join(part for part in (exc.context, exc.problem) if part) or "syntax error"
        line = mark.line + 1 if mark else None
        raise SpecError(path, line, None, f"invalid YAML: {message}") from None
    except yaml.YAMLError as exc:
        raise SpecError(path, None, None, f"invalid YAML: {exc}") from None
    finally:
        loader.dispose()
    lines: dict[Key, int] = {}
    if node is not None:
        # A document that is just the list of tasks is read as {"tasks": [...]}: key it so.
        root: Key = ("tasks",) if isinstance(node, yaml.SequenceNode) else ()
        _yaml_lines(path, node, root, lines, set())

    def locate(key: Key) -> int | None:
        for n in range(len(key), -1, -1):
            if key[:n] in lines:
                return lines[key[:n]]
        return None

    return data, locate


def _yaml_lines(
    path: Path, node: yaml.Node, key: Key, lines: dict[Key, int], active: set[int]
) -> None:
    """Record the line of every mapping key and sequence item; reject duplicate keys."""
    if id(node) in active:  # a recursive alias: its lines are already recorded
        return
    active.add(id(node))
    lines.setdefault(key, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for k, v in node.value:
            name = str(k.value)
            line = k.start_mark.line + 1
            # PyYAML silently keeps the last of two equal keys; a typo'd copy would vanish.
            if name in seen:
                field = ".".join(str(part) for part in (*key, name))
                raise SpecError(path, line, field, f"duplicate key (first at line {seen[name]})")
            seen[name] = line
            lines[(*key, name)] = line
            _yaml_lines(path, v, (*key, name), lines, active)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _yaml_lines(path, item, (*key, index), lines, active)
    active.discard(id(node))


# --- structure --------------------------------------------------------------------------------


def _load_document(src: _Source, data: object) -> Batch:
    if data is None:
        raise src.error((), None, "the batch is empty: add tasks")
    if isinstance(data, list):  # YAML may be just the list of tasks
        data = {"tasks": data}
    if not isinstance(data, dict):
        raise src.error((), None, f"expected a table with [[tasks]], got {_kind(data)}")
    for key in map(str, data):
        if key not in _TOP_KEYS:
            hint = " (task fields go inside a tasks entry)" if key in TASK_FIELDS else ""
            raise src.error((key,), key, f"unknown key{_suggest(key, _TOP_KEYS)}{hint}")
    header = _table(src, data, "batch")
    for key in map(str, header):
        if key not in _BATCH_KEYS:
            field = f"batch.{key}"
            raise src.error(("batch", key), field, f"unknown key{_suggest(key, _BATCH_KEYS)}")
    name = header.get("name", _file_name(src.path))
    if not isinstance(name, str) or not name.strip():
        raise src.error(("batch", "name"), "batch.name", _expected("a non-empty string", name))
    problem = unicode_problem(name)
    if problem:  # only a name the file writes: a default one is made valid below
        raise src.error(("batch", "name"), "batch.name", problem)
    workspace = _workspace(src, header.get("workspace"))
    defaults = _defaults(src, _table(src, data, "defaults"))
    entries = data.get("tasks")
    if entries is None or entries == []:
        raise src.error(("tasks",), "tasks", "the batch has no tasks")
    if not isinstance(entries, list):
        raise src.error(("tasks",), "tasks", _expected("an array of tables ([[tasks]])", entries))
    drafts = [d for i, raw in enumerate(entries) for d in _expand(raw, src, ("tasks", i), defaults)]
    return _finish(src.path, name, workspace, drafts)


def _table(src: _Source, data: dict[object, object], key: str) -> dict[object, object]:
    value = data.get(key, {})
    if value is None:  # YAML `defaults:` with every line under it commented out
        return {}
    if not isinstance(value, dict):
        raise src.error((key,), key, _expected(f"a table ([{key}])", value))
    return value


def _workspace(src: _Source, value: object) -> Path | None:
    if value is None:
        return None
    key = ("batch", "workspace")
    if not isinstance(value, str) or not value.strip():
        raise src.error(key, "batch.workspace", _expected("a folder path string", value))
    folder = src.path.parent / Path(value).expanduser()
    if not folder.is_dir():
        raise src.error(key, "batch.workspace", f"folder not found: {folder}")
    return folder


def _defaults(src: _Source, table: dict[object, object]) -> dict[str, object]:
    out: dict[str, object] = {}
    for raw_key, value in table.items():
        key = str(raw_key)
        field = f"defaults.{key}"
        if key in ("id", "goal"):
            raise src.error(("defaults", key), field, "every task needs its own; no default")
        if key not in TASK_FIELDS:
            raise src.error(("defaults", key), field, f"unknown key{_suggest(key, TASK_FIELDS)}")
        problem = _check(key, value)
        if problem:
            raise src.error(("defaults", key), field, problem)
        out[key] = value
    return out


# --- one entry -> tasks -----------------------------------------------------------------------


def _expand(raw: object, src: _Source, key: Key, defaults: dict[str, object]) -> list[_Draft]:
    """Validate one tasks entry and decompose it into one draft per item."""
    if not isinstance(raw, dict):
        raise src.error(key, None, _expected("a task table", raw))
    allowed = TASK_FIELDS + _DECOMPOSE
    for raw_name, value in raw.items():
        name = str(raw_name)
        if name not in allowed:
            raise src.error((*key, name), name, f"unknown key{_suggest(name, allowed)}")
        problem = _check(name, value)
        if problem:
            raise src.error((*key, name), name, problem)
    if "goal" not in raw:
        raise src.error(key, "goal", "required: what this task should do")
    fields: dict[str, object] = {**defaults, **{k: v for k, v in raw.items() if k in TASK_FIELDS}}
    if "for_each" in raw and "for_each_file" in raw:
        raise src.error((*key, "for_each_file"), "for_each_file", "use for_each or for_each_file")
    if "for_each" in raw:
        items = _list_items(src, (*key, "for_each"), raw["for_each"])
    elif "for_each_file" in raw:
        items = _file_items(src, (*key, "for_each_file"), str(raw["for_each_file"]))
    else:
        items = None
    route_at = _set_at("route", raw, key) if "route" in fields else None
    if items is None:
        return [_Draft(fields, src, key, "", route_at)]
    where = {n: _set_at(n, raw, key) for n in _TEMPLATED}
    drafts = []
    for label, values in items:
        fields_now = _substitute(src, where, fields, values, label)
        drafts.append(_Draft(fields_now, src, key, label, route_at))
    return drafts


def _set_at(name: str, raw: dict[object, object], key: Key) -> tuple[Key, str]:
    """Where a task's field was set, for messages: in the task, or inherited from [defaults]
    (reported at its line there)."""
    return ((*key, name), name) if name in raw else (("defaults", name), f"defaults.{name}")


_Items = list[tuple[str, dict[str, str]]]  # (label for messages, placeholder values)


def _list_items(src: _Source, key: Key, items: object) -> _Items:
    assert isinstance(items, list)  # _check accepted it
    out: _Items = []
    for index, item in enumerate(items, start=1):
        label = f"for_each item {index}: "
        try:
            values = _placeholders(item, index)
        except ValueError as exc:
            raise src.error((*key, index - 1), "for_each", f"{label}{exc}") from None
        if values is None:
            problem = _expected("a string, number or table", item)
            raise src.error((*key, index - 1), "for_each", label + problem)
        out.append((label, values))
    return out


def _file_items(src: _Source, key: Key, name: str) -> _Items:
    """Items from a .txt (one per non-blank line) or .jsonl (one object per line) file."""
    data_path = src.path.parent / Path(name).expanduser()
    suffix = data_path.suffix.lower()
    if suffix not in (".txt", ".jsonl"):
        message = f"unsupported file type {suffix!r}: use .txt or .jsonl"
        raise src.error(key, "for_each_file", message)
    if not data_path.is_file():
        raise src.error(key, "for_each_file", f"file not found: {data_path}")
    text = _read_text(data_path)
    out: _Items = []
    if suffix == ".txt":
        # Lines starting with "#" are items here ("#123" is a pull request), not comments.
        lines = [(n, line.strip()) for n, line in enumerate(_lines(text), 1) if line.strip()]
        for index, (number, line) in enumerate(lines, start=1):
            out.append((f"{data_path.name}:{number}: ", {"item": line, "index": str(index)}))
    else:
        for index, (obj, row) in enumerate(_jsonl_objects(data_path, text), start=1):
            label = f"{data_path.name}:{row.line(())}: "
            try:
                values = _placeholders(obj, index)
            except ValueError as exc:
                raise src.error(key, "for_each_file", f"{label}{exc}") from None
            assert values is not None  # _jsonl_objects only returns objects
            out.append((label, values))
    if not out:
        raise src.error(key, "for_each_file", f"no items in {data_path}")
    return out


def _placeholders(item: object, index: int) -> dict[str, str] | None:
    """Placeholder values for one item (None: the item is not a usable type; ValueError: a
    value inside it cannot be written as text)."""
    if isinstance(item, dict):
        # A table's keys become placeholders; {item} and {index} keep their built-in meaning.
        values = {str(k): _item_text(k, v) for k, v in item.items()}
        return {**values, "item": _json(item), "index": str(index)}
    if isinstance(item, str | int | float) and not isinstance(item, bool):
        return {"item": _text(item), "index": str(index)}
    return None


def _item_text(key: object, value: object) -> str:
    try:
        return _text(value)
    except ValueError as exc:  # name the key: a table item has several values
        raise ValueError(f"{key}: {exc}") from None


def _json(value: object) -> str:
    try:
        return json.dumps(value, separators=(",", ":"), default=_json_default)
    except TypeError as exc:  # from _json_default
        raise ValueError(str(exc)) from None
    except ValueError:  # json's own: "Circular reference detected"
        raise ValueError("it refers to itself (a recursive alias)") from None


def _json_default(value: object) -> object:
    # TOML and YAML have dates and times: as text, they read as in the file.
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    raise TypeError(f"a value of type {type(value).__name__} cannot be used as text")


def _substitute(
    src: _Source,
    where: dict[str, tuple[Key, str]],  # field name -> (its key path, its name in messages)
    fields: dict[str, object],
    values: dict[str, str],
    label: str,
) -> dict[str, object]:
    """Fill the placeholders of the templated fields with one item's values."""
    out = dict(fields)
    for name in _TEMPLATED:
        template = fields.get(name)
        if not isinstance(template, str):
            continue
        for placeholder in _PLACEHOLDER.findall(template):
            if placeholder and placeholder not in values:  # "": an escaped brace
                known = ", ".join("{" + k + "}" for k in values)
                message = (
                    f"{label}unknown placeholder {{{placeholder}}} (known: {known}; "
                    f"write {{{{{placeholder}}}}} for the text itself)"
                )
                raise src.error(*where[name], message)
        out[name] = _PLACEHOLDER.sub(lambda m: _fill(m, values), template)
        if name == "goal" and not str(out[name]).strip():
            raise src.error(*where[name], f"{label}the goal is empty for this item")
    return out


def _fill(match: re.Match[str], values: dict[str, str]) -> str:
    name = match.group(1)
    return match.group(0)[0] if name is None else values[name]  # "{{" -> "{", "}}" -> "}"


# --- ids, order, tasks ------------------------------------------------------------------------


def _finish(path: Path, name: str, workspace: Path | None, drafts: list[_Draft]) -> Batch:
    if not drafts:
        raise SpecError(path, None, None, "the batch has no tasks")
    tasks: list[Task] = []
    first: dict[str, _Draft] = {}
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
                f"{draft.label}{task_id!r} is not a valid id: it names a file, so use 1-64 "
                "letters, digits, '.', '_' or '-', starting with a letter or digit"
            )
            raise draft.src.error(id_key, "id", message)
        if task_id in first:
            other = first[task_id]
            where = f"{other.src.path}:{other.src.line((*other.key, 'id'))}"
            if other.label:
                where += f" ({other.label.rstrip(': ')})"
            message = f"{draft.label}duplicate id {task_id!r} (first defined at {where})"
            raise draft.src.error(id_key, "id", message)
        first[task_id] = draft
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


def _generated_id(seq: int, taken: set[str]) -> str:
    """`task-0001` for the first task, unless the file gives that id to a task itself."""
    task_id = base = f"task-{seq + 1:04d}"
    suffix = 1
    while task_id in taken:
        suffix += 1
        task_id = f"{base}-{suffix}"
    return task_id


# --- field checks -----------------------------------------------------------------------------


def _check(name: object, value: object) -> str | None:
    """Why `value` is not valid for entry field `name` (None: it is)."""
    if name in ("id", "goal", "context", "group", "route"):
        if not isinstance(value, str):
            return _expected("a string", value)
        if name in ("goal", "route") and not value.strip():
            return "must not be empty"
        return unicode_problem(value)
    elif name == "max_turns":
        if not isinstance(value, int) or isinstance(value, bool):
            return _expected("an integer", value)
        if not 1 <= value <= MAX_TURNS_LIMIT:
            return f"must be between 1 and {MAX_TURNS_LIMIT}, got {value}"
    elif name == "timeout_s":
        if not isinstance(value, int | float) or isinstance(value, bool):
            return _expected("a number of seconds", value)
        if not (math.isfinite(value) and value > 0):
            return f"must be a positive number of seconds, got {value}"
    elif name == "for_each":
        if not isinstance(value, list):
            return _expected("an array of items", value)
        if not value:
            return "no items: the list is empty"
    elif name == "for_each_file":
        if not isinstance(value, str) or not value.strip():
            return _expected("a file path string", value)
        return unicode_problem(value)
    return None


def unicode_problem(text: str) -> str | None:
    """Why `text` cannot be sent or stored (None: it can): a surrogate, which a JSON or YAML
    escape decodes to but no UTF-8 encoder (a provider's, SQLite's) accepts."""
    if text.isascii():  # constant time in CPython: most text pays nothing more
        return None
    try:
        text.encode("utf-8")  # a third of the time of a regex search, measured
        return None
    except UnicodeEncodeError as exc:
        at = exc.start
    where = f"at character {at + 1}"
    pair = _SURROGATE_PAIR.match(text, at)
    if pair is None:
        return f"not valid Unicode text: a lone surrogate ({_escaped(text[at])}) {where}"
    # YAML does not join an escaped pair as JSON does: say how to write the character.
    char = pair.group().encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    return (
        f"not valid Unicode text: a surrogate pair ({_escaped(pair.group())}) {where}; "
        f"write the character itself or \\U{ord(char):08x}"
    )


def _escaped(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in text)


def _expected(what: str, value: object) -> str:
    return f"expected {what}, got {_kind(value)}"


def _kind(value: object) -> str:
    """A short, terminal-safe description of a value: its type and (for scalars) a repr."""
    names = {bool: "boolean", int: "integer", float: "float", str: "string", list: "array"}
    if isinstance(value, dict):
        return "table"
    if value is None:
        return "null"
    name = names.get(type(value), type(value).__name__)
    if isinstance(value, list):
        return name
    shown = repr(value)  # repr escapes control characters, so untrusted text stays inert
    return f"{name} {shown if len(shown) <= 40 else shown[:37] + '...'}"


def _suggest(name: object, choices: Collection[str]) -> str:
    close = difflib.get_close_matches(str(name), list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _text(value: object) -> str:
    if isinstance(value, str):
        problem = unicode_problem(value)
        if problem:
            raise ValueError(problem)
        return value
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return _json(value)


def _str(value: object) -> str:
    assert isinstance(value, str)
    return value


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: object) -> int:
    assert isinstance(value, int)
    return value


__all__ = [
    "DEFAULT_MAX_TURNS",
    "ID_PATTERN",
    "TASK_FIELDS",
    "Batch",
    "SpecError",
    "Task",
    "check_routes",
    "load_batch",
    "unicode_problem",
]
