"""The worker threads children run on: daemon threads with a few spares, whose shutdown drops
queued work and whose stuck calls do not hold the process, and a coordinator that runs on when
the system refuses a thread."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from flightdeck.engine.control.pool import SPARE_WORKERS, worker_pool
from flightdeck.engine.control.workers import WorkerPool

from helpers import HANG_S, Hold, batch, run_to_end, settings, sim_route, start, until


def test_at_most_the_slots_plus_spares_run_at_once_and_the_rest_wait() -> None:
    pool = worker_pool(2)
    release = threading.Event()
    lock = threading.Lock()
    running = peak = finished = 0

    def task() -> None:
        nonlocal running, peak, finished
        with lock:
            running += 1
            peak = max(peak, running)
        release.wait(HANG_S)
        with lock:
            running -= 1
            finished += 1

    for _ in range(2 + SPARE_WORKERS + 3):
        pool.submit(task)
    until(lambda: running == 2 + SPARE_WORKERS, timeout=60)
    release.set()
    until(lambda: finished == 2 + SPARE_WORKERS + 3, timeout=60)
    assert peak == 2 + SPARE_WORKERS
    assert pool.threads == 2 + SPARE_WORKERS
    pool.shutdown()


def test_a_free_thread_takes_the_next_work_instead_of_a_new_one() -> None:
    pool = WorkerPool(8)
    done = threading.Event()
    for _ in range(20):
        pool.submit(done.set)
        assert done.wait(60)
        done.clear()
        until(lambda: pool.idle == 1, timeout=60)
    assert pool.threads == 1
    pool.shutdown()


def test_worker_threads_are_named_for_log_records_and_are_daemons() -> None:
    pool = worker_pool(1)
    seen: list[threading.Thread] = []
    pool.submit(lambda: seen.append(threading.current_thread()))
    until(lambda: bool(seen), timeout=60)
    assert seen[0].name.startswith("flightdeck-child") and seen[0].daemon
    pool.shutdown()


def test_shutdown_drops_queued_work_and_refuses_more() -> None:
    pool = WorkerPool(1)
    started, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def blocker() -> None:
        started.set()
        release.wait(HANG_S)
        ran.append("blocker")

    pool.submit(blocker)
    assert started.wait(60)
    pool.submit(lambda: ran.append("queued"))
    pool.shutdown()
    release.set()
    until(lambda: ran == ["blocker"], timeout=60)
    assert "queued" not in ran  # the running call finished, the queued one never started
    with pytest.raises(RuntimeError, match="shut down"):
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
    # Held, so the first two children keep their threads busy when the third arrives: a
    # child that ended first would leave its thread idle and no third thread would be asked.
    hold = Hold(tmp_path / "hold")
    route = sim_route(tool_turns=0, **hold.options())
    engine = start(batch(10), settings(route, pool=8), tmp_path)
    try:
        until(lambda: "cannot start another worker thread" in caplog.text, timeout=60)
        hold.release()
        snap = run_to_end(engine)
    finally:
        hold.release()
        engine.close()
    assert snap.totals.completed == 10


DEAF_CHILD = """
import sys, threading
from pathlib import Path
from helpers import batch, settings, sim_route, start
from flightdeck.engine.model import Usage
from flightdeck.engine.providers.base import TextDelta, UsageEvent

streaming = threading.Event()

class Stream:
    def __iter__(self):
        streaming.set()
        threading.Event().wait(60)  # no stop reaches it: an SDK read with no abort
        yield TextDelta("too late")
        yield UsageEvent(Usage(1, 1))

    def close(self):
        pass

class Deaf:
    name, model, secrets = "sim", "deaf", ()

    def open(self, request):
        return Stream()

    def close(self):
        pass

s = settings(sim_route(tool_turns=0), stall_grace_s=0.1)
engine = start(batch(1), s, Path(sys.argv[1]), providers={"sim": Deaf()})
assert streaming.wait(60)
engine.stop_all()
assert engine.wait(60)
engine.close()
print("closed", flush=True)
"""


@pytest.mark.slow
def test_a_worker_stuck_in_a_call_does_not_hold_the_process_at_exit(tmp_path: Path) -> None:
    # The child is abandoned (stopped, recorded) but its thread stays inside the call. The
    # process must still end when its main thread does, as with daemon threads.
    tests = Path(__file__).parent
    done = subprocess.run(
        [sys.executable, "-c", DEAF_CHILD, str(tmp_path)],
        cwd=tests,
        env={**os.environ, "PYTHONPATH": str(tests)},
        capture_output=True,
        text=True,
        timeout=30,  # the stuck call lasts 60 s: a process that waits for it fails here
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "closed\n"


def test_a_thread_lent_for_a_paused_process_lets_the_next_child_run() -> None:
    # A paused process keeps its thread: one more is lent, so the child taking its slot runs
    # at once instead of waiting for a thread that will not come back until it continues.
    pool = WorkerPool(1)
    held, ran = threading.Event(), threading.Event()
    pool.submit(lambda: held.wait(HANG_S))  # the suspended process's thread
    pool.lend(1)
    pool.submit(ran.set)
    assert ran.wait(HANG_S) and pool.threads == 2
    pool.lend(-1)  # continued: its thread is its own again
    held.set()
    pool.shutdown()


def test_raising_the_pool_keeps_the_threads_lent_to_paused_processes() -> None:
    # Six suspended processes each hold a thread, and one is lent for each; the operator then
    # raises the pool: all twenty new children must get a thread, and giving the lent ones back
    # leaves the pool its raised size (before, grow() swallowed the lent threads).
    pool = WorkerPool(1)
    held = threading.Event()
    for _ in range(6):
        pool.submit(lambda: held.wait(HANG_S))
        pool.lend(1)
    pool.grow(20)
    started = threading.Semaphore(0)
    release = threading.Event()

    def child() -> None:
        started.release()
        release.wait(HANG_S)

    for _ in range(20):
        pool.submit(child)
    for _ in range(20):
        assert started.acquire(timeout=HANG_S), "a child waited for a thread"
    assert pool.threads == 26
    pool.lend(-6)
    assert pool._max == 20
    release.set()
    held.set()
    pool.shutdown()
