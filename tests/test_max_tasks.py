"""A batch file of more tasks than `[engine] max_tasks` is refused at the first task over, in
every format and however the tasks are written (lines, entries, for_each, for_each_file),
before the rest of the file is read or any task is built."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from flightdeck.engine.errors import ConfigError, SpecError
from flightdeck.engine.inputs.settings import load_settings
from flightdeck.engine.inputs.tasks import load_batch
from flightdeck.engine.inputs.tasks.count import SCAN_FROM_BYTES
from flightdeck.tui.exitcodes import ExitCode

from helpers import flightdeck

# A comment that takes a file over SCAN_FROM_BYTES: its tasks are counted before it is parsed.
PAD = "#" + "x" * SCAN_FROM_BYTES + "\n"
OVER = "more than 5 tasks, the limit ([engine] max_tasks: raise it there, or split the batch)"


def refused(path: Path, line: int, field: str | None, label: str = "") -> None:
    with pytest.raises(SpecError) as info:
        load_batch(path, max_tasks=5)
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), line, field), str(err)
    assert err.message == label + OVER


def jsonl(n: int, extra: str = "") -> str:
    return "".join(json.dumps({"goal": f"g{i}"}) + "\n" for i in range(n)) + extra


def test_a_jsonl_file_is_refused_at_its_first_task_over_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    # The lines after the first one over are never parsed: one that is not JSON goes unseen.
    path.write_text("# a comment\n\n" + jsonl(6, "this is not json\n"))
    refused(path, 8, None)
    path.write_text(jsonl(5))
    assert len(load_batch(path, max_tasks=5).tasks) == 5


def test_a_for_each_is_counted_item_by_item(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(jsonl(2) + json.dumps({"goal": "x {item}", "for_each": list(range(9))}) + "\n")
    refused(path, 3, "for_each", "for_each item 4: ")  # 2 tasks, 3 items: the 4th is over
    yaml = tmp_path / "t.yaml"
    yaml.write_text("tasks:\n  - goal: a\n  - goal: x {item}\n    for_each: [1, 2, 3, 4, 5]\n")
    refused(yaml, 4, "for_each", "for_each item 5: ")


def test_a_for_each_file_stops_reading_at_the_item_over(tmp_path: Path) -> None:
    (tmp_path / "items.txt").write_text("".join(f"#{i}\n" for i in range(1, 10)))
    path = tmp_path / "t.toml"
    path.write_text('[[tasks]]\ngoal = "Review {item}"\nfor_each_file = "items.txt"\n')
    refused(path, 3, "for_each_file", "items.txt:6: ")
    (tmp_path / "items.jsonl").write_text(jsonl(7))
    path.write_text('[[tasks]]\ngoal = "Do {goal}"\nfor_each_file = "items.jsonl"\n')
    refused(path, 3, "for_each_file", "items.jsonl:6: ")


def test_a_large_yaml_or_toml_file_is_refused_before_it_is_built(tmp_path: Path) -> None:
    # Over SCAN_FROM_BYTES the tasks are counted from the text before anything is built; the
    # first task over is named at its line (a syntax error after it is never reached).
    pad = "x" * 100
    n = SCAN_FROM_BYTES // 100 + 10  # lines of over 100 bytes: over SCAN_FROM_BYTES
    yaml = tmp_path / "big.yaml"
    yaml.write_text(
        "batch:\n  name: big\ntasks:\n"
        + "".join(f"  - goal: {pad} {i}\n" for i in range(n))
        + "  - goal: [unclosed\n"
    )
    with pytest.raises(SpecError) as info:
        load_batch(yaml, max_tasks=1000)
    assert (info.value.line, info.value.message) == (1004, OVER.replace("5", "1,000", 1))
    items = tmp_path / "items.yaml"  # one task whose inline for_each is the long list
    items.write_text(
        "- goal: x {item}\n  for_each:\n" + "".join(f"    - {pad} {i}\n" for i in range(n))
    )
    with pytest.raises(SpecError) as info:
        load_batch(items, max_tasks=1000)
    err = info.value
    assert (err.line, err.field) == (1003, "for_each")
    assert err.message == "for_each item 1001: " + OVER.replace("5", "1,000", 1)
    toml = tmp_path / "big.toml"
    toml.write_text("".join(f'[[tasks]]\ngoal = "{pad} {i}"\n' for i in range(n)) + "[[[x\n")
    with pytest.raises(SpecError) as info:
        load_batch(toml, max_tasks=1000)
    assert (info.value.line, info.value.field) == (2001, None)


def refused_unparsed(
    monkeypatch: pytest.MonkeyPatch,
    path: Path,
    text: str,
    line: int,
    field: str | None,
    label: str = "",
) -> None:
    """`text` is refused at the same task whether small (counted as it is built) or padded
    over SCAN_FROM_BYTES (counted as its keys are located: tomllib never builds it)."""
    path.write_text(text)
    refused(path, line, field, label)
    path.write_text(text + PAD)
    with monkeypatch.context() as patch:
        patch.setattr(tomllib, "loads", _not_parsed)
        refused(path, line, field, label)


def _not_parsed(text: str) -> object:
    raise AssertionError("a file over max_tasks was parsed")


def test_an_inline_toml_tasks_array_is_refused_before_it_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.toml"
    entries = [f'{{goal = "g{i}, [x] {{y}} # z"}}' for i in range(9)]
    refused_unparsed(monkeypatch, path, f"tasks = [{', '.join(entries)}]\n", 1, None)
    spread = "".join(f"  {entry},  # entry {i}\n" for i, entry in enumerate(entries))
    refused_unparsed(monkeypatch, path, f"tasks = [\n{spread}]\n", 7, None)


def test_an_inline_toml_for_each_is_refused_before_it_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.toml"
    table = '[[tasks]]\ngoal = "a"\n[[tasks]]\ngoal = "x {item}"\n'
    table += "for_each = [\n  1, 2, 3,\n  4, 5, 6,\n]\n"
    refused_unparsed(monkeypatch, path, table, 7, "for_each", "for_each item 5: ")
    inline = 'tasks = [{goal = "a"}, {goal = "x {item}", for_each = ["1", "2", "3", "4", "5"]}]\n'
    refused_unparsed(monkeypatch, path, inline, 1, "for_each", "for_each item 5: ")
    # A schedule's template is one wave, counted on its own.
    wave = '[[schedules]]\nevery = "1h"\n[schedules.task]\ngoal = "w {item}"\nfor_each = [\n'
    wave += "".join(f"  {i},\n" for i in range(9)) + "]\n"
    refused_unparsed(monkeypatch, path, wave, 11, "for_each", "for_each item 6: ")


# Ends inside the for_each list: the test closes it, or adds an item first.
TRICKY = (Path(__file__).parent / "fixtures" / "tasks" / "tricky.toml").read_text()


def test_a_tricky_toml_file_within_the_limit_is_counted_right(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "t.toml"
    for pad in ("", PAD):
        path.write_text(TRICKY + "]\n" + pad)
        batch = load_batch(path, max_tasks=5)
        assert [t.goal for t in batch.tasks][2:] == ["review a,b]", "review c\\d", 'review e", f']
    more = TRICKY + '  {name = "g"}\n]\n'  # a 4th item: the 6th task
    refused_unparsed(monkeypatch, path, more, 30, "for_each", "for_each item 4: ")
    # The same, its tasks inline: `tasks = [{...}, ...]` over many lines.
    inline = (
        'tasks = [\n  {goal = "a, [b] {c} # d"},\n  # {goal = "a comment"},\n'
        "  {goal = '''multi\nline, ] } with \"quotes\"''', context = \"{x}\"},\n"
        '  {goal = "x {item}", for_each = [\n    "1, 2", 3,\n    {a = [5, 6]},\n  ]},\n]\n'
    )
    path.write_text(inline + PAD)
    assert len(load_batch(path, max_tasks=5).tasks) == 5
    # Header lines inside a multi-line string are no tasks.
    path.write_text('[[tasks]]\ngoal = "a"\ncontext = """\n' + "[[tasks]]\n" * 9 + '"""\n' + PAD)
    assert len(load_batch(path, max_tasks=5).tasks) == 1
    # Stray commas are no items: the file is not TOML, and is told so.
    path.write_text('[[tasks]]\ngoal = "x {item}"\nfor_each = [' + "," * 9 + "1]\n" + PAD)
    with pytest.raises(SpecError, match="invalid TOML"):
        load_batch(path, max_tasks=5)


def test_max_tasks_is_a_setting_with_bounds_named_at_its_line(tmp_path: Path) -> None:
    config = tmp_path / "flightdeck.toml"
    config.write_text("[engine]\nmax_tasks = 50000\n")
    assert load_settings(config).engine.max_tasks == 50_000
    for value in ("0", "1000001", '"many"'):
        config.write_text(f"[engine]\nmax_concurrent = 2\nmax_tasks = {value}\n")
        with pytest.raises(ConfigError) as info:
            load_settings(config)
        assert (info.value.line, info.value.field) == (3, "engine.max_tasks")


@pytest.mark.slow
def test_a_million_tasks_is_one_line_exit_2_and_nothing_written(tmp_path: Path) -> None:
    # The reported file: 1,000,000 tasks, 13 MB of JSONL, used to be accepted, silent for
    # 90 s and 6 GB of memory on the way.
    (tmp_path / "million.jsonl").write_text(
        "".join(f'{{"id": "t{i}", "goal": "Review item {i}"}}\n' for i in range(1_000_000))
    )
    result = flightdeck("run", "million.jsonl", "--headless", cwd=tmp_path)
    assert result.returncode == ExitCode.USAGE
    assert result.stdout == ""
    assert result.stderr == (
        "flightdeck: million.jsonl:10001: more than 10,000 tasks, the limit ([engine] "
        "max_tasks: raise it there, or split the batch)\n"
    )
    assert not (tmp_path / ".flightdeck").exists()


@pytest.mark.slow
@pytest.mark.parametrize("form", ["tasks", "for_each"])
def test_an_inline_toml_million_is_one_line_exit_2(tmp_path: Path, form: str) -> None:
    # Written inline, a million tasks (or for_each items) used to be parsed whole first:
    # refused after 18 s at a 700 MB peak (2,000,000 for_each items: 16 s, 455 MB).
    million = range(1_000_000)
    if form == "tasks":
        text = "tasks = [" + ", ".join(f'{{goal = "t{i}"}}' for i in million) + "]\n"
        where = "1"
    else:
        text = '[[tasks]]\ngoal = "x {item}"\nfor_each = [' + ", ".join(map(str, million)) + "]\n"
        where = "3: for_each: for_each item 10001"
    (tmp_path / "inline.toml").write_text(text)
    result = flightdeck("run", "inline.toml", "--headless", cwd=tmp_path)
    assert (result.returncode, result.stdout) == (ExitCode.USAGE, "")
    assert result.stderr == (
        f"flightdeck: inline.toml:{where}: more than 10,000 tasks, the limit ([engine] "
        "max_tasks: raise it there, or split the batch)\n"
    )
    assert not (tmp_path / ".flightdeck").exists()
