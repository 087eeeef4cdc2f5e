"""The transcript sink: events framed to the writer process, or written in-process without it."""

from __future__ import annotations

import fcntl
import itertools
import logging
import os
import select
import signal
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

import pytest
from flightdeck.engine.agents import tree
from flightdeck.engine.records import appender, writerproc
from flightdeck.engine.records.appender import FileAppender, Transcripts, apply_frames
from flightdeck.engine.records.events import (
    EndStream,
    Event,
    Raw,
    Release,
    Stream,
    Write,
    decode,
    encode,
)
from flightdeck.engine.records.sink import TranscriptSink
from flightdeck.engine.records.transcripts import TranscriptWriter

from helpers import HANG_S, until

TS = time.mktime((2024, 5, 1, 13, 4, 5, 0, 0, -1)) + 0.25  # 13:04:05.250 local time


def read(path: str) -> list[str]:
    return Path(path).read_text(encoding="utf-8").splitlines()


def bodies(path: str) -> list[str]:
    return [line.split(" │ ", 1)[1] for line in read(path)]


def test_appender_keeps_order_per_file_and_writes_each_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    writes: list[bytes] = []
    real = appender.write_all

    def counting(fd: int, data: bytes | bytearray) -> None:
        writes.append(bytes(data))
        real(fd, data)

    monkeypatch.setattr(appender, "write_all", counting)
    files = FileAppender(max_open=2)
    paths = [str(tmp_path / "deep" / f"c{i}.log") for i in range(3)]  # parents are created
    for n in range(5):
        for p in paths:
            files.add(p, f"{os.path.basename(p)} line {n}\n".encode())
    files.write_pending()
    # three files, more than max_open: the least recently used descriptor was closed, no loss
    assert len(writes) == 3
    for p in paths:
        assert read(p) == [f"{os.path.basename(p)} line {n}" for n in range(5)]

    # a release writes what is pending first; later lines reopen the file and append
    files.add(paths[0], b"before release\n")
    files.release(paths[0])
    files.add(paths[0], b"after release\n")
    files.close()
    assert read(paths[0])[-2:] == ["before release", "after release"]
    assert len(writes) == 5


def test_every_kind_of_event_crosses_the_wire_unchanged() -> None:
    odd = "naïve \udcff name.log"  # a lone surrogate, as a surrogate-escaped file name has
    events: list[Event] = [
        Write(odd, TS, "tool", "a\nb \udc80"),
        Stream(odd, TS + 1, "chunk"),
        EndStream(odd, TS + 2),
        Release(odd, TS + 3),
        Raw(odd, b"13:04:05.250  engine    \xe2\x94\x82 done\n"),
    ]
    frames = encode(events[:2]) + encode(events[2:]) + encode([])
    assert decode(frames) == (events, len(frames))
    assert decode(frames[:-1]) == (events, len(frames) - len(encode([])))  # a frame in part


def test_frames_survive_any_split_and_odd_file_names(tmp_path: Path) -> None:
    odd = str(tmp_path / "naïve \udcff name.log")  # not valid UTF-8: a surrogate-escaped byte
    events: list[Event] = [
        Write(odd, TS, "user", "one"),
        Stream(odd, TS + 1, "two\nthr"),
        Release(odd, TS + 2),  # ends the stream: the partial line is written
    ]
    stream = encode(events[:1]) + encode(events[1:])
    files = Transcripts()
    buf = bytearray()
    taken = []
    for byte in stream:  # the pipe may deliver a frame one byte at a time
        buf.append(byte)
        done = apply_frames(buf, files)
        del buf[:done]
        taken.append(done)
    # whole frames only: what the writer process answers falls on a frame boundary
    assert not buf and [n for n in taken if n] == [
        len(encode(events[:1])),
        len(stream) - len(encode(events[:1])),
    ]
    files.write_pending()
    assert Path(odd).read_text(encoding="utf-8").splitlines() == [
        "13:04:05.250  user      │ one",
        "13:04:06.250  assistant │ two",
        "13:04:07.250  assistant │ thr",
    ]


