"""The tools a child waits on holding no slot, and how its pending pause reads meanwhile."""

from __future__ import annotations

# The tool through which a child hands sub-tasks to the engine and waits for them, holding no
# slot meanwhile (`child/delegate.py`).
DELEGATE_TOOL = "delegate"
# The tool through which a model child asks the operator a question and waits for the answer,
# holding no slot meanwhile (`child/ask.py`).
ASK_TOOL = "ask_operator"
# How a running child's activity text starts while the operator's pause of it is pending: it
# takes the pause at the end of its turn, or, waiting on its delegates or on the operator's
# answer, once they return or it comes. The store keeps the text, so an attached view reads
# the same (`ChildRow.pausing`).
PAUSING = "pausing"


def pausing_text(current_tool: str | None) -> str:
    """The activity text of a running child whose pause is pending."""
    if current_tool == DELEGATE_TOOL:
        return f"{PAUSING} once its delegates return"
    if current_tool == ASK_TOOL:  # its turn waits on the operator, for as long as it takes
        return f"{PAUSING} once its question is answered"
    return f"{PAUSING} at the end of this turn"
