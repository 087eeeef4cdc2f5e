"""An error's signature: its message with the parts that differ between children (ids, numbers,
paths, quoted values) replaced by placeholders, so the same failure groups under one line."""

from __future__ import annotations

import re

from flightdeck.engine.sanitize import sanitize

SIGNATURE_CHARS = 120  # the part of a message that names the failure; the rest is detail

# Order matters: a UUID or a long hex run is one id, not several numbers.
_RULES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\b[a-z][a-z0-9+.-]*://\S+", re.I), "<url>"),
    (re.compile(r"(?<![\w.])\.{0,2}(?:/[\w.@+-]+){2,}/?"), "<path>"),
    (re.compile(r"'[^']*'|\"[^\"]*\""), "<q>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.I), "<id>"),
    (re.compile(r"\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{8,}\b", re.I), "<id>"),
    # ids such as req_8f3a2b, call-01HX9, c0012: letters then a run with a digit in it
    (re.compile(r"\b[A-Za-z]+[_-]?(?=[A-Za-z0-9_-]*\d)[A-Za-z0-9_-]*\b"), "<id>"),
    # numbers, with a unit or not (3.2s keeps its s): the unit says what kind of failure it is
    (re.compile(r"(?<![\w<.])[-+]?\d+(?:[.,]\d+)*(?=[A-Za-z%]*\b|\W|$)"), "<n>"),
)
_SPACE = re.compile(r"\s+")


def error_signature(message: str | None) -> str | None:
    """`rate limited (429) on req_8f3a2b, retry in 3.2s` → `rate limited (<n>) on <id>, retry in
    <n>s`. None for no message; the first line only, cut to `SIGNATURE_CHARS`."""
    if message is None:
        return None
    # Sanitized first: a placeholder put inside an escape sequence (`ESC[31m` → `ESC[<n>m`)
    # leaves a mangled sequence that sanitizing on screen only half strips, or takes its end
    # with it (`<url>` eats an OSC's BEL) so the rest of the message is stripped as its body.
    text = sanitize(message).strip().split("\n", 1)[0]
    if not text:
        return None
    for pattern, placeholder in _RULES:
        text = pattern.sub(placeholder, text)
    text = _SPACE.sub(" ", text).strip()
    if len(text) > SIGNATURE_CHARS:
        text = text[: SIGNATURE_CHARS - 1].rstrip() + "…"
    return text
