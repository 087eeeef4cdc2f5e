"""The operator's accept and discard, applied off the coordinator thread (git takes its time:
a merge, a worktree removed), and what they decided reported back to it as a `Reviewed` fact.
Several at once take turns (the reviewer's lock)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping

from flightdeck.engine.commands import Accept, CommandError, Discard
from flightdeck.engine.control.inbox import Message, Order, Reviewed
from flightdeck.engine.model import ChildRow
from flightdeck.engine.review.apply import Reviewer
from flightdeck.engine.sanitize import one_line

log = logging.getLogger(__name__)


class ReviewDesk:
    """Hands each accept or discard to a thread of its own, and its outcome to the coordinator."""

    def __init__(self, reviewer: Reviewer, report: Callable[[Message], None]) -> None:
        self._reviewer = reviewer
        self._report = report

    def submit(self, order: Order, rows: Mapping[str, ChildRow]) -> None:
        """Apply `order` (an Accept or Discard) to `rows` (the batch's, as they are now)."""
        threading.Thread(
            target=self._run, args=(order, rows), name="flightdeck-review", daemon=True
        ).start()

    def _run(self, order: Order, rows: Mapping[str, ChildRow]) -> None:
        command = order.command
        assert isinstance(command, Accept | Discard)
        try:
            outcome = self._reviewer.apply(command, rows)
        except CommandError as exc:
            self._report(Reviewed(order, {}, str(exc)))
        except Exception as exc:  # a bug must not leave its sender waiting for ever
            log.exception("flightdeck engine: %s failed", command.title)
            self._report(Reviewed(order, {}, f"{command.title} failed: {one_line(str(exc), 200)}"))
        else:
            self._report(Reviewed(order, outcome.decided))
