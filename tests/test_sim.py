"""The sim provider's per-turn draws and planned text: deterministic for a seed."""

from __future__ import annotations

import random
import threading

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
from flightdeck.engine.providers.sim import _SENTENCES, SimProvider, _body, turn_random


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


def _timed(**options: object) -> tuple[float, float, int]:
    """Seconds to the first text and to the end of one answer, and its output tokens."""
    import time

    provider = SimProvider(default_sim_route(tool_turns=0, seed=3, **options))  # type: ignore[arg-type]
    request = TurnRequest(
        system="sys",
        messages=(Message("user", "Review PR 7"),),
        tools=TOOL_SPECS,
        max_tokens=100,
        child_id="c1",
    )
    t0 = time.monotonic()
    first = None
    tokens = 0
    for event in provider.open(request):
        if first is None and isinstance(event, TextDelta):
            first = time.monotonic() - t0
        if isinstance(event, UsageEvent):
            tokens = event.usage.output_tokens
    assert first is not None
    return first, time.monotonic() - t0, tokens


def test_latency_and_speed_are_what_the_route_says_scaled_by_time_scale() -> None:
    # Waits never end early, so the lower bounds are exact: latency is drawn in 0.6-1.4x
    # latency_ms, and the answer streams at tokens_per_s (less the first chunk's tokens).
    first, total, tokens = _timed(latency_ms=150, tokens_per_s=400, time_scale=1.0)
    assert first >= 0.6 * 0.150
    assert total - first >= (tokens - 4) / 400
    # The same answer at a hundredth of the time: only an upper bound can show that, so it is
    # loose (a tenth of the lower bound above).
    _, scaled_total, scaled_tokens = _timed(latency_ms=150, tokens_per_s=400, time_scale=0.01)
    assert scaled_tokens == tokens
    assert scaled_total < total / 10


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
