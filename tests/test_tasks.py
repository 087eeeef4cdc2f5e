"""Task files: the three formats, decomposition, and one precise error per bad input."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest
from flightdeck.engine.attached.spawn import OWNER_LOG
from flightdeck.engine.errors import SpecError
from flightdeck.engine.inputs import files
from flightdeck.engine.inputs.settings import load_settings
from flightdeck.engine.inputs.tasks import Batch, Task, check_routes, load_batch
from flightdeck.engine.inputs.tasks.values import RESERVED_IDS
from flightdeck.engine.inputs.tomlpos import TomlLocator

from helpers import laughs

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def error_at(path: Path, line: int | None, field: str | None) -> SpecError:
    """Load `path`, expecting one SpecError at exactly this line and field."""
    with pytest.raises(SpecError) as info:
        load_batch(path)
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), line, field), str(err)
    where = f"{path}:{line}" if line is not None else str(path)
    assert str(err).startswith(f"{where}: {field + ': ' if field else ''}")
    return err


# --- happy paths ---------------------------------------------------------------------------


def test_jsonl_one_task_per_line_skipping_blanks_and_comments(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "b.jsonl",
        '# a comment\n{"id": "a", "goal": "first", "group": "g", "max_turns": 3}\n\n'
        '{"goal": "second", "timeout_s": 1.5, "route": "fast", "context": "ctx"}\n',
    )
    batch = load_batch(path)
    assert batch.name == "b"
    assert batch.source == path
    assert batch.workspace is None
    assert batch.tasks == (
        Task(id="a", goal="first", seq=0, group="g", max_turns=3, source=f"{path}:2"),
        Task(
            id="task-0002",
            goal="second",
            seq=1,
            context="ctx",
            route="fast",
            timeout_s=1.5,
            source=f"{path}:4",
            route_source=f"{path}:4:route",
        ),
    )


def test_toml_batch_defaults_and_workspace(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    path = write(
        tmp_path,
        "b.toml",
        """\
[batch]
name = "nightly"
workspace = "ws"

[defaults]
group = "review"
max_turns = 4
route = "slow"

[[tasks]]
goal = "one"

[[tasks]]
id = "two"
goal = "two"
group = "docs"
max_turns = 9
""",
    )
    batch = load_batch(path)
    assert batch.name == "nightly"
    assert batch.workspace == tmp_path / "ws"
    first, second = batch.tasks
    assert (first.id, first.group, first.route) == ("task-0001", "review", "slow")
    assert first.max_turns == 4
    assert (second.id, second.group, second.max_turns, second.route) == ("two", "docs", 9, "slow")
    assert (first.source, second.source) == (f"{path}:10", f"{path}:13")


def test_toml_batch_name_defaults_to_file_stem(tmp_path: Path) -> None:
    path = write(tmp_path, "sweep-7.toml", '[[tasks]]\ngoal = "g"\n')
    assert load_batch(path).name == "sweep-7"


def test_yaml_for_each_list(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "b.yaml",
        """\
batch:
  name: fan
defaults:
  group: g
tasks:
  - id: "r-{item}"
    for_each: [calc, text, 7]
    goal: "Review {item} ({index} of 3)"
    context: "item {item}"
  - goal: last
