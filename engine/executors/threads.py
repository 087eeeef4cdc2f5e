"""The default executor: each child's work on a daemon thread of the owner process."""

from __future__ import annotations

import functools
import logging

from flightdeck.engine.child.facts import ChildDone, Report
from flightdeck.engine.child.state import Child
from flightdeck.engine.control.workers import WorkerPool
from flightdeck.engine.model import ChildStatus

log = logging.getLogger(__name__)


class ThreadExecutor:
    """Children's work on the threads of a `WorkerPool`."""

    def __init__(self, pool: WorkerPool, report: Report) -> None:
        self.pool = pool
        self._report = report

    def submit(self, child: Child) -> None:
        """Run `Child.run` on a thread (see WorkerPool.submit for what it raises)."""
        self.pool.submit(functools.partial(self._run, child))

    def lend(self, threads: int) -> None:
        """See WorkerPool.lend."""
        self.pool.lend(threads)

    def grow(self, max_workers: int) -> None:
        """See WorkerPool.grow."""
        self.pool.grow(max_workers)

    def shutdown(self) -> None:
        """See WorkerPool.shutdown."""
        self.pool.shutdown()

    def _run(self, child: Child) -> None:
        """A worker thread's one error path. `Child.run` never raises; if it does (a bug), the
        child fails with the reason, and the coordinator hears it ended, so the batch can end."""
        try:
            child.run()
        except Exception as exc:
            log.exception("flightdeck engine: child %s's worker failed", child.task.id)
            try:
                child.finalize(ChildStatus.FAILED, f"internal error: {exc!r}")
            finally:
                self._report(ChildDone(child.task.id))
