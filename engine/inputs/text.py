"""Text the operator gives (a goal, a steer) checked for what the engine can send and store."""

from __future__ import annotations

import re

from flightdeck.engine.sanitize import sanitize

# A high then a low surrogate: what YAML makes of an escaped pair such as "\ud83d\ude00".
_SURROGATE_PAIR = re.compile(r"[\ud800-\udbff][\udc00-\udfff]")


def too_long(length: int, limit: int) -> str:
    """A text over `[engine] max_task_chars`, said the one way goals and steers share."""
    return f"too long: {length:,} characters, over the limit of {limit:,} ([engine] max_task_chars)"


# Characters that take no room on a screen: zero-width spaces and joiners, direction marks,
# the word joiner and its kin, variation selectors, the byte order mark, a soft hyphen.
_INVISIBLE = re.compile(
    "[\u00ad\u034f\u061c\u180e\u200b-\u200f\u2060-\u2064\u206a-\u206f\ufe00-\ufe0f\ufeff]"
)


def blank(text: str) -> bool:
    """Whether `text` shows nothing once sanitized: only spaces, escape sequences, control
    characters and invisible ones. A goal or steer of "\\x1b[31m" (or of zero-width spaces)
    would reach the model, and the screen, empty."""
    shown = sanitize(text)
    if not shown.isascii():
        shown = _INVISIBLE.sub("", shown)
    return not shown.strip()


def unicode_problem(text: str) -> str | None:
    """Why `text` cannot be sent or stored (None: it can): a surrogate, which a JSON or YAML
    escape decodes to but no UTF-8 encoder (a provider's, SQLite's) accepts."""
    if text.isascii():  # constant time in CPython: most text pays nothing more
        return None
    try:
        text.encode("utf-8")  # quicker than searching for a surrogate with a regex
        return None
    except UnicodeEncodeError as exc:
        at = exc.start
    where = f"at character {at + 1}"
    pair = _SURROGATE_PAIR.match(text, at)
    if pair is None:
        return f"not valid Unicode text: a lone surrogate ({_escaped(text[at])}) {where}"
    # YAML does not join an escaped pair as JSON does: say how to write the character.
    char = pair.group().encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    return (
        f"not valid Unicode text: a surrogate pair ({_escaped(pair.group())}) {where}; "
        f"write the character itself or \\U{ord(char):08x}"
    )


def _escaped(text: str) -> str:
    return "".join(f"\\u{ord(c):04x}" for c in text)
