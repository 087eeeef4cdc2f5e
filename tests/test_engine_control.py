"""Control at the edges: interrupted calls are billed, steer --now under rate limits, the
last turn, budgets that cannot be enforced, and the Engine API used out of order."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import threading
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.commands import SetLimits
from flightdeck.engine.control.inbox import Order
from flightdeck.engine.errors import ConfigError
from flightdeck.engine.inputs.settings import Budget, Route
from flightdeck.engine.model import (
    BatchFinished,
    BatchStatus,
    ChildRow,
    ChildStarted,
    ChildStatus,
    EngineEvent,
    SteerState,
    Usage,
)
from flightdeck.engine.providers.base import StreamEvent, TurnRequest, UsageEvent
from flightdeck.engine.providers.sim import SimProvider, SimStream
from flightdeck.engine.records.reader import StoreReader

from helpers import HANG_S, HANGS, Hold, batch, run_to_end, settings, sim_route, start, until
from loopback import KEY_ENV, Loopback, Reply, route_for


@pytest.mark.parametrize("provider", ["sim", "openai", "anthropic"])
def test_a_stopped_response_is_billed_for_what_it_streamed(provider: str, tmp_path: Path) -> None:
    # The server has read the prompt and written part of the answer: it bills both, although
    # the usage report at the end of the stream never comes.
    with Loopback() as server:
        if provider == "sim":
            route = sim_route(tool_turns=0, **HANGS)
        else:
            answer = "Result for: the task\n" + "word " * 2000  # as the sim's answers begin
            # It stops sending after its first line, until the stop closes the stream.
            server.script(Reply(text=answer, chunk_chars=8, stall_after_chunks=4))
            route = route_for(server, provider)
        engine = Engine(
            batch(1, route=route.name), settings(route), state_dir=tmp_path, env={KEY_ENV: "k"}
        )
        engine.start()
        try:
            log = Path(engine.snapshot().children[0].transcript)
            # A line is written once it ends: the answer's first line is in, the rest is not.
            until(lambda: log.exists() and "Result for:" in log.read_text())
            engine.stop(["t0000"])
            row = run_to_end(engine).children[0]
        finally:
            engine.close()
    assert row.status is ChildStatus.STOPPED
    assert row.usage.prompt_tokens > 0
    assert row.usage.output_tokens >= 5  # at least that first line, 4 characters a token
    assert row.cost_usd is not None and row.cost_usd > 0
    assert engine.snapshot().totals.usage == row.usage  # and in the batch's meter


def test_steer_now_while_waiting_for_the_rate_limit_sends_one_request(tmp_path: Path) -> None:
    # rpm 1 to begin with: whichever child reaches the bucket first calls at once, the other two
    # wait about a minute and two. Their order shows in their waits whatever order their threads
    # came in, and the steer lands long before either slot; rpm 60 then lets them go a slot
    # (0.75 to 1.25 s, the bucket's jitter) apart. Every call is held before its first token.
    hold = Hold(tmp_path / "hold")
    route = dataclasses.replace(sim_route(tool_turns=0, **hold.options()), rpm=1)
    engine = start(batch(3), settings(route, pool=3), tmp_path)
    waiting = "rpm 1 configured: next slot in "

    def slots() -> dict[str, float]:
        """Each child waiting for its slot, and its wait."""
        rows = engine.snapshot().children
        return {
            r.id: float(r.activity.text.removeprefix(waiting).rstrip("s"))
            for r in rows
            if r.activity.text.startswith(waiting)
        }

    def row(child_id: str) -> ChildRow:
        return next(r for r in engine.snapshot().children if r.id == child_id)

    try:
        until(lambda: len(slots()) == 2)
        waits = slots()
        sooner, later = sorted(waits, key=waits.__getitem__)
        engine.steer([sooner], "answer in one line", now=True)
        until(lambda: bool(row(sooner).steers))  # in its inbox while it still waits
        engine.send(SetLimits({"routes": {"sim": {"rpm": 60}}}))
        until(lambda: f"{later}@0" in hold.held())  # the later child's call reached the server
        held = hold.held()
        steered = row(sooner)
    finally:
        engine.close()
    # The request it had waited for went out with the message, ahead of the later child's: not
    # thrown away for another (a call counted but never made, and a wait behind that child).
    assert f"{sooner}@0" in held and f"{sooner}@1" not in held
    assert steered.activity.api_calls == 1
    assert [s.state for s in steered.steers] == [SteerState.DELIVERED]


class _HeldAtOpen(SimProvider):
    """The sim, its first call held inside `open` until the test lets it go: the runner is
    past its last look for a steer --now and has not yet made the call the steer closes."""

    def __init__(self, route: Route) -> None:
        super().__init__(route)
        self.opening = threading.Event()
        self.go = threading.Event()

    def open(self, request: TurnRequest) -> SimStream:
        if not self.opening.is_set():
            self.opening.set()
            self.go.wait(HANG_S)
        return super().open(request)


def test_a_steer_now_landing_as_the_call_opens_goes_out_with_it(tmp_path: Path) -> None:
    # The slot it waited for is spent on the request with the message: not counted as a call
    # made and then thrown away for another slot (at rpm 1, a minute away).
    route = dataclasses.replace(sim_route(tool_turns=0), rpm=1)
    provider = _HeldAtOpen(route)
    engine = start(batch(1), settings(route), tmp_path, providers={"sim": provider})
    waiting = "rpm 1 configured: next slot in "
    try:
        assert provider.opening.wait(60)
        engine.steer(["t0000"], "answer in one line", now=True)
        until(lambda: bool(engine.snapshot().children[0].steers))  # in its inbox
        provider.go.set()
        until(
            lambda: (
                (r := engine.snapshot().children[0]).status.terminal
                or r.activity.text.startswith(waiting)
            )
        )
        row = engine.snapshot().children[0]
    finally:
        provider.go.set()
        engine.close()
    assert (row.status, row.activity.api_calls) == (ChildStatus.COMPLETED, 1)
    assert [s.state for s in row.steers] == [SteerState.DELIVERED]
    assert "response interrupted" not in Path(row.transcript).read_text()


class _Unbilled:
    """A sim stream whose usage never comes (an OpenAI reply cut short: its usage is the last
    chunk): what a stop bills of it is the runner's estimate of the prompt."""

    def __init__(self, stream: SimStream) -> None:
        self._stream = stream

    def close(self) -> None:
        self._stream.close()

    def __iter__(self) -> Iterator[StreamEvent]:
        return (e for e in self._stream if not isinstance(e, UsageEvent))


