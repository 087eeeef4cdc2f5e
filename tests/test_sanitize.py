"""Terminal-safe text: escape sequences, controls, bidi, streaming splits, redaction."""

from __future__ import annotations

import random

import pytest
from flightdeck.engine.sanitize import (
    REDACTED,
    StreamSanitizer,
    each_string,
    one_line,
    redact,
    sanitize,
    valid_text,
)

ESC = "\x1b"
ST = "\x1b\\"


@pytest.mark.parametrize(
    ("raw", "safe"),
    [
        (f"a{ESC}[31mred{ESC}[0m", "ared"),
        (f"a{ESC}[?1049h{ESC}[2J{ESC}[1;1Hb", "ab"),
        (f"a{ESC}[38;2;255;0;0mb", "ab"),
        (f"x{ESC}]0;evil title\x07y", "xy"),
        (f"x{ESC}]8;;https://evil.example{ST}link{ESC}]8;;{ST}z", "xlinkz"),
        (f"x{ESC}]52;c;ZXZpbA==\x07y", "xy"),  # clipboard write
        (f"a{ESC}Pq#0;2;0;0;0{ST}b", "ab"),  # DCS (sixel)
        (f"a{ESC}X sos {ST}b{ESC}^ pm {ST}c{ESC}_ apc {ST}d", "abcd"),
        (f"a{ESC}(Bb{ESC}#8c{ESC}7d{ESC}=e", "abcde"),
        (f"a{ESC}\\b", "ab"),  # stray ST
        ("a\x9b31mb", "ab"),  # 8-bit CSI
        ("a\x9d0;title\x9cb", "ab"),  # 8-bit OSC ended by 8-bit ST
        ("a\x9d0;title\x07b", "ab"),
        ("a\x90q\x9cb\x98s\x9cc\x9ep\x9cd\x9fa\x9ce", "abcde"),
        (f"a{ESC}]0;title{ESC}[31m still title\x07b", "ab"),  # ESC inside OSC is not ST
        # Unterminated: dropped to the end of its line; the lines after it stay (a stray OSC in
        # a CLI's output or a file once hid every line after it).
        (f"a{ESC}]0;never ends\nmore", "a\nmore"),
        (f"a{ESC}]0;never ends", "a"),
        (f"a{ESC}Pq never ends", "a"),
        (f"a{ESC}[12", "a"),  # truncated CSI at the end
        (f"a{ESC}", "a"),
        (f"a{ESC}[12\nb", "a\nb"),  # malformed CSI: introducer and params go
        ("line\roverwrite", "lineoverwrite"),
        ("a\r\nb", "a\nb"),
        ("\x00\x01\x07\x08\x0b\x0c\x0e\x1f\x7f", ""),
        ("a\x80\x85\x9c\x9ab", "ab"),
        ("a\x9fb", "a"),  # a lone 8-bit APC opens a string that never ends
        ("safe\u202eevil\u202c \u2066iso\u2069 \u202a\u202b\u202d", "safeevil iso "),
        ("tab\tand\nnewline stay", "tab\tand\nnewline stay"),
        ("unicode ✓ │ é 日本 🚀", "unicode ✓ │ é 日本 🚀"),
        ("bad \ud800 and \udfff end", "bad \ufffd and \ufffd end"),  # lone surrogates
        (f"\udc80{ESC}[31m\ud83d", "\ufffd\ufffd"),
    ],
)
def test_sanitize(raw: str, safe: str) -> None:
    assert sanitize(raw) == safe


def test_sanitize_returns_clean_text_unchanged() -> None:
    text = "plain text, nothing to strip\n\tok"
    assert sanitize(text) is text


def test_sanitized_text_has_no_controls() -> None:
    rng = random.Random(7)
    alphabet = [ESC, "[", "]", "P", "\\", "\x07", "\x9b", "\x9c", "\x9d", "\r", "1", ";", "m", "a"]
    for _ in range(2000):
        raw = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 20)))
        out = sanitize(raw)
        assert not any(ord(c) < 0x20 and c not in "\t\n" for c in out), repr(raw)
        assert not any(0x7F <= ord(c) <= 0x9F for c in out), repr(raw)


TRICKY = (
    f"hello {ESC}[1;31mred{ESC}[0m {ESC}]0;title\x07 after\r\n"
    f"{ESC}]8;;http://x{ST}link{ESC}]8;;{ST} \x9b2J\x9d0;t\x9c"
    f"{ESC}Pq#0{ST}{ESC}(B{ESC}]0;a{ESC}b\x07 end\u202e!\t{ESC}[38;5;1"
)


def _stream(chunks: list[str]) -> str:
    san = StreamSanitizer()
    return "".join(san.feed(c) for c in chunks) + san.flush()


def test_stream_every_two_way_split_matches_whole() -> None:
    expected = sanitize(TRICKY)
    for i in range(len(TRICKY) + 1):
        assert _stream([TRICKY[:i], TRICKY[i:]]) == expected, i


def test_stream_one_char_at_a_time_matches_whole() -> None:
    assert _stream(list(TRICKY)) == sanitize(TRICKY)


def test_stream_random_chunkings_match_whole() -> None:
    rng = random.Random(11)
    alphabet = [ESC, "[", "]", "P", "_", "\\", "\x07", "\x9b", "\x9c", "\x9d", "\r", "1", "m", "a"]
    for _ in range(500):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 30)))
        cuts = sorted(rng.sample(range(len(text) + 1), k=min(len(text) + 1, rng.randint(0, 5))))
        chunks = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
        assert _stream(chunks) == sanitize(text), (text, chunks)


