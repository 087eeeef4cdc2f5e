"""The flightdeck command lines printed for an operator to paste back into a shell (report,
attach, resume, answer, ...): each names its state folder, so it finds the batch from any
folder, whichever `--state-dir`, FLIGHTDECK_HOME or flightdeck.toml chose it."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from flightdeck.engine.sanitize import sanitize


def command_line(state_dir: Path | str, *words: str) -> str:
    """`flightdeck WORDS --state-dir DIR`, each word quoted for a shell where it needs it (but
    `…`, left for the operator to fill in) and sanitized; the folder absolute, for any working
    folder (it came from the command line or flightdeck.toml: untrusted text)."""
    words = (*words, "--state-dir", os.path.abspath(state_dir))
    return " ".join(["flightdeck", *(w if w == "…" else shlex.quote(sanitize(w)) for w in words)])


def soft_lift(state_dir: Path | str, batch_id: str) -> str:
    """The commands that lift the soft budget's hold on admission: raise it, or drop it."""
    limits = command_line(state_dir, "limits", batch_id, "--soft-cost", "USD")
    return f"To go on: {limits} (raise it) or --soft-cost off (drop it)"