class _HeldAtOpenUnbilled(_HeldAtOpen):
    def open(self, request: TurnRequest) -> Any:
        return _Unbilled(super().open(request))


def test_a_call_opened_again_for_a_steer_now_is_estimated_with_the_message(
    tmp_path: Path,
) -> None:
    # The call that goes out carries the steer: stopped before the server's usage came, its
    # cut-short bill is the estimate of that prompt, not of the one without the message.
    hold = Hold(tmp_path / "hold")
    route = sim_route(tool_turns=0, **hold.options())
    provider = _HeldAtOpenUnbilled(route)
    engine = start(batch(1), settings(route), tmp_path, providers={"sim": provider})
    message = "x" * 40_000  # 10,000 tokens at 4 characters a token
    try:
        assert provider.opening.wait(60)
        engine.steer(["t0000"], message, now=True)
        until(lambda: bool(engine.snapshot().children[0].steers))  # in its inbox
        provider.go.set()
        until(lambda: bool(hold.held()), what="the call opened again, held")
        engine.stop(["t0000"])
        row = run_to_end(engine).children[0]
    finally:
        provider.go.set()
        engine.close()
    assert [s.state for s in row.steers] == [SteerState.DELIVERED]
    assert row.usage.input_tokens >= len(message) // 4


def test_a_turn_restarted_by_steer_now_may_wait_on_the_rate_limit(tmp_path: Path) -> None:
    # The restarted call waits about two seconds for the rpm bucket, longer than stall_after_s:
    # like any call's wait on its own route, that is not a stall. Between chunks (0.2 s apart)
    # the stall has a margin of 0.8 s, for a child thread a loaded machine leaves waiting.
    route = dataclasses.replace(
        sim_route(tool_turns=0, latency_ms=0, tokens_per_s=20, time_scale=1.0), rpm=30
    )
    engine = start(batch(1), settings(route, stall_after_s=1.0, stall_grace_s=0.1), tmp_path)
    try:
        until(lambda: engine.snapshot().children[0].activity.text == "streaming", 60)
        engine.steer(["t0000"], "start over", now=True)
        until(
            lambda: (
                (
                    (r := engine.snapshot().children[0]).activity.api_calls == 2
                    and r.activity.text == "streaming"
                )
                or r.status.terminal
            ),
            60,
        )
        row = engine.snapshot().children[0]
    finally:
        engine.close()
    assert (row.status, row.error) == (ChildStatus.RUNNING, None)