def test_sanitized_text_always_encodes() -> None:
    """A lone surrogate (JSON "\\ud800" decodes to one) would make a print or a write raise."""
    raw = f"error \ud800 from {ESC}]0;t\x07 a server \udfff"
    for out in (sanitize(raw), one_line(raw), _stream(list(raw))):
        out.encode("utf-8")  # strict: raises on a surrogate
        assert out.count("\ufffd") == 2, out


def test_stream_holds_back_incomplete_sequence() -> None:
    san = StreamSanitizer()
    assert san.feed("abc\x1b") == "abc"
    assert san.pending
    assert san.feed("[3") == ""
    assert san.feed("1mred") == "red"
    assert not san.pending
    assert san.feed(f"x{ESC}]0;tit") == "x"
    assert san.feed("le\x1b") == ""
    assert san.feed("\\y") == "y"


def test_stream_flush_drops_incomplete_sequence() -> None:
    san = StreamSanitizer()
    assert san.feed("ok\x1b[3") == "ok"
    assert san.flush() == ""
    assert not san.pending
    assert san.feed("1mnext") == "1mnext"  # a fresh stream: the old introducer is gone


def test_stream_bounds_memory_on_endless_control_string() -> None:
    san = StreamSanitizer()
    assert san.feed("a\x1b]0;") == "a"
    for _ in range(100):
        assert san.feed("x" * 10_000) == ""
    assert len(san._held) < 10_000
    assert san.feed("\x07tail") == "tail"


def test_redact() -> None:
    key = "sk-abcdef123456"
    text = f"key={key} again {key}; short=abc"
    assert redact(text, [key, "abc", ""]) == f"key={REDACTED} again {REDACTED}; short=abc"


def test_redact_longest_secret_first() -> None:
    assert redact("token-1234567890", ["token-1234", "token-1234567890"]) == REDACTED


@pytest.mark.parametrize("hidden", ["\x1b[31m", "\u202e", "\x1b]0;t\x07", "\x07"])
def test_a_key_that_sanitizing_would_reveal_is_redacted(hidden: str) -> None:
    key = "sk-live-0123456789"
    echoed = f"bad key {key[:7]}{hidden}{key[7:]}!"
    out = redact(echoed, [key])
    assert key not in sanitize(out) and key not in one_line(out)
    assert out == f"bad key {REDACTED}!"


CANARY = "sk-CANARY\x1b[31mESCkey4d5e6f70"  # the reported key: an escape sequence inside


@pytest.mark.parametrize(
    "form",
    [
        CANARY,  # as it is
        "sk-CANARYESCkey4d5e6f70",  # stripped, as the screen, a transcript and logs show it
        "sk-CANARY\\x1b[31mESCkey4d5e6f70",  # escaped by repr: an error line
        "sk-CANARY\\u001b[31mESCkey4d5e6f70",  # escaped by JSON
    ],
)
def test_a_key_is_redacted_in_every_form_sanitizing_and_escaping_give_it(form: str) -> None:
    # Stripped, the key was written to transcripts and shown by `logs` whole; escaped, it was
    # written into a read_file error line.
    out = redact(f"error: '{form}' is not a file", [CANARY])
    assert out == f"error: '{REDACTED}' is not a file"
    for shown in (out, sanitize(out), one_line(out)):
        assert "CANARY" not in shown and "ESCkey" not in shown


def test_redact_keeps_raw_text_when_no_key_hides_in_it() -> None:
    assert redact("\x1b[1mbold\x1b[0m sk-live-0123456789", ["sk-live-0123456789"]) == (
        f"\x1b[1mbold\x1b[0m {REDACTED}"
    )


def test_a_short_key_is_redacted_as_a_whole_token() -> None:
    assert redact("key=x9Q2, again x9Q2", ["x9Q2"]) == f"key={REDACTED}, again {REDACTED}"
    assert redact("ollama serves ollama-7b", ["ollama"]) == f"{REDACTED} serves ollama-7b"
    assert redact("testing", ["test"]) == "testing"
    assert redact("a abc b", ["abc"]) == "a abc b"  # under 4: no secret, not redacted


def test_one_line() -> None:
    assert one_line("  a\n\tb   c\r\n\x1b[31md ") == "a b c d"
    assert one_line("abcdefgh", width=5) == "abcd…"
    assert one_line("abcde", width=5) == "abcde"
    assert one_line("abc", width=0) == ""
    assert one_line("a\u2028b") == "a b"  # unicode line separator


def test_valid_text_joins_a_split_surrogate_pair_and_replaces_a_lone_one() -> None:
    assert valid_text("plain") == "plain"
    assert valid_text("a\ud83d\ude00b") == "a\U0001f600b"  # two JSON escapes, one character
    assert valid_text("a\ud800b\udc00") == "a\ufffdb\ufffd"
    assert valid_text("é\ud800").encode() == "é\ufffd".encode()


def test_each_string_reaches_every_string_of_a_json_value_and_its_keys() -> None:
    value = {"k\ud800": ["a\ud800", {"n": 1, "s": "b\ud800"}], "t": ("c\ud800",), "x": None}
    assert each_string(value, valid_text) == {
        "k\ufffd": ["a\ufffd", {"n": 1, "s": "b\ufffd"}],
        "t": ["c\ufffd"],
        "x": None,
    }


def test_an_open_control_string_ends_at_its_line() -> None:
    text = "+red\x1b]0;never closed\n+++ b/z.txt\n+after\x1bP\n"
    assert sanitize(text) == "+red\n+++ b/z.txt\n+after\n"


def test_a_stream_with_an_escape_sequence_left_open_keeps_its_later_lines() -> None:
    stream = StreamSanitizer()
    chunks = ["Hello \x1b]0;oops", " line one\nline two\n", "line three\n"]
    out = "".join(stream.feed(c) for c in chunks) + stream.flush()
    assert out == "Hello \nline two\nline three\n"
