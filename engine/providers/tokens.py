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
    return math.ceil((chars + _tools_chars(request.tools)) / CHARS_PER_TOKEN)


# The tools offered are the same few specs in every prompt of every child: their schemas' size
# is worked out once per set (a JSON dump per tool per turn was a tenth of an instant child's
# worker time). Keyed by the specs' identities (a spec's parameters are a dict, not hashable);
# the entry keeps the specs, so no id in a key is reused while it is cached. Specs are
# constants: the bound only guards against a leak.
_TOOLS_CHARS: dict[tuple[int, ...], tuple[tuple[ToolSpec, ...], int]] = {}
_TOOLS_CHARS_MAX = 1024


def _tools_chars(tools: tuple[ToolSpec, ...]) -> int:
    key = tuple(map(id, tools))
    known = _TOOLS_CHARS.get(key)
    if known is not None:
        return known[1]
    chars = sum(
        len(t.name) + len(t.description) + len(json.dumps(dict(t.parameters))) for t in tools
    )
    if len(_TOOLS_CHARS) < _TOOLS_CHARS_MAX:
        _TOOLS_CHARS[key] = (tools, chars)
    return chars


def estimate_tokens(request: TurnRequest) -> int:
    """What a call may use against a tokens-per-minute limit: the prompt plus `max_tokens`
    (the most it can write; OpenAI reserves the same way), reconciled after the call."""
    return prompt_tokens_estimate(request) + request.max_tokens
