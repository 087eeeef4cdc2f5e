"""`format = "claude-stream-json"`: Claude Code's `claude -p --output-format stream-json
--verbose`, one JSON event a line.

`system` (subtype `init`, with the session_id), `assistant` messages whose content blocks are
`text` and `tool_use`, `user` messages carrying `tool_result` blocks, and a final `result`
with the answer, `usage`, `total_cost_usd` and the session_id. With `--input-format
stream-json` a process answers several user turns, one `result` each.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

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
from flightdeck.engine.model import Usage

# A tool's output in the transcript is cut here, as a model child's is (child/loop.py).
TOOL_RESULT_CHARS = 2000


class ClaudeStreamJson:
    """Reads one Claude Code process's events."""

    def __init__(self) -> None:
        # `total_cost_usd` is the session's running total, not the turn's: each result is
        # billed for what it adds to the one before.
        self._cost_seen = Decimal(0)

    def feed(self, line: str) -> list[Event]:
        event = json_object(line)
        if event is None:
            return [Shown("output", line)] if line.strip() else []
        kind = event.get("type")
        if kind == "system":
            return self._system(event)
        if kind == "assistant":
            return self._assistant(event)
        if kind == "user":
            return self._user(event)
        if kind == "result":
            return self._result(event)
        return []  # stream_event (partial messages) and kinds added later: not shown

    def _system(self, event: dict[str, object]) -> list[Event]:
        out: list[Event] = []
        session = event.get("session_id")
        if isinstance(session, str) and session:
            out.append(Session(session))
        if event.get("subtype") == "init":
            model = event.get("model")
            out.append(Shown("system", f"claude session {session} (model {model})"))
        return out

    def _assistant(self, event: dict[str, object]) -> list[Event]:
        out: list[Event] = []
        for block in _blocks(event):
            kind = block.get("type")
            if kind == "text":
                out.append(Shown("assistant", text_of(block.get("text", ""))))
            elif kind == "tool_use":
                name = text_of(block.get("name", "tool"))
                out.append(Shown("tool-call", f"{name} {text_of(block.get('input', {}))}"))
                out.append(ToolStarted(name))
        return out

    def _user(self, event: dict[str, object]) -> list[Event]:
        out: list[Event] = []
        for block in _blocks(event):
            if block.get("type") != "tool_result":
                continue
            content = block.get("content", "")
            if isinstance(content, list):
                content = "\n".join(
                    text_of(part.get("text", "")) if isinstance(part, dict) else text_of(part)
                    for part in content
                )
            shown = text_of(content)
            more = max(0, len(shown) - TOOL_RESULT_CHARS)
            shown = shown[:TOOL_RESULT_CHARS] + (f"\n… ({more} more characters)" if more else "")
            if block.get("is_error"):
                shown = "error: " + shown
            out += [Shown("tool", shown), ToolEnded()]
        return out

    def _result(self, event: dict[str, object]) -> list[Event]:
        out: list[Event] = []
        session = event.get("session_id")
        if isinstance(session, str) and session:
            out.append(Session(session))
        usage = event.get("usage")
        figures = usage if isinstance(usage, dict) else {}
        tokens = Usage(
            input_tokens=count(figures.get("input_tokens")),
            output_tokens=count(figures.get("output_tokens")),
            cache_read_tokens=count(figures.get("cache_read_input_tokens")),
            cache_write_tokens=count(figures.get("cache_creation_input_tokens")),
        )
        cost = _money(event.get("total_cost_usd"))
        if cost is not None:
            cost, self._cost_seen = max(Decimal(0), cost - self._cost_seen), cost
        out.append(Report(tokens, cost))
        error = bool(event.get("is_error")) or event.get("subtype") not in (None, "success")
        text = event.get("result")
        answer = text_of(text) if text is not None else text_of(event.get("subtype", ""))
        turns = event.get("num_turns")
        out.append(Shown("system", f"result: {event.get('subtype')} after {turns} turn(s)"))
        out.append(Result(answer, error=error))
        return out


def _blocks(event: dict[str, object]) -> list[dict[str, object]]:
    message = event.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if not isinstance(content, list):
        return []
    return [block for block in content if isinstance(block, dict)]


def _money(value: object) -> Decimal | None:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        cost = Decimal(str(value))  # via str: 0.0123 stays 0.0123
    except InvalidOperation:
        return None
    return cost if cost.is_finite() and cost >= 0 else None
