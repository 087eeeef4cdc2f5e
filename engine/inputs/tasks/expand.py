"""Decomposition: a tasks entry with `for_each` or `for_each_file` becomes one draft per item."""

from __future__ import annotations

import datetime
import json
import re
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from flightdeck.engine.errors import SpecError
from flightdeck.engine.inputs.messages import expected, key_name, suggest
from flightdeck.engine.inputs.tasks.checks import check_field
from flightdeck.engine.inputs.tasks.count import too_many
from flightdeck.engine.inputs.tasks.readers import Source, jsonl_objects, read_text, text_lines
from flightdeck.engine.inputs.tasks.values import TASK_FIELDS
from flightdeck.engine.inputs.text import blank, unicode_problem
from flightdeck.engine.inputs.tomlpos import Key

# {name} is a placeholder; {{ and }} are a literal brace, as in str.format.
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{(\w+)\}")
_DECOMPOSE = ("for_each", "for_each_file")
_TEMPLATED = ("id", "goal", "context", "group")
_WAVE_FIELDS = ("goal", "context")  # what a schedule's wave fills {wave} in (fill_wave)


@dataclass(slots=True)
class Room:
    """How many tasks a batch file may still become ([engine] max_tasks): counted as each is
    read or expanded, so a file of a million stops at the first one over, having built no
    more than the limit."""

    limit: int
    used: int = 0

    def take(self, src: Source, key: Key, field: str | None, label: str = "") -> None:
        """Count one more task; SpecError at its line once there are more than the limit."""
        self.used += 1
        if self.used > self.limit:
            raise src.error(key, field, too_many(self.limit, label))


@dataclass(frozen=True, slots=True)
class Draft:
    """A validated task before ids and positions are assigned."""

    fields: dict[str, object]
    src: Source
    key: Key
    label: str  # "" or "for_each item 3: ", prefixed to messages about one expanded item
    route_at: tuple[Key, str] | None = None  # where its route was set: the task or [defaults]


def expand(
    raw: object,
    src: Source,
    key: Key,
    defaults: dict[str, object],
    room: Room,
    *,
    wave: bool = False,
) -> list[Draft]:
    """Validate one tasks entry and decompose it into one draft per item, each counted in
    `room`. `wave`: a schedule's template, whose goal and context are filled again for each
    wave (`{wave}` kept for it, `{{` and `}}` left escaped, every other placeholder refused)."""
    if not isinstance(raw, dict):
        raise src.error(key, None, expected("a task table", raw))
    allowed = TASK_FIELDS + _DECOMPOSE
    for raw_name, value in raw.items():
        name = key_name(raw_name)
        if name not in allowed:
            raise src.error((*key, name), name, f"unknown key{suggest(name, allowed)}")
        problem = check_field(name, value)
        if problem:
            raise src.error((*key, name), name, problem)
    if "goal" not in raw:
        raise src.error(key, "goal", "required: what this task should do")
    fields: dict[str, object] = {**defaults, **{k: v for k, v in raw.items() if k in TASK_FIELDS}}
    if "for_each" in raw and "for_each_file" in raw:
        raise src.error((*key, "for_each_file"), "for_each_file", "use for_each or for_each_file")
    if "for_each" in raw:
        items = _list_items(src, (*key, "for_each"), raw["for_each"], room)
    elif "for_each_file" in raw:
        items = _file_items(src, (*key, "for_each_file"), str(raw["for_each_file"]), room)
    else:
        items = None
    route_at = _set_at("route", raw, key) if "route" in fields else None
    where = {n: _set_at(n, raw, key) for n in _TEMPLATED}
    if items is None:
        room.take(src, key, None)
        if wave:  # refused here, with its line, as a for_each template's are
            _substitute(src, where, {n: fields.get(n) for n in _WAVE_FIELDS}, {}, "", wave)
        return [Draft(fields, src, key, "", route_at)]
    drafts = []
    for label, values in items:
        fields_now = _substitute(src, where, fields, values, label, wave)
        drafts.append(Draft(fields_now, src, key, label, route_at))
    return drafts


def _set_at(name: str, raw: dict[object, object], key: Key) -> tuple[Key, str]:
    """Where a task's field was set, for messages: in the task, or inherited from [defaults]
    (reported at its line there)."""
    return ((*key, name), name) if name in raw else (("defaults", name), f"defaults.{name}")


_Items = list[tuple[str, dict[str, str]]]  # (label for messages, placeholder values)


