"""The worker threads children run on: a ThreadPoolExecutor with a few spare threads, whose
shutdown drops queued work, and a coordinator that runs on when the system refuses a thread."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from flightdeck.engine.control.pool import SPARE_WORKERS, worker_pool

from helpers import batch, run_to_end, settings, sim_route, start, until


def test_at_most_the_slots_plus_spares_run_at_once_and_the_rest_wait() -> None:
    pool = worker_pool(2)
    release = threading.Event()
    lock = threading.Lock()
    running = peak = 0

    def task() -> None:
        nonlocal running, peak
        with lock:
            running += 1
            peak = max(peak, running)
        release.wait(5)
        with lock:
            running -= 1

    futures = [pool.submit(task) for _ in range(2 + SPARE_WORKERS + 3)]
    until(lambda: running == 2 + SPARE_WORKERS, timeout=5)
    release.set()
    for future in futures:
        future.result(5)
    assert peak == 2 + SPARE_WORKERS
    pool.shutdown()


def test_worker_threads_are_named_for_log_records() -> None:
    pool = worker_pool(1)
    assert (
        pool.submit(lambda: threading.current_thread().name)
        .result(5)
        .startswith("flightdeck-child")
    )
    pool.shutdown()


def test_shutdown_drops_queued_work_and_refuses_more() -> None:
    pool = worker_pool(1)  # one slot, plus the spares
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def blocker() -> None:
        started.set()
        release.wait(5)
        ran.append("blocker")

    blockers = [pool.submit(blocker) for _ in range(1 + SPARE_WORKERS)]
    assert started.wait(5)
    queued = pool.submit(lambda: ran.append("queued"))
    pool.shutdown(wait=False, cancel_futures=True)
    release.set()
    for future in blockers:
        future.result(5)
    assert queued.cancelled()
    assert "queued" not in ran  # the running calls finished, the queued one never started
    with pytest.raises(RuntimeError, match="shutdown"):
        pool.submit(lambda: None)


def test_a_thread_the_system_refuses_leaves_the_pool_smaller_not_broken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A pids limit refuses threads before the cap: the work waits for the threads there are."""
    real_start = threading.Thread.start

    def start_thread(self: threading.Thread) -> None:
        if self.name.startswith("flightdeck-child") and not self.name.endswith(("_0", "_1")):
            raise RuntimeError("can't start new thread")
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start_thread)
    engine = start(batch(10), settings(sim_route(tool_turns=0), pool=8), tmp_path)
    try:
        snap = run_to_end(engine)
    finally:
        engine.close()
    assert snap.totals.completed == 10
    assert "cannot start another worker thread" in caplog.text