""",
    )
    batch = load_batch(path)
    assert [t.id for t in batch.tasks] == ["r-calc", "r-text", "r-7", "task-0004"]
    assert batch.tasks[2].goal == "Review 7 (3 of 3)"
    assert batch.tasks[0].context == "item calc"
    assert {t.group for t in batch.tasks} == {"g"}
    assert [t.seq for t in batch.tasks] == [0, 1, 2, 3]
    assert [t.source for t in batch.tasks] == [f"{path}:6"] * 3 + [f"{path}:10"]


def test_yaml_top_level_list_is_the_tasks(tmp_path: Path) -> None:
    path = write(tmp_path, "b.yml", "- goal: one\n- goal: two\n  id: second\n")
    assert [t.id for t in load_batch(path).tasks] == ["task-0001", "second"]


def test_a_yaml_document_of_one_scalar_says_what_yaml_takes(tmp_path: Path) -> None:
    # Not `[[tasks]]`, TOML's way, which a YAML writer cannot act on.
    path = write(tmp_path, "b.yaml", '"just a string"\n')
    message = str(error_at(path, 1, None))
    assert "a list of tasks, or a mapping with a tasks: list, got string" in message
    assert "[[tasks]]" not in message


def test_for_each_list_of_fifty_makes_fifty_tasks(tmp_path: Path) -> None:
    items = ", ".join(f'"pr-{n}"' for n in range(1, 51))
    path = write(tmp_path, "b.toml", f'[[tasks]]\nfor_each = [{items}]\ngoal = "Review {{item}}"\n')
    tasks = load_batch(path).tasks
    assert len(tasks) == 50
    assert tasks[49].goal == "Review pr-50"
    assert tasks[49].id == "task-0050"


def test_for_each_file_txt_one_item_per_non_blank_line(tmp_path: Path) -> None:
    lines = [f"#{n}" for n in range(1, 51)]  # "#12" is an item here, not a comment
    write(tmp_path, "data/prs.txt", "\n".join(lines[:25]) + "\n\n  \n" + "\n".join(lines[25:]))
    path = write(
        tmp_path,
        "b.toml",
        '[[tasks]]\nfor_each_file = "data/prs.txt"\nid = "pr-{index}"\n'
        'goal = "Review pull request {item}"\ngroup = "review"\n',
    )
    tasks = load_batch(path).tasks
    assert len(tasks) == 50
    assert (tasks[0].id, tasks[0].goal) == ("pr-1", "Review pull request #1")
    assert (tasks[49].id, tasks[49].goal) == ("pr-50", "Review pull request #50")


def test_for_each_file_jsonl_keys_become_placeholders(tmp_path: Path) -> None:
    rows = [{"number": n, "title": f"fix bug {n}"} for n in range(1, 51)]
    write(tmp_path, "prs.jsonl", "# PRs\n" + "\n".join(json.dumps(r) for r in rows) + "\n")
    path = write(
        tmp_path,
        "b.yaml",
        'tasks:\n  - for_each_file: prs.jsonl\n    id: "pr-{number}"\n'
        '    goal: "Review #{number}: {title}"\n',
    )
    tasks = load_batch(path).tasks
    assert len(tasks) == 50
    assert (tasks[6].id, tasks[6].goal) == ("pr-7", "Review #7: fix bug 7")


def test_placeholders_are_plain_substitution_not_format(tmp_path: Path) -> None:
    # str.format would evaluate {item.__class__} or choke on {0}; we leave non-matches alone.
    path = write(
        tmp_path,
        "b.toml",
        '[[tasks]]\nfor_each = ["x"]\ngoal = "{item} {item.__class__} {} {0x"\n',
    )
    assert load_batch(path).tasks[0].goal == "x {item.__class__} {} {0x"


def test_entries_without_for_each_keep_braces(tmp_path: Path) -> None:
    path = write(tmp_path, "b.jsonl", '{"goal": "explain {item} in f-strings"}\n')
    assert load_batch(path).tasks[0].goal == "explain {item} in f-strings"


def test_toml_inline_tasks_array_locates_each_element(tmp_path: Path) -> None:
    path = write(tmp_path, "b.toml", 'tasks = [\n  { goal = "a" },\n  { goal = "" },\n]\n')
    error_at(path, 3, "goal")


def test_example_batches_load_and_match_example_routes() -> None:
    settings = load_settings(EXAMPLES / "flightdeck.toml")
    demo = load_batch(EXAMPLES / "demo.toml")
    assert demo.name == "demo"
    assert len(demo.tasks) == 24
    assert demo.workspace is not None and (demo.workspace / "README.md").is_file()
    assert any(t.route == "sim-slow" for t in demo.tasks)
    assert len({t.id for t in demo.tasks}) == 24
    for name in ("demo.toml", "reviews.jsonl", "review-fanout.yaml"):
        batch: Batch = load_batch(EXAMPLES / name)
        check_routes(batch, settings.routes, settings.engine.default_route)


def test_check_routes_names_the_task_line(tmp_path: Path) -> None:
    path = write(tmp_path, "b.jsonl", '{"goal": "a"}\n{"goal": "b", "route": "fsat"}\n')
    batch = load_batch(path)
    check_routes(batch, {"sim", "fsat"}, "sim")  # every route known: no error
    with pytest.raises(SpecError) as info:
        check_routes(batch, {"sim", "fast"}, "sim")
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), 2, "route")
    assert "unknown route 'fsat' (did you mean 'fast'?)" in str(err)


@pytest.mark.parametrize(
    ("text", "line", "field"),
    [
        ('[[tasks]]\nid = "a"\ngoal = "x"\nroute = "nope"\n', 4, "route"),
        ('[defaults]\nroute = "nope"\n\n[[tasks]]\ngoal = "x"\n', 2, "defaults.route"),
        (
            '[[tasks]]\nfor_each = ["a", "b"]\ngoal = "x {item}"\n\nroute = "nope"\n',
            5,
            "route",
        ),
    ],
)
def test_check_routes_names_the_line_of_the_route_setting(
    tmp_path: Path, text: str, line: int, field: str
) -> None:
    path = write(tmp_path, "b.toml", text)
    with pytest.raises(SpecError) as info:
        check_routes(load_batch(path), {"sim"}, "sim")
    err = info.value
    assert (err.path, err.line, err.field) == (str(path), line, field)
    assert "unknown route 'nope'" in str(err)


def test_check_routes_flags_a_missing_default(tmp_path: Path) -> None:
    batch = load_batch(write(tmp_path, "b.jsonl", '{"goal": "a"}\n'))
    with pytest.raises(SpecError, match=r"b\.jsonl:1: route: no route given.*'gone'"):
        check_routes(batch, {"sim"}, "gone")


def test_locator_ignores_headers_inside_multiline_strings() -> None:
    text = '[[tasks]]\ngoal = """\n[[tasks]]\nid = 1\n"""\n\n[[tasks]]\nid = "b"\n'
    locator = TomlLocator(text)
    assert locator.line("tasks", 0, "goal") == 2
    assert locator.line("tasks", 1) == 7
    assert locator.line("tasks", 1, "id") == 8
    assert locator.line("tasks", 1, "missing") == 7


@pytest.mark.parametrize(
    "broken",
    [
        "a = [1, 2",
        'a = "open',
        "a = {b = ",
        "[[tasks",
        "a = ]",
        'k."\\q" = 1',
        "a = 1 = 2",
        "a = [,,1]",
        "a = 1 b = 2",
    ],
)
def test_locator_stops_at_text_that_is_not_toml(broken: str) -> None:
    # It runs before tomllib on a task file (to count tasks): it must end, and raise nothing.
    locator = TomlLocator('x = 1\n[t]\ny = "a]"\n' + broken)
    assert (locator.line("x"), locator.line("t", "y")) == (1, 3)


# --- one precise error per malformed input ----------------------------------------------------


def test_bad_json_line(tmp_path: Path) -> None:
    path = write(tmp_path, "b.jsonl", '{"goal": "a"}\n\n{"goal": "b",}\n')
    assert "invalid JSON" in str(error_at(path, 3, None))


def test_jsonl_line_that_is_not_an_object(tmp_path: Path) -> None:
    path = write(tmp_path, "b.jsonl", '{"goal": "a"}\n["goal"]\n')
    assert "expected a JSON object, got array" in str(error_at(path, 2, None))


def test_missing_goal_points_at_the_entry(tmp_path: Path) -> None:
    path = write(tmp_path, "b.toml", '[[tasks]]\ngoal = "a"\n\n[[tasks]]\nid = "b"\n')
    assert "required" in str(error_at(path, 4, "goal"))


@pytest.mark.parametrize(
    "goal",
    ["   ", "\x1b[31m", "\x07\x08 ", "\x1b]0;title\x07", "\u200b\u200b", "\ufeff \u2060\u200d"],
)
def test_empty_goal(tmp_path: Path, goal: str) -> None:
    # one that would show nothing once its escape sequences and control characters are gone
    # (zero-width ones too: they were accepted)
    path = write(tmp_path, "b.jsonl", json.dumps({"goal": goal}) + "\n")
    assert "must not be empty" in str(error_at(path, 1, "goal"))


def test_empty_group(tmp_path: Path) -> None:
    path = write(tmp_path, "b.jsonl", '{"goal": "g"}\n{"goal": "g", "group": "\\u001b[2J"}\n')
    assert "must not be empty (leave it out for no group)" in str(error_at(path, 2, "group"))


def test_duplicate_id_names_both_lines(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "b.toml",
        '[[tasks]]\nid = "same"\ngoal = "a"\n\n[[tasks]]\ngoal = "b"\nid = "same"\n',
    )
    err = error_at(path, 7, "id")
    assert f"first defined at {path}:2" in str(err)


def test_a_duplicate_id_through_a_yaml_alias_says_so(tmp_path: Path) -> None:
    # The alias shares its anchor's node, and so its line: "first defined at" the very line
    # the error is at read as nonsense without the alias named.
    text = "tasks:\n  - &rev\n    id: review\n    goal: Review\n  - {id: b, goal: B}\n  - *rev\n"
    path = write(tmp_path, "b.yaml", text)
    err = error_at(path, 3, "id")
    assert str(err).endswith(
        f"duplicate id 'review' (first defined at {path}:3), repeated through a YAML alias of it"
    )


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("b.toml", '[[tasks]]\nid = "t-{item}"\ngoal = "g"\nfor_each = ["a", "b", "a"]\n'),
        ("b.jsonl", '{"id": "t-{item}", "goal": "g", "for_each": ["a", "b", "a"]}\n'),
        ("b.yaml", 'tasks:\n  - {id: "t-{item}", goal: g, for_each: [a, b, a]}\n'),
    ],
)
def test_a_duplicate_id_from_one_for_each_names_no_yaml_alias(
    tmp_path: Path, name: str, text: str
) -> None:
    # Two items of one task share its line, as an alias shares its anchor's: every format's
    # error said "repeated through a YAML alias of it", a TOML or JSONL file's too.
    path = write(tmp_path, name, text)
    err = error_at(path, 1 if name == "b.jsonl" else 2, "id")
    assert str(err).endswith(
        f"for_each item 3: duplicate id 't-a' (first defined at {path}:"
        f"{1 if name == 'b.jsonl' else 2} (for_each item 1))"
    )


def test_duplicate_id_from_decomposition(tmp_path: Path) -> None:
    path = write(
        tmp_path, "b.yaml", 'tasks:\n  - id: "r"\n    for_each: [a, b]\n    goal: "x {item}"\n'
    )
    err = error_at(path, 2, "id")
    assert "for_each item 2: duplicate id 'r'" in str(err)


def test_generated_ids_step_around_the_files_own_ids(tmp_path: Path) -> None:
    # Whether the explicit id comes before or after the task whose generated id it takes.
    lines = [
        {"id": "task-0002", "goal": "a"},
        {"goal": "b"},
        {"goal": "c"},
        {"id": "task-0003", "goal": "d"},
        {"id": "task-0003-2", "goal": "e"},
    ]
    path = write(tmp_path, "b.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
    ids = [t.id for t in load_batch(path).tasks]
    assert ids == ["task-0002", "task-0002-2", "task-0003-3", "task-0003", "task-0003-2"]


def test_a_key_a_terminal_would_not_show_is_named_escaped(tmp_path: Path) -> None:
    path = write(tmp_path, "b.jsonl", '{"goal": "g", "\\u001b[2J": 1}\n')
    with pytest.raises(SpecError) as info:
        load_batch(path)
    # Sanitized on its way to the terminal, the key itself would be an empty name.
    assert info.value.field == "\x1b[2J"
    assert str(info.value) == f"{path}:1: '\\x1b[2J': unknown key"


def test_a_yaml_null_or_boolean_key_is_named_as_the_file_wrote_it(tmp_path: Path) -> None:
    # Found by an audit: `~: 1` was reported as "None: unknown key", a key the file never wrote.
    path = write(tmp_path, "b.yaml", "tasks: [{goal: x, ~: 1}]\n")
    assert str(error_at(path, 1, "~ (null)")).endswith(": ~ (null): unknown key")
    path = write(tmp_path, "c.yaml", "tasks: [{goal: x}]\ntrue: 1\n")
    assert "unknown key" in str(error_at(path, 2, "true"))


@pytest.mark.parametrize(
    ("text", "line", "field", "word"),
    [
        ("tasks:\n  - goal: yes\n", 2, "goal", "yes"),
        ("tasks:\n  - id: no\n    goal: a\n", 2, "id", "no"),
        ("tasks:\n  - goal: a\n    group: On\n", 3, "group", "On"),
        ("batch:\n  name: off\ntasks: [{goal: a}]\n", 2, "batch.name", "off"),
        ("tasks:\n  - goal: x {item}\n    for_each: [a, yes]\n", 3, "for_each", "yes"),
    ],
)
def test_a_yaml_word_read_as_a_boolean_where_text_is_expected_is_told_to_quote_it(
    tmp_path: Path, text: str, line: int, field: str, word: str
) -> None:
    # YAML 1.1 (PyYAML's) reads an unquoted yes, no, on or off as a boolean: the error said
    # `expected a string, got boolean true` of a goal the file wrote as `yes`.
    said = str(error_at(write(tmp_path, "b.yaml", text), line, field))
    assert said.endswith(f", got boolean {str(word.lower() in ('yes', 'on')).lower()}; YAML "
                         f"reads an unquoted {word} as a boolean: quote it, '{word}'")  # fmt: skip


def test_a_quoted_word_or_a_wanted_boolean_gets_no_yaml_hint(tmp_path: Path) -> None:
    path = write(tmp_path, "b.yaml", "tasks:\n  - goal: a\n    max_turns: yes\n")
    assert str(error_at(path, 3, "max_turns")).endswith("expected an integer, got boolean true")
    path = write(tmp_path, "c.yaml", "batch:\n  delegate: yes\ntasks:\n  - goal: 'yes'\n")
    assert load_batch(path).tasks[0].goal == "yes"


def test_unknown_task_key_suggests_the_right_one(tmp_path: Path) -> None:
    path = write(tmp_path, "b.toml", '[[tasks]]\ngoal = "a"\nmax_turn = 3\n')
    assert "unknown key (did you mean 'max_turns'?)" in str(error_at(path, 3, "max_turn"))


def test_wrong_type_names_field_and_expected_type(tmp_path: Path) -> None:
    path = write(tmp_path, "b.yaml", "tasks:\n  - goal: a\n    max_turns: '8'\n")
    err = error_at(path, 3, "max_turns")
    assert "expected an integer, got string '8'" in str(err)


def test_max_turns_out_of_range(tmp_path: Path) -> None:
    path = write(tmp_path, "b.jsonl", '{"goal": "a", "max_turns": 201}\n')
    assert "between 1 and 200" in str(error_at(path, 1, "max_turns"))


def test_boolean_is_not_a_number(tmp_path: Path) -> None:
    path = write(tmp_path, "b.jsonl", '{"goal": "a", "timeout_s": true}\n')
    assert "got boolean true" in str(error_at(path, 1, "timeout_s"))


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("b.toml", "tasks = 5\n", "expected an array of tables ([[tasks]]), got integer 5"),
        ("b.TOML", "tasks = 5\n", "expected an array of tables ([[tasks]]), got integer 5"),
        ("b.yaml", "tasks: 5\n", "expected a list of tasks, got integer 5"),  # in YAML's words
    ],
)
def test_tasks_that_are_not_a_list(tmp_path: Path, name: str, text: str, says: str) -> None:
    assert says in str(error_at(write(tmp_path, name, text), 1, "tasks"))


@pytest.mark.parametrize(
    ("value", "got"),
    [
        ("2019-01-01", "got date 2019-01-01"),  # in the file's words, not Python's
        ("!!binary aGVsbG8=", "got binary data (5 bytes)"),
    ],
)
def test_a_value_of_the_wrong_type_is_said_as_the_file_wrote_it(
    tmp_path: Path, value: str, got: str
) -> None:
    path = write(tmp_path, "b.yaml", f"tasks:\n  - goal: {value}\n")
    assert f"expected a string, {got}" in str(error_at(path, 2, "goal"))


def test_negative_timeout(tmp_path: Path) -> None:
    path = write(tmp_path, "b.toml", '[[tasks]]\ngoal = "a"\ntimeout_s = -1\n')
    assert "positive" in str(error_at(path, 3, "timeout_s"))


@pytest.mark.parametrize(
    ("name", "text", "line"),
    [
        ("b.toml", '[[tasks]]\ngoal = "a"\ntimeout_s = inf\n', 3),
        ("b.toml", '[[tasks]]\ngoal = "a"\ntimeout_s = nan\n', 3),
        ("b.jsonl", '{"goal": "a", "timeout_s": Infinity}\n', 1),
        ("b.yaml", "tasks:\n  - goal: a\n    timeout_s: .inf\n", 3),
    ],
)
def test_a_timeout_that_is_not_finite_is_said_so(
    tmp_path: Path, name: str, text: str, line: int
) -> None:
    # inf was refused as "must be a positive number of seconds": the wrong reason.
    message = str(error_at(write(tmp_path, name, text), line, "timeout_s"))
    assert "must be a finite number" in message and "positive" not in message


@pytest.mark.parametrize("bad", ["a b", "../etc", "-lead", "x" * 65, "é"])
def test_bad_id_characters(tmp_path: Path, bad: str) -> None:
    path = write(tmp_path, "b.jsonl", '{"goal": "ok"}\n' + json.dumps({"id": bad, "goal": "a"}))
    assert "not a valid id" in str(error_at(path, 2, "id"))


@pytest.mark.parametrize("reserved", ["owner", "Owner"])
def test_an_id_whose_transcript_would_be_the_owners_log_is_refused(
    tmp_path: Path, reserved: str
) -> None:
    path = write(
        tmp_path, "b.jsonl", '{"goal": "ok"}\n' + json.dumps({"id": reserved, "goal": "a"})
    )
    assert f"{reserved!r} is reserved" in str(error_at(path, 2, "id"))
    # the names kept free are those the owner writes, whichever of the two is renamed
    assert {f"{i}.log" for i in RESERVED_IDS} == {OWNER_LOG}


def test_id_made_invalid_by_an_item(tmp_path: Path) -> None:
    write(tmp_path, "items.txt", "ok\nnot ok\n")
    path = write(
        tmp_path, "b.toml", '[[tasks]]\nfor_each_file = "items.txt"\nid = "t-{item}"\ngoal = "g"\n'
    )
    assert "items.txt:2: 't-not ok' is not a valid id" in str(error_at(path, 3, "id"))


def test_unknown_placeholder_names_the_field(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "b.toml",
        '[[tasks]]\nfor_each = ["a"]\ngoal = "g {item}"\ncontext = "about {nmae}"\n',
    )
    err = error_at(path, 4, "context")
    assert "unknown placeholder {nmae} (known: {item}, {index}; write {{nmae}}" in str(err)


def test_unknown_placeholder_in_jsonl_data_names_the_data_line(tmp_path: Path) -> None:
    write(tmp_path, "rows.jsonl", '{"n": 1, "who": "ann"}\n{"n": 2}\n')
    path = write(
        tmp_path, "b.toml", '[[tasks]]\nfor_each_file = "rows.jsonl"\ngoal = "ask {who}"\n'
    )
    err = error_at(path, 3, "goal")
    assert "rows.jsonl:2: unknown placeholder {who}" in str(err)


def test_toml_syntax_error(tmp_path: Path) -> None:
    path = write(tmp_path, "b.toml", '[[tasks]]\ngoal = "a"\nid = \n')
    assert "invalid TOML" in str(error_at(path, 3, None))


def test_toml_unclosed_array_blames_the_last_line(tmp_path: Path) -> None:
    path = write(tmp_path, "b.toml", '[[tasks]]\ngoal = "a"\nfor_each = [\n  "x",\n\n')
    error_at(path, 4, None)


def test_yaml_syntax_error(tmp_path: Path) -> None:
    path = write(tmp_path, "b.yaml", "tasks:\n  - goal: a\n  - goal: [unclosed\n  - goal: c\n")
    assert "invalid YAML" in str(error_at(path, 4, None))


@pytest.mark.parametrize("char", ["\x00", "\x07", "\ufffe"])
def test_a_character_yaml_refuses_is_an_error_at_its_line(tmp_path: Path, char: str) -> None:
    # PyYAML's reader refuses it as it is made, outside the parse's error handling: a
    # traceback, where one line naming the file and line is promised.
    path = write(tmp_path, "b.yaml", f'tasks:\n  - goal: a\n  - goal: "b{char}"\n')
    err = error_at(path, 3, None)
    code = f"#x{ord(char):04x}"
    assert str(err).endswith(
        f"invalid YAML: unacceptable character {code}: special characters are not allowed"
    )


@pytest.mark.parametrize("tag", ["!!int", "!!float", "!!bool", "!!timestamp"])
def test_a_scalar_its_tag_cannot_read_is_an_error_at_its_line(tmp_path: Path, tag: str) -> None:
    # PyYAML's constructors raised ValueError, KeyError or AttributeError with no mark: a
    # traceback, where one line naming the file and line is promised.
    path = write(tmp_path, "b.yaml", f"tasks:\n  - goal: a\n  - goal: {tag} nope\n")
    err = error_at(path, 3, None)
    assert str(err).endswith(f"invalid YAML: not a valid {tag} value: 'nope'")


def test_yaml_duplicate_key(tmp_path: Path) -> None:
    path = write(tmp_path, "b.yaml", "tasks:\n  - goal: a\n    group: x\n    goal: b\n")
    assert "duplicate key (first at line 2)" in str(error_at(path, 4, "tasks.0.goal"))


@pytest.mark.parametrize(
    ("name", "text", "line", "field", "message"),
    [
        ("b.jsonl", "# nothing here\n\n", None, None, "the batch has no tasks"),
        ("b.toml", '[batch]\nname = "x"\n', None, "tasks", "the batch has no tasks"),
        ("b.yaml", "# only a comment\n", None, None, "the batch is empty"),
        ("b.yaml", "tasks: []\n", 1, "tasks", "the batch has no tasks"),
    ],
)
def test_empty_batch(
    tmp_path: Path, name: str, text: str, line: int | None, field: str | None, message: str
) -> None:
    path = write(tmp_path, name, text)
    assert message in str(error_at(path, line, field))


def test_task_fields_at_top_level_get_a_hint(tmp_path: Path) -> None:
    path = write(tmp_path, "b.toml", 'goal = "a"\n')
    assert "go inside a tasks entry" in str(error_at(path, 1, "goal"))


def test_for_each_cannot_be_a_default(tmp_path: Path) -> None:
    # Found by an audit: said "unknown key", of a key every task may have.
    for key, value in (("for_each", '["a"]'), ("for_each_file", '"i.txt"')):
        text = f'[defaults]\n{key} = {value}\n\n[[tasks]]\ngoal = "a {{item}}"\n'
        err = error_at(write(tmp_path, "b.toml", text), 2, f"defaults.{key}")
        assert err.message == "cannot be a default: set it in a task"


def test_defaults_cannot_set_id(tmp_path: Path) -> None:
    path = write(tmp_path, "b.toml", '[defaults]\nid = "x"\n\n[[tasks]]\ngoal = "a"\n')
    error_at(path, 2, "defaults.id")


def test_bad_default_type(tmp_path: Path) -> None:
    path = write(tmp_path, "b.toml", '[defaults]\ngroup = 3\n\n[[tasks]]\ngoal = "a"\n')
    assert "expected a string, got integer 3" in str(error_at(path, 2, "defaults.group"))


def test_missing_workspace(tmp_path: Path) -> None:
    path = write(tmp_path, "b.toml", '[batch]\nworkspace = "nope"\n[[tasks]]\ngoal = "a"\n')
    assert "folder not found" in str(error_at(path, 2, "batch.workspace"))


def test_missing_for_each_file(tmp_path: Path) -> None:
    path = write(tmp_path, "b.toml", '[[tasks]]\ngoal = "a"\nfor_each_file = "gone.txt"\n')
    assert "file not found" in str(error_at(path, 3, "for_each_file"))


def test_a_folder_where_a_file_goes_and_a_file_where_a_folder_goes(tmp_path: Path) -> None:
    (tmp_path / "items.txt").mkdir()
    path = write(tmp_path, "b.toml", '[[tasks]]\ngoal = "a"\nfor_each_file = "items.txt"\n')
    assert "not a file: " in str(error_at(path, 3, "for_each_file"))
    write(tmp_path, "work", "")
    path = write(tmp_path, "c.toml", '[batch]\nworkspace = "work"\n[[tasks]]\ngoal = "a"\n')
    assert "a file, not a folder: " in str(error_at(path, 2, "batch.workspace"))


def test_empty_for_each_file(tmp_path: Path) -> None:
    write(tmp_path, "none.txt", "\n  \n")
    path = write(tmp_path, "b.toml", '[[tasks]]\ngoal = "a"\nfor_each_file = "none.txt"\n')
    assert "no items" in str(error_at(path, 3, "for_each_file"))


def test_both_for_each_and_for_each_file(tmp_path: Path) -> None:
    write(tmp_path, "i.txt", "a\n")
    path = write(
        tmp_path, "b.toml", '[[tasks]]\ngoal = "a"\nfor_each = [1]\nfor_each_file = "i.txt"\n'
    )
    error_at(path, 4, "for_each_file")


def test_for_each_item_of_the_wrong_type(tmp_path: Path) -> None:
    path = write(tmp_path, "b.toml", '[[tasks]]\ngoal = "a"\nfor_each = [\n  "ok",\n  [1],\n]\n')
    assert "for_each item 2: expected" in str(error_at(path, 5, "for_each"))


def test_unsupported_extension(tmp_path: Path) -> None:
    path = write(tmp_path, "b.json", "{}")
    assert "unsupported file type" in str(error_at(path, None, None))


def test_missing_file(tmp_path: Path) -> None:
    assert "file not found" in str(error_at(tmp_path / "gone.toml", None, None))


def test_placeholder_error_in_an_inherited_default_points_at_defaults(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "b.toml",
        '[defaults]\ncontext = "see {ticket}"\n\n[[tasks]]\nfor_each = [1]\ngoal = "g {item}"\n',
    )
    assert "unknown placeholder {ticket}" in str(error_at(path, 2, "defaults.context"))


def test_goal_emptied_by_an_item(tmp_path: Path) -> None:
    path = write(tmp_path, "b.toml", '[[tasks]]\nfor_each = ["a", " "]\ngoal = "{item}"\n')
    assert "for_each item 2: the goal is empty" in str(error_at(path, 3, "goal"))


def test_group_emptied_by_an_item(tmp_path: Path) -> None:
    text = '[[tasks]]\nfor_each = ["a", ""]\ngoal = "g {item}"\ngroup = "{item}"\n'
    path = write(tmp_path, "b.toml", text)
    assert "for_each item 2: the group is empty" in str(error_at(path, 4, "group"))


def test_check_routes_without_a_line_keeps_the_whole_path() -> None:
    task = Task(id="a", goal="g", seq=0, route="nope", source="C:/batches/b.toml")
    with pytest.raises(SpecError) as info:
        check_routes(Batch(name="b", tasks=(task,)), {"sim"}, "sim")
    assert (info.value.path, info.value.line) == ("C:/batches/b.toml", None)


def test_jsonl_lines_are_split_at_newlines_only(tmp_path: Path) -> None:
    # U+2028, U+2029 and U+0085 are legal unescaped inside a JSON string (json.dumps with
    # ensure_ascii=False writes them so); they do not end the line, nor shift later lines.
    goal = "para\u2028graph\u2029 and\u0085 more"
    text = json.dumps({"id": "a", "goal": goal}, ensure_ascii=False) + "\r\n"
    path = write(tmp_path, "t.jsonl", text + '{"id": "b", "goal": "x", "max_turns": 0}\n')
    assert "max_turns" in str(error_at(path, 2, "max_turns"))
    good = write(tmp_path, "good.jsonl", text)
    assert load_batch(good).tasks[0].goal == goal


def test_jsonl_duplicate_keys_are_rejected(tmp_path: Path) -> None:
    path = write(tmp_path, "t.jsonl", '{"goal": "x"}\n{"id": "a", "goal": "x", "id": "b"}\n')
    assert "duplicate key" in str(error_at(path, 2, "id"))


def test_a_byte_order_mark_is_not_part_of_the_first_line(tmp_path: Path) -> None:
    jsonl = tmp_path / "t.jsonl"
    jsonl.write_bytes(b'\xef\xbb\xbf{"id": "a", "goal": "x"}\n')
    toml = tmp_path / "t.toml"
    toml.write_bytes(b'\xef\xbb\xbf[[tasks]]\nid = "b"\ngoal = "y"\n')
    assert [t.id for t in load_batch(jsonl).tasks] == ["a"]
    assert [t.id for t in load_batch(toml).tasks] == ["b"]


def test_for_each_dates_read_as_written_and_unusable_values_are_named(tmp_path: Path) -> None:
    ok = write(
        tmp_path,
        "ok.toml",
        '[[tasks]]\nfor_each = [{d = 1979-05-27, t = 07:32:00}]\ngoal = "on {d} at {t}: {item}"\n',
    )
    assert load_batch(ok).tasks[0].goal == (
        'on 1979-05-27 at 07:32:00: {"d":"1979-05-27","t":"07:32:00"}'
    )
    binary = write(
        tmp_path, "b.yaml", "tasks:\n  - goal: x {v}\n    for_each: [{v: !!binary aGk=}]\n"
    )
    assert "a value of type bytes cannot be used as text" in str(error_at(binary, 3, "for_each"))
    loop = write(tmp_path, "l.yaml", "tasks: &t\n  - goal: x {item}\n    for_each: [{a: *t}]\n")
    assert "refers to itself" in str(error_at(loop, 3, "for_each"))


def test_a_yaml_list_of_tasks_names_the_line_of_the_bad_field(tmp_path: Path) -> None:
    path = write(tmp_path, "l.yaml", "- id: a\n  goal: x\n- id: c\n  goal: z\n  max_turns: 0\n")
    assert "max_turns" in str(error_at(path, 5, "max_turns"))


def test_an_empty_yaml_section_is_an_empty_table(tmp_path: Path) -> None:
    path = write(tmp_path, "b.yaml", "batch:\ndefaults:\n  # max_turns: 4\ntasks:\n  - goal: x\n")
    batch = load_batch(path)
    assert batch.name == "b" and [t.goal for t in batch.tasks] == ["x"]
    assert batch.tasks[0].max_turns == 8


def test_doubled_braces_are_literal_braces_in_a_template(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "b.toml",
        '[[tasks]]\nfor_each = ["a"]\n'
        'goal = "Fill {{name}} in {item}; keep {{ and }}, {{{item}}}"\n',
    )
    assert load_batch(path).tasks[0].goal == "Fill {name} in a; keep { and }, {a}"
    bad = write(tmp_path, "c.toml", '[[tasks]]\nfor_each = ["a"]\ngoal = "Fill {name}"\n')
    assert "write {{name}} for the text itself" in str(error_at(bad, 3, "goal"))


# --- text that cannot be sent: lone surrogates --------------------------------------------------


@pytest.mark.parametrize("field", ["id", "goal", "context", "group", "route"])
def test_a_lone_surrogate_in_a_jsonl_field_is_rejected_at_its_line(
    tmp_path: Path, field: str
) -> None:
    # JSON's \ud800 escape decodes to a str that no UTF-8 encoder accepts: the child would
    # crash on it, and the store could not record it.
    task = {"id": "a", "goal": "g", field: "see \\ud800 here"}
    text = '{"goal": "fine"}\n' + json.dumps(task).replace("\\\\", "\\") + "\n"
    path = write(tmp_path, "s.jsonl", text)
    err = error_at(path, 2, field)
    assert err.message == "not valid Unicode text: a lone surrogate (\\ud800) at character 5"


def test_a_lone_surrogate_repro_from_the_report(tmp_path: Path) -> None:
    path = write(tmp_path, "s.jsonl", '{"id":"sur","goal":"review \\ud800 this"}\n')
    assert str(error_at(path, 1, "goal")).endswith(
        "goal: not valid Unicode text: a lone surrogate (\\ud800) at character 8"
    )


def test_yaml_double_quoted_surrogates_are_rejected(tmp_path: Path) -> None:
    # PyYAML decodes "\udc80" to a lone surrogate, and a pair to two of them (JSON would
    # join the pair): the message says how to write the character instead.
    lone = write(tmp_path, "l.yaml", 'tasks:\n  - goal: ok\n  - goal: "x\\udc80"\n')
    assert "a lone surrogate (\\udc80) at character 2" in str(error_at(lone, 3, "goal"))
    pair = write(tmp_path, "p.yaml", 'tasks:\n  - goal: ok\n    context: "hi \\ud83d\\ude00"\n')
    err = error_at(pair, 3, "context")
    assert err.message == (
        "not valid Unicode text: a surrogate pair (\\ud83d\\ude00) at character 4; "
        "write the character itself or \\U0001f600"
    )


def test_toml_refuses_a_surrogate_escape_itself(tmp_path: Path) -> None:
    path = write(tmp_path, "b.toml", '[[tasks]]\ngoal = "x \\ud800"\n')
    assert "invalid TOML" in str(error_at(path, 2, None))


def test_a_lone_surrogate_in_defaults_or_the_batch_name_is_rejected(tmp_path: Path) -> None:
    defaults = write(tmp_path, "d.yaml", 'defaults:\n  group: "\\ud800"\ntasks:\n  - goal: x\n')
    assert "lone surrogate" in str(error_at(defaults, 2, "defaults.group"))
    name = write(tmp_path, "n.yaml", 'batch:\n  name: "\\ud800"\ntasks:\n  - goal: x\n')
    assert "lone surrogate" in str(error_at(name, 2, "batch.name"))


def test_a_lone_surrogate_in_a_decomposition_item_names_the_item(tmp_path: Path) -> None:
    listed = write(
        tmp_path,
        "b.yaml",
        'tasks:\n  - goal: "x {item}"\n    for_each:\n      - ok\n      - "\\ud800"\n',
    )
    err = error_at(listed, 5, "for_each")
    assert (
        err.message
        == "for_each item 2: not valid Unicode text: a lone surrogate (\\ud800) at character 1"
    )
    write(tmp_path, "rows.jsonl", '{"who": "ann"}\n{"who": "b\\udfff"}\n')
    from_file = write(
        tmp_path, "f.toml", '[[tasks]]\nfor_each_file = "rows.jsonl"\ngoal = "ask {who}"\n'
    )
    err = error_at(from_file, 2, "for_each_file")
    assert err.message == (
        "rows.jsonl:2: who: not valid Unicode text: a lone surrogate (\\udfff) at character 2"
    )


# --- YAML merge keys ----------------------------------------------------------------------------


def test_yaml_merge_key_with_an_override(tmp_path: Path) -> None:
    path = write(
        tmp_path, "m.yaml", "tasks:\n  - &t\n    goal: a\n    id: a\n  - <<: *t\n    id: b\n"
    )
    first, second = load_batch(path).tasks
    assert (first.id, first.goal, second.id, second.goal) == ("a", "a", "b", "a")
    assert second.source == f"{path}:5"


def test_yaml_merged_keys_keep_the_line_they_were_written_on(tmp_path: Path) -> None:
    # The second task's max_turns comes from an item of the first task's for_each list.
    path = write(
        tmp_path,
        "m.yaml",
        'tasks:\n  - goal: "x {item}"\n    for_each:\n      - &m\n        max_turns: "x"\n'
        "  - <<: *m\n    goal: y\n",
    )
    assert "expected an integer" in str(error_at(path, 5, "max_turns"))


def test_yaml_merge_list_earlier_mappings_win_and_own_keys_win_over_all(tmp_path: Path) -> None:
    # PyYAML's own merge lets a later mapping win for a key it does not intern ("goal").
    path = write(
        tmp_path,
        "m.yaml",
        "defaults:\n  group: base\n"
        "tasks:\n"
        "  - &x {id: x, goal: from x, context: x ctx}\n"
        "  - &y {id: y, goal: from y, context: y ctx, group: y}\n"
        "  - <<: [*x, *y]\n    id: z\n"
        "  - <<: *y\n    <<: *x\n    id: w\n    context: own\n",
    )
    tasks = {t.id: t for t in load_batch(path).tasks}
    assert (tasks["z"].goal, tasks["z"].context, tasks["z"].group) == ("from x", "x ctx", "y")
    assert (tasks["w"].goal, tasks["w"].context, tasks["w"].group) == ("from y", "own", "y")


def test_yaml_key_written_twice_beside_a_merge_is_still_a_duplicate(tmp_path: Path) -> None:
    path = write(
        tmp_path, "m.yaml", "tasks:\n  - &t\n    goal: a\n  - <<: *t\n    id: b\n    id: c\n"
    )
    assert "duplicate key (first at line 5)" in str(error_at(path, 6, "tasks.1.id"))


def test_yaml_merge_of_a_scalar_is_invalid_yaml_at_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "m.yaml", "tasks:\n  - goal: a\n    <<: 3\n")
    assert "expected a mapping or list of mappings for merging" in str(error_at(path, 3, None))


@pytest.mark.parametrize("suffix", [".toml", ".yaml", ".jsonl"])
def test_a_file_name_that_is_not_utf8_still_names_its_batch(tmp_path: Path, suffix: str) -> None:
    # A file name may hold any bytes; the default name keeps what it can, with U+FFFD for the
    # rest, rather than rejecting a field the file never wrote.
    content = {
        ".toml": '[[tasks]]\nid = "a"\ngoal = "g"\n',
        ".yaml": "tasks:\n  - id: a\n    goal: g\n",
        ".jsonl": '{"id": "a", "goal": "g"}\n',
    }[suffix]
    path = tmp_path / os.fsdecode(b"tt\xfe" + suffix.encode())
    path.write_text(content, encoding="utf-8")
    batch = load_batch(path)
    assert batch.name == "tt\ufffd"
    assert [t.id for t in batch.tasks] == ["a"]


# --- hostile files --------------------------------------------------------------------------


def test_yaml_nested_aliases_fail_fast_at_their_line(tmp_path: Path) -> None:
    path = write(tmp_path, "b.yaml", laughs(10))
    # This thread's CPU time: linear in the file, however busy the machine (a wall clock
    # there counts the time other processes ran).
    started = time.thread_time()
    err = error_at(path, 9, None)
    assert time.thread_time() - started < 0.5
    assert "aliases add more than 100,000 values" in str(err)


def test_yaml_aliases_that_add_little_still_load(tmp_path: Path) -> None:
    text = "defaults: &d\n  group: g\ntasks:\n" + "".join(
        f"  - {{id: t{n}, goal: x, group: *g}}\n" for n in range(3)
    )
    text = text.replace("group: g", "group: &g g")
    assert [t.group for t in load_batch(write(tmp_path, "b.yaml", text)).tasks] == ["g"] * 3


def test_a_task_file_over_the_size_limit_is_refused_unread(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 100)
    path = write(tmp_path, "b.jsonl", '{"goal": "' + "x" * 100 + '"}\n')
    assert "too large: over" in str(error_at(path, None, None))


def test_a_for_each_file_over_the_size_limit_is_said_at_the_tasks_line_and_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found by an audit: said as "in/big.txt: too large: over 256 MiB", no task line nor field.
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 100)
    write(tmp_path, "in/big.txt", "x\n" * 100)
    path = write(tmp_path, "b.toml", '[[tasks]]\ngoal = "a {item}"\nfor_each_file = "in/big.txt"\n')
    err = error_at(path, 3, "for_each_file")
    assert err.message == f"{tmp_path / 'in/big.txt'}: too large: over 0 MiB"
    (tmp_path / "in/big.txt").write_bytes(b"ok\n\xff\n")  # the list's line, where it has one
    err = error_at(path, 3, "for_each_file")
    assert err.message == f"{tmp_path / 'in/big.txt'}:2: not valid UTF-8 text"


def test_a_goal_over_the_default_limit_is_refused_at_its_field(tmp_path: Path) -> None:
    goal = "x" * 1_000_001
    path = write(tmp_path, "b.jsonl", '{"goal": "ok"}\n{"goal": "' + goal + '"}\n')
    err = error_at(path, 2, "goal")
    assert "too long: 1,000,001 characters, over the limit of 1,000,000" in str(err)
    assert "[engine] max_task_chars" in str(err)


@pytest.mark.parametrize(
    ("name", "text", "line", "field"),
    [
        (
            "b.toml",
            '[[tasks]]\ngoal = "ok"\n\n[[tasks]]\ngoal = "a"\ncontext = "0123456789"\n',
            6,
            "context",
        ),
        ("b.yaml", "tasks:\n  - goal: ok\n    group: '0123456789'\n", 3, "group"),
        (
            "b.yaml",
            "defaults:\n  context: '0123456789'\ntasks:\n  - goal: ok\n",
            2,
            "defaults.context",
        ),
        ("b.yaml", "tasks:\n  - goal: 'x {item}'\n    for_each: [a, 123456789]\n", 2, "goal"),
    ],
)
def test_task_text_over_a_given_limit_is_refused_at_file_line_field(
    tmp_path: Path, name: str, text: str, line: int, field: str
) -> None:
    path = write(tmp_path, name, text)
    with pytest.raises(SpecError) as info:
        load_batch(path, max_chars=9)
    assert (info.value.line, info.value.field) == (line, field), str(info.value)
    assert "over the limit of 9" in str(info.value)
    assert load_batch(path, max_chars=11).tasks[0].goal in ("ok", "x a")


@pytest.mark.parametrize(
    ("name", "text", "line"),
    [
        ("deep.jsonl", '{"goal": "a"}\n{"goal": ' + "[" * 100_000 + "\n", 2),
        ("deep.toml", '[[tasks]]\ngoal = "x [[["\ncontext = ' + "[" * 100_000 + "\n", 3),
        ("deep.yaml", "tasks:\n  - goal: '{{'\n  - goal: " + "[" * 100_000 + "\n", 3),
    ],
)
@pytest.mark.slow
def test_input_nested_past_the_parsers_stack_is_a_clear_error_at_its_line(
    tmp_path: Path, name: str, text: str, line: int
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(SpecError) as err:
        load_batch(path)
    assert str(err.value).startswith(f"{path}:{line}: "), str(err.value)
    assert "nested too deeply" in str(err.value) or "depth" in str(err.value)


def test_a_timeout_or_schedule_longer_than_a_wait_can_be_is_an_error(tmp_path: Path) -> None:
    path = write(tmp_path, "t.jsonl", '{"goal": "x", "timeout_s": 1e300}\n')
    assert "at most 10,000,000 seconds" in str(error_at(path, 1, "timeout_s"))
    # Just over the bound, the value is shown whole (it read "got 1e+07", as if at the bound).
    path = write(tmp_path, "t.jsonl", '{"goal": "x", "timeout_s": 10000001}\n')
    assert "seconds, got 10000001" in str(error_at(path, 1, "timeout_s"))
    path = write(
        tmp_path,
        "s.toml",
        '[[schedules]]\nid = "s"\nevery = "999999999d"\n[schedules.task]\ngoal = "x"\n',
    )
    assert "at most 10,000,000 seconds" in str(error_at(path, 3, "schedules.every"))


@pytest.mark.parametrize("key", ["engine", "routes"])
def test_a_config_given_as_the_task_file_is_said_as_that(tmp_path: Path, key: str) -> None:
    # `flightdeck run flightdeck.toml`: "engine: unknown key" alone did not say the file's kind.
    table = "[routes.sim]" if key == "routes" else f"[{key}]"
    path = write(tmp_path, "flightdeck.toml", f"{table}\nprovider = 'sim'\n")
    message = str(error_at(path, 1, key))
    assert "unknown key: a config's, not a task file's (give it with --config)" in message
