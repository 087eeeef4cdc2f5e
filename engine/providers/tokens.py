"""Token estimates from characters: for rate-limit reservations and for usage a server omits."""

from __future__ import annotations

import json
import math

from flightdeck.engine.model import CHARS_PER_TOKEN
from flightdeck.engine.providers.base import ToolSpec, TurnRequest


def prompt_tokens_estimate(request: TurnRequest) -> int:
    """Rough prompt size from its characters: system, messages, tool calls and tool schemas."""
    chars = len(request.system)
    for message in request.messages:
        chars += len(message.content) + 8
        for call in message.tool_calls:
            chars += len(call.name) + len(json.dumps(dict(call.arguments)))
    for tool in request.tools:
        chars += _tool_chars(tool)
    return math.ceil(chars / CHARS_PER_TOKEN)


# A tool's schema is the same in every prompt of every child: its size is worked out once per
# spec (a JSON dump per tool per turn was a tenth of an instant child's worker time). Keyed by
# identity (a spec's parameters are a dict, not hashable); the entry keeps the spec, so its id
# is never reused while cached. Specs are constants: the bound only guards against a leak.
_TOOL_CHARS: dict[int, tuple[ToolSpec, int]] = {}
_TOOL_CHARS_MAX = 1024


def _tool_chars(tool: ToolSpec) -> int:
    known = _TOOL_CHARS.get(id(tool))
    if known is not None and known[0] is tool:
        return known[1]
    chars = len(tool.name) + len(tool.description) + len(json.dumps(dict(tool.parameters)))
    if len(_TOOL_CHARS) < _TOOL_CHARS_MAX:
        _TOOL_CHARS[id(tool)] = (tool, chars)
    return chars


def estimate_tokens(request: TurnRequest) -> int:
    """What a call may use against a tokens-per-minute limit: the prompt plus `max_tokens`
    (the most it can write; OpenAI reserves the same way), reconciled after the call."""
    return prompt_tokens_estimate(request) + request.max_tokens
