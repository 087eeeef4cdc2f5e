"""The CLI output formats, line by line (engine/agents/formats)."""

from __future__ import annotations

import json
from decimal import Decimal

from flightdeck.engine.agents.formats import (
    Report,
    Result,
    Session,
    Shown,
    ToolEnded,
    ToolStarted,
    reader_for,
)
from flightdeck.engine.model import Usage


def line(event: dict[str, object]) -> str:
    return json.dumps(event)


def test_claude_result_bills_what_each_turn_adds_to_the_running_cost() -> None:
    reader = reader_for("claude-stream-json")
    first = reader.feed(
        line(
            {
                "type": "result",
                "subtype": "success",
                "result": "a",
                "session_id": "s1",
                "total_cost_usd": 0.25,
                "usage": {"input_tokens": 3, "output_tokens": 4},
            }
        )
    )
    second = reader.feed(
        line(
            {
                "type": "result",
                "subtype": "success",
                "result": "b",
                "total_cost_usd": 0.4,
                "usage": {"output_tokens": 1},
            }
        )
    )
    assert Session("s1") in first
    assert Report(Usage(3, 4), Decimal("0.25")) in first
    assert Report(Usage(0, 1), Decimal("0.15")) in second
    assert Result("b") in second


def test_claude_error_result_and_tool_blocks() -> None:
    reader = reader_for("claude-stream-json")
    events = reader.feed(
        line(
            {
                "type": "assistant",
                "message": {
                    "content": [
                        {"type": "tool_use", "id": "t", "name": "Edit", "input": {"file": "a.py"}}
                    ]
                },
            }
        )
    )
    assert events == [Shown("tool-call", 'Edit {"file": "a.py"}'), ToolStarted("Edit")]
    events = reader.feed(
        line(
            {
                "type": "user",
                "message": {
                    "content": [
                        {
                            "type": "tool_result",
                            "content": [{"type": "text", "text": "no"}],
                            "is_error": True,
                        }
                    ]
                },
            }
        )
    )
    assert events == [Shown("tool", "error: no"), ToolEnded()]
    events = reader.feed(line({"type": "result", "subtype": "error_max_turns", "is_error": True}))
    assert Result("error_max_turns", error=True) in events
    assert [e for e in events if isinstance(e, Report)] == [Report(Usage(), None)]  # no cost


def test_stray_lines_are_shown_and_bad_json_never_raises() -> None:
    for name in ("claude-stream-json", "codex-json"):
        reader = reader_for(name)  # type: ignore[arg-type]
        assert reader.feed("npm warn something") == [Shown("output", "npm warn something")]
        assert reader.feed('{"type": "result", "usage": ') == [
            Shown("output", '{"type": "result", "usage": ')
        ]
    assert reader_for("claude-stream-json").feed('{"type": "assistant", "message": 3}') == []
    # An event Codex never printed: one line, never dropped, never fatal.
    events = reader_for("codex-json").feed('{"type": "assistant", "message": 3}')
    assert events == [Shown("event", 'assistant: {"type": "assistant", "message": 3}')]
    assert reader_for("plain").feed("x") == [Shown("output", "x")]


def test_codex_failed_turn_and_mcp_tool() -> None:
    reader = reader_for("codex-json")
    started = reader.feed(
        line(
            {
                "type": "item.started",
                "item": {
                    "type": "mcp_tool_call",
                    "server": "gh",
                    "tool": "search",
                    "arguments": {"q": "x"},
                },
            }
        )
    )
    assert ToolStarted("gh.search") in started
    done = reader.feed(
        line(
            {
                "type": "item.completed",
                "item": {
                    "type": "mcp_tool_call",
                    "server": "gh",
                    "tool": "search",
                    "status": "completed",
                },
            }
        )
    )
    assert ToolEnded() in done
    failed = reader.feed(line({"type": "turn.failed", "error": {"message": "quota"}}))
    assert Result("quota", error=True) in failed


def test_codex_command_completed_in_progress_at_its_turn_end_says_left_running() -> None:
    # Later Codex versions complete a command still running as its turn ends: `in_progress`,
    # no exit status. It is no `exit None`, and it is told once, not again at the process's end.
    reader = reader_for("codex-json")
    command = {"id": "item_2", "type": "command_execution", "command": "sleep 25"}
    reader.feed(line({"type": "item.started", "item": {**command, "status": "in_progress"}}))
    partial = {**command, "status": "in_progress", "exit_code": None, "aggregated_output": "so"}
    done = reader.feed(line({"type": "item.completed", "item": partial}))
    said = "shell sleep 25: left running when the turn ended (Codex reports no end for it)\nso"
    assert done == [Shown("tool", said), ToolEnded()]
    assert not [e for e in reader.feed(line({"type": "turn.completed"})) if isinstance(e, Shown)]
    assert reader.ended() == []


def test_codex_failed_turn_closes_its_open_command_before_the_failure() -> None:
    reader = reader_for("codex-json")
    command = {"id": "item_1", "type": "command_execution", "command": "make"}
    reader.feed(line({"type": "item.started", "item": command}))
    failed = reader.feed(line({"type": "turn.failed", "error": {"message": "quota"}}))
    assert failed[:2] == [
        Shown("tool", "shell make: left running when the turn ended (Codex reports no end for it)"),
        ToolEnded(),
    ]
    assert failed[-1] == Result("quota", error=True) and reader.ended() == []


