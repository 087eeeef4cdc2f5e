"""Is a child looping? Three checks over its tool calls, turn by turn, and the evidence.

- repeat: the same tool with the same or near-same arguments `repeat_calls` times in a row.
  Near-same is decided on a canonical key, not a similarity ratio: the arguments as JSON with
  sorted keys, runs of whitespace made one space and every number made `#`. Two calls that
  differ only in a line number, an offset or spacing are one call made again; a ratio (difflib)
  would need a threshold that is wrong for short arguments or for long ones, and costs
  quadratic time per pair where a key costs one dict look-up.
- no_output: `stale_turns` tool turns in a row whose results were all seen before.
- no_change: `still_turns` tool turns in a row whose tokens grew while a fingerprint of the
  child's workspace (each file's path, size and mtime) stayed the same.

The first check that holds is the evidence; it clears when none holds any more (the child
made progress). Once a loop policy's steer reached the child (`steered`), a check holding on
calls or turns from before it is no news: only one that holds on what the child did since is
evidence again (`again`), what the policy's next step waits for. The detector is plain data
fed by one thread (the child's worker).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from flightdeck.engine.inputs.settings import LoopSettings
from flightdeck.engine.model import LoopEvidence
from flightdeck.engine.sanitize import one_line

CALL_CHARS = 160  # one call as the evidence shows it
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
_SPACE = re.compile(r"\s+")
# A workspace fingerprint looks at this many entries at most: a cheap check between turns,
# not a scan of a monorepo (past it, only the first entries in walk order are compared).
FINGERPRINT_ENTRIES = 5000
_SKIP_DIRS = frozenset({".git", "node_modules", "__pycache__", ".venv", ".flightdeck"})


def call_key(name: str, arguments: Mapping[str, Any] | str) -> str:
    """The canonical key of a tool call: near-same calls share it (see the module's notes)."""
    if isinstance(arguments, str):
        text = arguments
    else:
        text = json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)
    text = _NUMBER.sub("#", _SPACE.sub(" ", text).strip())
    return f"{name}\x00{text}"


def call_text(name: str, arguments: Mapping[str, Any] | str) -> str:
    """One call on one line, as the evidence shows it: `read_file {"path": "a.py"}`."""
    if isinstance(arguments, str):
        text = arguments
    else:
        text = json.dumps(arguments, sort_keys=True, ensure_ascii=False, default=str)
    return one_line(f"{name} {text}", CALL_CHARS)


