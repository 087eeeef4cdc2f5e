"""`format = "claude-stream-json"`: Claude Code's `claude -p --output-format stream-json
--verbose`, one JSON event a line; written from its captured output (tests/fixtures/agents/).

- `system` `init`: the session id and the model it runs; `api_retry`: a failed call it retries
  (attempt, max_retries, retry_delay_ms, error_status, error).
- `assistant`: one event per content block (`text`, `tool_use`, `thinking`), each carrying its
  message's `usage` so far; the message `id` names the API call. A `<synthetic>` message is the
  CLI's own error text, not a call.
- `user`: `tool_result` blocks; with `--replay-user-messages`, the messages it read on stdin
  (`isReplay`), and `command_lifecycle` events saying when each (by its `uuid`) was queued,
  started (inside the running turn, if one runs), completed or cancelled.
- `result`, one per turn: the answer (or `is_error` and the error text), `num_turns` (the API
  calls of the turn), `total_cost_usd` (the session's running total, a resumed session's
  included), and `modelUsage` / `model_usage_since_last_result` (every model's tokens and cost,
  which is what the cost is for; `usage` counts the main loop's only).
"""

from __future__ import annotations

import dataclasses
import json
import math
from decimal import Decimal, InvalidOperation

from flightdeck.engine.agents.formats.base import (
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
    count,
    cut,
    cut_line,
    json_object,
    text_of,
    unknown,
)
from flightdeck.engine.model import CHARS_PER_TOKEN, Usage

# A tool's output in the transcript is cut here, as a model child's is (child/loop.py).
TOOL_RESULT_CHARS = 2000
_QUIET = {"stream_event", "control_response", "control_request", "keep_alive"}


