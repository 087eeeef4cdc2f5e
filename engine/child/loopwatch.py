"""A child's loop checks as its runner feeds them: each call and turn goes to the detector
(loops.py), and a flag, or its clearing, becomes one transcript line and a fact."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from flightdeck.engine.child.facts import LoopFlagged, Report
from flightdeck.engine.child.loops import LoopDetector, workspace_fingerprint
from flightdeck.engine.inputs.settings import LoopSettings
from flightdeck.engine.model import LoopEvidence


class LoopWatch:
    """The detector fed by the runner's thread; `evidence` is what the child's row shows."""

    __slots__ = (
        "_child_id",
        "_clock",
        "_detector",
        "_report",
        "_settings",
        "_tokens",
        "_write",
        "evidence",
        "looped_ts",
        "version",
    )

    def __init__(
        self,
        child_id: str,
        settings: LoopSettings,
        *,
        write: Callable[[str, str], None],
        report: Report,
        tokens: Callable[[], int],
        clock: Callable[[], float],
    ) -> None:
        self._child_id = child_id
        self._settings = settings
        # Made at the first tool call (most children of a big batch never make one), dropped
        # when the run ends: a detector's history weighs about 4 KB.
        self._detector: LoopDetector | None = None
        self._write = write  # a transcript line: (role, text)
        self._report = report
        self._tokens = tokens
        self._clock = clock
        self.evidence: LoopEvidence | None = None  # replaced whole, read from any thread
        self.looped_ts: float | None = None  # its last flag's time, kept once it clears
        self.version = 0

    @property
    def _found(self) -> LoopDetector:
        if self._detector is None:
            self._detector = LoopDetector(self._settings)
        return self._detector

    def call(self, name: str, arguments: Mapping[str, Any] | str, output: str) -> None:
        """One tool call and what it returned."""
        self._found.call(name, arguments, output)

    def steered(self) -> None:
        """A loop policy's steer reached the child: from here on only fresh evidence counts."""
        self._found.steered()

    def turn_ended(self, workspace: Path | None) -> None:
        """A turn's tool calls have all returned: is it looping now, or no longer?"""
        detector = self._found
        if not detector.enabled:
            return
        fingerprint = None
        if detector.settings.still_turns and workspace is not None:
            fingerprint = workspace_fingerprint(workspace)
        before = self.evidence
        if detector.turn_ended(self._tokens(), fingerprint, self._clock()):
            self._changed(before, detector.evidence, again=detector.again)

    def answered(self) -> None:
        """It answered with no tool call: a loop it was in has ended."""
        if self._detector is not None and self._detector.answered():
            self._changed(self.evidence, None)

    def ended(self) -> None:
        """Its run is over: the detector's history goes (about 4 KB with tool calls); the flag
        it found, if any, stays on the row."""
        self._detector = None

    def follow(self, evidence: LoopEvidence | None) -> None:
        """The flag as judged where the child runs (another machine): this is what it shows."""
        self.evidence = evidence
        if evidence is not None:
            self.looped_ts = evidence.ts
        self.version += 1

    def _changed(
        self, before: LoopEvidence | None, found: LoopEvidence | None, again: bool = False
    ) -> None:
        self.evidence = found
        if found is not None:
            self.looped_ts = found.ts
        self.version += 1
        if again and found is not None:
            # Fresh evidence on what it did after the policy's steer reached it.
            self._write(
                "engine",
                f"still looping after the loop policy's steer ({found.kind}): {found.summary}",
            )
        elif before is not None and found is not None and before.kind == found.kind:
            return  # the same loop, its calls updated in place
        elif found is not None:
            self._write("engine", f"looping ({found.kind}): {found.summary}")
        else:
            self._write("engine", "no longer looping: it made progress")
        self._report(LoopFlagged(self._child_id, found, again))