class StepClock:
    def __init__(self) -> None:
        self.now = TS

    def __call__(self) -> float:
        self.now += 0.0007
        return self.now


def scripted(tw: TranscriptWriter) -> None:
    """Every kind of event, including hostile text, in one transcript."""
    tw.write("system", "You are a worker.\nBe brief.")
    tw.write("user", "Review \x1b]0;evil title\x07PR 104\u202e")
    tw.stream("Looking at the \x1b[3")  # an escape sequence split across chunks
    tw.stream("1mdiff\x1b[0m now.\nIt adds")
    tw.write("operator", "steer: be quicker")  # a write in mid-stream keeps time order
    tw.stream(" a test.\n")
    tw.stream("ünïcode, then no newline")
    tw.end_stream()
    tw.write("tool-call", 'read_file {"path": "a.txt"}')
    tw.write("tool", "line 1 \ud800\n\nline 3\n")  # a lone surrogate, as JSON can carry
    tw.stream("partial at close")
    tw.close()
    tw.write("engine", "completed")  # after close: reopens the file


def test_the_writer_process_formats_exactly_as_this_process_does(tmp_path: Path) -> None:
    local = tmp_path / "local.log"
    scripted(TranscriptWriter(local, StepClock()))
    s = TranscriptSink()
    try:
        assert s.helper_pid is not None
        remote = tmp_path / "remote.log"
        scripted(TranscriptWriter(remote, StepClock(), sink=s))
        assert s.flush(10)
    finally:
        s.close()
    assert remote.read_bytes() == local.read_bytes()
    text = local.read_text(encoding="utf-8")
    assert "\x1b" not in text and "\u202e" not in text
    assert bodies(str(local)) == [
        "You are a worker.",
        "Be brief.",
        "Review PR 104",
        "Looking at the diff now.",
        "It ↩",  # cut by the operator's line after a word: the rest goes on after it
        "steer: be quicker",
        "adds a test.",
        "ünïcode, then no newline",
        'read_file {"path": "a.txt"}',
        "line 1 \ufffd",  # the lone surrogate, replaced: the reader sees one was there
        "",
        "line 3",
        "partial at close",
        "completed",
    ]


def test_the_writer_process_writes_the_files(tmp_path: Path) -> None:
    s = TranscriptSink()
    try:
        pid = s.helper_pid
        assert pid is not None and pid != os.getpid()
        # its own session: a Ctrl+C sent to the engine's process group does not reach it
        assert os.getsid(pid) != os.getsid(0)
        paths = [str(tmp_path / f"c{i}.log") for i in range(3)]
        writers = [TranscriptWriter(p, sink=s) for p in paths]
        for n in range(50):
            for tw in writers:
                tw.write("engine", f"line {n}")
            s.pump()  # what the coordinator does between facts
        writers[0].close()
        assert s.flush(10)  # returns once the helper has written them
        for p in paths:
            assert bodies(p) == [f"line {n}" for n in range(50)]
        writers[0].write("engine", "after release")
    finally:
        s.close()
    assert bodies(paths[0])[-1] == "after release"
    with pytest.raises(ProcessLookupError):  # close() waited for it to exit
        os.kill(pid, 0)


def test_the_writer_process_is_not_among_the_children_a_command_child_s_end_reads() -> None:
    # A command child's end reads every child of the main thread, where a subreaper's orphans
    # land: the writer, started by the drain thread, is not one (nor read at every end).
    assert threading.current_thread() is threading.main_thread()
    s = TranscriptSink()
    try:
        assert s.helper_pid is not None
        assert s.helper_pid not in [a.proc.pid for a in tree.adopted()]
        assert s.helper_pid in tree.children(os.getpid())  # still this process's child
    finally:
        s.close()