def test_the_last_turn_does_not_run_tools_nobody_would_read(tmp_path: Path) -> None:
    # Every answer asks for another tool: the second (last) turn's call would write or read
    # for nothing, since no third turn can see its result.
    engine = start(batch(1, max_turns=2), settings(sim_route(tool_turns=5)), tmp_path)
    row = run_to_end(engine).children[0]
    assert row.status is ChildStatus.FAILED
    assert row.error == "max_turns (2) reached without a final answer"
    assert (row.activity.api_calls, row.activity.tool_calls) == (2, 1)
    text = Path(row.transcript).read_text()
    assert text.count("tool-call") == 1 and "1 tool call(s) not run: no turns left" in text


def test_a_steer_sent_while_the_final_answer_streams_reaches_the_child(tmp_path: Path) -> None:
    # "At next turn" used to be missed by a child already writing its final answer.
    hold = Hold(tmp_path / "hold")
    final = sim_route(tool_turns=0, **hold.options())  # its one call, the final answer, held
    engine = start(batch(1), settings(final), tmp_path)
    try:
        until(lambda: engine.snapshot().children[0].activity.api_calls == 1)
        engine.steer(["t0000"], "cite the file")
        until(lambda: len(engine.snapshot().children[0].steers) == 1)  # queued
        hold.release()
        row = run_to_end(engine).children[0]
    finally:
        engine.close()
    assert row.status is ChildStatus.COMPLETED and row.activity.turns == 2
    assert [r.state for r in row.steers] == [SteerState.DELIVERED]
    assert row.result is not None and row.result.startswith("Understood — cite the file.")


def test_a_cost_budget_needs_a_price_for_every_route(tmp_path: Path) -> None:
    # Spend at an unknown price is never counted, so the cap would never be reached.
    unpriced = dataclasses.replace(sim_route("free"), price=None)
    budget = Budget(max_cost_usd=Decimal("0.50"), cost_line=7)
    s = dataclasses.replace(
        settings(sim_route(), unpriced), budget=budget, source=Path("flightdeck.toml")
    )
    with pytest.raises(ConfigError) as caught:
        Engine(batch(2, route="free"), s, state_dir=tmp_path)
    assert str(caught.value).startswith("flightdeck.toml:7: budget.max_cost_usd: cannot be")
    assert "route 'free'" in str(caught.value)
    Engine(batch(2), s, state_dir=tmp_path).close()  # a batch on priced routes only is fine
    assert not list(tmp_path.iterdir())  # nothing written


# --- the Engine API used out of order -----------------------------------------------------------


def test_start_runs_one_batch_once(tmp_path: Path) -> None:
    engine = Engine(batch(2), settings(sim_route(tool_turns=0)), state_dir=tmp_path)
    with pytest.raises(RuntimeError, match="has not been called"):
        engine.wait(0)
    engine.start()
    with pytest.raises(RuntimeError, match="once"):
        engine.start()  # a second batch of the same tasks would run them twice
    assert run_to_end(engine).totals.completed == 2
    with pytest.raises(RuntimeError, match="once"):
        engine.start()
    with pytest.raises(RuntimeError, match="after close"):
        engine.steer(["t0000"], "too late")  # no receipt that nothing would ever settle
    engine.stop_all()  # nothing left to stop: harmless


