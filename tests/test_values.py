"""The engine's value types (`model.record`): read-only to the type checker, hashable like
frozen dataclasses, and slotted."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.child.activity import InFlight
from flightdeck.engine.child.progress import Progress
from flightdeck.engine.model import Activity, ChildRow, ChildStatus, Usage
from flightdeck.engine.money import ZERO_USD
from flightdeck.engine.providers.base import Message, TextDelta

ROOT = Path(__file__).resolve().parents[1]

PROBE = """\
from flightdeck.engine.model import ChildRow, ChildStatus, Usage
from flightdeck.engine.providers.base import Message, TextDelta


def mutate(row: ChildRow, usage: Usage, message: Message, delta: TextDelta) -> None:
    row.status = ChildStatus.FAILED
    usage.input_tokens = 3
    message.content = "changed"
    delta.text = "changed"


def fine(usage: Usage) -> Usage:
    return Usage(usage.input_tokens + 1)
"""


@pytest.mark.slow
def test_assigning_a_field_is_a_type_error(tmp_path: Path) -> None:
    """What keeps these values safe to share between threads: `make check` runs mypy."""
    probe = tmp_path / "probe.py"
    probe.write_text(PROBE)
    # mypy reads modules by path, not through the install's package-dir mapping: the engine
    # under its import name, as `make types` links it (without depending on that having run).
    (tmp_path / "path" / "flightdeck").mkdir(parents=True)
    (tmp_path / "path" / "flightdeck" / "engine").symlink_to(ROOT / "engine")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--no-incremental",
            "--follow-imports=silent",
            "--ignore-missing-imports",
            "--cache-dir",
            os.devnull,
            str(probe),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "MYPYPATH": str(tmp_path / "path")},
        timeout=120,
    )
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert [(e.split(":")[1], e.split("error: ")[1]) for e in errors] == [
        ("6", 'Property "status" defined in "ChildRow" is read-only  [misc]'),
        ("7", 'Property "input_tokens" defined in "Usage" is read-only  [misc]'),
        ("8", 'Property "content" defined in "Message" is read-only  [misc]'),
        ("9", 'Property "text" defined in "TextDelta" is read-only  [misc]'),
    ], result.stdout


def test_equal_values_hash_alike_and_replace_builds_a_new_one() -> None:
    a, b = Usage(1, 2, 3, 4), Usage(1, 2, 3, 4)
    assert a == b and hash(a) == hash(b) and len({a, b}) == 1
    assert Usage(1) != Usage(2)
    assert {Message("user", "hi"): 1}[Message("user", "hi")] == 1
    row = ChildRow(
        id="c1",
        seq=0,
        goal="g",
        group=None,
        route="sim",
        model="m",
        status=ChildStatus.RUNNING,
        activity=Activity(api_calls=1),
        usage=a,
        cost_usd=Decimal("0.5"),
        queued_ts=1.0,
        started_ts=2.0,
        finished_ts=None,
        error=None,
        result=None,
        transcript="c1.log",
    )
    done = dataclasses.replace(row, status=ChildStatus.COMPLETED)
    assert row.status is ChildStatus.RUNNING and done.status is ChildStatus.COMPLETED
    assert hash(done) == hash(dataclasses.replace(row, status=ChildStatus.COMPLETED))


@pytest.mark.parametrize("value", [Usage(), TextDelta("x"), Message("user", "x")])
def test_values_have_slots_and_no_instance_dict(value: object) -> None:
    assert not hasattr(value, "__dict__")
    with pytest.raises(AttributeError):
        value.not_a_field = 1  # type: ignore[attr-defined]


def test_what_every_child_keeps_has_slots_and_no_instance_dict() -> None:
    """A batch holds one of each per child (its retry policy, its loop watch): no dicts."""
    from flightdeck.engine.child.loopwatch import LoopWatch
    from flightdeck.engine.control.retry import RetryPolicy, _JitteredBackoff
    from flightdeck.engine.inputs.settings import LoopSettings, RetrySettings

    policy = RetryPolicy(RetrySettings())
    watch = LoopWatch(
        "c1", LoopSettings(), write=print, report=print, tokens=lambda: 0, clock=lambda: 0.0
    )
    progress = Progress(lambda: 0.0)
    progress.call_started(InFlight(100))
    backoff = _JitteredBackoff(RetrySettings(), 1.0, None, "c1")  # made at a first retry
    for part in (policy, backoff, policy._account, watch, progress):
        assert not hasattr(part, "__dict__"), type(part).__name__
    for part in (progress._activity, progress._in_flight):
        assert not hasattr(part, "__dict__"), type(part).__name__
    progress.call_ended()  # its row's usage in flight, zero: the one shared zero
    assert progress.figures().in_flight is Progress(lambda: 0.0).figures().in_flight == Usage()


def test_a_child_billed_known_costs_keeps_one_decimal_for_its_cost_and_what_is_known() -> None:
    """Its cost and what is known of it are the same sums while every price is known."""
    progress = Progress(lambda: 0.0)
    for cost in (Decimal("0.0013"), Decimal("0.0002")):
        progress.bill(Usage(10, 5), cost, ZERO_USD)
    assert progress._cost is progress._known and progress._cost == Decimal("0.0015")
    progress.bill(Usage(1), None, None)  # an unknown price: the cost is unknown, the rest known
    assert progress._cost is None and progress._known == Decimal("0.0015")
    progress.bill(Usage(1), Decimal("0.0001"), None)
    assert progress._cost is None and progress._known == Decimal("0.0016")
