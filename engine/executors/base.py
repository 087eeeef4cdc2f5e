"""Where children's work runs: the one interface the coordinator hands children to.

An executor runs a child's work (`Child.run` on a thread of the owner, or its runner on a
cluster's worker); the coordinator decides when. It raises `ThreadRefused` when the child is
queued but no thread could start for it, RuntimeError when it can take no work at all.
"""

from __future__ import annotations

from typing import Protocol

from flightdeck.engine.child.state import Child


class Executor(Protocol):
    """Runs children's work; `submit` is called on the coordinator thread."""

    def submit(self, child: Child) -> None:
        """Run the child's work (again, for a paused child continued)."""
        ...

    def lend(self, threads: int) -> None:
        """A paused process keeps its thread: allow `threads` more (negative: fewer)."""
        ...

    def grow(self, max_workers: int) -> None:
        """The pool size grew: allow up to `max_workers` threads."""
        ...

    def shutdown(self) -> None:
        """Take no more work; what runs is abandoned, not waited for."""
        ...
