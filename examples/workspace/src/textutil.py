"""String helpers."""

import re


def slugify(text: str) -> str:
    """A lowercase, dash-separated version of `text` for use in URLs."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def truncate(text: str, width: int) -> str:
    """`text` cut to `width` characters, with an ellipsis when cut."""
    # TODO: counts code points, not terminal cells; wide characters overflow.
    return text if len(text) <= width else text[: width - 1] + "…"


def word_counts(text: str) -> dict[str, int]:
    """How often each word occurs in `text`."""
    counts: dict[str, int] = {}
    for word in text.split():
        counts[word] = counts.get(word, 0) + 1
    return counts