def test_claude_task_bookkeeping_of_a_running_tool_is_no_raw_json_in_the_transcript() -> None:
    # Found by a walk-through: Claude Code 2.1.332 runs each shell command as a task and prints
    # its bookkeeping, and a heartbeat every 30 s of a long tool; each was a raw JSON line in
    # the transcript (`event │ tool_progress: {"type": "tool_progress", ...}`), the pane under
    # the table filled with them while a child held in its tool. Their lines as it printed them:
    session = "07351524-a886-41b4-a88c-c9ee7372c0a1"
    task = {"task_id": "bcyylmnwi", "run_id": "0mxc54hzv-3ac71f57", "uuid": "779eb518"}
    started = {"type": "system", "subtype": "task_started", **task, "tool_use_id": "call_1"}
    started |= {"description": "run the goal's command", "is_backgrounded": False}
    started |= {"task_type": "local_bash", "session_id": session}
    heartbeat = {"type": "tool_progress", "tool_use_id": "call_1-heartbeat-0"}
    heartbeat |= {"tool_name": "Bash", "parent_tool_use_id": "call_1"}
    heartbeat |= {"elapsed_time_seconds": 30, "heartbeat": True, "session_id": session}
    listed = {"type": "system", "subtype": "background_tasks_changed", "session_id": session}
    listed |= {"tasks": [{"task_id": "bcyylmnwi", "task_type": "local_bash"}]}
    moved = {"type": "system", "subtype": "task_updated", **task, "session_id": session}
    moved |= {"patch": {"is_backgrounded": True}}
    ended = {"type": "system", "subtype": "task_notification", **task, "status": "completed"}
    ended |= {"tool_use_id": "call_1", "output_file": "", "summary": "run the goal's command"}
    ended |= {"session_id": session}
    reader = reader_for("claude-stream-json")
    shown = [e for ev in (started, heartbeat, listed, moved, ended) for e in reader.feed(line(ev))]
    assert [e for e in shown if not isinstance(e, Session)] == [
        Shown("system", "task bcyylmnwi moved to the background"),
        Shown("system", "task completed: run the goal's command"),
    ]
    # What it does not know yet is still one line, never dropped.
    other = {"type": "system", "subtype": "task_updated", **task, "patch": {"x": 1}}
    assert [e.role for e in reader.feed(line(other)) if isinstance(e, Shown)] == ["event"]
    progress = {**heartbeat, "heartbeat": False}
    assert [e.role for e in reader.feed(line(progress)) if isinstance(e, Shown)] == ["event"]


def test_claude_live_usage_counts_what_a_message_wrote_before_its_turn_reports_it() -> None:
    # Found by a walk-through: Claude Code 2.1.332's `assistant` events carry the usage of the
    # message's start (`output_tokens: 1`, tests/fixtures/agents/claude-2.1.332/tool.jsonl):
    # a child held in the tool its call asked for read `12.9k/1` tokens, the call's output
    # (a whole file it writes, in a real run) neither counted nor billed until the turn ended.
    from flightdeck.engine.agents.formats import Live

    start = {"input_tokens": 12525, "output_tokens": 1}
    write = "x" * 4000  # a tool call writing 4,000 characters: about 1,000 tokens
    blocks = [
        {"type": "text", "text": "Writing it."},
        {"type": "tool_use", "id": "call_1", "name": "Write", "input": {"content": write}},
    ]
    reader = reader_for("claude-stream-json")
    live = []
    for block in blocks:
        event = {"type": "assistant", "message": {"id": "msg_1", "usage": start}}
        event["message"]["content"] = [block]  # type: ignore[index]
        live += [e for e in reader.feed(line(event)) if isinstance(e, Live)]
    assert [e.usage.input_tokens for e in live] == [12525, 12525]
    assert live[-1].usage.output_tokens >= 1000, live
    assert live[-1].usage.output_tokens < 1100, live
    # Reported usage above the estimate is kept as reported.
    big = {"type": "assistant", "message": {"id": "msg_2", "usage": {"output_tokens": 50}}}
    big["message"]["content"] = [{"type": "text", "text": "ok"}]  # type: ignore[index]
    [event] = [e for e in reader.feed(line(big)) if isinstance(e, Live)]
    assert event.usage.output_tokens == 50


def test_claude_live_estimate_counts_a_tool_input_in_characters_not_json_escapes() -> None:
    # A Write of 3,000 Japanese characters was counted as its JSON's `\uXXXX` escapes, six
    # characters each: about 4,500 tokens live, for a call the turn then billed at about 1,000.
    from flightdeck.engine.agents.formats import Live

    text = "日本語" * 1000
    block = {"type": "tool_use", "id": "call_1", "name": "Write", "input": {"content": text}}
    event = {"type": "assistant", "message": {"id": "msg_1", "usage": {"output_tokens": 1}}}
    event["message"]["content"] = [block]  # type: ignore[index]
    [live] = [e for e in reader_for("claude-stream-json").feed(line(event)) if isinstance(e, Live)]
    assert 750 <= live.usage.output_tokens < 800, live