def test_arguments_of_the_wrong_type_are_said_so_at_the_call(tmp_path: Path) -> None:
    # A list of tasks or a config's path for the loaded values failed on an attribute deep in
    # the checks; a subscriber that is no function failed later, on every event.
    s = settings(sim_route(tool_turns=0))
    with pytest.raises(TypeError, match=r"batch: expected a Batch \(load_batch\(path\)\)"):
        Engine([{"goal": "x"}], s, state_dir=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"settings: expected Settings .*, got PosixPath"):
        Engine(batch(1), tmp_path / "flightdeck.toml", state_dir=tmp_path)  # type: ignore[arg-type]
    engine = Engine(batch(1), s, state_dir=tmp_path)
    with pytest.raises(TypeError, match="expected a function of one event, got int"):
        engine.subscribe(5)  # type: ignore[arg-type]
    engine.close()
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_subscriber_cannot_deadlock_the_engine(tmp_path: Path) -> None:
    # Subscribers run on the coordinator thread: close(), or wait() without a timeout, there
    # would wait for that thread. They refuse, and the batch still ends and closes from the
    # caller's thread.
    before = set(threading.enumerate())  # another test's engine left running is not this one's
    engine = Engine(batch(2), settings(sim_route(tool_turns=0)), state_dir=tmp_path)
    seen: list[object] = []

    def on_event(event: EngineEvent) -> None:
        if isinstance(event, ChildStarted) and event.child_id == "t0000":
            t0 = time.monotonic()
            seen.append(engine.wait(5))  # the batch cannot end meanwhile: False at once
            seen.append(time.monotonic() - t0 < 1)
            try:
                engine.wait()
            except RuntimeError as exc:
                seen.append(str(exc))
        if isinstance(event, BatchFinished):
            seen.append(engine.wait(0))  # waiters were released before the announcement
            try:
                engine.close()
            except RuntimeError as exc:
                seen.append(str(exc))

    engine.subscribe(on_event)
    engine.start()
    assert engine.wait(60)
    engine.close()
    assert seen == [
        False,
        True,
        "Engine.wait() without a timeout cannot be called from an engine event subscriber: "
        "it would wait on itself",
        True,
        "Engine.close() cannot be called from an engine event subscriber",
    ]
    names = {t.name for t in set(threading.enumerate()) - before}
    assert "flightdeck-coordinator" not in names


class _Deaf:
    """A provider whose stream ignores close() until the test lets it go: an SDK call stuck
    where no abort reaches it. It then bills the call, as a server would."""

    name = "sim"
    model = "deaf"
    secrets: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.streaming = threading.Event()
        self.release = threading.Event()

    def open(self, request: object) -> object:
        from flightdeck.engine.providers.base import TextDelta, UsageEvent

        provider = self

        class Stream:
            def __iter__(self):  # type: ignore[no-untyped-def]
                provider.streaming.set()
                provider.release.wait(HANG_S)
                yield TextDelta("too late\n")
                yield UsageEvent(Usage(1000, 200))

            def close(self) -> None:
                pass  # deaf

        return Stream()

    def close(self) -> None:
        pass


