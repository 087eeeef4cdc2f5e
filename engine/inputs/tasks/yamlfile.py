"""A YAML batch file parsed, with the line of every key, its tasks counted first (a large file's,
from YAML's event stream) and its aliases bounded. Imported only to read a YAML file: PyYAML is
a fair share of a start-up that has none to read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from flightdeck.engine.errors import SpecError
from flightdeck.engine.inputs.tasks.count import SCAN_FROM_BYTES, too_many
from flightdeck.engine.inputs.tasks.readers import Locate
from flightdeck.engine.inputs.tomlpos import Key

_MERGE_TAG = "tag:yaml.org,2002:merge"
_BOOL_TAG = "tag:yaml.org,2002:bool"
# What aliases may add to a YAML document, each counted as all it stands for: nested aliases
# ("billion laughs") would otherwise grow a few hundred bytes into billions of values.
MAX_ALIAS_NODES = 100_000


class _MergeRule(yaml.constructor.SafeConstructor):
    """Merge keys (`<<`) that follow YAML's rule: keys written in the mapping win, then the
    earlier of the merged mappings. PyYAML 6.0.4 lets a later one win for a key it has not
    interned, and leaves overridden pairs in the node, which _yaml_lines calls duplicates."""

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


class _MarkedErrors(yaml.constructor.SafeConstructor):
    """A scalar its explicit tag cannot read (`!!int x`, `!!timestamp x`) is an error at its
    line: PyYAML's constructors raise whatever they meet there (ValueError, KeyError, ...),
    with no mark, and a traceback reached the user."""

    def construct_object(self, node: yaml.Node, deep: bool = False) -> object:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, KeyError, AttributeError, TypeError, OverflowError):
            tag = str(node.tag).replace("tag:yaml.org,2002:", "!!")
            value = str(node.value)
            shown = repr(value if len(value) <= 60 else value[:60] + "…")
            problem = f"not a valid {tag} value: {shown}"
            raise yaml.constructor.ConstructorError(None, None, problem, node.start_mark) from None


class _YamlLoader(_MarkedErrors, _MergeRule, yaml.SafeLoader):
    """PyYAML's own parser, with YAML's merge rule."""


# libyaml's parser, where PyYAML was built with it: about eight times faster.
_FastYamlLoader: type[yaml.SafeLoader] | None = None
if hasattr(yaml, "CSafeLoader"):

    class _CYamlLoader(_MarkedErrors, _MergeRule, yaml.CSafeLoader):
        """libyaml's parser, with YAML's merge rule."""

    _FastYamlLoader = _CYamlLoader  # type: ignore[assignment]


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


def parse_yaml(path: Path, text: str, max_tasks: int) -> tuple[object, Locate, dict[Key, str]]:
    """The parsed YAML document, a locator for its keys, and the values YAML read as booleans
    from plain words (`yes`, `off`), as written, by key; duplicate keys are errors, as is a
    document of more than `max_tasks` tasks (found before it is built)."""
    check_yaml(path, text, max_tasks, _FastYamlLoader or _YamlLoader)
    if _FastYamlLoader is None:
        node, data = _built(path, text, _YamlLoader)
    else:
        try:
            node, data = _built(path, text, _FastYamlLoader)
        except SpecError:
            # libyaml refuses a few things PyYAML reads (a surrogate escape, which the task
            # checks then name by field with a fix): read again by PyYAML, for its message.
            node, data = _built(path, text, _YamlLoader)
    lines: dict[Key, int] = {}
    booleans: dict[Key, str] = {}
    if node is not None:
        # A document that is just the list of tasks is read as {"tasks": [...]}: key it so.
        root: Key = ("tasks",) if isinstance(node, yaml.SequenceNode) else ()
        _yaml_lines(path, node, root, (lines, booleans), set())

    def locate(key: Key) -> int | None:
        for n in range(len(key), -1, -1):
            if key[:n] in lines:
                return lines[key[:n]]
        return None

    return data, locate, booleans


def _built(
    path: Path, text: str, loader_type: type[yaml.SafeLoader]
) -> tuple[yaml.Node | None, object]:
    """The document's node tree and its value, read by `loader_type`."""
    try:
        loader = loader_type(text)
    except yaml.reader.ReaderError as exc:
        # PyYAML's reader checks every character before it reads any (a NUL, say), and says
        # where as an offset: the traceback reached the user.
        at = text.count("\n", 0, exc.position) + 1
        what = f" #x{exc.character:04x}" if isinstance(exc.character, int) else ""
        raise SpecError(
            path, at, None, f"invalid YAML: unacceptable character{what}: {exc.reason}"
        ) from None
    try:
        node = loader.get_single_node()
        if node is not None:
            _check_size(path, node)
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
    return node, data


def _check_size(path: Path, node: yaml.Node) -> None:
    """SpecError at the first node whose aliases add more than MAX_ALIAS_NODES nodes. Each node
    is sized once, so this takes time linear in the file, not in what it expands to."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # the ancestors of the node in hand: a cycle adds nothing
    stack: list[tuple[yaml.Node, bool]] = [(node, False)]
    while stack:  # iterative: a deep file must not hit the recursion limit here
        current, children_done = stack.pop()
        key = id(current)
        if not children_done:
            if key not in sizes and key not in open_nodes:
                open_nodes.add(key)
                stack.append((current, True))
                stack.extend((child, False) for child in _children(current))
            continue
        open_nodes.discard(key)
        total = 1 + sum(sizes.get(id(child), 0) for child in _children(current))
        # The nodes sized so far include all of this one's: what exceeds them came from aliases.
        if total - len(sizes) - 1 > MAX_ALIAS_NODES:
            line = current.start_mark.line + 1
            message = f"too large: its aliases add more than {MAX_ALIAS_NODES:,} values"
            raise SpecError(path, line, None, message)
        sizes[key] = total


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    return []


def _yaml_lines(
    path: Path,
    node: yaml.Node,
    key: Key,
    found: tuple[dict[Key, int], dict[Key, str]],
    active: set[int],
) -> None:
    """Record the line of every mapping key and sequence item, and the words YAML read as
    booleans; reject duplicate keys."""
    if id(node) in active:  # a recursive alias: its lines are already recorded
        return
    active.add(id(node))
    lines, booleans = found
    lines.setdefault(key, node.start_mark.line + 1)
    if isinstance(node, yaml.ScalarNode) and node.tag == _BOOL_TAG and not node.style:
        booleans[key] = node.value
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
            _yaml_lines(path, v, (*key, name), found, active)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _yaml_lines(path, item, (*key, index), found, active)
    active.discard(id(node))


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
