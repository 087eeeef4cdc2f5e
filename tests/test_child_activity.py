"""The activity token of one child as a reader sees it: before, during and after a tool call;
the estimate of its call in progress."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from flightdeck.engine.child.activity import InFlight
from flightdeck.engine.child.loop import ModelRunner
from flightdeck.engine.child.state import Child
from flightdeck.engine.child.tools import Toolbox
from flightdeck.engine.control.retry import RetryPolicy
from flightdeck.engine.inputs.settings import RetrySettings
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.model import ChildStatus, Question, Usage
from flightdeck.engine.providers.base import (
    StreamEvent,
    TextDelta,
    ToolCall,
    ToolCallEvent,
    TurnRequest,
    UsageEvent,
)
from flightdeck.engine.records.meter import Meter
from flightdeck.engine.records.sink import TranscriptSink

from helpers import HANG_S, sim_route, until


class TwoTurns:
    """Turn 1 asks for list_dir, turn 2 answers."""

    name = "fake"
    model = "fake-1"
    secrets: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.turns = 0

    def open(self, request: TurnRequest) -> TwoTurns.Stream:
        self.turns += 1
        if self.turns == 1:
            events: list[StreamEvent] = [
                TextDelta("Looking first.\n"),
                ToolCallEvent(ToolCall("t1", "list_dir", {"path": "."})),
            ]
        else:
            events = [TextDelta("All done.\n")]
        return TwoTurns.Stream([*events, UsageEvent(Usage(10, 5))])

    def close(self) -> None: ...

    class Stream:
        def __init__(self, events: list[StreamEvent]) -> None:
            self.events = events

        def __iter__(self) -> Iterator[StreamEvent]:
            return iter(self.events)

        def close(self) -> None: ...


class HeldTools(Toolbox):
    """A toolbox whose calls wait until the test lets them finish."""

    def __init__(self, workspace: Path) -> None:
        super().__init__(workspace)
        self.entered = threading.Event()
        self.release = threading.Event()

    def run(self, name: str, arguments: Mapping[str, Any]) -> str:
        self.entered.set()
        assert self.release.wait(60)
        return super().run(name, arguments)


def test_activity_token_tracks_calls_turns_and_the_running_tool(tmp_path: Path) -> None:
    now = [100.0]

    def clock() -> float:
        now[0] += 0.5
        return now[0]

    tools = HeldTools(tmp_path)
    facts: list[object] = []
    child = make_child(tmp_path, facts, tools=tools, clock=clock)
    queued = child.row().activity
    assert (queued.api_calls, queued.turns, queued.last_activity_ts) == (0, 0, None)

    worker = threading.Thread(target=child.run)
    worker.start()
    assert tools.entered.wait(60)
    during = child.row()
    act = during.activity
    assert during.status is ChildStatus.RUNNING
    assert (act.api_calls, act.tool_calls, act.turns) == (1, 1, 1)
    assert act.current_tool == "list_dir" and act.text == "tool: list_dir"
    assert act.tool_started_ts is not None and act.last_activity_ts == act.tool_started_ts
    assert child.in_tool and child.last_activity == act.last_activity_ts

    tools.release.set()
    worker.join(HANG_S)
    until(lambda: bool(facts))
    done = child.row()
    act = done.activity
    assert done.status is ChildStatus.COMPLETED and done.result == "All done.\n"
    assert (act.api_calls, act.tool_calls, act.turns) == (2, 1, 2)
    assert act.current_tool is None and act.tool_started_ts is None
    assert act.text == "completed" and not child.in_tool
    before = during.activity.last_activity_ts
    assert before is not None and act.last_activity_ts is not None
    assert act.last_activity_ts > before
    assert done.usage == Usage(20, 10)
    assert child.row() is done  # unchanged since: the frozen row is reused, not rebuilt


def make_child(
    tmp_path: Path,
    facts: list[object],
    provider: TwoTurns | HeldStream | None = None,
    tools: Toolbox | None = None,
    clock: Callable[[], float] = lambda: 100.0,
    max_turns: int = 30,
    sink: TranscriptSink | None = None,
) -> Child:
    route = sim_route()
    runner = ModelRunner(
        route.name,
        provider or TwoTurns(),
        RetryPolicy(RetrySettings()),
        tools or Toolbox(tmp_path),
        Meter(),
    )
    return Child(
        Task(id="c1", goal="Look around", seq=0, max_turns=max_turns),
        route,
        runner,
        str(tmp_path / "c1.log"),
        clock,
        facts.append,
        queued_ts=0.0,
        sink=sink,
    )


def test_an_ended_child_keeps_no_transcript_writer_and_a_later_line_still_lands(
    tmp_path: Path,
) -> None:
    """A batch keeps every child to its end, so its writer (a lock and its state) goes when it
    ends; an operator's line after that is written all the same, after the last one."""
    sink = TranscriptSink()
    try:
        child = make_child(tmp_path, [], sink=sink)
        running = weakref.ref(child.transcript)
        child.run()
        assert child.row().status is ChildStatus.COMPLETED
        gc.collect()
        assert running() is None
        child.transcript.write("operator", "stop requested")
        sink.flush()
    finally:
        sink.close()
    lines = (tmp_path / "c1.log").read_text(encoding="utf-8").splitlines()
    assert lines[-2].endswith("engine    │ completed")
    assert lines[-1].endswith("operator  │ stop requested")


