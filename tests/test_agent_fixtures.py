"""The agent-CLI formats on the real output of the CLIs (tests/fixtures/agents/, captured by
tests/agents/capture.py from Claude Code 2.1.332 and Codex 0.171.0 against the loopback
server): every event type seen there, read as the CLI meant it."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from flightdeck.engine.agents.formats import (
    Denied,
    Event,
    Lifecycle,
    Live,
    Model,
    Report,
    Result,
    Retrying,
    Session,
    Shown,
    ToolEnded,
    ToolStarted,
    Waiting,
    reader_for,
)
from flightdeck.engine.child.cliinput import (
    AFTER_INTERRUPT,
    INTO_TURN,
    NEW_TURN,
    CliInput,
    interrupt,
    user_turn,
)
from flightdeck.engine.model import SteerReceipt, SteerState, Usage

FIXTURES = Path(__file__).parent / "fixtures" / "agents"
CLAUDE = FIXTURES / "claude-2.1.332"
CODEX = FIXTURES / "codex-0.171.0"


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


def read(fmt: str, *paths: Path) -> list[Event]:
    reader = reader_for(fmt)  # type: ignore[arg-type]
    return [event for path in paths for line in lines(path) for event in reader.feed(line)]


def of(events: list[Event], kind: type) -> list:  # type: ignore[type-arg]
    return [e for e in events if isinstance(e, kind)]


def test_every_captured_event_is_read_and_none_is_unknown() -> None:
    for folder, fmt in ((CLAUDE, "claude-stream-json"), (CODEX, "codex-json")):
        for path in sorted(folder.glob("*.jsonl")):
            events = read(fmt, path)
            unknown = [e for e in events if isinstance(e, Shown) and e.role == "event"]
            assert unknown == [], (path.name, unknown)
            assert of(events, Result), path.name  # every capture ends in an answer or a failure


def test_claude_reports_its_model_session_live_usage_and_the_turn_in_full() -> None:
    events = read("claude-stream-json", CLAUDE / "tool.jsonl")
    first = json.loads(lines(CLAUDE / "tool.jsonl")[0])
    assert of(events, Model) == [Model("claude-opus-5-5")]
    assert Session(first["session_id"]) in events
    # Live: each assistant event carries its message's usage so far; a message is one call.
    live = of(events, Live)
    assert len({e.key for e in live}) == 2 and all(e.usage.input_tokens > 0 for e in live)
    assert ToolStarted("Bash") in events and ToolEnded() in events
    (report,) = of(events, Report)
    result = json.loads(lines(CLAUDE / "tool.jsonl")[-1])
    models = result["model_usage_since_last_result"]["claude-opus-5-5"]
    assert report.usage == Usage(
        models["inputTokens"],
        models["outputTokens"],
        models["cacheReadInputTokens"],
        models["cacheCreationInputTokens"],
    )
    assert report.cost_usd == Decimal(str(result["total_cost_usd"]))
    assert report.calls == result["num_turns"] == 2
    assert of(events, Result) == [Result("done: list the files")]


def test_claude_api_retries_are_retry_notices() -> None:
    events = read("claude-stream-json", CLAUDE / "retry.jsonl")
    notices = [e.text for e in of(events, Retrying)]
    assert len(notices) == 2 and notices[0].startswith("429 rate_limit, retry 1/10 in ")
    assert any(isinstance(e, Shown) and e.text.startswith("api retry: 429") for e in events)
    assert of(events, Result) == [Result("done: retry me")]


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("fail_429", "API Error: Request rejected (429) · loopback refuses this one"),
        ("fail_400", "API Error: 400 loopback refuses this one"),
    ],
)
def test_claude_gives_its_own_error_as_the_failed_result(name: str, reason: str) -> None:
    events = read("claude-stream-json", CLAUDE / f"{name}.jsonl")
    assert of(events, Result) == [Result(reason, error=True)]
    assert of(events, Live) == []  # the CLI's own error message is no API call
    assert Shown("error", reason) in events
    # Its result says `"subtype": "success"` with `"is_error": true`: the transcript said
    # "result: success" of a failed turn.
    assert Shown("system", "result: error after 1 API call(s)") in events


def test_a_resumed_claude_session_bills_its_own_turn_not_the_session_total() -> None:
    (report,) = of(read("claude-stream-json", CLAUDE / "resume.jsonl"), Report)
    result = json.loads(lines(CLAUDE / "resume.jsonl")[-1])
    turn = result["model_usage_since_last_result"]["claude-opus-5-5"]["costUSD"]
    assert report.cost_usd == Decimal(str(turn)) < Decimal(str(result["total_cost_usd"]))


def _feed(name: str, *steers: SteerReceipt) -> list[tuple[SteerReceipt, str]]:
    """The capture's events through CliInput as the supervisor passes them, its messages sent
    when the capture sent them: the task's, then each steer (just before the CLI queued it)."""
    events = read("claude-stream-json", CLAUDE / f"{name}.jsonl")
    prompt_id, *steer_ids = dict.fromkeys(e.uuid for e in of(events, Lifecycle))
    ids = iter((prompt_id, *steer_ids))
    written: list[str] = []
    cli = CliInput(lambda text: written.append(text), new_id=lambda: next(ids))
    cli.prompt("the task")
    sends = dict(zip(steer_ids, steers, strict=True))
    started, queued = [], []
    for event in events:
        if isinstance(event, Live):
            cli.model_answered()
        if not isinstance(event, Lifecycle):
            continue
        if event.state == "queued" and event.uuid in sends:
            assert cli.steer(sends.pop(event.uuid)) is None
        if (was_read := cli.queued(event)) is not None:
            queued.append(was_read)
        if (found := cli.lifecycle(event)) is not None:
            started.append(found)
        if event.uuid == steer_ids[-1] and event.state != "completed":
            assert not cli.answered()  # the steer waits for its answer: the input stays open
    assert cli.answered()
    interrupts = ['"interrupt"' in line for line in written]
    assert interrupts == [s.now for s in steers]  # --now: the interrupt goes first, with it
    assert queued == list(steers)  # the CLI read each steer (the task's own prompt is no steer)
    return started