def test_a_child_abandoned_by_the_watchdog_is_recorded_again_when_it_bills_late(
    tmp_path: Path,
) -> None:
    # Stopped, it does not stop within the grace period: the watchdog records it `stopped`
    # ("abandoned") and frees its slot. When its call comes back, the tokens it was billed
    # must reach the store too, or the report says less than the server charged.
    provider = _Deaf()
    s = settings(sim_route(tool_turns=0), stall_grace_s=0.1)
    engine = start(batch(1), s, tmp_path, providers={"sim": provider})
    try:
        assert provider.streaming.wait(60)
        engine.stop(["t0000"])
        assert engine.wait(60)
        reader = StoreReader(tmp_path / "state" / "flightdeck.db")
        [row] = reader.children(engine.batch_id)
        assert row.status is ChildStatus.STOPPED
        assert row.error is not None and "abandoned" in row.error
        assert row.usage.total == 0
        provider.release.set()
        until(lambda: reader.children(engine.batch_id)[0].usage.total == 1200, timeout=60)
        [row] = reader.children(engine.batch_id)
        live = engine.snapshot()
    finally:
        engine.close()
    assert row.status is ChildStatus.STOPPED  # still the status it ended with
    assert row.cost_usd is not None and row.cost_usd > 0
    assert row.usage == live.children[0].usage == live.totals.usage
    assert row.cost_usd == live.totals.cost_usd


def test_an_abandoned_child_s_late_stream_leaves_its_transcript_closed(tmp_path: Path) -> None:
    # Found by a review: the call the watchdog gave up on came back and streamed through the
    # transcript writer the turn took before the call, which the child's end had closed. The
    # stream marked it open again and nothing closed it: the writer process kept the file
    # open, and its formatter, until the batch closed (one more for every such child).
    provider = _Deaf()
    s = settings(sim_route(tool_turns=0), stall_grace_s=0.1)
    engine = start(batch(1), s, tmp_path, providers={"sim": provider})
    try:
        assert provider.streaming.wait(60)
        log = Path(engine.snapshot().children[0].transcript)
        engine.stop(["t0000"])
        assert engine.wait(60)
        reader = StoreReader(tmp_path / "state" / "flightdeck.db")
        provider.release.set()
        until(lambda: reader.children(engine.batch_id)[0].usage.total == 1200, timeout=60)
        sink = engine._run.sink if engine._run is not None else None
        assert sink is not None and sink.flush(HANG_S)
        assert "too late" in log.read_text()  # the late line is written, as before
        fds = Path(f"/proc/{sink.helper_pid or os.getpid()}/fd")
        held = []
        for fd in fds.iterdir():
            with contextlib.suppress(OSError):  # closed since it was listed
                held.append(os.readlink(fd))
        assert str(log) not in held
    finally:
        engine.close()


@pytest.mark.parametrize(
    ("fail_one", "expected"), [(False, BatchStatus.STOPPED), (True, BatchStatus.FAILED)]
)
def test_a_batch_whose_children_were_stopped_one_by_one_ends_stopped(
    fail_one: bool, expected: BatchStatus, tmp_path: Path
) -> None:
    # Stopping children one at a time is the operator's doing, as stop-all is: the batch
    # did not fail. A child that did fail still makes it `failed`.
    slow = sim_route(tool_turns=0, **Hold(tmp_path / "hold").options())
    routes = [slow]
    if fail_one:
        routes.append(sim_route("bad", tool_turns=0, fail_rate=1.0))
    tasks = batch(3).tasks
    if fail_one:
        tasks += (dataclasses.replace(tasks[0], id="broken", seq=3, route="bad"),)
    b = dataclasses.replace(batch(0), tasks=tasks)
    engine = start(b, settings(*routes), tmp_path)
    try:
        until(lambda: sum(r.status is ChildStatus.RUNNING for r in engine.snapshot().children) == 3)
        for child_id in ("t0000", "t0001", "t0002"):
            engine.stop([child_id])
        snap = run_to_end(engine)
    finally:
        engine.close()
    assert snap.status is expected
    info = StoreReader(tmp_path / "state" / "flightdeck.db").batch(engine.batch_id)
    assert info is not None and info.status is expected


def test_steer_refuses_text_that_cannot_be_sent_before_queueing_it(tmp_path: Path) -> None:
    # A lone surrogate would crash the child's provider on send and the store's writer on
    # record: the caller hears of it, and no receipt is made.
    slow = sim_route(tool_turns=0, **Hold(tmp_path / "hold").options())
    engine = start(batch(1), settings(slow), tmp_path)
    try:
        until(lambda: engine.snapshot().children[0].status is ChildStatus.RUNNING)
        with pytest.raises(ValueError, match=r"lone surrogate \(\\ud800\) at character 8"):
            engine.steer(["t0000"], "answer \ud800 briefly")
        assert engine.receipts() == []
        [receipt] = engine.steer(["t0000"], "answer briefly")
    finally:
        engine.close()
    assert [r.id for r in engine.receipts()] == [receipt]


