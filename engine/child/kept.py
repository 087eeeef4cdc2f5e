"""What a child keeps beside its live figures: which attempt it is (and the retry that made it),
what it changed in its own workspace, and its final answer, bounded."""

from __future__ import annotations

from flightdeck.engine.child.port import Attempt
from flightdeck.engine.review.values import Changes

# Characters of a final answer kept in the row (the store, the screen, the report's readers);
# the whole answer is in the transcript. A 100 MB reply must not be copied everywhere.
MAX_RESULT_CHARS = 100_000


class Kept:
    """A child's attempt and its changes; each replaced whole (any thread may read them)."""

    def __init__(
        self, attempt: int = 1, retrying: Attempt | None = None, changes: Changes | None = None
    ) -> None:
        self.attempt = attempt
        self.retrying = retrying
        self.changes = changes
        self.version = 0  # bumped on every change, so readers can skip an unchanged child

    def changed(self, changes: Changes | None) -> None:
        """Its changes as found at its end, or as the operator decided them."""
        self.changes = changes
        self.version += 1


def bounded_result(text: str, transcript: str) -> str:
    """`text`, or its first MAX_RESULT_CHARS characters and a note of where the rest is."""
    if len(text) <= MAX_RESULT_CHARS:
        return text
    rest = len(text) - MAX_RESULT_CHARS
    return (
        f"{text[:MAX_RESULT_CHARS]}\n\n[cut here: {rest:,} more characters; "
        f"the whole answer is in the transcript, {transcript}]"
    )