def output_digest(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8", "replace"), digest_size=12).hexdigest()


def workspace_fingerprint(root: Path) -> str:
    """A cheap digest of a folder's files: each path, size and modification time."""
    digest = hashlib.blake2b(digest_size=12)
    seen = 0
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
        for name in sorted(files):
            path = os.path.join(folder, name)
            try:
                st = os.stat(path, follow_symlinks=False)
            except OSError:
                continue
            digest.update(f"{path}\x00{st.st_size}\x00{st.st_mtime_ns}\n".encode())
            seen += 1
            if seen >= FINGERPRINT_ENTRIES:
                return digest.hexdigest()
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class _Call:
    key: str
    text: str
    new: bool = False  # its result had not been seen before


class LoopDetector:
    """Fed each tool call and the end of each tool turn; `evidence` is the loop found, if any."""

    def __init__(self, settings: LoopSettings) -> None:
        self.settings = settings
        self.evidence: LoopEvidence | None = None
        self._recent: deque[_Call] = deque(maxlen=max(1, settings.repeat_calls))
        self._outputs: set[str] = set()
        self._turn_calls: list[_Call] = []
        self._turn_new = False  # a result of this turn not seen before
        # The stale turns in a row, each as its calls, oldest first.
        self._stale: deque[str] = deque(maxlen=max(1, settings.stale_turns))
        self._still: deque[str] = deque(maxlen=max(1, settings.still_turns))
        self._turns = 0
        self._last_tokens: int | None = None
        self._last_print: str | None = None
        # Since a policy's steer reached the child (None: none since it was last flagged).
        self._calls_since: int | None = None
        self._turns_since = 0
        self.again = False  # the last change: a check held afresh on what came after a steer

    @property
    def enabled(self) -> bool:
        s = self.settings
        return bool(s.repeat_calls or s.stale_turns or s.still_turns)

    def call(self, name: str, arguments: Mapping[str, Any] | str, output: str) -> None:
        """A tool call ran and returned `output`."""
        digest = output_digest(name + "\x00" + output)
        new = digest not in self._outputs
        if new:
            self._outputs.add(digest)
            self._turn_new = True
        one = _Call(call_key(name, arguments), call_text(name, arguments), new)
        self._recent.append(one)
        if self._calls_since is not None:
            self._calls_since += 1
        self._turn_calls.append(one)

    def turn_ended(self, tokens: int, fingerprint: str | None, now: float) -> bool:
        """A tool turn's calls have all returned: check again; True if the evidence changed
        (found, changed kind, or cleared)."""
        self._turns += 1
        self._turns_since += 1
        calls = "; ".join(c.text for c in self._turn_calls) or "(no tool call)"
        label = one_line(f"turn {self._turns}: {calls}", CALL_CHARS * 2)
        if self._turn_new or not self._turn_calls:
            self._stale.clear()
        else:
            self._stale.append(label)
        grew = self._last_tokens is not None and tokens > self._last_tokens
        same = fingerprint is not None and fingerprint == self._last_print
        if grew and same:
            delta = tokens - (self._last_tokens or 0)
            self._still.append(f"turn {self._turns}: +{delta:,} tokens, workspace unchanged")
        elif fingerprint is not None:
            self._still.clear()
        self._last_tokens, self._last_print = tokens, fingerprint
        self._turn_calls, self._turn_new = [], False
        found = self._check(now)
        before = self.evidence
        self.again = False
        if found is not None and self._calls_since is not None:
            fresh = self._check(now, self._calls_since, self._turns_since)
            if fresh is None:
                return False  # it still loops, on evidence the steer already answered
            found, self.again, self._calls_since = fresh, True, None
        elif found is not None and before is not None and found.kind == before.kind:
            found = LoopEvidence(found.kind, found.summary, found.calls, before.ts)
        if found is None:
            self._calls_since = None
        self.evidence = found
        return found != before

    def steered(self) -> None:
        """A loop policy's steer reached the child: from here, only a check that holds on what
        it does next is evidence again. The flag stays until it makes progress."""
        if self.evidence is not None:
            self._calls_since, self._turns_since = 0, 0

    def answered(self) -> bool:
        """The model answered without a tool call: progress. True if that cleared a flag."""
        self._recent.clear()
        self._stale.clear()
        self._still.clear()
        self._calls_since, self.again = None, False
        before, self.evidence = self.evidence, None
        return before is not None

    def _check(
        self, now: float, calls: int | None = None, turns: int | None = None
    ) -> LoopEvidence | None:
        """The first check that holds; with `calls` and `turns` (made since a steer), only a
        check whose whole window lies within them."""
        s = self.settings
        recent = list(self._recent)
        full = bool(s.repeat_calls) and len(recent) >= s.repeat_calls
        if calls is not None and calls < s.repeat_calls:
            full = False
        if turns is not None and turns < s.stale_turns:
            stale = False
        else:
            stale = bool(s.stale_turns) and len(self._stale) >= s.stale_turns
        if turns is not None and turns < s.still_turns:
            still = False
        else:
            still = bool(s.still_turns) and len(self._still) >= s.still_turns
        # Near-same calls that each bring something new are work (reading a file page by page:
        # offset 0, 40, 80); the same call again, or near-same ones told nothing new, a loop.
        exact = len({c.text for c in recent}) == 1
        if full and len({c.key for c in recent}) == 1 and (exact or not all(c.new for c in recent)):
            how = "the same arguments" if exact else "near-same arguments"
            summary = f"{recent[-1].text} called {len(recent)} times with {how}"
            return LoopEvidence(
                "repeat", one_line(summary, 200), tuple(c.text for c in recent), now
            )
        if stale:
            summary = f"tool calls with no new output for {len(self._stale)} turns"
            return LoopEvidence("no_output", summary, tuple(self._stale), now)
        if still:
            summary = f"tokens growing for {len(self._still)} turns with no change to the workspace"
            return LoopEvidence("no_change", summary, tuple(self._still), now)
        return None
