"""`format = "codex-json"`: `codex exec --json`, one JSON event a line; written from its
captured output (tests/fixtures/agents/).

`thread.started` (its thread_id, which `codex exec resume` continues), `turn.started`,
`item.started` / `item.updated` / `item.completed` whose item is an `agent_message`,
`reasoning`, `command_execution`, `file_change`, `mcp_tool_call`, `web_search`, `todo_list` or
`error` (a warning, such as a model it has no metadata for); `turn.completed` with `usage`
(input_tokens, which include cached_input_tokens and cache_write_input_tokens, output_tokens),
`turn.failed` with the reason, and `error` events: `Reconnecting... 2/5 (...)` while it retries,
then the error it gave up on. Codex reports no cost: a route's `price` prices its tokens.

A shell command still running when its 10 s yield is up goes on in a session of its own; if the
turn ends first, Codex 0.171.0 never completes its item (later versions complete it at the
turn's end, `in_progress`). Either way the transcript says it was left running, and the child's
current tool ends with the turn (or with the process: `ended`).
"""

from __future__ import annotations

from flightdeck.engine.agents.formats.base import (
    Event,
    Report,
    Result,
    Retrying,
    Session,
    Shown,
    ToolEnded,
    ToolStarted,
    count,
    cut,
    cut_line,
    json_object,
    text_of,
    unknown,
)
from flightdeck.engine.agents.formats.claude import TOOL_RESULT_CHARS
from flightdeck.engine.model import Usage

# Items that run something: the child's current tool while they do.
_TOOLS = {"command_execution": "shell", "web_search": "web_search"}
_QUIET = {"turn.started", "item.updated"}
LEFT_AT_TURN_END = "left running when the turn ended (Codex reports no end for it)"
LEFT_AT_EXIT = "no end reported before its process ended"
NAMED_CHARS = 200  # of the command named in such a line


class CodexJson:
    """Reads one `codex exec --json` process's events."""

    def __init__(self, thread_usage: Usage | None = None) -> None:
        self._last_message = ""
        self._open: dict[str, str] = {}  # item id -> what it runs, for items not completed
        # `turn.completed` counts the whole thread: a resumed one's turns before this process
        # too (`thread_usage`, what they were reported at); each report is the difference.
        self.thread_usage = thread_usage or Usage()

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
            written = count(figures.get("cache_write_input_tokens"))
            total = Usage(
                # OpenAI counts cached input inside input_tokens; ours are apart
                input_tokens=max(0, count(figures.get("input_tokens")) - cached - written),
                output_tokens=count(figures.get("output_tokens")),
                cache_read_tokens=cached,
                cache_write_tokens=written,
            )
            before, self.thread_usage = self.thread_usage, total
            left = self._close(LEFT_AT_TURN_END)
            return [*left, Report(_since(total, before)), Result(self._last_message)]
        if kind == "turn.failed":
            error = event.get("error")
            message = text_of(error.get("message", "")) if isinstance(error, dict) else ""
            failed: list[Event] = [
                Shown("error", f"turn failed: {message}"),
                Result(message, error=True),
            ]
            return [*self._close(LEFT_AT_TURN_END), *failed]
        if kind == "error":
            message = text_of(event.get("message", ""))
            if message.startswith("Reconnecting"):
                return [Retrying(message), Shown("system", message)]
            return [Shown("error", message)]
        if kind in _QUIET:
            return []
        return [unknown(event, kind)]

    def ended(self) -> list[Event]:
        """Its process has ended: tools it started and never completed are closed."""
        return self._close(LEFT_AT_EXIT)

    def _close(self, why: str) -> list[Event]:
        """A transcript line for each item still open, and the current tool's end."""
        if not self._open:
            return []
        shown: list[Event] = [
            Shown("tool", f"{cut_line(what, NAMED_CHARS)}: {why}") for what in self._open.values()
        ]
        self._open.clear()
        return [*shown, ToolEnded()]

    def _started(self, item: dict[str, object]) -> list[Event]:
        kind = text_of(item.get("type", ""))
        if kind == "mcp_tool_call":
            name = f"{text_of(item.get('server', ''))}.{text_of(item.get('tool', ''))}"
            self._open[text_of(item.get("id", ""))] = name
            return [
                Shown("tool-call", f"{name} {text_of(item.get('arguments', {}))}"),
                ToolStarted(name),
            ]
        if kind in _TOOLS:
            self._open[text_of(item.get("id", ""))] = named = _named(kind, item)
            return [Shown("tool-call", named), ToolStarted(_TOOLS[kind])]
        return []

    def _completed(self, item: dict[str, object]) -> list[Event]:
        kind = text_of(item.get("type", ""))
        if kind in _TOOLS and item.get("status") == "in_progress":
            # Completed at its turn's end while it still runs: no exit status.
            return self._close_one(kind, item, LEFT_AT_TURN_END)
        self._open.pop(text_of(item.get("id", "")), None)
        if kind == "agent_message":
            self._last_message = text_of(item.get("text", ""))
            return [Shown("assistant", self._last_message)]
        if kind == "reasoning":
            return [Shown("reasoning", text_of(item.get("text", "")))]
        if kind == "command_execution":
            output = cut(text_of(item.get("aggregated_output", "")), TOOL_RESULT_CHARS)
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
            return [Shown("tool", cut(text_of(result), TOOL_RESULT_CHARS)), ToolEnded()]
        if kind == "web_search":
            return [ToolEnded()]
        if kind == "error":  # a warning: the turn goes on
            return [Shown("system", "codex: " + text_of(item.get("message", "")))]
        if kind == "todo_list":
            return [Shown("system", "plan: " + text_of(item.get("items", [])))]
        return [unknown(item, f"item {kind}")]

    def _close_one(self, kind: str, item: dict[str, object], why: str) -> list[Event]:
        what = self._open.pop(text_of(item.get("id", "")), None) or _named(kind, item)
        output = cut(text_of(item.get("aggregated_output", "")), TOOL_RESULT_CHARS)
        said = f"{cut_line(what, NAMED_CHARS)}: {why}"
        return [Shown("tool", f"{said}\n{output}" if output else said), ToolEnded()]


def _named(kind: str, item: dict[str, object]) -> str:
    """A command or search item as its transcript line names it."""
    return f"{_TOOLS[kind]} {text_of(item.get('command', item.get('query', '')))}"


def _since(total: Usage, before: Usage) -> Usage:
    """The thread's usage since `before`, field by field, never below zero."""
    return Usage(
        max(0, total.input_tokens - before.input_tokens),
        max(0, total.output_tokens - before.output_tokens),
        max(0, total.cache_read_tokens - before.cache_read_tokens),
        max(0, total.cache_write_tokens - before.cache_write_tokens),
    )