def _steer(n: int, message: str = "the steer", now: bool = False) -> SteerReceipt:
    return SteerReceipt(n, "t0", message, now, SteerState.QUEUED, 0.0)


def test_claude_lifecycle_says_where_each_steer_went() -> None:
    receipt, now = _steer(1), _steer(1, now=True)
    assert _feed("steer_midturn", receipt) == [(receipt, INTO_TURN)]
    assert _feed("steer_after", receipt) == [(receipt, NEW_TURN)]
    assert _feed("steer_now", now) == [(now, AFTER_INTERRUPT)]


def test_steers_an_interrupt_finds_waiting_start_with_the_steer_now_as_one_new_turn() -> None:
    # The interrupt leaves them queued (`still_queued`), and once the turn is cancelled they
    # start one after another with the steer --now, one user text: none went into a turn.
    steers = _steer(1, "first"), _steer(2, "second"), _steer(3, "third now", now=True)
    assert _feed("steer_now_behind_waiting", *steers) == [(s, AFTER_INTERRUPT) for s in steers]
    events = read("claude-stream-json", CLAUDE / "steer_now_behind_waiting.jsonl")
    assert of(events, Result)[-1] == Result("done: first\nsecond\nthird now")


def test_a_steer_now_that_could_not_be_written_interrupted_no_turn() -> None:
    # Its input's copy could not be opened, so neither the steer nor its interrupt was written:
    # the steer waiting behind it later starts a turn of its own, not "the running one
    # interrupted" (it said so, as if the interrupt had gone out).
    ids = iter(("task", "first", "now"))
    refused = "its input's copy could not be kept (Permission denied)"
    cli = CliInput(lambda text: refused if "control_request" in text else None, lambda: next(ids))
    cli.prompt("the task")
    cli.lifecycle(Lifecycle("task", "started"))
    first, now = _steer(1, "first"), _steer(2, "now", now=True)
    assert cli.steer(first) is None
    assert cli.steer(now) == refused
    cli.lifecycle(Lifecycle("task", "completed"))
    assert cli.lifecycle(Lifecycle("first", "started")) == (first, NEW_TURN)


