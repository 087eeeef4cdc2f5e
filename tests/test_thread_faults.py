"""No engine thread dies on an exception: the coordinator, the workers, the transcript drain
thread and the end of a batch each have one error path that says so and leaves the batch in a
known state. (The store writer's is in test_store_faults.py.)"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from flightdeck.engine import api
from flightdeck.engine.child.state import Child
from flightdeck.engine.control.coordinator import Coordinator
from flightdeck.engine.errors import ConfigError
from flightdeck.engine.model import BatchStatus, ChildStatus
from flightdeck.engine.owner import batchdir
from flightdeck.engine.records import sink as sink_module
from flightdeck.engine.records.events import Write
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.sink import TranscriptSink

from helpers import batch, run_to_end, settings, sim_route, start


def test_a_coordinator_exception_stops_every_child_and_fails_the_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = Coordinator._progress
    calls = 0

    def progress(self: Coordinator) -> None:
        nonlocal calls
        calls += 1
        if calls == 20:
            raise RuntimeError("a bug in the coordinator")
        real(self)

    monkeypatch.setattr(Coordinator, "_progress", progress)
    s = settings(sim_route(time_scale=0.05, tool_turns=0), pool=2)
    with caplog.at_level(logging.ERROR, logger="flightdeck"):
        engine = start(batch(30), s, tmp_path)
        snap = run_to_end(engine)
    assert calls >= 20
    assert snap.status is BatchStatus.FAILED
    assert engine.failure == "engine error: RuntimeError: a bug in the coordinator"
    assert all(row.status.terminal for row in snap.children)
    assert {row.status for row in snap.children} <= {ChildStatus.COMPLETED, ChildStatus.STOPPED}
    assert "the coordinator failed; stopping every child" in caplog.text
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
        assert reader.batch(engine.batch_id).status is BatchStatus.FAILED  # type: ignore[union-attr]
        assert all(r.status.terminal for r in reader.children(engine.batch_id))


def test_a_worker_whose_child_raises_fails_that_child_and_the_batch_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = Child.run

    def run(self: Child) -> None:
        if self.task.id == "t0002":
            raise RuntimeError("a bug below the agent loop")
        real(self)

    monkeypatch.setattr(Child, "run", run)
    with caplog.at_level(logging.ERROR, logger="flightdeck"):
        engine = start(batch(5), settings(sim_route(tool_turns=0), pool=2), tmp_path)
        snap = run_to_end(engine)
    bad = snap.child("t0002")
    assert bad is not None and bad.status is ChildStatus.FAILED
    assert "a bug below the agent loop" in (bad.error or "")
    assert snap.status is BatchStatus.FAILED and snap.totals.completed == 4
    assert "child t0002's worker failed" in caplog.text


def test_a_manifest_that_cannot_be_written_at_the_end_is_said_and_the_batch_still_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = batchdir.write_manifest
    calls = 0

    def write_manifest(*args: Any) -> None:
        nonlocal calls
        calls += 1
        if calls > 1:  # the first is at start; the disk fills before the end
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(*args)

    monkeypatch.setattr(batchdir, "write_manifest", write_manifest)
    hook_calls: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", hook_calls.append)
    with caplog.at_level(logging.ERROR, logger="flightdeck"):
        engine = start(batch(3), settings(sim_route(tool_turns=0)), tmp_path)
        snap = run_to_end(engine)
    assert hook_calls == []  # no thread died
    assert snap.status is BatchStatus.COMPLETED
    assert "cannot write the batch manifest: [Errno 28] No space left on device" in caplog.text
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
        assert reader.batch(engine.batch_id).status is BatchStatus.COMPLETED  # type: ignore[union-attr]


def test_a_manifest_that_cannot_be_written_at_start_is_an_unusable_state_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def write_manifest(*args: Any) -> None:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(batchdir, "write_manifest", write_manifest)
    engine = api.Engine(batch(2), settings(sim_route()), state_dir=tmp_path / "state")
    try:
        with pytest.raises(ConfigError, match="No space left on device"):
            engine.start()
    finally:
        engine.close()
    assert list((tmp_path / "state" / "batches").iterdir()) == []  # nothing of it is kept
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:
        assert reader.batches() == []


def test_the_transcript_drain_thread_survives_an_error_and_still_answers_flush(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(sink_module.WriterProcess, "start", classmethod(lambda cls, n: None))
    real = sink_module.apply_frames
    broken = threading.Event()
    broken.set()

    def apply_frames(*args: Any) -> None:
        if broken.is_set():
            broken.clear()
            raise ValueError("a bug in the transcript writer")
        real(*args)

    monkeypatch.setattr(sink_module, "apply_frames", apply_frames)
    path = str(tmp_path / "t.log")
    sink = TranscriptSink()
    try:
        with caplog.at_level(logging.ERROR, logger="flightdeck"):
            sink.send(Write(path, time.time(), "engine", "lost"))
            assert sink.flush(timeout=60)  # answered (False had it waited out the timeout)
        assert "transcript lines could not be written" in caplog.text
        assert "a bug in the transcript writer" in caplog.text
        sink.send(Write(path, time.time(), "engine", "kept"))
        assert sink.flush(timeout=60)
    finally:
        sink.close()
    text = Path(path).read_text()
    assert "kept" in text and "lost" not in text


def test_headless_says_an_engine_failure_on_one_line_without_escape_sequences(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The failure's words are an exception's, which may quote a child's output or a path."""
    import io

    from flightdeck.tui.headless import run_headless
    from rich.console import Console

    def progress(self: Coordinator) -> None:
        raise RuntimeError("a bug near \x1b]8;;http://x.invalid\x1b\\this\x1b]8;;\x1b\\\nline")

    monkeypatch.setattr(Coordinator, "_progress", progress)
    s = settings(sim_route(tool_turns=0), pool=2)
    engine = api.Engine(batch(3), s, state_dir=tmp_path / "state")
    out, err = io.StringIO(), io.StringIO()
    run_headless(engine, Console(file=out, width=200), Console(file=err, width=200))
    last = err.getvalue().strip().splitlines()[-1]
    assert (
        last
        == "flightdeck: error: the batch fails: engine error: RuntimeError: a bug near this line"
    )
    assert "\x1b" not in err.getvalue()
