"""What a child keeps beside its live figures: which attempt it is (and the retry that made it),
what it changed in its own workspace, and whether an earlier attempt of its parent made it."""

from __future__ import annotations

from dataclasses import dataclass

from flightdeck.engine.model.session import CliSession
from flightdeck.engine.review.values import Changes


@dataclass(frozen=True, slots=True)
class Attempt:
    """The operator's retry of a child that ended: which attempt this is, and whether it works
    on from the earlier one (`resume`: its workspace as it was, its transcript as context, the
    CLI's session resumed) or starts again from its goal."""

    number: int
    resume: bool
    before: str  # how the earlier attempt ended: "failed: exit 3"
    context: str = ""  # resume: the end of the earlier attempt's transcript
    session: CliSession | None = None  # resume: the CLI session the earlier attempt reported

    @property
    def prompt(self) -> str:
        """What a resumed attempt is told ahead of its goal (a model, a CLI with no session)."""
        return (
            f"An earlier attempt at this task ended ({self.before}). Its transcript so far "
            f"follows; continue the task from where it stopped.\n\n{self.context}"
        )

    def shown(self, text: str) -> str:
        """`text` (a prompt holding `prompt`) as the transcript shows it: the earlier
        transcript, already above it in the same file, named rather than repeated."""
        note = f"[the earlier attempt's transcript, {len(self.context):,} characters]"
        return text.replace(self.context, note) if self.context else text


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
