"""The threads children run on: daemon threads taking work from one queue."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class ThreadRefused(RuntimeError):
    """The system refused a new thread (a pids limit, say); the work waits for a busy one."""


class WorkerPool:
    """Up to `max_workers` daemon threads running callables first in, first out.

    Not `ThreadPoolExecutor`: it joins its threads at interpreter exit, so one child abandoned
    inside a call that no stop reaches (an SDK read with no abort) would hold the process long
    after its batch ended. Children report to the coordinator, so no future is needed either.
    Threads start on demand, when work arrives and none is idle.
    """

    def __init__(self, max_workers: int, name: str = "flightdeck-child") -> None:
        if max_workers < 1:
            raise ValueError("max_workers must be at least 1")
        self._base = max_workers  # what the pool size asks for (grow)
        self._lent = 0  # one more for each paused process holding its thread (lend)
        self._max = max_workers  # _base + _lent, or fewer once the system refused a thread
        self._name = name
        self._queue: queue.SimpleQueue[Callable[[], object] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._idle = 0  # threads waiting for work that no queued item is promised to yet
        self._closed = False

    @property
    def threads(self) -> int:
        """Threads started so far."""
        return len(self._threads)

    @property
    def idle(self) -> int:
        """Threads waiting for work."""
        return self._idle

    def grow(self, max_workers: int) -> None:
        """Allow up to `max_workers` threads (a larger pool size); never fewer: a thread that
        is not needed waits idle, and a lower pool size only admits fewer children."""
        with self._lock:
            self._base = max(self._base, max_workers)
            self._max = self._base + self._lent

    def submit(self, fn: Callable[[], object]) -> None:
        """Queue `fn` for a thread; RuntimeError once shut down or while the interpreter exits,
        ThreadRefused when it is queued but no thread could start for it."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the worker pool is shut down")
            # threading stops the main thread before it joins the others at exit: work that
            # would start then is refused, so the caller settles it instead.
            if not threading.main_thread().is_alive():
                raise RuntimeError("cannot start work while the interpreter exits")
            if self._idle:
                self._idle -= 1
                self._queue.put(fn)
                return
            if len(self._threads) >= self._max:
                self._queue.put(fn)  # the next thread free takes it
                return
            thread = threading.Thread(
                target=self._work, name=f"{self._name}_{len(self._threads)}", daemon=True
            )
            try:
                thread.start()
            except RuntimeError as exc:
                if not self._threads:
                    raise
                self._max = len(self._threads)
                self._queue.put(fn)
                raise ThreadRefused(str(exc)) from exc
            self._threads.append(thread)
            self._queue.put(fn)

    def lend(self, threads: int) -> None:
        """Allow `threads` more (or, negative, fewer) threads: a paused process keeps its
        thread, so the children that take its slot meanwhile need one of their own."""
        with self._lock:
            self._lent = max(0, self._lent + threads)
            self._max = self._base + self._lent

    def shutdown(self) -> None:
        """Drop queued work that has not started and let idle threads exit; do not wait.

        A thread inside a call finishes that call, then exits.
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
        while (fn := self._queue.get()) is not None:
            try:
                fn()
            except Exception:  # a child never raises; anything else must not end the thread
                log.exception("%s: a task raised", self._name)
            del fn  # drop the reference before waiting for the next item
            with self._lock:
                self._idle += 1
