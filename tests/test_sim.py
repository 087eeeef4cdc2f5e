"""The sim provider's per-turn draws and planned text: deterministic for a seed."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import pytest
from flightdeck.engine.child.tools import TOOL_SPECS
from flightdeck.engine.inputs.settings import default_sim_route
from flightdeck.engine.providers.base import (
    Interrupted,
    Message,
    TextDelta,
    TurnRequest,
    UsageEvent,
)
from flightdeck.engine.providers.sim import (
    _SENTENCES,
    SimProvider,
    SimStream,
    _body,
    turn_random,
)

from helpers import HANG_S


def test_a_turns_draws_are_fixed_by_seed_child_and_turn() -> None:
    def draws(seed: int, child: str, turn: int) -> list[float]:
        rng = turn_random(seed, child, turn)
        return [rng.random() for _ in range(20)]

    first = draws(0, "c1", 0)
    assert first == draws(0, "c1", 0)
    assert all(
        first != other for other in (draws(1, "c1", 0), draws(0, "c2", 0), draws(0, "c1", 1))
    )


def test_a_body_is_three_to_nine_whole_sentences() -> None:
    counts = set()
    for i in range(300):
        body = _body(random.Random(i))
        assert body.endswith(".") and not body.startswith(" ")
        sentences = body.split(". ")
        assert all(s.rstrip(".") + "." in _SENTENCES for s in sentences), body
        counts.add(len(sentences))
    assert counts == set(range(3, 10))


def _answer(provider: SimProvider, child: str) -> tuple[str, UsageEvent]:
    request = TurnRequest(
        system="sys",
        messages=(Message("user", "Review PR 7\nmore"),),
        tools=TOOL_SPECS,
        max_tokens=100,
        child_id=child,
    )
    events = list(provider.open(request))
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    usage = next(e for e in events if isinstance(e, UsageEvent))
    return text, usage


def test_a_turn_replays_for_a_seed_and_changes_with_it() -> None:
    def route(seed: int) -> SimProvider:
        # Sped up: what a turn draws does not depend on the speed, and at the real 60 tok/s each
        # answer streamed for seconds.
        return SimProvider(
            default_sim_route(tool_turns=0, latency_ms=0, seed=seed, time_scale=0.001)
        )

    text, usage = _answer(route(1), "c1")
    assert text.startswith("Result for: Review PR 7\n")
    assert (text, usage) == _answer(route(1), "c1")
    assert text != _answer(route(2), "c1")[0]
    assert usage.usage.output_tokens == (len(text) + 3) // 4


def test_a_childs_turns_do_not_depend_on_how_its_siblings_interleave() -> None:
    def route() -> SimProvider:
        # No prompt cache: which turn writes the shared prefix does depend on the order.
        options = {"tool_turns": 0, "latency_ms": 0, "time_scale": 0.001, "cache": False}
        return SimProvider(default_sim_route(seed=5, **options))

    apart = route()
    a = [_answer(apart, "a") for _ in range(3)]
    b = [_answer(apart, "b") for _ in range(3)]
    mixed = route()
    interleaved = [(_answer(mixed, "b"), _answer(mixed, "a")) for _ in range(3)]
    assert [x for _, x in interleaved] == a
    assert [y for y, _ in interleaved] == b


def _tool_after(listing: str) -> list[tuple[str, dict[str, object]]]:
    """The tool call the sim makes after `list_dir` answered `listing` (none: it answers)."""
    from flightdeck.engine.providers.base import ToolCall, ToolCallEvent

    provider = SimProvider(
        default_sim_route(tool_turns=2, latency_ms=0, time_scale=0.001, fail_rate=0.0)
    )
    listed = ToolCall("call_1", "list_dir", {"path": "."})
    request = TurnRequest(
        system="sys",
        messages=(
            Message("user", "Review PR 7"),
            Message("assistant", "Looking.", (listed,)),
            Message("tool", listing, tool_call_id="call_1", name="list_dir"),
        ),
        tools=TOOL_SPECS,
        max_tokens=100,
        child_id="c1",
    )
    events = list(provider.open(request))
    return [(e.call.name, dict(e.call.arguments)) for e in events if isinstance(e, ToolCallEvent)]


def test_the_sim_reads_only_files_its_listing_named() -> None:
    # An empty workspace (every batch without one) answers "(empty)": that is not a file to
    # read, nor is a folder, a long listing's "… N more", or an error. It looks again.
    again = [("list_dir", {"path": "."})]
    assert _tool_after("(empty)") == again
    assert _tool_after("docs/\n… 12 more") == again
    assert _tool_after("error: 'x' is not a folder") == again
    assert _tool_after("docs/\nnotes.md\n… 3 more") == [("read_file", {"path": "notes.md"})]
    assert _tool_after("error.log") == [("read_file", {"path": "error.log"})]  # a real file


def _waits(monkeypatch: pytest.MonkeyPatch, **options: object) -> tuple[list[float], int]:
    """The delays one answer asks for, in order (none is slept), and its output tokens."""
    waits: list[float] = []
    monkeypatch.setattr(SimStream, "_wait", lambda self, seconds: waits.append(seconds))
    provider = SimProvider(default_sim_route(tool_turns=0, seed=3, **options))  # type: ignore[arg-type]
    request = TurnRequest("sys", (Message("user", "Review PR 7"),), TOOL_SPECS, 100, "c1")
    events = list(provider.open(request))
    [usage] = [e.usage for e in events if isinstance(e, UsageEvent)]
    return waits, usage.output_tokens


def test_latency_and_speed_are_what_the_route_says_scaled_by_time_scale(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Latency is drawn in 0.6-1.4x latency_ms; the answer streams at tokens_per_s.
    waits, tokens = _waits(monkeypatch, latency_ms=150, tokens_per_s=400, time_scale=1.0)
    assert 0.6 * 0.150 <= waits[0] <= 1.4 * 0.150
    assert sum(waits[1:]) == pytest.approx(tokens / 400)
    # The same answer in a hundredth of the time (in fewer, larger chunks).
    scaled, scaled_tokens = _waits(monkeypatch, latency_ms=150, tokens_per_s=400, time_scale=0.01)
    assert scaled_tokens == tokens
    assert scaled[0] == pytest.approx(waits[0] * 0.01)
    assert sum(scaled[1:]) == pytest.approx(sum(waits[1:]) * 0.01)


def test_a_held_call_waits_for_its_release_file_and_a_stop_ends_the_wait(
    tmp_path: Path,
) -> None:
    route = default_sim_route(tool_turns=0, time_scale=0.001, hold_dir=str(tmp_path))
    provider = SimProvider(route)

    def answer(child: str) -> tuple[threading.Thread, list[object]]:
        events: list[object] = []
        request = TurnRequest("sys", (Message("user", "Review"),), TOOL_SPECS, 100, child)
        stream = provider.open(request)
        streams[child] = stream

        def run() -> None:
            try:
                events.extend(stream)
            except Interrupted:
                events.append("interrupted")

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread, events

    streams: dict[str, SimStream] = {}
    (c1, c1_events), (c2, c2_events) = answer("c1"), answer("c2")
    c1.join(0.3)
    assert c1.is_alive() and c1_events == []  # held: not a token
    (tmp_path / "c1@0").touch()  # c1's first call only
    c1.join(HANG_S)
    assert not c1.is_alive() and isinstance(c1_events[-1], UsageEvent)
    c1_again, c1_again_events = answer("c1")  # its second call: held again
    streams["c2"].close()  # a stop ends a held call at once, the prompt billed
    c2.join(HANG_S)
    assert c2_events[-1] == "interrupted" and isinstance(c2_events[-2], UsageEvent)
    assert c2_events[-2].usage.output_tokens == 0  # the prompt billed, nothing written
    c1_again.join(0.3)
    assert c1_again.is_alive() and c1_again_events == []
    (tmp_path / "all").touch()
    c1_again.join(HANG_S)
    assert isinstance(c1_again_events[-1], UsageEvent)


def test_a_stop_before_the_first_token_still_bills_the_prompt() -> None:
    # The sim, like a server, has read the prompt while the first token is on its way.
    provider = SimProvider(default_sim_route(tool_turns=0, latency_ms=10_000, time_scale=1.0))
    request = TurnRequest("sys", (Message("user", "Review PR 7"),), TOOL_SPECS, 100, "c1")
    stream = provider.open(request)
    threading.Timer(0.05, stream.close).start()
    events: list[object] = []
    with pytest.raises(Interrupted):
        events.extend(stream)
    [billed] = [e.usage for e in events if isinstance(e, UsageEvent)]
    assert billed.prompt_tokens > 0 and billed.output_tokens == 0