def test_child_ids_of_the_wrong_type_are_said_to_be_so(tmp_path: Path) -> None:
    # {"a": 1} read as "no child with id 'a'": the table's keys taken for the ids.
    import json

    from flightdeck.engine.commands import CommandError, decode

    engine = start(batch(1), settings(sim_route(**Hold(tmp_path / "hold").options())), tmp_path)
    try:
        for bad, got in (({"a": 1}, "got table"), ("t0", "got string 't0'"), (5, "got integer 5")):
            said = f"child_ids: expected a list of child ids, {got}"
            with pytest.raises(CommandError, match=said):
                engine.stop(bad)  # type: ignore[arg-type]
            # As a client's request reads back from the store: the same words.
            with pytest.raises(CommandError, match=said):
                decode("steer", json.dumps({"child_ids": bad, "message": "hi"}))
        with pytest.raises(CommandError, match=r"expected child ids \(text\), got integer 1 in"):
            engine.steer(["t0000", 1], "hi")  # type: ignore[list-item]
        # Every method with ids, not only steer, stop and pause (found by an audit: answer,
        # dismiss, retry, accept and discard read "t0" as the ids 't' and '0').
        said = "child_ids: expected a list of child ids, got string 't0'"
        for call in (
            lambda: engine.answer("t0", "yes"),  # type: ignore[arg-type]
            lambda: engine.dismiss("t0"),  # type: ignore[arg-type]
            lambda: engine.retry("t0"),  # type: ignore[arg-type]
            lambda: engine.accept("t0", "main"),  # type: ignore[arg-type]
            lambda: engine.discard("t0"),  # type: ignore[arg-type]
        ):
            with pytest.raises(CommandError, match=said):
                call()
        assert engine.receipts() == []
    finally:
        engine.close()


def test_a_command_with_a_field_of_the_wrong_type_is_refused_and_the_batch_runs_on(
    tmp_path: Path,
) -> None:
    # steer(now="yes") reached the coordinator and failed it on recording the receipt: every
    # child stopped. A command value's fields are read as a client's request is, first.
    from flightdeck.engine.commands import CommandError, Steer

    hold = Hold(tmp_path / "hold")
    engine = start(batch(1), settings(sim_route(tool_turns=0, **hold.options())), tmp_path)
    try:
        until(lambda: engine.snapshot().children[0].status is ChildStatus.RUNNING)
        for call, said in (
            (lambda: engine.steer(["t0000"], "hi", now="yes"), "steer now: expected true or"),
            (lambda: engine.steer(["t0000"], 5), "steer message: expected text"),
            (lambda: engine.send(Steer("t0000", "hi")), "expected a list of child ids, got str"),
            (lambda: engine.accept(["t0000"], 5), "accept into: expected text"),
            # "no" is truthy: it paused admission; None failed as "not iterable".
            (lambda: engine.pause_admission("no"), "pause_admission on: expected true or"),
            (lambda: engine.set_limits(None), "limits: expected a table .*, got null"),
            (lambda: engine.set_limits(["pool_size"]), "limits: expected a table .*, got array"),
        ):
            with pytest.raises(CommandError, match=said):
                call()  # type: ignore[no-untyped-call]
        with pytest.raises(TypeError, match=r"expected a command of .*, got string 'stop'"):
            engine.send("stop")  # type: ignore[arg-type]
        assert engine.receipts() == []
        [receipt] = engine.steer(["t0000"], "answer briefly", now=True)
        hold.release()
        row = run_to_end(engine).children[0]
    finally:
        engine.close()
    assert engine.failure is None
    assert row.status is ChildStatus.COMPLETED
    assert [r.id for r in row.steers] == [receipt]


