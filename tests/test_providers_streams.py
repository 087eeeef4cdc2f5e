"""Both SDK providers against the loopback server: stalls, read timeouts and stop from another
thread. One parametrized module, so the two providers are held to exactly the same bar."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.errors import TransientError
from flightdeck.engine.model import ChildStatus
from flightdeck.engine.providers.base import Interrupted, Message, Provider, TextDelta, TurnRequest
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.report import build_report

from helpers import HANG_S, batch, settings, until
from loopback import KEY_ENV, READ_FILE, Loopback, Reply, provider_for, route_for

KEY = "sk-test-0123456789abcdef"
ENV = {KEY_ENV: KEY}
REQUEST = TurnRequest("You are a worker.", (Message("user", "Review a.txt"),), (READ_FILE,), 256)
PROVIDERS = ["openai", "anthropic"]


def open_provider(server: Loopback, kind: str, **kw: float) -> Provider:
    return provider_for(server, kind, KEY, **kw)


@pytest.mark.parametrize("kind", PROVIDERS)
def test_a_stream_stalled_past_the_read_timeout_is_transient(server: Loopback, kind: str) -> None:
    server.script(Reply(stall_after_chunks=1))
    p = open_provider(server, kind, read_timeout_s=0.2)
    try:
        with pytest.raises(TransientError, match="timeout"):
            list(p.open(REQUEST))
    finally:
        p.close()
    # The 0.2 s read timeout broke the stall, not the loopback giving up (MAX_STALL_S).
    assert server.stalls_given_up == 0


@pytest.mark.parametrize("kind", PROVIDERS)
@pytest.mark.parametrize(
    "stall", [Reply(stall_after_chunks=2), Reply(stall_before_headers=True)], ids=["mid", "head"]
)
def test_close_from_another_thread_ends_a_stalled_stream(
    server: Loopback, kind: str, stall: Reply
) -> None:
    server.script(stall)
    p = open_provider(server, kind, read_timeout_s=2 * HANG_S)
    stream = p.open(REQUEST)
    outcome: list[object] = []

    def read() -> None:
        try:
            outcome.extend(stream)
            outcome.append("ended")
        except BaseException as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    until(lambda: len(server.received) == 1 and (stall.stall_before_headers or bool(outcome)))
    time.sleep(0.05)  # let the reader block in recv
    stream.close()
    reader.join(HANG_S)
    try:
        assert not reader.is_alive()
        # The close ended it, not the read timeout (past HANG_S) nor the loopback giving up.
        # How fast (within a second) is measured by the benchmarks (bench_stop.py).
        assert server.stalls_given_up == 0
        assert isinstance(outcome[-1], Interrupted) or outcome[-1] == "ended"
        # The route's connection pool still works after the abort.
        assert any(isinstance(e, TextDelta) for e in p.open(REQUEST))
    finally:
        p.close()


@pytest.mark.parametrize("kind", PROVIDERS)
def test_stop_during_a_stall_in_the_engine_ends_it(tmp_path: Path, kind: str) -> None:
    with Loopback() as server:
        server.default = Reply(text="z" * 64, stall_after_chunks=3)
        route = route_for(server, kind, read_timeout_s=2 * HANG_S)
        engine = Engine(batch(2, route=kind), settings(route), state_dir=tmp_path, env=ENV)
        engine.start()
        try:
            until(lambda: all(r.activity.text == "streaming" for r in engine.snapshot().children))
            engine.stop_all()
            until(lambda: engine.snapshot().totals.running == 0)
            given_up = server.stalls_given_up
            snap = engine.snapshot()
        finally:
            engine.close()
    # The stop ended the stalls, not the read timeout (past HANG_S) nor the loopback giving
    # up (its speed: bench_stop.py).
    assert given_up == 0
    assert [r.status for r in snap.children] == [ChildStatus.STOPPED] * 2
    if kind == "anthropic":  # message_start bills the prompt before any text
        assert all(r.usage.input_tokens == 120 for r in snap.children)


@pytest.mark.parametrize("kind", PROVIDERS)
@pytest.mark.parametrize("how", ["stop", "now"])
@pytest.mark.parametrize(
    "stall", [Reply(stall_after_chunks=3), Reply(stall_before_headers=True)], ids=["mid", "head"]
)
def test_a_call_cut_short_by_the_operator_is_billed_live_in_the_store_and_the_report(
    tmp_path: Path, kind: str, how: str, stall: Reply
) -> None:
    # The prompt was sent (and, mid-stream, 24 characters had streamed): the server bills the
    # call although its usage never came, and so must we, everywhere the figures are read.
    with Loopback() as server:
        # The restarted turn (steer --now) reports no usage: all the row has is the cut call's.
        server.script(dataclasses.replace(stall, text="z" * 64), Reply(text="ok", no_usage=True))
        route = route_for(server, kind, read_timeout_s=30.0)
        engine = Engine(batch(1, route=kind), settings(route), state_dir=tmp_path, env=ENV)
        engine.start()
        try:
            doing = "waiting for model" if stall.stall_before_headers else "streaming"
            until(lambda: engine.snapshot().children[0].activity.text == doing)
            until(lambda: len(server.received) == 1)
            if stall.stall_before_headers:
                time.sleep(0.1)  # most likely waiting for the headers by now; if not, as well
            else:  # the three chunks before the stall are read
                until(lambda: engine.snapshot().children[0].live_usage.output_tokens >= 6)
            if how == "stop":
                engine.stop_all()
            else:
                engine.steer(["t0000"], "wrap up", now=True)
            assert engine.wait(HANG_S)
            snap = engine.snapshot()
        finally:
            engine.close()
    row = snap.children[0]
    assert row.status is (ChildStatus.STOPPED if how == "stop" else ChildStatus.COMPLETED)
    assert row.usage.prompt_tokens > 0
    if not stall.stall_before_headers:
        assert row.usage.output_tokens >= 6  # ceil(24 / 4)
    assert row.cost_usd is not None and row.cost_usd > 0
    assert snap.totals.usage == row.usage and snap.totals.cost_usd == row.cost_usd
    with StoreReader(tmp_path / "flightdeck.db") as reader:
        [stored] = reader.children(snap.batch_id)
        report = build_report(reader, snap.batch_id)
    assert stored.usage == row.usage and stored.cost_usd == row.cost_usd
    assert report["totals"]["tokens_in"] == row.usage.input_tokens
    assert report["children"][0]["tokens_out"] == row.usage.output_tokens
    assert "billed as an estimate" in Path(row.transcript).read_text(encoding="utf-8")
