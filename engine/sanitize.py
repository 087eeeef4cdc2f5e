"""Terminal-safe text, secret redaction and valid Unicode (for transcripts, reports, requests
and the UI)."""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Mapping

# Not `typing.TYPE_CHECKING`: the transcript writer process imports this module and starts
# without `typing` (tests/test_import_hygiene.py); mypy reads the name alike.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

REDACTED = "[REDACTED]"
# Under 4 characters a key is no secret (62**3 values are guessed in seconds), and redacting it
# would garble ordinary text and show the key by where `[REDACTED]` lands. From 4 to 7 a key is
# matched only as a whole token, so a key "test" leaves "testing" alone; from 8, anywhere.
MIN_SECRET_LEN = 4
TOKEN_SECRET_LEN = 8

# Anything that may need stripping: C0 except tab/newline, DEL, C1, bidi overrides/isolates,
# and lone surrogates (a JSON "\\ud800" decodes to one; no terminal, file or database encodes
# it, so a print or write of it raises): those become U+FFFD, so the reader sees something was.
UNSAFE_CHARS = "\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_NEEDS_WORK = re.compile(f"[{UNSAFE_CHARS}]")

# Control strings: OSC, DCS, SOS, PM, APC in 7-bit (ESC ] P X ^ _) and 8-bit C1 form. The body
# is an unrolled loop (no backtracking) in which an ESC only counts as the start of ST `ESC \`.
# A newline ends one left open: it is dropped to its line's end, never the lines after it.
_STRING_START = r"(?:\x1b[\]PX^_]|[\x90\x98\x9d\x9e\x9f])"
_STRING_BODY = r"[^\x07\x1b\x9c\n]*(?:\x1b(?!\\)[^\x07\x1b\x9c\n]*)*"
_CSI_START = r"(?:\x1b\[|\x9b)"
_CSI_BODY = r"[\x30-\x3f]*[\x20-\x2f]*"

# Order matters: control strings and CSI before the generic ESC form, which would otherwise
# take `ESC [` or `ESC ]` as a complete two-byte sequence. A malformed or truncated sequence
# loses its introducer and parameters, so what is left is plain printable text.
_STRIP = re.compile(
    f"{_STRING_START}{_STRING_BODY}(?:\\x07|\\x1b\\\\|\\x9c|(?=\\n)|\\Z)"
    f"|{_CSI_START}{_CSI_BODY}[\\x40-\\x7e]?"
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]?"
    f"|[{UNSAFE_CHARS}]"
)

# A sequence that is still incomplete at the end of the text: a stream holds it back.
_INCOMPLETE_TAIL = re.compile(
    f"(?:{_STRING_START}{_STRING_BODY}|{_CSI_START}{_CSI_BODY}|\\x1b[\\x20-\\x2f]*)\\Z"
)

# A held-back sequence longer than this is shortened to its introducer plus its last char;
# that is equivalent (the body is dropped anyway) and bounds memory on hostile streams.
_MAX_HELD = 4096

_WHITESPACE = re.compile(r"\s+")


def _replacement(match: re.Match[str]) -> str:
    return "\ufffd" if "\ud800" <= match.group() <= "\udfff" else ""


def sanitize(text: str) -> str:
    """Strip escape sequences, control characters (but tab and newline) and bidi overrides;
    a lone surrogate becomes U+FFFD."""
    if _NEEDS_WORK.search(text) is None:
        return text
    return _STRIP.sub(_replacement, text)


class StreamSanitizer:
    """Sanitize a stream chunk by chunk; a sequence split across chunks never leaks a byte."""

    __slots__ = ("_held",)

    def __init__(self) -> None:
        self._held = ""

    def feed(self, chunk: str) -> str:
        """Return the safe text of `chunk`, holding back an incomplete trailing sequence."""
        data = self._held + chunk if self._held else chunk
        if _NEEDS_WORK.search(data) is None:
            self._held = ""
            return data
        tail = _INCOMPLETE_TAIL.search(data)
        if tail is None:
            self._held = ""
            return _STRIP.sub(_replacement, data)
        held = tail.group()
        if len(held) > _MAX_HELD:
            intro = 2 if held[0] == "\x1b" and held[1] in "[]PX^_" else 1
            held = held[:intro] + held[-1]
        self._held = held
        return _STRIP.sub(_replacement, data[: tail.start()])

    def flush(self) -> str:
        """End of stream: drop any incomplete held-back sequence."""
        # Whatever is held is an unterminated sequence, which sanitize() drops entirely.
        self._held = ""
        return ""

    @property
    def pending(self) -> bool:
        """Whether an incomplete sequence is being held back."""
        return bool(self._held)


def redact(text: str, secrets: Iterable[str]) -> str:
    """Replace each secret (at least 4 characters long) with `[REDACTED]`, also in the text
    that sanitizing would make of `text`."""
    pattern = _secrets_pattern(tuple(sorted(set(secrets))))
    if pattern is None:
        return text
    text = pattern.sub(REDACTED, text)
    # An escape sequence or a bidi mark inside a key hides it here, but sanitizing (for the
    # screen, a report) would give it back whole: then the text is kept sanitized, redacted.
    clean = sanitize(text)
    if clean is not text and pattern.search(clean) is not None:
        return pattern.sub(REDACTED, clean)
    return text