def in_pipe(s: TranscriptSink) -> int:
    """Bytes the sink wrote that the writer process has not read yet."""
    helper = s._helper
    assert helper is not None
    buf = bytearray(4)
    fcntl.ioctl(helper.proc.stdin.fileno(), termios.FIONREAD, buf)  # type: ignore[union-attr]
    return int.from_bytes(buf, sys.byteorder)


@pytest.mark.parametrize("then", ["write more", "close"])
def test_lines_keep_coming_and_none_is_lost_when_the_writer_process_dies(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, then: str
) -> None:
    s = TranscriptSink()
    path = str(tmp_path / "c.log")
    try:
        tw = TranscriptWriter(path, sink=s)
        tw.write("engine", "before")
        assert s.flush(10)
        pid = s.helper_pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)  # it reads no more: the next lines wait in the pipe
        for n in range(3):
            tw.write("engine", f"sent {n}")
        until(lambda: in_pipe(s) > 0)
        os.kill(pid, signal.SIGKILL)  # dies with them unread
        if then == "write more":  # later lines are written in-process
            tw.write("engine", "after")
            assert s.flush(10)
            assert s.helper_pid is None
    finally:
        s.close()
    expected = ["before", "sent 0", "sent 1", "sent 2"] + (
        ["after"] if then == "write more" else []
    )
    assert bodies(path) == expected  # each line once, in order
    assert "writing" in caplog.text and "in-process" in caplog.text


