"""`format = "codex-json"`: `codex exec --json`, one JSON event a line.

`thread.started` (its thread_id, which `codex exec resume` continues), `turn.started`,
`item.started` / `item.updated` / `item.completed` whose item is an `agent_message`,
`reasoning`, `command_execution`, `file_change`, `mcp_tool_call`, `web_search`, `todo_list` or
`error`; `turn.completed` with `usage` (input_tokens, cached_input_tokens, output_tokens),
`turn.failed` and `error`. Codex reports no cost: a route's `price` prices its tokens.
"""

from __future__ import annotations

from flightdeck.engine.agents.formats.base import (
    Event,
    Report,
    Result,
    Session,
    Shown,
    ToolEnded,
    ToolStarted,
    count,
    json_object,
    text_of,
)
from flightdeck.engine.agents.formats.claude import TOOL_RESULT_CHARS
from flightdeck.engine.model import Usage

# Items that run something: the child's current tool while they do.
_TOOLS = {"command_execution": "shell", "web_search": "web_search"}


class CodexJson:
    """Reads one `codex exec --json` process's events."""

    def __init__(self) -> None:
        self._last_message = ""

    def feed(self, line: str) -> list[Event]:
        event = json_object(line)
        if event is None:
            return [Shown("output", line)] if line.strip() else []
        kind = event.get("type")
        item = event.get("item")
        if kind == "thread.started":
            thread = text_of(event.get("thread_id", ""))
            return [Session(thread), Shown("system", f"codex thread {thread}")] if thread else []
        if kind == "item.started" and isinstance(item, dict):
            return self._started(item)
        if kind == "item.completed" and isinstance(item, dict):
            return self._completed(item)
        if kind == "turn.completed":
            usage = event.get("usage")
            figures = usage if isinstance(usage, dict) else {}
            cached = count(figures.get("cached_input_tokens"))
            tokens = Usage(
                # OpenAI counts cached input inside input_tokens; ours are apart
                input_tokens=max(0, count(figures.get("input_tokens")) - cached),
                output_tokens=count(figures.get("output_tokens")),
                cache_read_tokens=cached,
            )
            return [Report(tokens), Result(self._last_message)]
        if kind == "turn.failed":
            error = event.get("error")
            message = text_of(error.get("message", "")) if isinstance(error, dict) else ""
            return [Shown("error", f"turn failed: {message}"), Result(message, error=True)]
        if kind == "error":
            return [Shown("error", text_of(event.get("message", "")))]
        return []

    def _started(self, item: dict[str, object]) -> list[Event]:
        kind = text_of(item.get("type", ""))
        if kind == "mcp_tool_call":
            name = f"{text_of(item.get('server', ''))}.{text_of(item.get('tool', ''))}"
            return [
                Shown("tool-call", f"{name} {text_of(item.get('arguments', {}))}"),
                ToolStarted(name),
            ]
        if kind in _TOOLS:
            detail = item.get("command", item.get("query", ""))
            return [
                Shown("tool-call", f"{_TOOLS[kind]} {text_of(detail)}"),
                ToolStarted(_TOOLS[kind]),
            ]
        return []

    def _completed(self, item: dict[str, object]) -> list[Event]:
        kind = text_of(item.get("type", ""))
        if kind == "agent_message":
            self._last_message = text_of(item.get("text", ""))
            return [Shown("assistant", self._last_message)]
        if kind == "reasoning":
            return [Shown("reasoning", text_of(item.get("text", "")))]
        if kind == "command_execution":
            output = _cut(text_of(item.get("aggregated_output", "")))
            status = f"exit {item.get('exit_code')}"
            return [Shown("tool", f"{status}\n{output}" if output else status), ToolEnded()]
        if kind == "file_change":
            changes = item.get("changes")
            listed = [
                f"{text_of(c.get('kind', ''))} {text_of(c.get('path', ''))}"
                for c in (changes if isinstance(changes, list) else [])
                if isinstance(c, dict)
            ]
            return [Shown("tool", "file change: " + (", ".join(listed) or "(none listed)"))]
        if kind == "mcp_tool_call":
            result = item.get("result", item.get("error", item.get("status", "")))
            return [Shown("tool", _cut(text_of(result))), ToolEnded()]
        if kind == "web_search":
            return [ToolEnded()]
        if kind == "error":
            return [Shown("error", text_of(item.get("message", "")))]
        if kind == "todo_list":
            return [Shown("system", "plan: " + text_of(item.get("items", [])))]
        return []


def _cut(text: str) -> str:
    more = max(0, len(text) - TOOL_RESULT_CHARS)
    return text[:TOOL_RESULT_CHARS] + (f"\n… ({more} more characters)" if more else "")