def test_a_child_that_ended_before_its_thread_ran_stays_ended(tmp_path: Path) -> None:
    # Stopped (or abandoned by the watchdog) while it waited in the pool's queue: when a
    # thread finally takes it, it must not come back as running.
    facts: list[object] = []
    child = make_child(tmp_path, facts)
    assert child.finalize(ChildStatus.STOPPED, "stopped by operator before start")
    child.run()
    row = child.row()
    assert row.status is ChildStatus.STOPPED and row.started_ts is None
    assert row.activity.api_calls == 0
    lines = (tmp_path / "c1.log").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1 and lines[0].endswith("stopped: stopped by operator before start")


def test_an_ended_child_asks_nothing_even_before_its_question_is_cleared(
    tmp_path: Path,
) -> None:
    # The coordinator clears a stopped child's question a moment after its end: no row in
    # between may say the child still waits on an answer (a loaded run saw one).
    child = make_child(tmp_path, [])
    child.operator.ask(Question("Ship it?", 100.0))
    assert child.row().question == Question("Ship it?", 100.0)
    assert child.finalize(ChildStatus.STOPPED, "stopped by operator")
    assert child.operator.question is not None  # not cleared yet
    assert child.row().question is None


def test_a_steer_that_arrives_while_the_child_ends_is_refused(tmp_path: Path) -> None:
    from flightdeck.engine.model import SteerReceipt, SteerState

    child = make_child(tmp_path, [])
    early = SteerReceipt(1, "c1", "early", False, SteerState.QUEUED, 100.0)
    assert child.add_steer(early)
    assert child.finalize(ChildStatus.COMPLETED, result="done")  # empties the inbox: missed
    late = SteerReceipt(2, "c1", "late", False, SteerState.QUEUED, 100.0)
    assert not child.add_steer(late)  # the caller settles it as missed
    assert [(r.id, r.state) for r in child.row().steers] == [(1, SteerState.MISSED)]


class EchoesTheKey(TwoTurns):
    """A provider whose model repeats its key: in a tool call's name, then in its answer."""

    secrets = ("sk-live-0123456789",)

    def open(self, request: TurnRequest) -> TwoTurns.Stream:
        self.turns += 1
        key = self.secrets[0]
        if self.turns == 1:
            return TwoTurns.Stream([ToolCallEvent(ToolCall("t1", f"get_{key}", {"k": key}))])
        return TwoTurns.Stream([TextDelta(f"The key is {key}."), UsageEvent(Usage(10, 5))])


def test_the_route_key_never_reaches_the_row(tmp_path: Path) -> None:
    """What a reader shows (the running tool, the activity, the answer) has the key redacted."""
    tools = HeldTools(tmp_path)
    child = make_child(tmp_path, [], EchoesTheKey(), tools)
    worker = threading.Thread(target=child.run)
    worker.start()
    assert tools.entered.wait(60)
    during = child.row().activity
    tools.release.set()
    worker.join(HANG_S)
    done = child.row()
    assert (during.current_tool, during.text) == ("get_[REDACTED]", "tool: get_[REDACTED]")
    assert done.status is ChildStatus.COMPLETED and done.result == "The key is [REDACTED]."
    assert "sk-live" not in (tmp_path / "c1.log").read_text()


class EchoesTheKeyColoured(EchoesTheKey):
    """A server that echoes the key with a colour change inside it, in the answer."""

    def open(self, request: TurnRequest) -> TwoTurns.Stream:
        key = self.secrets[0]
        coloured = f"{key[:7]}\x1b[31m{key[7:]}"
        return TwoTurns.Stream([TextDelta(f"The key is {coloured}."), UsageEvent(Usage(10, 5))])