class ClaudeStreamJson:
    """Reads one Claude Code process's events."""

    def __init__(self) -> None:
        # `total_cost_usd` and `modelUsage` are the session's running totals: each result is
        # billed for what it adds to the one before.
        self._cost_seen = Decimal(0)
        self._usage_seen = Usage()
        self._live_seen: tuple[str, Usage] | None = None
        # What each message has written so far (its blocks' characters), by its id: its
        # `assistant` events carry the usage of its start (`output_tokens: 1`), and the tokens
        # it wrote are reported only at the turn's end.
        self._written: dict[str, int] = {}
        # Each tool call's input until its result comes (a denial names the call, not its
        # input), and the calls whose denial was told as it happened (the result lists them
        # all again).
        self._inputs: dict[str, str] = {}
        self._denied: set[str] = set()
        # Commands it moved to the background that still run, and whether a turn's end left
        # it waiting for them (it says nothing meanwhile: no stall, a tool runs).
        self._background: set[str] = set()
        self._waiting = False

    def feed(self, line: str) -> list[Event]:
        event = json_object(line)
        if event is None:
            return [Shown("output", line)] if line.strip() else []
        kind = event.get("type")
        if kind == "system":
            return self._system(event)
        if kind == "assistant":
            if self._waiting:  # a new turn (a steer's) while it waited: it works again
                self._waiting = False  # its commands may end inside a tool of this turn
                return [Waiting(None), *self._assistant(event)]
            return self._assistant(event)
        if kind == "user":
            return self._user(event)
        if kind == "result":
            return self._result(event)
        if kind == "command_lifecycle":
            uuid, state = event.get("command_uuid"), event.get("state")
            return (
                [Lifecycle(uuid, state)] if isinstance(uuid, str) and isinstance(state, str) else []
            )
        if kind in _QUIET:  # partial messages and the control protocol's answers
            return []
        if kind == "tool_progress" and event.get("heartbeat") is True:
            return []  # every 30 s of a long tool: the row's `tool: Bash 1m30s` says as much
        return [unknown(event, kind)]

    def ended(self) -> list[Event]:
        # Each tool's end is its result; the process's end clears the current tool.
        return []

    def _system(self, event: dict[str, object]) -> list[Event]:
        out: list[Event] = []
        session = event.get("session_id")
        if isinstance(session, str) and session:
            out.append(Session(session))
        subtype = event.get("subtype")
        if subtype == "init":
            model = event.get("model")
            if isinstance(model, str) and model:
                out.append(Model(model))
            version = event.get("claude_code_version", "?")
            out.append(
                Shown("system", f"claude session {session} (model {model}, Claude Code {version})")
            )
        elif subtype == "api_retry":
            status = text_of(event.get("error_status", "?"))
            error = text_of(event.get("error", "error"))
            delay = count(event.get("retry_delay_ms")) / 1000
            attempt = text_of(event.get("attempt", "?"))
            attempts = text_of(event.get("max_retries", "?"))
            text = f"{status} {error}, retry {attempt}/{attempts} in {delay:.1f}s"
            out += [Retrying(text), Shown("system", f"api retry: {text}")]
        elif subtype == "background_tasks_changed":  # the commands in the background now
            tasks = event.get("tasks")
            tasks = tasks if isinstance(tasks, list) else []
            self._background = {text_of(t.get("task_id")) for t in tasks if isinstance(t, dict)}
            out += self._waited()
        elif subtype in ("task_started", "task_updated"):
            # A shell command run as a task (the tool-call line says it), moved to the
            # background (as it starts, or later: Claude Code says either), or ended (the
            # task_notification says how, in words).
            task, patch = text_of(event.get("task_id", "?")), _dict(event.get("patch"))
            if event.get("is_backgrounded") is True or patch.get("is_backgrounded") is True:
                self._background.add(task)
                out.append(Shown("system", f"task {task} moved to the background"))
            elif "status" in patch:
                self._background.discard(task)
                out += self._waited()
            elif subtype == "task_updated":
                out.append(unknown(event, "system task_updated"))
        elif subtype == "task_notification":
            status, summary = text_of(event.get("status", "?")), text_of(event.get("summary", ""))
            self._background.discard(text_of(event.get("task_id", "?")))
            out.append(Shown("system", f"task {status}: {summary}"))
            out += self._waited()
        elif subtype == "permission_denied":
            call = text_of(event.get("tool_use_id", ""))
            self._denied.add(call)
            given = self._inputs.get(call, "{}")
            out += _denied(text_of(event.get("tool_name", "?")), given, event.get("message"))
        else:
            out.append(unknown(event, f"system {subtype}"))
        return out

    def _assistant(self, event: dict[str, object]) -> list[Event]:
        out: list[Event] = []
        message = event.get("message")
        message = message if isinstance(message, dict) else {}
        synthetic = message.get("model") == "<synthetic>"
        chars = 0
        for block in _blocks(event):
            kind = block.get("type")
            if kind == "text":
                role = "error" if synthetic and event.get("error") else "assistant"
                text = text_of(block.get("text", ""))
                out.append(Shown(role, text))
                chars += len(text)
            elif kind == "thinking":
                text = text_of(block.get("thinking", ""))
                out.append(Shown("reasoning", text))
                chars += len(text)
            elif kind == "tool_use":
                name = text_of(block.get("name", "tool"))
                given = _input_json(block.get("input", {}))
                self._inputs[text_of(block.get("id", ""))] = given
                out.append(Shown("tool-call", f"{name} {text_of(block.get('input', {}))}"))
                out.append(ToolStarted(name))
                # Uncut, and as written: an escape of each non-ASCII character is no token.
                chars += len(name) + len(json.dumps(block.get("input", {}), ensure_ascii=False))
        key, usage = message.get("id"), message.get("usage")
        if isinstance(key, str) and isinstance(usage, dict) and not synthetic:
            # Its output so far, estimated from what it wrote, until the result counts it.
            written = self._written[key] = self._written.get(key, 0) + chars
            figures = _usage(usage)
            guess = math.ceil(written / CHARS_PER_TOKEN)
            if guess > figures.output_tokens:
                figures = dataclasses.replace(figures, output_tokens=guess)
            # Each of a message's blocks repeats its usage: only a change is news.
            if (key, figures) != self._live_seen:
                self._live_seen = (key, figures)
                out.append(Live(key, figures))
        return out

    def _user(self, event: dict[str, object]) -> list[Event]:
        if event.get("isReplay"):
            return []  # a message we wrote on its stdin; the transcript has it already
        out: list[Event] = []
        for block in _blocks(event):
            kind = block.get("type")
            if kind == "text":  # the CLI's own note, such as an interruption
                out.append(Shown("system", text_of(block.get("text", ""))))
            if kind != "tool_result":
                continue
            self._inputs.pop(text_of(block.get("tool_use_id", "")), None)
            content = block.get("content", "")
            if isinstance(content, list):
                content = "\n".join(
                    text_of(part.get("text", "")) if isinstance(part, dict) else text_of(part)
                    for part in content
                )
            shown = cut(text_of(content), TOOL_RESULT_CHARS)
            if block.get("is_error"):
                shown = "error: " + shown
            out += [Shown("tool", shown), ToolEnded()]
        return out

    def _result(self, event: dict[str, object]) -> list[Event]:
        out: list[Event] = []
        session = event.get("session_id")
        if isinstance(session, str) and session:
            out.append(Session(session))
        self._written.clear()  # the turn's own figures replace the estimates
        since = event.get("model_usage_since_last_result")
        total = _money(event.get("total_cost_usd"))
        if isinstance(since, dict):
            # The turn's own cost: a resumed session's total counts the turns before it too.
            costs = [_money(f.get("costUSD")) for f in since.values() if isinstance(f, dict)]
            cost = None if None in costs else sum((c for c in costs if c), Decimal(0))
        else:
            cost = None if total is None else max(Decimal(0), total - self._cost_seen)
        if total is not None:
            self._cost_seen = total
        calls = event.get("num_turns")
        calls = calls if isinstance(calls, int) and not isinstance(calls, bool) else None
        if event.get("subtype") == "error_during_execution":
            # An interrupted turn's num_turns is not its calls (3 for its one call, 2.1.332):
            # the calls seen streaming are counted instead.
            calls = None
        out.append(Report(self._tokens(event), cost, calls))
        error = bool(event.get("is_error")) or event.get("subtype") not in (None, "success")
        text = event.get("result")
        if text is None:  # an interrupted turn says why elsewhere
            text = event.get("terminal_reason", event.get("subtype", ""))
        subtype = text_of(event.get("subtype", ""))
        if error and subtype == "success":  # how Claude Code reports a failed API call
            subtype = "error"
        after = "" if calls is None else f" after {calls} API call(s)"
        out.append(Shown("system", f"result: {subtype}{after}"))
        out += self._denials(event.get("permission_denials"))
        out.append(Result(text_of(text), error=error))
        if self._background and not self._waiting:
            self._waiting = True
            out.append(Waiting(f"background command ({len(self._background)})"))
        return out

    def _waited(self) -> list[Event]:
        """The end of its wait for background commands, once none runs."""
        if self._waiting and not self._background:
            self._waiting = False
            return [Waiting(None)]
        return []

    def _denials(self, found: object) -> list[Event]:
        """The turn's denied calls (`permission_denials`) not told as they happened."""
        out: list[Event] = []
        for denial in found if isinstance(found, list) else ():
            if isinstance(denial, dict) and denial.get("tool_use_id") not in self._denied:
                tool = text_of(denial.get("tool_name", "?"))
                out += _denied(tool, _input_json(denial.get("tool_input", {})))
        return out

    def _tokens(self, event: dict[str, object]) -> Usage:
        """The turn's tokens, every model's: those its cost is for."""
        since = event.get("model_usage_since_last_result")
        if isinstance(since, dict):
            return _models(since)
        total = event.get("modelUsage")
        if isinstance(total, dict) and total:
            now = _models(total)
            turn = Usage(
                max(0, now.input_tokens - self._usage_seen.input_tokens),
                max(0, now.output_tokens - self._usage_seen.output_tokens),
                max(0, now.cache_read_tokens - self._usage_seen.cache_read_tokens),
                max(0, now.cache_write_tokens - self._usage_seen.cache_write_tokens),
            )
            self._usage_seen = now
            return turn
        usage = event.get("usage")
        return _usage(usage) if isinstance(usage, dict) else Usage()


