"""Operator commands (engine/commands.py): each one value, checked one way, recorded and read
back one way, whoever sends it."""

from __future__ import annotations

import dataclasses
import json
from decimal import Decimal

import pytest
from flightdeck.engine.commands import (
    KINDS,
    Accept,
    Answer,
    Command,
    CommandError,
    Context,
    Continue,
    ContinueAdmission,
    Discard,
    Dismiss,
    LimitError,
    Nudge,
    Pause,
    PauseAdmission,
    Retry,
    SetLimits,
    Steer,
    Stop,
    StopAll,
    changed,
    decode,
    encode,
    parse_count,
)
from flightdeck.engine.model import Activity, ChildRow, ChildStatus, Limits, RouteCaps, Usage

EVERY: list[Command] = [
    Steer(("a", "b"), "focus on the tests", now=True),
    Stop(("a",)),
    StopAll(),
    Pause(("b",)),
    Continue(("b",)),
    PauseAdmission(),
    ContinueAdmission(),
    SetLimits({"pool_size": 4, "routes": {"sim": {"rpm": None}}, "soft_cost_usd": "2.50"}),
    Nudge(("a",)),
    Answer(("a",), "yes, the second"),
    Dismiss(("a", "b")),
    Retry(("a",), resume=True),
    Accept(("a", "b"), "main"),
    Discard(("b",)),
]
LIMITS = Limits(8, (RouteCaps("sim", 4, 60, None),), max_cost_usd=Decimal("5"))


def context(**kw: object) -> Context:
    values: dict[str, object] = {
        "batch_id": "b1",
        "known": {"a", "b"},
        "max_chars": lambda: 40,
        "limits": lambda: LIMITS,
    }
    return Context(**{**values, **kw})  # type: ignore[arg-type]


def test_every_kind_is_one_value_recorded_and_read_back_the_same() -> None:
    assert {type(c) for c in EVERY} == set(KINDS.values())  # a new command is listed here too
    for command in EVERY:
        kind, body = encode(command)
        assert kind == command.kind and json.loads(body) is not None
        assert decode(kind, body) == command
        command.check(context())  # each of them is fine for this batch


@pytest.mark.parametrize(
    ("command", "field", "says"),
    [
        (Steer(("a",), "   "), "message", "steer message is empty"),
        (Steer(("a",), "\x1b[31m\x07 "), "message", "steer message is empty"),  # shows nothing
        (Steer(("a",), "bad \ud800"), "message", "steer message: not valid Unicode text"),
        (Steer(("a",), "x" * 41), "message", "steer message: too long: 41 characters"),
        (Steer((), "hi"), "child_ids", "name at least one child"),
        (Stop(("a", "zz")), "child_ids", "no child with id 'zz' in batch b1"),
        (Nudge(("zz",)), "child_ids", "no child with id 'zz'"),
        (Answer(("a",), " "), "message", "answer is empty"),
        (Answer(("a",), "x" * 41), "message", "answer: too long: 41 characters"),
        (Dismiss(()), "child_ids", "name at least one child"),
        (SetLimits({"pool_size": 0}), "pool_size", "pool_size: must be a whole number"),
        (SetLimits({"soft_cost_usd": "9"}), "soft_cost_usd", "at most the hard budget"),
    ],
)
def test_one_check_whoever_sends_it(command: Command, field: str, says: str) -> None:
    with pytest.raises(CommandError) as caught:
        command.check(context())
    assert caught.value.field == field and says in str(caught.value)
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    ("field", "high", "rule"),
    [
        ("pool_size", 1024, "must be a whole number between 1 and 1024, got"),
        ("max_concurrent", 1024, "must be a whole number between 1 and 1024 (or off), got"),
        ("rpm", 10**9, "must be a whole number between 1 and 1,000,000,000 (or off), got"),
    ],
)
def test_a_bad_live_count_is_said_with_its_one_rule_whatever_the_value(
    field: str, high: int, rule: str
) -> None:
    # --pool -1 said "from 1 to 1,000,000,000, or off", --pool off "needs a size" and --pool
    # 2000 "from 1 to 1024"; a route's max_concurrent took 999999999, past the config's 1024.
    bad = ["-1", "0", "abc", "1.5", str(high + 1), "999999999999"]
    for text in [*bad, "off"] if field == "pool_size" else bad:
        with pytest.raises(LimitError) as typed:
            parse_count(field, text)
        assert str(typed.value).startswith(f"{field}: {rule} "), (text, str(typed.value))
    assert parse_count(field, str(high)) == high  # the config's own bound
    # As an attached client's change reaches the owner:
    change = {"routes": {"sim": {field: high + 1}}} if field != "pool_size" else {field: high + 1}
    with pytest.raises(LimitError) as sent:
        changed(LIMITS, change)
    assert str(sent.value) == f"{field}: {rule} {high + 1}"


def test_what_the_sender_does_not_know_is_left_to_the_owner() -> None:
    unknown = context(max_chars=lambda: None, limits=lambda: None)
    Steer(("a",), "x" * 10_000).check(unknown)
    SetLimits({"pool_size": 99}).check(unknown)
    with pytest.raises(LimitError):
        SetLimits({}).check(unknown)