def test_without_the_writer_process_the_sink_writes_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_process(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        raise OSError("fork failed")

    monkeypatch.setattr(writerproc.subprocess, "Popen", no_process)
    caplog.set_level(logging.WARNING)
    s = TranscriptSink()
    path = str(tmp_path / "c.log")
    try:
        assert s.helper_pid is None
        tw = TranscriptWriter(path, sink=s)
        tw.write("engine", "one")
        s.pump()  # nothing to frame for: a no-op
        tw.stream("two\nthree")
        tw.close()
        assert s.flush(10)
        assert bodies(path) == ["one", "two", "three"]
    finally:
        s.close()
    assert "cannot start the transcript writer process (fork failed)" in caplog.text


def test_secrets_are_redacted_before_the_events_leave_this_process(tmp_path: Path) -> None:
    sent: list[Event] = []
    s = TranscriptSink()
    try:
        real = s.send
        s.send = lambda event: (sent.append(event), real(event))  # type: ignore[method-assign]
        path = tmp_path / "c.log"
        tw = TranscriptWriter(path, sink=s, secrets=["sk-live-0123456789"])
        tw.write("user", "key is sk-live-0123456789")
        tw.stream("echo sk-live-01234")
        tw.stream("56789 done")
        tw.close()
        assert s.flush(10)
    finally:
        s.close()
    assert "sk-live" not in repr(sent)  # neither the pipe nor the writer process sees it
    # ... because lines formatted and redacted here are what is sent (not, say, nothing)
    assert {type(event) for event in sent} == {Raw, Release}
    raw = b"".join(event.data for event in sent if isinstance(event, Raw)).decode()
    assert "key is [REDACTED]" in raw and "echo [REDACTED] done" in raw
    assert bodies(str(path)) == ["key is [REDACTED]", "echo [REDACTED] done"]


def test_a_failed_write_is_reported_by_the_writer_process(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    s = TranscriptSink()
    try:
        TranscriptWriter(str(blocker / "c.log"), sink=s).write("engine", "x")  # a file as folder
        TranscriptWriter(str(tmp_path / "ok.log"), sink=s).write("engine", "fine")
        assert s.flush(10)
    finally:
        s.close()
    assert bodies(str(tmp_path / "ok.log")) == ["fine"]
    assert "1 transcript write(s) failed" in caplog.text
    assert "cannot append to transcript" in caplog.text


def test_stamps_follow_file_order_when_threads_share_a_transcript(tmp_path: Path) -> None:
    ticks = itertools.count()

    def clock() -> float:
        now = TS + next(ticks) / 1000  # one millisecond a call
        time.sleep(0)  # let the other thread run between reading the clock and writing
        return now

    s = TranscriptSink()
    path = tmp_path / "c.log"
    tw = TranscriptWriter(path, clock, sink=s)
    try:

        def work(role: str) -> None:
            for i in range(100):
                tw.write(role, f"{role} {i}")

        threads = [threading.Thread(target=work, args=(r,)) for r in ("engine", "operator")]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert s.flush(10)
    finally:
        s.close()
    stamps = [line[:12] for line in read(str(path))]
    assert len(stamps) == 200 and len(set(stamps)) == 200
    assert stamps == sorted(stamps)


def test_the_writer_process_waits_for_nothing_when_more_than_a_pipe_is_sent(
    tmp_path: Path,
) -> None:
    # 4 MB in one send, four times the pipe: the send reads answers while the pipe is full
    path = str(tmp_path / "big.log")
    line = "x" * 1000
    frames = bytearray()
    for n in range(4000):
        frames += encode([Write(path, TS, "tool", f"{n} {line}")])
    proc = writerproc.WriterProcess.start(8)
    assert proc is not None
    proc.send(frames)
    assert proc.wait_written(30)
    assert not proc.stop(10)  # a clean exit: nothing left unconfirmed
    assert [b.split(" ", 1)[0] for b in bodies(path)] == [str(n) for n in range(4000)]


def test_a_send_reads_the_answers_that_came_so_what_is_kept_stays_bounded(
    tmp_path: Path,
) -> None:
    # Sends that never fill the pipe (a steady batch) must still read the process's answers,
    # or every frame sent stays in memory until the end.
    path = str(tmp_path / "a.log")
    proc = writerproc.WriterProcess.start(8)
    assert proc is not None
    try:
        for n in range(4):
            proc.send(encode([Write(path, TS, "engine", f"line {n}")]))
            assert len(proc._kept) <= 1  # the frames before this one were confirmed
            if proc._kept:  # its answer is on its way (send's own read may have taken it):
                # wait until it can be read, without reading it
                assert select.select([proc.proc.stdout], [], [], 30)[0]
        assert not proc.stop(10)
    finally:
        proc.kill()
    assert bodies(path) == [f"line {n}" for n in range(4)]


def test_a_dead_writer_process_hands_back_exactly_the_frames_it_did_not_confirm(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "c.log")
    first = encode([Write(path, TS, "engine", "one")])
    rest = encode([Write(path, TS, "engine", "two")]) + encode([Write(path, TS, "engine", "three")])
    proc = writerproc.WriterProcess.start(8)
    assert proc is not None
    os.kill(proc.pid, signal.SIGSTOP)
    proc.send(first + rest)  # one send; the process answers per read, on frame boundaries
    proc._answers += appender.DONE.pack(len(first), 0, 0)  # as if it had written the first
    proc._take_answers()
    assert proc.kill() == rest
    assert not os.path.exists(path)  # it never ran: the answer above was ours


def test_the_writer_process_writes_everything_after_the_engine_is_gone(tmp_path: Path) -> None:
    # The engine died: nobody reads the answers. Every line sent is still written.
    path = str(tmp_path / "c.log")
    proc = subprocess.Popen(
        writerproc.command(8),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdout.close()  # its first answer fails
    for n in range(100):
        proc.stdin.write(encode([Write(path, TS, "engine", f"line {n}")]))
        proc.stdin.flush()
    proc.stdin.close()
    assert proc.wait(HANG_S) == 0
    assert bodies(path) == [f"line {n}" for n in range(100)]


def test_a_flush_asked_from_another_thread_survives_the_coordinators_pump(
    tmp_path: Path,
) -> None:
    # The coordinator frames events between facts (pump) while, say, a second Ctrl+C flushes
    # from the main thread: pump must leave the flush marker for the drain thread to answer.
    s = TranscriptSink()
    try:
        path = str(tmp_path / "c.log")
        TranscriptWriter(path, sink=s).write("engine", "before the flush")
        done = threading.Event()
        s._items.append(done)  # what flush() queues, without waiting here
        s.pump()
        assert done.wait(60)
        assert bodies(path) == ["before the flush"]
    finally:
        s.close()


def holding(pid: int, path: Path) -> bool:
    """Whether process `pid` has `path` open."""
    where = Path(f"/proc/{pid}/fd")
    found = []
    for fd in where.iterdir():
        try:
            found.append(os.readlink(fd))
        except OSError:  # closed since it was listed
            continue
    return str(path) in found


@pytest.mark.parametrize("secrets", [(), ("sk-live-0123456789",)], ids=["events", "lines"])
@pytest.mark.parametrize("helper", [True, False], ids=["writer-process", "in-process"])
def test_a_line_after_a_transcript_is_closed_leaves_its_file_closed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, helper: bool, secrets: tuple[str, ...]
) -> None:
    # Found by a review: an ended child's later line (a merge of its changes, a resume's note)
    # opened its file in the writer again, and its formatter, for good: one descriptor (up to
    # 128) and one formatter more for every such child, until the batch closed.
    if not helper:

        def no_process(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
            raise OSError("fork failed")

        monkeypatch.setattr(writerproc.subprocess, "Popen", no_process)
    s = TranscriptSink()
    path = tmp_path / "c.log"
    try:
        pid = s.helper_pid or os.getpid()
        assert (s.helper_pid is not None) is helper
        tw = TranscriptWriter(path, sink=s, secrets=secrets)
        tw.write("engine", "its run")
        tw.close("engine", "completed")
        assert s.flush(10)
        assert not holding(pid, path)
        tw.write("engine", "merged: its changes")  # after its end
        assert s.flush(10)
        assert not holding(pid, path)
        tw.stream("a later run streams\nand ")  # a retry's run: open until it is closed again
        tw.stream("ends")
        tw.close()
        assert s.flush(10)
        assert not holding(pid, path)
        tw.stream("a call given up on, come back\nlate")  # ended, not closed again
        tw.end_stream(interrupted=True)
        assert s.flush(10)
        assert not holding(pid, path)
        if s._helper is not None:
            assert s._helper.proc.poll() is None  # alive still: it was not the exit that closed it
    finally:
        s.close()
    lines = ["its run", "completed", "merged: its changes", "a later run streams", "and ends"]
    assert bodies(str(path))[:5] == lines
    assert bodies(str(path))[5:] == ["a call given up on, come back", "late (interrupted)"]


def test_an_ended_child_s_later_line_leaves_its_file_closed_in_the_writer(tmp_path: Path) -> None:
    # Its writer is let go as it ends (a later line makes another): that one, never closed,
    # kept the file open in the writer process, and its formatter, until the batch closed.
    from types import SimpleNamespace
    from typing import Any

    from flightdeck.engine.child.state import Child
    from flightdeck.engine.inputs.tasks import Task
    from flightdeck.engine.model import ChildStatus

    from helpers import sim_route

    runner: Any = SimpleNamespace(steerable=True)
    path = tmp_path / "c0.log"
    s = TranscriptSink()
    try:
        assert s.helper_pid is not None
        child = Child(
            Task(id="c0", goal="Look around", seq=0), sim_route(), runner, str(path),
            time.time, lambda fact: None, 1000.0, s, secrets=(),
        )  # fmt: skip
        assert child.mark_running()
        child.transcript.write("engine", "its run")
        assert child.finalize(ChildStatus.COMPLETED)
        child.transcript.write("engine", "merged: its changes")
        assert s.flush(10)
        assert not holding(s.helper_pid, path)
    finally:
        s.close()
    assert bodies(str(path)) == ["its run", "completed", "merged: its changes"]