def test_steer_and_stop_refuse_an_id_that_names_no_child(tmp_path: Path) -> None:
    # A typo would otherwise be dropped in silence: nothing queued, nothing stopped.
    slow = sim_route(tool_turns=0, **Hold(tmp_path / "hold").options())
    engine = start(batch(2), settings(slow), tmp_path)
    try:
        with pytest.raises(ValueError, match=r"no child with id 't9999' in batch "):
            engine.steer(["t0000", "t9999"], "hello")
        with pytest.raises(ValueError, match=r"no child with id 'nope'"):
            engine.stop(["t0000", "nope"])
        engine.stop(iter(["t0001"]))  # any iterable of known ids
        # Commands apply in order: anything the refused calls had queued is applied by now.
        until(lambda: engine.snapshot().children[1].status is ChildStatus.STOPPED)
        assert not engine.snapshot().children[0].status.terminal
        assert engine.receipts() == []
    finally:
        engine.close()


def test_a_steer_to_a_child_that_has_ended_is_missed_with_the_reason(tmp_path: Path) -> None:
    # Found by an audit: `flightdeck steer` to a completed child printed `c1: missed` with no
    # reason, which the receipt's `how` carries for the other ways a steer is missed.
    hold = Hold(tmp_path / "hold")
    engine = start(batch(2), settings(sim_route(**hold.options())), tmp_path)
    try:
        hold.release("t0000")  # it completes; t0001 holds the batch open
        until(lambda: engine.snapshot().children[0].status is ChildStatus.COMPLETED)
        engine.steer(["t0000"], "too late")
        until(lambda: bool(engine.receipts()))
        (receipt,) = engine.receipts()
        hold.release()
        run_to_end(engine)
    finally:
        engine.close()
    assert (receipt.state, receipt.how) == (SteerState.MISSED, "the child had ended: completed")
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:  # for `flightdeck steer`
        (stored,) = reader.child(engine.batch_id, "t0000").steers  # type: ignore[union-attr]
    assert stored.how == "the child had ended: completed"


