"""The `ask_operator` tool, the child's side: a model asks the human supervising it a question
and waits for the answer, which comes back as the tool's result.

While it waits the child holds no slot (as a parent waiting on its delegates does), so children
waiting on an operator who is away never keep the rest of the batch from running, and it is not
stalled (it waits on the operator, not the model). Its `timeout_s`, if any, still counts: an
unattended batch is not held for ever. The coordinator records the question, shows it in the
"needs you" queue (engine/triage/needs.py) and settles the call with the operator's answer
(control/questions.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from flightdeck.engine.errors import ToolError
from flightdeck.engine.model import ASK_TOOL
from flightdeck.engine.providers.base import ToolSpec

ASK_SPEC = ToolSpec(
    name=ASK_TOOL,
    description=(
        "Ask the human operator supervising you a question and wait for the answer, which is "
        "this tool's result. Use it only when you cannot go on well without a decision only "
        "they can make (which of two conflicting instructions to follow, whether a change that "
        "cannot be undone is wanted); otherwise decide yourself."
    ),
    parameters={
        "type": "object",
        "properties": {"question": {"type": "string", "description": "the question, in full"}},
        "required": ["question"],
    },
)


@dataclass(eq=False)
class AskCall:
    """One `ask_operator` call in flight: the coordinator settles it, the child's thread waits."""

    child_id: str
    question: str
    done: threading.Event = field(default_factory=threading.Event)
    answer: str | None = None
    refused: str | None = None

    def settle(self, answer: str) -> None:
        self.answer = answer
        self.done.set()

    def refuse(self, reason: str) -> None:
        self.refused = reason
        self.done.set()


class Settled(Protocol):
    """A call the coordinator settles (`ask_operator`'s, `delegate`'s): done, or refused."""

    done: threading.Event
    refused: str | None


def wait_settled(call: Settled, check_stop: Callable[[], None]) -> None:
    """Until the coordinator settles `call`; `check_stop` raising (a stop) ends the wait, and a
    refusal is the tool's error."""
    while not call.done.wait(0.05):
        check_stop()
    check_stop()
    if call.refused is not None:
        raise ToolError(call.refused)


def parse_question(arguments: Mapping[str, Any], max_chars: int) -> str:
    """The question a call asks; ToolError (for the model to read) if it is malformed."""
    question = arguments.get("question")
    if not isinstance(question, str) or not question.strip():
        raise ToolError("'question' must be a non-empty string")
    if len(question) > max_chars:
        raise ToolError(
            f"the question has {len(question):,} characters; at most {max_chars:,} (max_task_chars)"
        )
    return question.strip()


def answer_text(answer: str) -> str:
    """The tool's result: the operator's answer, marked as theirs."""
    return f"The operator answered: {answer}"