def test_an_adopter_never_writes_a_steer_its_dead_owner_wrote_the_cli_had_not_read() -> None:
    # The dead owner wrote the task and a steer --now (its interrupt with it), then died before
    # the CLI read the steer: the copy of its input says so (the last line, cut short by the
    # death mid-write, is not known whole), and the CLI's events deliver it as the dead owner's
    # would have.
    events = read("claude-stream-json", CLAUDE / "steer_now.jsonl")
    prompt_id, steer_id = dict.fromkeys(e.uuid for e in of(events, Lifecycle))
    now = _steer(1, now=True)
    written = user_turn("the task", prompt_id) + interrupt("flightdeck-1")
    written += user_turn(now.message, steer_id) + '{"type": "us'
    adopter = CliInput(lambda text: pytest.fail(f"written again: {text}"), lambda: steer_id)
    adopter.expect([now], written)
    assert adopter.written_before() == [now] and not adopter.answered()
    started = []
    for event in events:
        if isinstance(event, Live):
            adopter.model_answered()
        if isinstance(event, Lifecycle) and (found := adopter.lifecycle(event)) is not None:
            started.append(found)
    assert started == [(now, AFTER_INTERRUPT)] and adopter.answered()


def test_claude_interrupted_turn_is_an_error_result_then_the_steer_answers() -> None:
    events = read("claude-stream-json", CLAUDE / "steer_now.jsonl")
    first, last = of(events, Result)
    assert first.error and first.text == "aborted_tools"
    assert last == Result("done: focus on security")
    assert Shown("system", "[Request interrupted by user for tool use]") in events


def test_codex_reports_its_thread_tools_usage_and_answer() -> None:
    events = read("codex-json", CODEX / "tool.jsonl")
    thread = json.loads(lines(CODEX / "tool.jsonl")[0])["thread_id"]
    assert events[0] == Session(thread)
    assert ToolStarted("shell") in events and ToolEnded() in events
    (report,) = of(events, Report)
    usage = json.loads(lines(CODEX / "tool.jsonl")[-1])["usage"]
    assert report.usage.input_tokens == usage["input_tokens"] - usage["cached_input_tokens"]
    assert report.usage.output_tokens == usage["output_tokens"] and report.cost_usd is None
    assert of(events, Result) == [Result("done: list the files")]
    # The missing-metadata item is a warning the turn goes on after, not an error.
    assert any(isinstance(e, Shown) and e.role == "system" and "metadata" in e.text for e in events)


def test_codex_command_left_running_at_the_turn_end_is_closed_with_the_turn() -> None:
    # Its command outlived the shell's yield and the turn: Codex never completes its item.
    events = read("codex-json", CODEX / "left_running.jsonl")
    started = events.index(ToolStarted("shell"))
    (closed,) = [e.text for e in of(events, Shown) if e.role == "tool"]
    assert closed.startswith("shell /bin/bash -lc 'sleep 25; echo slept': left running when")
    assert ToolEnded() in events[started : events.index(of(events, Report)[0])]
    assert of(events, Result) == [Result("done: wait for it")]


def test_codex_reconnects_are_retry_notices_and_its_own_error_is_the_reason() -> None:
    retry = read("codex-json", CODEX / "retry.jsonl")
    assert [e.text[:17] for e in of(retry, Retrying)] == ["Reconnecting... 1", "Reconnecting... 2"]
    failed = read("codex-json", CODEX / "fail_429.jsonl")
    reason = "exceeded retry limit, last status: 429 Too Many Requests"
    assert of(failed, Result) == [Result(reason, error=True)]
    assert of(failed, Retrying) == []


