"""The readers: a batch file's text parsed as JSONL or TOML (YAML: yamlfile.py, imported only
for a YAML file), with a way to find the line of any key in it."""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from flightdeck.engine.errors import SpecError
from flightdeck.engine.inputs import files
from flightdeck.engine.inputs.messages import kind
from flightdeck.engine.inputs.tasks.count import SCAN_FROM_BYTES, TomlCount
from flightdeck.engine.inputs.tomlpos import Key, TomlLocator, decode_error

Locate = Callable[[Key], int | None]


@dataclass(frozen=True, slots=True)
class Source:
    """A file and a way to find the line of a key path in it, for error messages."""

    path: Path
    locate: Locate
    # A YAML file's values read as booleans from plain words (`goal: yes`), as written, by key.
    booleans: Mapping[Key, str] | None = None

    def line(self, key: Key) -> int | None:
        """The line of `key` (or of its nearest located parent)."""
        return self.locate(key)

    def error(self, key: Key, field: str | None, message: str) -> SpecError:
        """A SpecError at the line of `key`; a word YAML read as a boolean where text was
        wanted is told how to keep it a word."""
        word = self.booleans.get(key) if self.booleans else None
        wanted, got, _ = message.partition(", got boolean ")  # `expected`'s wrong type
        if word is not None and got and "string" in wanted:
            message += f"; YAML reads an unquoted {word} as a boolean: quote it, '{word}'"
        return SpecError(self.path, self.locate(key), field, message)


def read_text(path: Path) -> str:
    """A task file's text (or a `for_each_file` list's); SpecError if it cannot be read."""
    return files.read_text(path, SpecError)


def jsonl_objects(path: Path, text: str) -> Iterator[tuple[object, Source]]:
    """Each non-blank, non-comment line as (parsed JSON, a source pinned to that line), one at
    a time: a reader that stops early (too many tasks) has parsed no further."""
    for number, line in enumerate(text_lines(text), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        try:
            value = _JSON.decode(stripped)
        except json.JSONDecodeError as exc:
            message = f"invalid JSON: {exc.msg} (column {exc.colno})"
            raise SpecError(path, number, None, message) from None
        except RecursionError:  # `[[[[…` deeper than the decoder's stack
            raise SpecError(path, number, None, "nested too deeply to read") from None
        except _DuplicateKeyError as exc:
            # json keeps the last of two equal keys: a typo'd copy would vanish silently.
            raise SpecError(path, number, exc.key, "duplicate key") from None
        if not isinstance(value, dict):
            raise SpecError(path, number, None, f"expected a JSON object, got {kind(value)}")
        yield value, Source(path, _fixed(number))


def text_lines(text: str) -> Iterator[str]:
    """Lines as a text editor counts them, one at a time. `str.splitlines` also splits at
    U+2028, U+2029 and U+0085, which JSON strings may hold unescaped, and would miscount every
    line after one."""
    start = 0
    while True:
        end = text.find("\n", start)
        if end < 0:
            yield text[start:].removesuffix("\r")
            return
        yield text[start:end].removesuffix("\r")
        start = end + 1


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


def parse_toml(path: Path, text: str, max_tasks: int) -> tuple[object, Locate]:
    """The parsed TOML document and a locator for its keys; SpecError before it is parsed if
    it has more than `max_tasks` tasks."""
    # Located first: a large file's tasks are counted as their keys are found, so a file of a
    # million is refused without tomllib building it.
    count = TomlCount(path, max_tasks) if len(text) >= SCAN_FROM_BYTES else None
    locator = TomlLocator(text, count)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        line, message = decode_error(exc, text)
        raise SpecError(path, line, None, f"invalid TOML: {message}") from None
    return data, lambda key: locator.line(*key)
