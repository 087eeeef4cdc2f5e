"""The worker pool: on-demand threads up to a cap, FIFO, reuse of idle workers, shutdown."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable

import pytest
from flightdeck.engine.control import workers
from flightdeck.engine.control.workers import WorkerPool

from helpers import until


def test_runs_everything_in_fifo_order_on_one_worker() -> None:
    pool = WorkerPool(1, "t")
    done = threading.Event()
    seen: list[int] = []
    for i in range(50):
        pool.submit(lambda i=i: seen.append(i))
    pool.submit(done.set)
    assert done.wait(5)
    assert seen == list(range(50))
    assert pool.size == 1
    pool.shutdown()


def test_an_idle_worker_is_reused_instead_of_starting_a_thread() -> None:
    pool = WorkerPool(8, "t")
    for _ in range(20):
        ran = threading.Event()
        pool.submit(ran.set)
        assert ran.wait(5)
        # the worker hands its idle token back just after the call returns
        for _ in range(1000):
            if pool._idle or pool.size > 1:
                break
            threading.Event().wait(0.001)
    assert pool.size == 1
    pool.shutdown()


def test_never_more_threads_than_the_cap_and_queued_work_waits_for_one() -> None:
    pool = WorkerPool(3, "t")
    release = threading.Event()
    lock = threading.Lock()
    running = peak = finished = 0
    all_done = threading.Event()

    def task() -> None:
        nonlocal running, peak, finished
        with lock:
            running += 1
            peak = max(peak, running)
        release.wait(5)
        with lock:
            running -= 1
            finished += 1
            if finished == 10:
                all_done.set()

    for _ in range(10):
        pool.submit(task)
    assert pool.size == 3
    until(lambda: running == 3, timeout=5)  # three calls at once, the rest queued
    assert finished == 0
    release.set()
    assert all_done.wait(5)
    assert peak == 3 and pool.size == 3
    pool.shutdown()


def test_a_thread_the_system_refuses_leaves_the_pool_smaller_not_broken(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A pids limit refuses threads before the cap: the work waits for the threads there are."""
    real_start = workers._start_new_thread
    started = 0

    def start(fn: Callable[..., object], args: tuple[object, ...]) -> int:
        nonlocal started
        if started == 2:
            raise RuntimeError("can't start new thread")
        started += 1
        return real_start(fn, args)

    monkeypatch.setattr(workers, "_start_new_thread", start)
    pool = WorkerPool(8, "t")
    pool.start_workers(4)  # two start, the third is refused: no error
    done: list[int] = []
    all_done = threading.Event()

    def task(i: int) -> None:
        done.append(i)
        if len(done) == 10:
            all_done.set()

    for i in range(10):
        pool.submit(lambda i=i: task(i))  # type: ignore[misc]
    assert all_done.wait(5)
    assert sorted(done) == list(range(10)) and pool.size == 2
    assert "cannot start another worker thread" in caplog.text
    pool.shutdown()


def test_shutdown_drops_queued_work_and_refuses_more() -> None:
    pool = WorkerPool(1, "t")
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def blocker() -> None:
        started.set()
        release.wait(5)
        ran.append("blocker")

    pool.submit(blocker)
    assert started.wait(5)
    pool.submit(lambda: ran.append("queued"))
    pool.shutdown()
    assert pool.alive == 1  # inside its call
    release.set()
    until(lambda: pool.alive == 0, timeout=5)  # the worker exits once its call returns
    assert ran == ["blocker"]  # the running call finished, the queued one never started
    with pytest.raises(RuntimeError, match="shut down"):
        pool.submit(lambda: None)


def test_a_raising_task_does_not_kill_its_worker(caplog: pytest.LogCaptureFixture) -> None:
    pool = WorkerPool(1, "t")
    done = threading.Event()

    def boom() -> None:
        raise ValueError("boom")

    pool.submit(boom)
    pool.submit(done.set)
    assert done.wait(5)
    assert pool.size == 1
    assert "a task raised" in caplog.text
    pool.shutdown()


def test_work_submitted_while_the_interpreter_exits_is_refused() -> None:
    # A non-daemon thread submits after the main thread has finished, as a coordinator does
    # when a script ends without Engine.close().
    script = """
import threading
from flightdeck.engine.control.workers import WorkerPool
pool = WorkerPool(2, "t")
def late():
    threading.main_thread().join()
    try:
        pool.submit(lambda: print("ran"))
        print("accepted")
    except RuntimeError as exc:
        print("refused:", exc)
threading.Thread(target=late).start()
"""
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=True
    )
    assert out.stdout.strip() == "refused: cannot start work while the interpreter exits"


def test_workers_started_ahead_take_the_first_items_without_new_threads() -> None:
    pool = WorkerPool(4, "t")
    pool.start_workers(10)  # capped
    assert pool.size == 4
    release = threading.Event()
    started = threading.Semaphore(0)

    def task() -> None:
        started.release()
        release.wait(5)

    for _ in range(4):
        pool.submit(task)
    for _ in range(4):
        assert started.acquire(timeout=5)  # four ran at once, on the threads started ahead
    assert pool.size == 4
    release.set()
    pool.shutdown()

    small = WorkerPool(8, "t")
    small.start_workers(2)
    assert small.size == 2
    hold = threading.Event()
    for _ in range(3):  # more work than started threads: a third thread starts on demand
        small.submit(lambda: hold.wait(5))
    assert small.size == 3
    hold.set()
    small.shutdown()
