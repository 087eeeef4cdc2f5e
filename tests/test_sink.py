"""The transcript sink: framed lines to the writer process, or written in-process without it."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from pathlib import Path

import pytest

from flightdeck.engine import appender, sink
from flightdeck.engine.appender import FileAppender, apply_frames, frame
from flightdeck.engine.sink import TranscriptSink


def read(path: str) -> list[str]:
    return Path(path).read_text(encoding="utf-8").splitlines()


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


def test_frames_survive_any_split_and_odd_file_names(tmp_path: Path) -> None:
    odd = str(tmp_path / "naïve \udcff name.log")  # not valid UTF-8: a surrogate-escaped byte
    stream = frame(1, odd, b"one\n") + frame(1, odd, b"two\n") + frame(2, odd) + frame(3)
    flushes: list[int] = []
    files = FileAppender()
    buf = bytearray()
    for byte in stream:  # the pipe may deliver a frame one byte at a time
        buf.append(byte)
        del buf[: apply_frames(buf, files, lambda: flushes.append(1))]
    assert not buf and flushes == [1]
    assert Path(odd).read_bytes() == b"one\ntwo\n"


def test_the_writer_process_writes_the_files(tmp_path: Path) -> None:
    s = TranscriptSink()
    try:
        pid = s.helper_pid
        assert pid is not None and pid != os.getpid()
        # its own session: a Ctrl+C sent to the engine's process group does not reach it
        assert os.getsid(pid) != os.getsid(0)
        paths = [str(tmp_path / f"c{i}.log") for i in range(3)]
        for n in range(50):
            for p in paths:
                s.append(p, f"line {n}\n".encode())
            s.pump()  # what the coordinator does between facts
        s.release(paths[0])
        assert s.flush(10)  # returns once the helper has written them
        for p in paths:
            assert read(p) == [f"line {n}" for n in range(50)]
        s.append(paths[0], b"after release\n")
    finally:
        s.close()
    assert read(paths[0])[-1] == "after release"
    with pytest.raises(ProcessLookupError):  # close() waited for it to exit
        os.kill(pid, 0)


def test_lines_keep_coming_when_the_writer_process_dies(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    s = TranscriptSink()
    path = str(tmp_path / "c.log")
    try:
        s.append(path, b"before\n")
        assert s.flush(10)
        pid = s.helper_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        for n in range(3):
            s.append(path, f"after {n}\n".encode())
        assert s.flush(10)
        assert s.helper_pid is None
    finally:
        s.close()
    assert read(path) == ["before", "after 0", "after 1", "after 2"]
    assert "writing in-process" in caplog.text


def test_without_the_writer_process_the_sink_writes_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_process(*args: object, **kwargs: object) -> subprocess.Popen[bytes]:
        raise OSError("fork failed")

    monkeypatch.setattr(sink.subprocess, "Popen", no_process)
    caplog.set_level(logging.WARNING)
    s = TranscriptSink()
    path = str(tmp_path / "c.log")
    try:
        assert s.helper_pid is None
        s.append(path, b"one\n")
        s.pump()  # nothing to frame for: a no-op
        s.append(path, b"two\n")
        assert s.flush(10)
        assert read(path) == ["one", "two"]
    finally:
        s.close()
    assert "cannot start the transcript writer process (fork failed)" in caplog.text


def test_a_failed_write_is_reported_by_the_writer_process(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    s = TranscriptSink()
    try:
        s.append(str(blocker / "c.log"), b"x\n")  # a file where a folder should be
        s.append(str(tmp_path / "ok.log"), b"fine\n")
        assert s.flush(10)
    finally:
        s.close()
    assert read(str(tmp_path / "ok.log")) == ["fine"]
    assert "1 transcript write(s) failed" in caplog.text
    assert "cannot append to transcript" in caplog.text