def redact_cut(text: str, secrets: Iterable[str]) -> str:
    """`text` with the start of a secret that it ends in (at least 4 characters of one of its
    forms, never the whole) replaced with `[REDACTED]`: the rest never came (a stream broke or
    was stopped mid-key), and the start alone would give most of the key away."""
    longest = 0
    for form in {f for s in secrets for f in secret_forms(s)}:
        for n in range(min(len(form) - 1, len(text)), longest, -1):
            if n < MIN_SECRET_LEN:
                break
            start = len(text) - n
            if text.endswith(form[:n]) and (
                len(form) >= TOKEN_SECRET_LEN or not _WORDLIKE.match(text[start - 1 : start])
            ):
                longest = n
                break
    return text[: len(text) - longest] + REDACTED if longest else text


# A character that continues a word: a short key next to one is part of a longer word there.
_WORD_CHAR = r"[\w-]"
_WORDLIKE = re.compile(_WORD_CHAR)


def secret_forms(secret: str) -> set[str]:
    """Every form a secret can take in what is written or shown: as it is; sanitized (its
    escape sequences, control characters and bidi marks stripped, as the screen, a transcript
    and `logs` show it); escaped, as an error's repr or JSON write it (`\\x1b`, `\\u001b`);
    and its control characters as shells and `cat -v` write them (`\\E`, `\\e`, `\\033`,
    `^[`). Forms under MIN_SECRET_LEN characters are left out."""
    import json  # here: the transcript writer process imports this module and never redacts

    clean = sanitize(secret)
    forms = {
        secret,
        clean,
        _WHITESPACE.sub(" ", clean).strip(),
        repr(secret)[1:-1],
        json.dumps(secret)[1:-1],
        json.dumps(secret, ensure_ascii=False)[1:-1],
    }
    if _CONTROL.search(secret):
        forms |= {_CONTROL.sub(spell, secret) for spell in _SHELL_SPELLINGS}
    return {form for form in forms if len(form) >= MIN_SECRET_LEN}


_CONTROL = re.compile("[\x00-\x1f\x7f]")
# How shells and tools write a control character: bash's `declare -p` and `printf %q` (`\E`
# for ESC), `echo -e` and C (`\e`, octal), and `cat -v`'s caret notation (`^[`, `^?`).
_SHELL_SPELLINGS = (
    lambda m: "\\E" if m[0] == "\x1b" else f"\\{ord(m[0]):03o}",
    lambda m: "\\e" if m[0] == "\x1b" else f"\\{ord(m[0]):03o}",
    lambda m: f"\\{ord(m[0]):03o}",
    lambda m: f"^{chr(ord(m[0]) ^ 0x40)}",
)


@functools.lru_cache(maxsize=64)
def _secrets_pattern(secrets: tuple[str, ...]) -> re.Pattern[str] | None:
    forms = {form for s in secrets for form in secret_forms(s)}
    # Longest first, so a secret that contains another is replaced whole.
    parts = [
        re.escape(s)
        if len(s) >= TOKEN_SECRET_LEN
        else rf"(?<!{_WORD_CHAR}){re.escape(s)}(?!{_WORD_CHAR})"
        for s in sorted(forms, key=len, reverse=True)
    ]
    return re.compile("|".join(parts)) if parts else None


# How far back from its limit a cut looks for whitespace (see `cut_at`).
CUT_WINDOW = 1024


def cut_at(text: str, limit: int) -> int:
    """Where to cut `text` longer than `limit` characters: after the last whitespace in the
    `CUT_WINDOW` characters up to `limit`, so that a key, which holds none, is never cut in
    two (its start alone would give most of it away, and no redaction recognises it); at
    `limit` when there is none. Text that is cut before it is redacted is cut here."""
    if len(text) <= limit:
        return len(text)
    space = max(text.rfind(c, max(0, limit - CUT_WINDOW), limit + 1) for c in " \t\n\r")
    return space + 1 if space >= 0 else limit


def one_line(text: str, width: int | None = None) -> str:
    """Sanitize, collapse all whitespace to single spaces and truncate to `width` with `…`."""
    flat = _WHITESPACE.sub(" ", sanitize(text)).strip()
    if width is not None and len(flat) > width:
        return flat[: width - 1] + "…" if width > 0 else ""
    return flat


def quoted(text: str, width: int = 60) -> str:
    """`text` a user typed, quoted as Python writes it for an error that names it: an escape
    sequence, a newline or a trailing space shows escaped or kept, where `one_line` would drop
    it and say "no child 'k0'" of the `k0 ` that was typed. Cut at `width` characters, `…`."""
    shown = repr(text[:width])
    return shown + "…" if len(text) > width else shown


def last_line(text: str, width: int) -> str:
    """The last non-empty line of a message of many lines (an error whose reason comes last),
    as `one_line` gives it; "" when there is none."""
    lines = [line for line in text.splitlines() if line.strip()]
    return one_line(lines[-1], width) if lines else ""


def valid_text(text: str) -> str:
    """`text` as valid Unicode, which UTF-8 (a request body, a file, SQLite) can encode: a
    surrogate pair split over two JSON escapes is joined again, a lone surrogate (a JSON
    "\\ud800" decodes to one) becomes U+FFFD."""
    if text.isascii():
        return text
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def each_string(value: Any, fn: Callable[[str], str]) -> Any:
    """JSON-like `value` (a tool call's arguments) with `fn` applied to every string in it, the
    keys of its objects included."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, Mapping):
        return {fn(str(k)): each_string(v, fn) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [each_string(v, fn) for v in value]
    return value