@pytest.mark.parametrize(
    ("kind", "body", "says"),
    [
        ("set_priority", "{}", "this flightdeck cannot apply a 'set_priority' command"),
        ("steer", '{"child_ids": ["a"], "message": null}', "steer message: missing"),
        ("steer", '{"child_ids": ["a"]}', "steer message: missing"),
        ("steer", '{"child_ids": "a", "message": "hi"}', "expected a list of child ids"),
        ("stop", "not json", "stop: not JSON"),
        ("stop", "[1, 2]", "stop: expected a JSON object"),
        ("limits", '{"change": 5}', "limits change: expected a table"),
        # A flag is true or false, as in a config or task file: 7 was read as true, 0 as false.
        ("steer", '{"child_ids": ["a"], "message": "hi", "now": 7}', "steer now: expected true"),
        ("retry", '{"child_ids": ["a"], "resume": 0}', "retry resume: expected true or false"),
    ],
)
def test_a_command_that_cannot_be_read_says_why(kind: str, body: str, says: str) -> None:
    with pytest.raises(CommandError, match=says.replace("(", r"\(")):
        decode(kind, body)


# --- retry, accept and discard: checked against the children's rows ----------------------------


def _row(child_id: str, status: str, changes: str | None = "pending", **kw: object) -> ChildRow:
    from flightdeck.engine.review.values import Changes, FileChange

    found = None
    if changes is not None:
        files = (FileChange("a.py", 1, 0),)
        found = Changes(files, f"/ws/{child_id}", base="abc", state=changes)  # type: ignore[arg-type]
        found = dataclasses.replace(found, mode=kw.pop("mode", "worktree"))  # type: ignore[arg-type]
    return ChildRow(
        id=child_id, seq=0, goal="g", group=None, route="sim", model="m",
        status=ChildStatus(status), activity=Activity(), usage=Usage(), cost_usd=Decimal(0),
        queued_ts=0.0, started_ts=None, finished_ts=None, error=None, result=None,
        transcript="", changes=found, **kw,  # type: ignore[arg-type]
    )  # fmt: skip


ROWS = {
    "failed": _row("failed", "failed", None),
    "done": _row("done", "completed"),
    "live": _row("live", "running"),
    "changed": _row("changed", "failed"),
    "taken": _row("taken", "completed", "accepted"),
    "gone": _row("gone", "stopped", "discarded"),
    "copy": _row("copy", "completed", mode="copy"),
    "delegate": _row("delegate", "failed", None, parent="failed"),
}


@pytest.mark.parametrize(
    ("command", "says"),
    [
        (Retry(("done",)), "done completed: nothing to retry"),
        (Retry(("live",)), "live has not ended (running): nothing to retry"),
        (Retry(("delegate",)), "delegate is a delegate: it runs again with its parent"),
        (Retry(("changed",)), "changed has changes not yet accepted or discarded (+1 −0"),
        (Accept(("live",), "main"), "live has not ended (running): accept it once it has"),
        (Accept(("failed",), "main"), "failed changed no file in a workspace of its own"),
        (Accept(("taken",), "main"), "taken's changes were accepted already"),
        (Accept(("done",), " "), "name the branch"),
        (Accept(("done",), "two words"), "'two words' is not a valid branch name"),
        (Accept(("done",), "x\x1b[31m"), "'x\\x1b[31m' is not a valid branch name"),
        # a bidi override git itself accepts: it would reach the screen as a branch's name
        (Accept(("done",), "x\u202ey"), "'x\\u202ey' is not a valid branch name"),
        (Accept(("copy",), "main"), "copy worked in a copy, which has no history to merge"),
        (Discard(("gone",)), "gone's changes were discarded already"),
    ],
)
def test_retry_accept_and_discard_are_checked_against_the_rows(command: Command, says: str) -> None:
    ctx = context(known=set(ROWS), rows=lambda: ROWS)
    with pytest.raises(CommandError) as caught:
        command.check(ctx)
    assert says in str(caught.value)


def test_a_copy_refused_for_accept_is_offered_only_what_works_on_a_copy() -> None:
    from flightdeck.engine.attached.rework import patch_of

    ctx = context(known=set(ROWS), rows=lambda: ROWS)
    with pytest.raises(CommandError) as refused:
        Accept(("copy",), "main").check(ctx)
    changes = ROWS["copy"].changes
    assert changes is not None
    with pytest.raises(CommandError, match="no history to diff against"):
        patch_of(changes, None, ())  # a copy's diff is refused, so the refusal does not point to it
    assert "diff" not in str(refused.value), refused.value
    Discard(("copy",)).check(ctx)  # what it points to instead


def test_what_retry_accept_and_discard_take() -> None:
    ctx = context(known=set(ROWS), rows=lambda: ROWS)
    Retry(("failed", "gone")).check(ctx)  # ended, not completed; nothing pending
    Retry(("changed",), resume=True).check(ctx)  # continues in its changes
    Accept(("done", "changed"), "release/1.2").check(ctx)
    Discard(("copy", "changed")).check(ctx)
