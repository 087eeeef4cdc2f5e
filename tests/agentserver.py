"""The loopback server for real agent CLIs: Claude Code (Anthropic Messages, streaming SSE) and
Codex (OpenAI Responses, streaming SSE), each pointed at it with a dummy key.

The conversation drives it: a goal holds directives in brackets, read from every request of its
conversation (the goal travels with each one), so a batch of CLIs needs no script per child:

    [tool: CMD]      the first answer to the goal runs CMD in the CLI's shell tool, then answers
    [429: N]         the first N requests of the conversation get a 429 (the CLI retries)
    [fail: STATUS]   every request of the conversation gets STATUS (the CLI gives up)
    [hang: N]        the first N requests of the conversation get no answer (until released)

A later user text (a steer, a retry's message) that holds `[tool: CMD]` is answered by running
CMD too, once: what a resumed session may do in its workspace is seen.

A request that carries the shell tool's result is answered with text; so is one whose latest
user text is new (a steer): `done: <that text>`. Token counts are derived from the request's
size, so a run's figures are the same each time.

    with AgentServer() as server:
        env = server.claude_env()           # ANTHROPIC_BASE_URL and a dummy key
        argv = server.codex_config_args()   # `-c` flags naming the server as Codex's provider
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from loopback import (
    ANTHROPIC_PATH,
    OPENAI_PATH,
    Loopback,
    Received,
    Reply,
    ToolUse,
    _AnthropicFormat,
    _Format,
    _OpenAIFormat,
    _pieces,
)

RESPONSES_PATH = "/v1/responses"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"
DUMMY_KEY = "sk-loopback-dummy-key-0123456789"
CODEX_MODEL = "gpt-5.1-codex-mini"  # a model Codex knows the metadata of
_DIRECTIVE = re.compile(r"\[(tool|429|fail|hang):\s*([^\]]*)\]")


@dataclass(frozen=True, slots=True)
class Turn:
    """What one request asks: the conversation's goal, its latest user text, and whether the
    latest input is a tool's result."""

    key: str  # the conversation (its first user text)
    latest_user: str
    after_tool: bool
    tool_results: int  # tool results in the conversation so far
    user_texts: int  # user texts in the conversation so far


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    out = []
    for block in content if isinstance(content, list) else []:
        if isinstance(block, dict) and block.get("type") in ("text", "input_text"):
            out.append(str(block.get("text", "")))
    return out


def _real(texts: list[str]) -> list[str]:
    """User texts without the reminders a CLI adds around the user's own words."""
    return [t for t in texts if not t.lstrip().startswith(("<system-reminder>", "<environment"))]


def anthropic_turn(body: dict[str, Any]) -> Turn:
    """The turn a Messages request asks for."""
    users: list[str] = []
    results = 0
    after_tool = False
    for message in body.get("messages", []):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        blocks = content if isinstance(content, list) else []
        tool = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
        results += len(tool)
        texts = _real(_texts(content))
        users += texts
        after_tool = bool(tool) and not texts
    return Turn(
        users[0] if users else "", users[-1] if users else "", after_tool, results, len(users)
    )


def responses_turn(body: dict[str, Any]) -> Turn:
    """The turn a Responses request asks for."""
    users: list[str] = []
    results = 0
    after_tool = False
    for item in body.get("input", []):
        if not isinstance(item, dict):
            continue
        if item.get("type") == "function_call_output":
            results += 1
            after_tool = True
        elif item.get("role") == "user":
            texts = _real(_texts(item.get("content")))
            users += texts
            after_tool = after_tool and not texts
    return Turn(
        users[0] if users else "", users[-1] if users else "", after_tool, results, len(users)
    )