def test_a_key_with_an_escape_inside_never_reaches_the_row(tmp_path: Path) -> None:
    """Sanitizing the stored answer (the screen, the report) must not give the key back."""
    from flightdeck.engine.sanitize import sanitize

    child = make_child(tmp_path, [], EchoesTheKeyColoured())
    child.run()
    done = child.row()
    assert done.status is ChildStatus.COMPLETED and done.result is not None
    assert sanitize(done.result) == "The key is [REDACTED]."
    assert "sk-live" not in (tmp_path / "c1.log").read_text()


class WritesTheKeyColoured(EchoesTheKey):
    """A model that writes its key, a colour change inside it, to a file (and in a list)."""

    def open(self, request: TurnRequest) -> TwoTurns.Stream:
        self.turns += 1
        key = self.secrets[0]
        coloured = f"{key[:7]}\x1b[31m{key[7:]}"
        content = {"path": "k.txt", "content": coloured, "notes": [{"k": coloured}]}
        if self.turns == 1:
            return TwoTurns.Stream([ToolCallEvent(ToolCall("t1", "write_file", content))])
        return TwoTurns.Stream([TextDelta("Wrote it."), UsageEvent(Usage(10, 5))])


def test_a_key_in_a_tool_call_is_redacted_before_it_is_json_escaped(tmp_path: Path) -> None:
    """JSON writes ESC as `\\u001b`, which sanitizing keeps: the transcript would show the key
    with six characters inside it, for any reader to take out."""
    child = make_child(tmp_path, [], WritesTheKeyColoured())
    child.run()
    text = (tmp_path / "c1.log").read_text()
    assert "write_file" in text and "0123456789" not in text and "[REDACTED]" in text


class ReadsAFile(EchoesTheKey):
    """A model that reads `secret.txt`, then answers."""

    def open(self, request: TurnRequest) -> TwoTurns.Stream:
        self.turns += 1
        if self.turns == 1:
            return TwoTurns.Stream([ToolCallEvent(ToolCall("t1", "read_file", {"path": "s.txt"}))])
        return TwoTurns.Stream([TextDelta("Read it."), UsageEvent(Usage(10, 5))])


def test_a_key_at_the_cut_of_a_long_tool_output_is_redacted_first(tmp_path: Path) -> None:
    """The transcript shows the first 2,000 characters of a tool's output: cut first, a key
    across the cut left its start ("sk-li") where redaction could no longer see it."""
    key = ReadsAFile.secrets[0]
    (tmp_path / "s.txt").write_text("a" * 1995 + key + " and more")
    child = make_child(tmp_path, [], ReadsAFile())
    child.run()
    assert child.row().status is ChildStatus.COMPLETED
    text = (tmp_path / "c1.log").read_text()
    assert "a" * 1995 + "[REDA" in text and "sk-li" not in text


class AnswersWhileSteered(TwoTurns):
    """Each turn is a final answer; the first waits mid-stream until the test has steered."""

    def __init__(self) -> None:
        super().__init__()
        self.streaming = threading.Event()
        self.steered = threading.Event()
        self.requests: list[TurnRequest] = []

    def open(self, request: TurnRequest) -> AnswersWhileSteered.Lazy:
        self.requests.append(request)
        self.turns += 1
        return AnswersWhileSteered.Lazy(self._first() if self.turns == 1 else self._second())

    def _first(self) -> Iterator[StreamEvent]:
        yield TextDelta("My final answer")
        self.streaming.set()
        assert self.steered.wait(60)
        yield TextDelta(" is this.\n")
        yield UsageEvent(Usage(10, 5))

    def _second(self) -> Iterator[StreamEvent]:
        yield TextDelta("Done, as asked.\n")
        yield UsageEvent(Usage(10, 5))

    class Lazy:
        def __init__(self, events: Iterator[StreamEvent]) -> None:
            self.events = events

        def __iter__(self) -> Iterator[StreamEvent]:
            return self.events

        def close(self) -> None: ...


def steer_mid_answer(tmp_path: Path, max_turns: int) -> tuple[Child, AnswersWhileSteered]:
    """Run a child and steer it (at next turn) while it streams its first, final answer."""
    from flightdeck.engine.model import SteerReceipt, SteerState

    provider = AnswersWhileSteered()
    child = make_child(tmp_path, [], provider=provider, max_turns=max_turns)  # type: ignore[arg-type]
    worker = threading.Thread(target=child.run)
    worker.start()
    assert provider.streaming.wait(60)
    on_last_turn = child.row().activity.last_turn
    assert child.add_steer(SteerReceipt(1, "c1", "cite your sources", False, SteerState.QUEUED, 1))
    provider.steered.set()
    worker.join(HANG_S)
    assert on_last_turn is (max_turns == 1)
    return child, provider