def _usage(figures: dict[str, object]) -> Usage:
    return Usage(
        input_tokens=count(figures.get("input_tokens")),
        output_tokens=count(figures.get("output_tokens")),
        cache_read_tokens=count(figures.get("cache_read_input_tokens")),
        cache_write_tokens=count(figures.get("cache_creation_input_tokens")),
    )


def _models(per_model: dict[str, object]) -> Usage:
    """The sum over `modelUsage`'s models."""
    total = Usage()
    for figures in per_model.values():
        if isinstance(figures, dict):
            total += Usage(
                input_tokens=count(figures.get("inputTokens")),
                output_tokens=count(figures.get("outputTokens")),
                cache_read_tokens=count(figures.get("cacheReadInputTokens")),
                cache_write_tokens=count(figures.get("cacheCreationInputTokens")),
            )
    return total


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


_DENIED_CHARS = 2_000  # of a denied call's input (a Write's whole file, maybe)


def _input_json(given: object) -> str:
    """A tool call's input as one line of JSON, cut at _DENIED_CHARS."""
    return cut_line(
        json.dumps(given, ensure_ascii=False, sort_keys=True, default=str), _DENIED_CHARS
    )


def _denied(tool: str, given: str, why: object = None) -> list[Event]:
    """A denied call, in the transcript (with the CLI's reason, if it gave one) and told."""
    because = f" ({text_of(why)})" if why else ""
    return [Shown("system", f"permission denied: {tool} {given}{because}"), Denied(tool, given)]


def _dict(value: object) -> dict[str, object]:
    return value if isinstance(value, dict) else {}
