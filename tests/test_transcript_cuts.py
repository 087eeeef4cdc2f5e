"""An operator line never breaks a model line inside a word: the line is cut after its last
whole word, marked `↩`, and the rest goes on after it (the mark always has a continuation);
a response cut off by steer --now or a stop says `(interrupted)` where it ends."""

from __future__ import annotations

import random
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from flightdeck.engine.model import SteerState
from flightdeck.engine.providers.base import TextDelta
from flightdeck.engine.records import lines
from flightdeck.engine.records.lines import CONTINUED, LineFormatter, parse

from helpers import HANG_S, batch, settings, sim_route, start, until

REPLY = "the change looks correct overall but the error path needs a test\n"


def assistant(data: bytes) -> list[str]:
    """The assistant lines' texts (with their marks) in `data`."""
    out = []
    for raw in data.decode().splitlines():
        line = parse(raw)
        if line is not None and line.role == "assistant":
            out.append(line.text + (CONTINUED if line.continued else ""))
    return out


@pytest.mark.parametrize("seed", range(40))
def test_lines_cut_by_other_lines_break_only_between_words(seed: int) -> None:
    rng = random.Random(seed)
    text = " ".join(
        rng.choice(["a", "looks", "correct", "the", "change", "x" * 9]) for _ in range(40)
    )
    fmt = LineFormatter()
    data = b""
    pos = 0
    while pos < len(text):
        step = rng.randint(1, 7)
        data += fmt.stream(text[pos : pos + step], 0.0)
        pos += step
        if rng.random() < 0.4:
            data += fmt.write("operator", "steer: focus", 0.0)
    data += fmt.stream("\n", 0.0) + fmt.end_stream(0.0)
    parts = assistant(data)
    assert "".join(p.removesuffix(CONTINUED) for p in parts) == text  # reads whole
    words = set(text.split())
    for part in parts:
        if part.endswith(CONTINUED):
            # Cut after a word: the line's words are whole, and it ends with the space.
            body = part.removesuffix(CONTINUED)
            assert body.endswith(" ") and set(body.split()) <= words, part
    assert not parts[-1].endswith(CONTINUED)  # every mark is followed by its continuation


def test_a_steer_mid_word_waits_for_the_word_and_a_cut_response_says_interrupted() -> None:
    fmt = LineFormatter()
    data = fmt.stream("the change lo", 0.0)
    data += fmt.write("operator", "steer (next turn): add tests", 0.0)
    data += fmt.stream("oks correct\n", 0.0)
    data += fmt.stream("and the ret", 0.0)
    data += fmt.write("operator", "steer (now): stop", 0.0)
    data += fmt.end_stream(0.0, interrupted=True)
    assert assistant(data) == [
        "the change ↩",
        "looks correct",
        "and the ↩",
        "ret (interrupted)",
    ]
    # A partial line with no operator line in it is cut off the same way.
    fmt = LineFormatter()
    cut = fmt.stream("half a sent", 0.0) + fmt.end_stream(0.0, interrupted=True)
    assert assistant(cut) == ["half a sent (interrupted)"]
    # And a stream that ended on its own says nothing of the kind.
    assert assistant(fmt.stream("done", 0.0) + fmt.end_stream(0.0)) == ["done"]


class _Held:
    """A provider whose first response streams `first`, then waits (the test's steer comes
    then) until it is closed or let go, then streams `rest`; later responses say `Understood.`"""

    name = "sim"
    model = "held"
    secrets: tuple[str, ...] = ()

    def __init__(self, first: str, rest: str) -> None:
        self.first, self.rest = first, rest
        self.waiting = threading.Event()
        self.go = threading.Event()
        self.calls = 0

    def open(self, request: object) -> object:
        provider = self
        provider.calls += 1
        call = provider.calls

        class Stream:
            closed = False

            def __iter__(self) -> Iterator[TextDelta]:
                if call > 1:
                    yield TextDelta("Understood.\n")
                    return
                yield TextDelta(provider.first)
                provider.waiting.set()
                provider.go.wait(HANG_S)
                if not self.closed:
                    yield TextDelta(provider.rest)

            def close(self) -> None:
                self.closed = True
                provider.go.set()

        return Stream()

    def close(self) -> None:
        pass


def _transcript_lines(tmp_path: Path, now: bool) -> list[str]:
    provider = _Held("Looking at the change: the ret", "urn value is right.\n")
    engine = start(
        batch(1), settings(sim_route(tool_turns=0)), tmp_path, providers={"sim": provider}
    )
    try:
        assert provider.waiting.wait(60)
        log = Path(engine.snapshot().children[0].transcript)
        engine.steer(["t0000"], "add tests", now=now)
        # The operator's line is in, mid-reply.
        until(lambda: log.exists() and "add tests" in log.read_text())
        provider.go.set()
        until(lambda: engine.snapshot().children[0].steers[0].state is SteerState.DELIVERED)
        assert engine.wait(60)
    finally:
        engine.close()
    return [
        p.text + (CONTINUED if p.continued else "")
        for p in map(parse, log.read_text().splitlines())
        if p and p.role == "assistant"
    ]


def test_a_next_turn_steer_mid_reply_leaves_the_reply_whole(tmp_path: Path) -> None:
    replies = _transcript_lines(tmp_path, now=False)
    assert replies[:2] == ["Looking at the change: the ↩", "return value is right."]


def test_a_steer_now_mid_reply_marks_where_the_response_was_cut(tmp_path: Path) -> None:
    replies = _transcript_lines(tmp_path, now=True)
    assert replies[:2] == ["Looking at the change: the ↩", "ret (interrupted)"]
    assert "Understood." in replies


def test_the_wire_carries_the_interrupted_end() -> None:
    from flightdeck.engine.records.events import EndStream, decode, encode

    events, _ = decode(encode([EndStream("c1.log", 1.0, True), EndStream("c1.log", 2.0)]))
    assert events == [EndStream("c1.log", 1.0, True), EndStream("c1.log", 2.0, False)]
    assert lines.INTERRUPTED.strip() == "(interrupted)"