def test_a_steer_sent_during_the_final_answer_gets_one_more_turn(tmp_path: Path) -> None:
    from flightdeck.engine.model import SteerState

    child, provider = steer_mid_answer(tmp_path, max_turns=5)
    row = child.row()
    assert row.status is ChildStatus.COMPLETED and row.result == "Done, as asked.\n"
    assert [r.state for r in row.steers] == [SteerState.DELIVERED]
    [_, second] = provider.requests
    assert [(m.role, m.content) for m in second.messages[-2:]] == [
        ("assistant", "My final answer is this.\n"),
        ("user", "[operator] cite your sources"),
    ]


def test_a_steer_after_the_last_allowed_turn_is_missed_and_says_why(tmp_path: Path) -> None:
    from flightdeck.engine.model import SteerState

    child, provider = steer_mid_answer(tmp_path, max_turns=1)
    row = child.row()
    assert row.status is ChildStatus.COMPLETED and row.result == "My final answer is this.\n"
    assert [r.state for r in row.steers] == [SteerState.MISSED]
    assert provider.turns == 1
    text = (tmp_path / "c1.log").read_text(encoding="utf-8")
    assert "operator  │ missed: cite your sources (max_turns (1) used up)\n" in text


class HeldStream:
    """One final answer streamed in 40-character chunks; billed only when the test lets it end."""

    name = "fake"
    model = "fake-1"
    secrets: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.streamed = threading.Event()
        self.release = threading.Event()

    def open(self, request: TurnRequest) -> HeldStream:
        return self

    def __iter__(self) -> Iterator[StreamEvent]:
        yield TextDelta("x" * 40)
        yield TextDelta("y" * 40)
        self.streamed.set()
        assert self.release.wait(60)
        yield UsageEvent(Usage(input_tokens=30, output_tokens=25, cache_read_tokens=100))

    def close(self) -> None: ...


def test_the_call_in_progress_counts_as_it_streams_until_its_usage_is_billed(
    tmp_path: Path,
) -> None:
    provider = HeldStream()
    facts: list[object] = []
    child = make_child(tmp_path, facts, provider=provider)
    worker = threading.Thread(target=child.run)
    worker.start()
    assert provider.streamed.wait(60)
    during = child.row()
    # Nothing is billed yet; the estimate is the prompt's characters and the 80 streamed (/4).
    assert during.usage == Usage()
    assert during.in_flight.input_tokens > 0 and during.in_flight.output_tokens == 20
    assert during.live_usage == during.in_flight
    assert during.in_flight_cost_usd and during.in_flight_cost_usd > 0
    assert during.live_cost_usd == during.in_flight_cost_usd
    provider.release.set()
    worker.join(HANG_S)
    done = child.row()
    # The real usage replaces the estimate, which is gone with the call.
    assert done.usage == Usage(input_tokens=30, output_tokens=25, cache_read_tokens=100)
    assert done.in_flight == Usage() and done.in_flight_cost_usd == 0
    assert done.live_usage == done.usage and done.live_cost_usd == done.cost_usd


def test_billed_figures_replace_the_estimate_as_they_come() -> None:
    call = InFlight(prompt_tokens=1_000, streamed_chars=400)
    assert call.usage() == Usage(input_tokens=1_000, output_tokens=100)
    # Anthropic bills the prompt as the reply starts: the prompt estimate gives way to it.
    call.billed += Usage(input_tokens=10, output_tokens=1, cache_read_tokens=900)
    assert call.usage() == Usage(output_tokens=99)
    call.billed += Usage(output_tokens=120)  # more than estimated: never a negative estimate
    assert call.usage() == Usage()


def test_the_part_of_a_prompt_the_last_call_left_cached_is_estimated_as_a_cache_read() -> None:
    # Priced as fresh input, a prompt mostly read from the cache made the live cost fall when
    # it was billed (tests/test_live_spent.py).
    call = InFlight(prompt_tokens=1_000, cached=600)
    assert call.usage() == Usage(input_tokens=400, cache_read_tokens=600)
    assert InFlight(prompt_tokens=500, cached=600).usage() == Usage(cache_read_tokens=500)
    call.billed += Usage(cache_write_tokens=1_000)  # counted: the server's figures replace it
    assert call.usage() == Usage()
