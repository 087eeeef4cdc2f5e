"""A child's final answer as its row keeps it: bounded, the whole of it in the transcript."""

from __future__ import annotations

# Characters of a final answer kept in the row (the store, the screen, the report's readers);
# the whole answer is in the transcript. A 100 MB reply must not be copied everywhere.
MAX_RESULT_CHARS = 100_000


def bounded_result(text: str, transcript: str) -> str:
    """`text`, or its first MAX_RESULT_CHARS characters and a note of where the rest is."""
    if len(text) <= MAX_RESULT_CHARS:
        return text
    rest = len(text) - MAX_RESULT_CHARS
    return (
        f"{text[:MAX_RESULT_CHARS]}\n\n[cut here: {rest:,} more characters; "
        f"the whole answer is in the transcript, {transcript}]"
    )
