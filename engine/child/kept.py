"""What a child keeps beside its live figures: which attempt it is (and the retry that made it),
what it changed in its own workspace, and whether an earlier attempt of its parent made it."""

from __future__ import annotations

from flightdeck.engine.child.port import Attempt
from flightdeck.engine.review.values import Changes


class Kept:
    """A child's attempt and its changes; each replaced whole (any thread may read them)."""

    def __init__(
        self, attempt: int = 1, retrying: Attempt | None = None, changes: Changes | None = None
    ) -> None:
        self.attempt = attempt
        self.retrying = retrying
        self.changes = changes
        self.superseded = False  # a delegate whose parent has run again since: history
        # Its attempt was lost with its owner (`resume` runs it again): in the worktree or copy
        # that attempt left, whose changes are its own, not an earlier attempt's to keep apart.
        self.in_place = False
        self.version = 0  # bumped on every change, so readers can skip an unchanged child

    def changed(self, changes: Changes | None) -> None:
        """Its changes as found at its end, or as the operator decided them."""
        self.changes = changes
        self.version += 1

    def run_in_place(self) -> None:
        """It runs again where its lost attempt worked (see `in_place`)."""
        self.in_place = True

    def supersede(self) -> None:
        """Its parent (or an ancestor) runs again: this delegate belongs to an earlier attempt."""
        self.superseded = True
        self.version += 1
