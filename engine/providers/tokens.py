"""Token estimates from characters: for rate-limit reservations and for usage a server omits."""

from __future__ import annotations

import json
import math

from flightdeck.engine.providers.base import ToolSpec, TurnRequest

CHARS_PER_TOKEN = 4  # about right for English and code on current tokenizers


def prompt_tokens_estimate(request: TurnRequest) -> int:
    """Rough prompt size from its characters: system, messages, tool calls and tool schemas."""
    chars = len(request.system)
    for message in request.messages:
        chars += len(message.content) + 8
        for call in message.tool_calls:
            chars += len(call.name) + len(json.dumps(dict(call.arguments)))
    chars += sum(_tool_chars(tool) for tool in request.tools)
    return math.ceil(chars / CHARS_PER_TOKEN)


def _tool_chars(tool: ToolSpec) -> int:
    return len(tool.name) + len(tool.description) + len(json.dumps(dict(tool.parameters)))


def estimate_tokens(request: TurnRequest) -> int:
    """What a call may use against a tokens-per-minute limit: the prompt plus `max_tokens`
    (the most it can write; OpenAI reserves the same way), reconciled after the call."""
    return prompt_tokens_estimate(request) + request.max_tokens
