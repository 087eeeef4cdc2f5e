"""`[engine] max_task_chars` bounds every text that becomes a prompt, not only task files': a
Batch built in Python and a steer message (issue 17, section 4)."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.errors import SpecError
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.model import ChildStatus

from helpers import Hold, batch, settings, sim_route, start, tasks_batch, until

LIMIT = "over the limit of 100 ([engine] max_task_chars)"


@pytest.mark.parametrize("field", ["goal", "context", "group"])
def test_a_batch_built_in_python_with_a_text_over_the_limit_is_refused(
    tmp_path: Path, field: str
) -> None:
    ok = Task(id="fine", goal="g" * 100, seq=0, context="c" * 100, group="p" * 100)
    long = dataclasses.replace(ok, id="long", seq=1, **{field: "x" * 101})
    with pytest.raises(SpecError) as caught:
        Engine(tasks_batch([ok, long]), settings(max_task_chars=100), state_dir=tmp_path)
    err = caught.value
    assert err.field == field and err.path is None
    assert str(err) == f"{field}: task 'long': too long: 101 characters, {LIMIT}"
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize(
    ("change", "said"),
    [
        # "../x" wrote its transcript outside the batch folder; two tasks "a" hung the batch.
        ({"id": "../x"}, "id: task 2: '../x' is not a valid id: it names a file, so use 1-64"),
        ({"id": "a"}, "id: task 2: duplicate id 'a'"),
        ({"id": "OWNER"}, "id: task 2: 'OWNER' is reserved: the batch folder's OWNER.log is"),
        ({"goal": " "}, "goal: task 2: must not be empty"),
        ({"goal": 5}, "goal: task 2: expected a string, got integer 5"),
        ({"group": ""}, "group: task 2: must not be empty (leave it out for no group)"),
        ({"max_turns": 0}, "max_turns: task 2: must be a whole number, 1 or more, got 0"),
        ({"max_turns": "8"}, "max_turns: task 2: must be a whole number, 1 or more, got '8'"),
        ({"timeout_s": -1}, "timeout_s: task 2: must be a positive number of seconds, got -1"),
    ],
)
def test_a_batch_built_in_python_meets_a_task_files_checks(
    tmp_path: Path, change: dict[str, object], said: str
) -> None:
    ok = Task(id="a", goal="g", seq=0)
    bad = dataclasses.replace(ok, seq=1, **{"id": "b", **change})  # type: ignore[arg-type]
    with pytest.raises(SpecError) as caught:
        Engine(tasks_batch([ok, bad]), settings(), state_dir=tmp_path)
    assert str(caught.value).startswith(said)
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # nothing written
    with pytest.raises(SpecError, match=r"^tasks.jsonl:7: id: duplicate id 'a'$"):
        located = dataclasses.replace(ok, seq=1, source="tasks.jsonl:7")
        Engine(tasks_batch([ok, located]), settings(), state_dir=tmp_path)


def test_a_batch_built_in_python_with_no_tasks_is_refused_as_a_file_is(tmp_path: Path) -> None:
    # It ran and completed empty, where a task file like it is refused.
    with pytest.raises(SpecError, match=r"^tasks: the batch has no tasks$"):
        Engine(tasks_batch([]), settings(), state_dir=tmp_path)
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # nothing written


def test_a_task_from_a_file_is_named_at_its_line(tmp_path: Path) -> None:
    task = Task(id="a", goal="x" * 101, seq=0, source="tasks.jsonl:7")
    with pytest.raises(SpecError) as caught:
        Engine(tasks_batch([task]), settings(max_task_chars=100), state_dir=tmp_path)
    assert str(caught.value) == f"tasks.jsonl:7: goal: task 'a': too long: 101 characters, {LIMIT}"


def test_the_default_limit_is_a_million_characters(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"over the limit of 1,000,000 \("):
        Engine(batch(1, goal="y" * 1_000_001), settings(), state_dir=tmp_path)
    Engine(batch(1, goal="y" * 1_000_000), settings(), state_dir=tmp_path).close()


def test_a_steer_message_over_the_limit_is_refused_and_nothing_is_queued(tmp_path: Path) -> None:
    slow = sim_route(tool_turns=0, **Hold(tmp_path / "hold").options())  # held running
    engine = start(batch(1), settings(slow, max_task_chars=100), tmp_path)
    try:
        until(lambda: engine.snapshot().children[0].status is ChildStatus.RUNNING)
        with pytest.raises(
            ValueError, match=re.escape(f"steer message: too long: 101 characters, {LIMIT}")
        ):
            engine.steer(["t0000"], "s" * 101)
        assert engine.receipts() == []
        [receipt] = engine.steer(["t0000"], "s" * 100)  # at the limit: sent
    finally:
        engine.close()
    assert [r.id for r in engine.receipts()] == [receipt]


@pytest.mark.parametrize(
    ("template", "said"),
    [
        # "../x" wrote each wave's transcript (`../x-w1.log`) outside the batch folder.
        (
            Task(id="../x", goal="g", seq=0),
            "id: schedule 's2' task 1: '../x' is not a valid id: it names a file",
        ),
        (Task(id="a", goal="g", seq=0), "id: schedule 's2' task 1: duplicate id 'a'"),
        (Task(id="b", goal=5, seq=0), "goal: schedule 's2' task 1: expected a string"),  # type: ignore[arg-type]
    ],
)
def test_a_schedules_template_built_in_python_meets_a_task_files_checks(
    tmp_path: Path, template: Task, said: str
) -> None:
    # Found in review: check_tasks read the batch's tasks, not its schedules' templates.
    from flightdeck.engine.inputs.tasks import Batch, Schedule

    first = Schedule(id="s1", tasks=(Task(id="a", goal="g", seq=0),), every_s=3600.0)
    second = Schedule(id="s2", tasks=(template,), every_s=3600.0)
    with pytest.raises(SpecError) as caught:
        Engine(Batch(name="b", tasks=(), schedules=(first, second)), settings(), state_dir=tmp_path)
    assert str(caught.value).startswith(said), caught.value
    assert not tmp_path.exists() or not any(tmp_path.iterdir())  # nothing written
