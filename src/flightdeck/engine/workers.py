"""The worker threads that run children: a thread pool without futures.

`concurrent.futures.ThreadPoolExecutor` would do the job, but the engine never reads a future
(children report what happened to the coordinator's inbox), and on the engine benchmark (2,000
instant children, 64 workers) the executor cost 70-90 µs more CPU per child than this pool.
Most of that was its idle semaphore, a lock every worker takes after every item, which convoys
under the GIL; the rest was a future per child (a Condition, a work item, notifications). This
pool keeps `submit` and `shutdown` (queued work dropped) and drops the rest.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)


class WorkerPool:
    """Up to `max_workers` daemon threads running callables from one FIFO queue.

    Threads start ahead (`start_workers`) or on demand, when work arrives and no started thread
    is idle. They are daemon threads: a worker abandoned inside a call that never returns cannot
    hold up interpreter exit.
    """

    def __init__(self, max_workers: int, name: str) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self._max = max_workers
        self._name = name
        self._queue: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()  # submit and shutdown only; workers never take it
        self._threads: list[threading.Thread] = []
        # One token per finished item: a started worker that will take the next item without
        # a new thread. A deque, because workers must not take a lock after every item: with
        # 64 workers that lock convoys under the GIL (measured: 90 µs of CPU per child).
        self._idle: deque[None] = deque()
        self._closed = False

    @property
    def size(self) -> int:
        """Threads started so far."""
        return len(self._threads)

    def start_workers(self, count: int) -> None:
        """Start up to `count` threads now (never more than the cap), before work arrives.

        `Thread.start` waits until the new thread runs, and a new thread has to win the
        interpreter lock to run: started on demand while workers are busy, each start held the
        caller (the coordinator) for one GIL switch interval. On the engine benchmark, 65
        starts on demand took 450 ms of a 625 ms run; started before the batch, a few ms.
        """
        with self._lock:
            while len(self._threads) < min(count, self._max):
                if not self._grow():
                    return
                self._idle.append(None)  # it will take the first item queued

    def submit(self, fn: Callable[[], object]) -> None:
        """Queue `fn`; RuntimeError once shut down or while the interpreter exits.

        The main thread has stopped once the interpreter is exiting (threading joins the other
        threads after that): work that would start then is refused, like ThreadPoolExecutor
        does, so the caller can settle it instead of leaving it to a dying process.
        """
        with self._lock:
            if self._closed:
                raise RuntimeError("the worker pool is shut down")
            if not threading.main_thread().is_alive():
                raise RuntimeError("cannot start work while the interpreter exits")
            self._queue.put(fn)
            if len(self._threads) >= self._max:
                return  # every thread started: the next one free takes it
            if self._idle:
                self._idle.pop()
                return
            self._grow()  # or, refused, it waits for a thread already started

    def _grow(self) -> bool:
        """Start one more thread; False when the system refuses one and others exist.

        A pids limit or a short memory budget can refuse a thread long before the cap: the
        pool then stays the size it has (queued work waits for a free thread, as it does at
        the cap) instead of failing a child, or the whole start, for it."""
        try:
            self._start_thread()
        except RuntimeError as exc:
            if not self._threads:
                raise
            self._max = len(self._threads)
            log.warning(
                "cannot start another worker thread (%s): at most %d children run at once",
                exc,
                self._max,
            )
            return False
        return True

    def _start_thread(self) -> None:
        thread = threading.Thread(
            target=self._work, name=f"{self._name}-{len(self._threads)}", daemon=True
        )
        thread.start()
        self._threads.append(thread)

    def shutdown(self) -> None:
        """Drop queued work that has not started and let idle workers exit; do not wait.

        A worker inside a call finishes that call, then exits.
        """
        with self._lock:
            self._closed = True
            while True:
                try:
                    self._queue.get_nowait()
                except queue.Empty:
                    break
            for _ in self._threads:
                self._queue.put(None)

    def _work(self) -> None:
        get = self._queue.get
        while True:
            fn = get()
            if fn is None:
                return
            try:
                fn()
            except Exception:  # Child.run never raises; anything else must not kill the worker
                log.exception("flightdeck worker: a task raised")
            del fn  # drop the reference before blocking on the next item
            self._idle.append(None)  # atomic: no lock