def test_claude_denying_a_tool_is_told_once_with_the_tool_and_its_input() -> None:
    # Claude Code says it twice: a `system` `permission_denied` as it happens (naming the call,
    # not its input) and the result's `permission_denials`: one denial, with the input.
    events = read("claude-stream-json", CLAUDE / "denied.jsonl")
    (denied,) = of(events, Denied)
    assert denied.tool == "Bash"
    assert json.loads(denied.input) == {
        "command": "rm -rf build",
        "description": "run the goal's command",
    }
    shown = [e.text for e in of(events, Shown) if e.text.startswith("permission denied")]
    assert len(shown) == 1 and "needs approval" in shown[0]
    assert events.index(denied) < events.index(of(events, Result)[0])  # as it happened


@pytest.mark.parametrize("name", ["tool", "steer_midturn", "steer_now", "steer_now_behind_waiting"])
def test_claude_calls_counted_are_the_calls_the_server_served(name: str) -> None:
    # Each call the loopback served is one message id in the capture; an interrupted turn's
    # `num_turns` (3 for its one call) is not its calls.
    from flightdeck.engine.child.clitally import CliTally
    from flightdeck.engine.records.meter import Meter

    path = CLAUDE / f"{name}.jsonl"
    served = {
        e["message"]["id"] for e in map(json.loads, lines(path)) if e.get("type") == "assistant"
    }
    tally = CliTally(Meter(), lambda usage: Decimal(0), Usage(), Decimal(0), Decimal(0))
    for event in read("claude-stream-json", path):
        if isinstance(event, Live):
            tally.live(event)
        elif isinstance(event, Report):
            tally.report(event)
    assert tally.calls == len(served)


@pytest.mark.parametrize(
    ("name", "answer"), [("background", "bgcap"), ("background_at_start", "bgcap2")]
)
def test_claude_waiting_for_its_background_command_is_in_a_tool_until_it_ends(
    name: str, answer: str
) -> None:
    # Its Bash command outlived the tool's timeout (moved to the background: said once the
    # task ran, or as it started), the turn ended, and Claude Code waited for the command,
    # silent, before its next turn. (Captured by hand, as capture.py would, with
    # BASH_DEFAULT_TIMEOUT_MS=5000 and 2000: the gate opened after the turn.)
    events = read("claude-stream-json", CLAUDE / f"{name}.jsonl")
    at = [(i, e) for i, e in enumerate(events) if isinstance(e, Result | Waiting)]
    assert [e for _, e in at] == [
        Result(f"done: task {answer}"),
        Waiting("background command (1)"),  # at once: the wait begins as the turn ends
        Waiting(None),  # the command ended: its next turn is told of it
        Result(f"done: task {answer}"),
    ]
    assert at[1][0] == at[0][0] + 1
    moved = [e for e in of(events, Shown) if e.role == "system" and "to the background" in e.text]
    assert len(moved) == 1, moved


def test_claude_working_again_while_it_waited_ends_the_wait_not_its_new_tool() -> None:
    # A steer came while it waited for its background command: the new turn's own tool runs
    # when that command ends, and must not be taken for the end of the wait (its tool limit,
    # its time in the tool, would be lost: a long command then read as a stall).
    captured = lines(CLAUDE / "background.jsonl")
    at = next(i for i, line in enumerate(captured) if json.loads(line).get("type") == "result")
    call = json.loads(captured[2])  # its first turn's Bash call
    call["message"]["id"], call["message"]["content"][0]["id"] = "msg_steered", "call_9"
    reader = reader_for("claude-stream-json")
    events = [e for line in [*captured[: at + 1], json.dumps(call)] for e in reader.feed(line)]
    told = len(events)
    events += [e for line in captured[at + 1 :] for e in reader.feed(line)]
    waits = [e for e in events if isinstance(e, Waiting | ToolStarted | ToolEnded)]
    assert waits[-3:] == [Waiting("background command (1)"), Waiting(None), ToolStarted("Bash")]
    assert not of(events[told:], Waiting)  # the command ended while its new tool ran