def _list_items(src: Source, key: Key, items: object, room: Room) -> _Items:
    assert isinstance(items, list)  # check_field accepted it
    out: _Items = []
    for index, item in enumerate(items, start=1):
        label = f"for_each item {index}: "
        room.take(src, (*key, index - 1), "for_each", label)
        try:
            values = _placeholders(item, index)
        except ValueError as exc:
            raise src.error((*key, index - 1), "for_each", f"{label}{exc}") from None
        if values is None:
            problem = expected("a string, number or table", item)
            raise src.error((*key, index - 1), "for_each", label + problem)
        out.append((label, values))
    return out


def _file_items(src: Source, key: Key, name: str, room: Room) -> _Items:
    """Items from a .txt (one per non-blank line) or .jsonl (one object per line) file."""
    data_path = src.path.parent / Path(name).expanduser()
    suffix = data_path.suffix.lower()
    if suffix not in (".txt", ".jsonl"):
        message = f"unsupported file type {suffix!r}: use .txt or .jsonl"
        raise src.error(key, "for_each_file", message)
    if not data_path.is_file():
        what = "not a file" if data_path.exists() else "file not found"
        raise src.error(key, "for_each_file", f"{what}: {data_path}")
    try:
        text = read_text(data_path)
    except SpecError as exc:  # at the task's line and field, as the list's other problems
        where = exc.path if exc.line is None else f"{exc.path}:{exc.line}"
        raise src.error(key, "for_each_file", f"{where}: {exc.message}") from None
    out: _Items = []
    if suffix == ".txt":
        # Lines starting with "#" are items here ("#123" is a pull request), not comments.
        lines = ((n, line.strip()) for n, line in enumerate(text_lines(text), 1))
        for index, (number, line) in enumerate(((n, t) for n, t in lines if t), start=1):
            label = f"{data_path.name}:{number}: "
            room.take(src, key, "for_each_file", label)
            out.append((label, {"item": line, "index": str(index)}))
    else:
        for index, (obj, row) in enumerate(jsonl_objects(data_path, text), start=1):
            label = f"{data_path.name}:{row.line(())}: "
            room.take(src, key, "for_each_file", label)
            try:
                values = _placeholders(obj, index)
            except ValueError as exc:
                raise src.error(key, "for_each_file", f"{label}{exc}") from None
            assert values is not None  # jsonl_objects only returns objects
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
    src: Source,
    where: dict[str, tuple[Key, str]],  # field name -> (its key path, its name in messages)
    fields: dict[str, object],
    values: dict[str, str],
    label: str,
    wave: bool = False,
) -> dict[str, object]:
    """Fill the placeholders of the templated fields with one item's values (`wave`: of a
    schedule's template, see `expand`)."""
    out = dict(fields)
    escaped = {k: v.replace("{", "{{").replace("}", "}}") for k, v in values.items()}
    escaped["wave"] = "{wave}"
    for name in _TEMPLATED:
        template = fields.get(name)
        if not isinstance(template, str):
            continue
        later = wave and name in _WAVE_FIELDS  # filled again as each wave is made
        known = {**values, "wave": "{wave}"} if later else values
        for placeholder in _PLACEHOLDER.findall(template):
            if placeholder and placeholder not in known:  # "": an escaped brace
                listed = ", ".join("{" + k + "}" for k in known) or "none"
                message = (
                    f"{label}unknown placeholder {{{placeholder}}} (known: {listed}; "
                    f"write {{{{{placeholder}}}}} for the text itself)"
                )
                raise src.error(*where[name], message)
        if later:  # an item's braces are text: escaped, so fill_wave leaves them be
            out[name] = _PLACEHOLDER.sub(partial(_keep, escaped), template)
        else:
            out[name] = _PLACEHOLDER.sub(lambda m: _fill(m, values), template)
        if name in ("goal", "group") and blank(str(out[name])):  # as check_field says of them
            raise src.error(*where[name], f"{label}the {name} is empty for this item")
    return out


def _keep(escaped: dict[str, str], match: re.Match[str]) -> str:
    name = match.group(1)
    return match.group(0) if name is None else escaped[name]  # "{{" stays, for fill_wave


def fill_wave(template: str, wave: int) -> str:
    """A schedule's goal or context for wave `wave`: `{wave}` its number, `{{` and `}}` a
    brace (the loader refused any other placeholder)."""

    def fill(m: re.Match[str]) -> str:
        name = m.group(1)
        return m.group(0)[0] if name is None else str(wave) if name == "wave" else m.group(0)

    return _PLACEHOLDER.sub(fill, template)


def _fill(match: re.Match[str], values: dict[str, str]) -> str:
    name = match.group(1)
    return match.group(0)[0] if name is None else values[name]  # "{{" -> "{", "}}" -> "}"


def _text(value: object) -> str:
    if isinstance(value, str):
        problem = unicode_problem(value)
        if problem:
            raise ValueError(problem)
        return value
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return _json(value)
