"""Error signatures: the same failure in different children groups under one line."""

from __future__ import annotations

import pytest
from flightdeck.engine.triage.signatures import SIGNATURE_CHARS, error_signature


@pytest.mark.parametrize(
    ("message", "signature"),
    [
        (
            "rate limited (429) on req_8f3a2b, retry in 3.2s",
            "rate limited (<n>) on <id>, retry in <n>s",
        ),
        (
            "tool read_file failed: /tmp/work/c0012/a.py not found",
            "tool read_file failed: <path> not found",
        ),
        ("child c0031 stalled: no activity for 61.5s", "child <id> stalled: no activity for <n>s"),
        (
            "exit status 2: error: 'foo' is not a valid option",
            "exit status <n>: error: <q> is not a valid option",
        ),
        ("upstream 0a1b2c3d4e5f at https://api.example.com/v1/x", "upstream <id> at <url>"),
        ("job 123e4567-e89b-12d3-a456-426614174000 lost", "job <id> lost"),
        ("  two\t spaces  \nand a second line", "two spaces"),
    ],
)
def test_ids_numbers_paths_and_quoted_values_are_normalized(message: str, signature: str) -> None:
    assert error_signature(message) == signature


def test_two_children_with_the_same_failure_share_a_signature() -> None:
    a = error_signature("HTTP 503 from server, retry 2/6 in 4.1s (request req_aa11)")
    b = error_signature("HTTP 503 from server, retry 5/6 in 12.9s (request req_bb22)")
    assert a == b
    assert a != error_signature("HTTP 400 bad request: 'model' is required")


def test_no_message_has_no_signature_and_a_long_one_is_cut() -> None:
    assert error_signature(None) is None
    assert error_signature(" \n") is None
    long = error_signature("word " * 100)
    assert long is not None and len(long) == SIGNATURE_CHARS and long.endswith("…")


def test_escape_sequences_are_stripped_before_the_placeholders() -> None:
    # Found by an audit: `ESC[31m` became `ESC[<n>m`, which sanitizing on screen left as `>m`,
    # and `<url>` took an OSC's BEL, so the rest of the message was stripped as its body.
    assert error_signature("400 bad \x1b[31mRED\x1b[0m input") == "<n> bad RED input"
    hyperlink = "bad \x1b]8;;http://evil\x07click\x1b]8;;\x07 here, retry in 3s"
    assert error_signature(hyperlink) == "bad click here, retry in <n>s"
