"""The worker threads that run children: a thread pool without futures.

`concurrent.futures.ThreadPoolExecutor` would do the job, but the engine never reads a future
(children report what happened to the coordinator's inbox), and on the engine benchmark (2,000
instant children, 64 workers) the executor cost 70-90 µs more CPU per child than this pool.
Most of that was its idle semaphore, a lock every worker takes after every item, which convoys
under the GIL; the rest was a future per child (a Condition, a work item, notifications). This
pool keeps `submit` and `shutdown` (queued work dropped) and drops the rest.
"""

from __future__ import annotations

import _thread
import logging
import queue
import threading
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)

_start_new_thread = _thread.start_new_thread  # a name tests can replace


class WorkerPool:
    """Up to `max_workers` threads running callables from one FIFO queue.

    Threads start ahead (`start_workers`) or on demand, when work arrives and no started thread
    is idle. They are low-level threads (`_thread`), started without `threading.Thread`'s
    handshake: `Thread.start` blocks its caller until the operating system has run the new
    thread, which on a busy two-core machine took up to a scheduler tick (4 ms) per thread:
    40-80 ms to start 64 workers on the engine benchmark, with the engine idle all that time;
    2-4 ms without it. Like daemon threads, a worker abandoned inside a call
    that never returns cannot hold up interpreter exit. They have no `threading` name: a log
    record from one says `Dummy-N`.
    """

    def __init__(self, max_workers: int, name: str) -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self._max = max_workers
        self._name = name  # in log records: the threads themselves have no name
        self._queue: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()  # submit and shutdown only; workers never take it
        self._started = 0  # threads started
        self._alive = 0  # of those, not yet exited (after shutdown)
        # One token per finished item: a started worker that will take the next item without
        # a new thread. A deque, because workers must not take a lock after every item: with
        # 64 workers that lock convoys under the GIL (measured: 90 µs of CPU per child).
        self._idle: deque[None] = deque()
        self._closed = False

    @property
    def size(self) -> int:
        """Threads started so far."""
        return self._started

    @property
    def alive(self) -> int:
        """Threads that have not exited: each exits after shutdown, once its call returns."""
        return self._alive

    def start_workers(self, count: int) -> None:
        """Start up to `count` threads now (never more than the cap), before work arrives.

        Started on demand, every new thread has to win the interpreter lock from the busy
        workers before it takes its first item. On the engine benchmark, 65 starts on demand
        (with `threading.Thread`, which also made the coordinator wait for each one) took
        450 ms of a 625 ms run; started before the batch, a few ms.
        """
        with self._lock:
            while self._started < min(count, self._max):
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
            if self._started >= self._max:
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
            if not self._started:
                raise
            self._max = self._started
            log.warning(
                "cannot start another worker thread (%s): at most %d children run at once",
                exc,
                self._max,
            )
            return False
        return True

    def _start_thread(self) -> None:
        _start_new_thread(self._work, ())  # RuntimeError when the system refuses a thread
        self._started += 1
        self._alive += 1

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
            for _ in range(self._started):
                self._queue.put(None)

    def _work(self) -> None:
        get = self._queue.get
        while True:
            fn = get()
            if fn is None:
                with self._lock:  # once per thread, at shutdown
                    self._alive -= 1
                return
            try:
                fn()
            except Exception:  # Child.run never raises; anything else must not kill the worker
                log.exception("%s worker: a task raised", self._name)
            del fn  # drop the reference before blocking on the next item
            self._idle.append(None)  # atomic: no lock