class AgentServer(Loopback):
    """A Loopback that answers agent CLIs from the directives in their goals."""

    def __init__(self) -> None:
        formats = {
            ANTHROPIC_PATH: _AnthropicFormat,
            COUNT_TOKENS_PATH: _CountTokens,
            OPENAI_PATH: _OpenAIFormat,
            RESPONSES_PATH: ResponsesFormat,
        }
        super().__init__(self._answer, formats)
        self._seen: dict[str, int] = {}  # requests per conversation
        self._seen_lock = threading.Lock()

    def claude_env(self) -> dict[str, str]:
        """What Claude Code needs to talk to this server and nothing else."""
        return {
            "ANTHROPIC_BASE_URL": self.anthropic_url,
            "ANTHROPIC_API_KEY": DUMMY_KEY,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
        }

    def codex_config_args(self) -> list[str]:
        """`-c` flags making this server Codex's model provider (key in LOOPBACK_KEY)."""
        provider = (
            f'{{name="loopback", base_url="{self.openai_url}", env_key="LOOPBACK_KEY", '
            'wire_api="responses", supports_websockets=false}'
        )
        return [
            "-c",
            "model_provider=loopback",
            "-c",
            f"model_providers.loopback={provider}",
            "-c",
            f"model={CODEX_MODEL}",
        ]

    def _answer(self, received: Received) -> Reply:
        path = received.path.partition("?")[0].rstrip("/")
        if path == COUNT_TOKENS_PATH:
            return Reply()
        body = received.body
        turn = responses_turn(body) if path == RESPONSES_PATH else anthropic_turn(body)
        size = len(json.dumps(body))
        # One conversation: the CLI's session (a header) and its goal.
        session = received.headers.get("x-claude-code-session-id") or received.headers.get(
            "session-id", ""
        )
        with self._seen_lock:
            n = self._seen[session + turn.key] = self._seen.get(session + turn.key, 0) + 1
        directives = dict(_DIRECTIVE.findall(turn.key))
        if "fail" in directives:
            return Reply(status=int(directives["fail"]), message="loopback refuses this one")
        if n <= int(directives.get("hang", "0") or 0):
            return Reply(stall_before_headers=True)
        if n <= int(directives.get("429", "0") or 0):
            return Reply(status=429, retry_after="0", message="Rate limit exceeded")
        tokens = {"input_tokens": size // 4, "output_tokens": 0}
        command = directives.get("tool")
        later = dict(_DIRECTIVE.findall(turn.latest_user)).get("tool")
        if later and turn.user_texts > 1 and not turn.after_tool:
            command = later  # a later user text asks for a tool of its own
        elif turn.tool_results or turn.user_texts != 1 or turn.after_tool:
            command = None
        if command:
            name = "Bash" if path == ANTHROPIC_PATH else "exec_command"
            args: dict[str, Any] = (
                {"command": command, "description": "run the goal's command"}
                if name == "Bash"
                else {"cmd": command}
            )
            tokens["output_tokens"] = 20
            return Reply(text="Running it.", tools=(ToolUse(f"call_{n}", name, args),), **tokens)
        text = f"done: {_DIRECTIVE.sub('', turn.latest_user).strip()}"
        tokens["output_tokens"] = max(1, len(text) // 4)
        return Reply(text=text, chunk_chars=16, **tokens)


class _CountTokens(_Format):
    """`/v1/messages/count_tokens`: a plain JSON count (served as one SSE-less event)."""

    def __init__(self, n: int, body: dict[str, Any]) -> None:
        self.size = len(json.dumps(body))

    def events(self, reply: Reply, stream: bool) -> Iterator[tuple[str, bytes]]:
        yield "meta", json.dumps({"input_tokens": self.size // 4}).encode()


class ResponsesFormat(_Format):
    """OpenAI Responses streaming events: `event: type` + `data: {json}` pairs."""

    def __init__(self, n: int, body: dict[str, Any]) -> None:
        self.id = f"resp_{n:08d}"
        self.model = str(body.get("model", "loopback"))
        self.seq = 0

    def _event(self, payload: dict[str, Any]) -> bytes:
        self.seq += 1
        data = {**payload, "sequence_number": self.seq}
        return f"event: {payload['type']}\ndata: {json.dumps(data)}\n\n".encode()

    def _response(self, status: str, output: list[dict[str, Any]], usage: Any) -> dict[str, Any]:
        return {
            "id": self.id,
            "object": "response",
            "created_at": 1,
            "status": status,
            "model": self.model,
            "output": output,
            "usage": usage,
        }

    def events(self, reply: Reply, stream: bool) -> Iterator[tuple[str, bytes]]:
        meta = self._meta
        yield meta("response.created", response=self._response("in_progress", [], None))
        output: list[dict[str, Any]] = []
        if reply.text:
            item_id = f"msg_{self.id}"
            item = {"id": item_id, "type": "message", "role": "assistant", "status": "in_progress"}
            yield meta("response.output_item.added", output_index=0, item={**item, "content": []})
            part = {"type": "output_text", "text": "", "annotations": []}
            where = {"item_id": item_id, "output_index": 0, "content_index": 0}
            yield meta("response.content_part.added", **where, part=part)
            for piece in _pieces(reply.text, reply.chunk_chars):
                delta = {"type": "response.output_text.delta", **where, "delta": piece}
                yield "content", self._event(delta)
            yield meta("response.output_text.done", **where, text=reply.text)
            done = {**part, "text": reply.text}
            yield meta("response.content_part.done", **where, part=done)
            item = {**item, "status": "completed", "content": [done]}
            yield meta("response.output_item.done", output_index=0, item=item)
            output.append(item)
        for tool in reply.tools:
            index = len(output)
            arguments = json.dumps(tool.arguments)
            call = {
                "id": f"fc_{tool.id}",
                "type": "function_call",
                "call_id": tool.id,
                "name": tool.name,
                "arguments": "",
                "status": "in_progress",
            }
            yield meta("response.output_item.added", output_index=index, item=call)
            for part_text in _pieces(arguments, 16):
                delta = {
                    "type": "response.function_call_arguments.delta",
                    "item_id": call["id"],
                    "output_index": index,
                    "delta": part_text,
                }
                yield "content", self._event(delta)
            call = {**call, "arguments": arguments, "status": "completed"}
            yield meta("response.output_item.done", output_index=index, item=call)
            output.append(call)
        read = reply.input_tokens + reply.cache_read
        usage = {
            "input_tokens": read,
            "input_tokens_details": {"cached_tokens": reply.cache_read},
            "output_tokens": reply.output_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": read + reply.output_tokens,
        }
        yield meta("response.completed", response=self._response("completed", output, usage))

    def _meta(self, kind: str, **fields: Any) -> tuple[str, bytes]:
        return "meta", self._event({"type": kind, **fields})

    def error(self, reply: Reply) -> dict[str, Any]:
        codes = {429: "rate_limit_exceeded", 401: "invalid_api_key"}
        kind = codes.get(reply.status, "server_error")
        return {"error": {"message": reply.message, "type": kind, "param": None, "code": kind}}

    def malformed(self) -> bytes:
        return b'event: response.output_text.delta\ndata: {"type": "response.outp\n\n'