def test_a_stop_or_pause_of_children_that_had_ended_is_a_notice_not_an_error(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Found by an audit: a stop the TUI sent (its dialog confirmed late) to a child that had
    # just completed was shown as an error, `stop not applied: …`; a pause so late, not at all.
    hold = Hold(tmp_path / "hold")
    engine = start(batch(2), settings(sim_route(**hold.options())), tmp_path)

    def said() -> list[tuple[str, str]]:
        return [(r.levelname, r.getMessage()) for r in caplog.records]

    try:
        hold.release("t0000")  # it completes; t0001 holds the batch open
        until(lambda: engine.snapshot().children[0].status is ChildStatus.COMPLETED)
        with caplog.at_level(logging.WARNING, logger="flightdeck"):
            engine.stop(["t0000"])
            until(lambda: len(said()) == 1)
            engine.pause(["t0000"])
            until(lambda: len(said()) == 2)
        hold.release()
        run_to_end(engine)
    finally:
        engine.close()
    assert said() == [
        ("WARNING", "t0000 had already ended (completed) when the stop arrived: not stopped"),
        ("WARNING", "t0000 had already ended (completed) when the pause arrived: not paused"),
    ]


def test_a_stop_refused_as_come_after_its_child_ended_is_settled_after_the_childs_final_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Found in review: a child's thread ends it, then tells the coordinator, which records its
    # final row. A stop taken in between was refused at once, the refusal maybe committed while
    # the row still read `running`: `flightdeck stop` then could not tell it came too late.
    from flightdeck.engine.attached.client import Client
    from flightdeck.engine.child.state import Child
    from flightdeck.engine.commands import Stop
    from flightdeck.engine.control.controls import Controls
    from flightdeck.engine.records.requests import RequestState

    in_between, let_go, taken = threading.Event(), threading.Event(), threading.Event()
    finalize, apply = Child.finalize, Controls.apply

    def finalize_then_wait(child: Child, status: ChildStatus, *args: Any, **kw: Any) -> bool:
        done = finalize(child, status, *args, **kw)
        if child.task.id == "t0000" and status is ChildStatus.COMPLETED:
            in_between.set()  # ended, and the coordinator not told yet
            assert let_go.wait(HANG_S)
        return done

    def apply_then_say(controls: Controls, order: Order) -> None:
        apply(controls, order)
        if isinstance(order.command, Stop):
            taken.set()

    monkeypatch.setattr(Child, "finalize", finalize_then_wait)
    monkeypatch.setattr(Controls, "apply", apply_then_say)
    hold = Hold(tmp_path / "hold")
    engine = start(batch(2), settings(sim_route(**hold.options())), tmp_path)
    db = tmp_path / "state" / "flightdeck.db"
    try:
        hold.release("t0000")  # it completes; t0001 holds the batch open
        assert in_between.wait(HANG_S)
        # The batch's row committed, as a client waits for it (spawn.wait_ready): on a busy
        # machine the child could end before the store's writer had, and the stop found no batch.
        assert engine._run.store is not None and engine._run.store.flush(30)
        with Client(db, engine.batch_id) as client:
            request = client.send(Stop(("t0000",)))
            assert taken.wait(HANG_S)
            assert engine._run.store is not None and engine._run.store.flush(30)
            # Its final row is not handed to the store yet (a progress write may have caught
            # its status): the refusal waits for it.
            assert client.request(request).state is RequestState.PENDING
            let_go.set()
            *_, settled = client.follow(request)
            assert settled.state is RequestState.REFUSED
            assert {r.id: r.status for r in client.rows()}["t0000"] is ChildStatus.COMPLETED
        hold.release()
        run_to_end(engine)
    finally:
        let_go.set()
        engine.close()


def test_a_given_batch_id_is_a_plain_name_not_taken_and_max_concurrent_a_number(
    tmp_path: Path,
) -> None:
    # Found by an audit of the Python API: batch_id="../../etc" wrote the batch outside the
    # state folder; a second run with the same id wrote over the first's records; and
    # max_concurrent="bogus" or 2.5 reached the pool.
    from flightdeck.engine.errors import InputError

    state = tmp_path / "state"
    for bad in ("../../etc", "", "a/b", ".hidden"):
        with pytest.raises(InputError, match="is not a valid batch id"):
            Engine(batch(1), settings(sim_route()), state_dir=state, batch_id=bad)
    assert not (tmp_path / "etc").exists()
    first = Engine(batch(1), settings(sim_route()), state_dir=state, batch_id="mine")
    first.start()
    try:
        run_to_end(first)
    finally:
        first.close()
    again = Engine(batch(1), settings(sim_route()), state_dir=state, batch_id="mine")
    with pytest.raises(InputError, match="batch mine is already recorded here: resume it"):
        again.start()
    again.close()
    for bad_pool in ("bogus", 2.5, True):
        with pytest.raises(ValueError, match='max_concurrent must be a whole number or "auto"'):
            Engine(batch(1), settings(sim_route()), state_dir=state, max_concurrent=bad_pool)  # type: ignore[arg-type]


def test_a_child_named_twice_is_taken_once(tmp_path: Path) -> None:
    # `flightdeck steer B c1 c1 -m …` sent the message to c1 twice (two receipts, two operator
    # turns), as the Python API did; the request read back from the store too.
    import json

    from flightdeck.engine.commands import Steer, decode

    engine = start(batch(2), settings(sim_route(**Hold(tmp_path / "hold").options())), tmp_path)
    try:
        until(lambda: engine.snapshot().totals.running == 2)
        assert len(engine.steer(["t0000", "t0001", "t0000"], "once each")) == 2
        until(lambda: len(engine.receipts()) == 2)
        assert sorted(r.child_id for r in engine.receipts()) == ["t0000", "t0001"]
        body = json.dumps({"child_ids": ["t0001", "t0000", "t0001"], "message": "hi"})
        assert decode("steer", body) == Steer(("t0001", "t0000"), "hi")
    finally:
        engine.close()
