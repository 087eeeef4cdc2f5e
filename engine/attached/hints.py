"""The flightdeck command lines printed for an operator to paste back into a shell (report,
attach, resume, answer, ...): each names its state folder, so it finds the batch from any
folder, whichever `--state-dir`, FLIGHTDECK_HOME or flightdeck.toml chose it."""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from flightdeck.engine.sanitize import sanitize


def command_line(state_dir: Path | str, *words: str) -> str:
    """`flightdeck WORDS --state-dir DIR`: the folder absolute (for any working folder), quoted
    for a shell, and sanitized (it came from the command line or flightdeck.toml: untrusted)."""
    folder = sanitize(os.path.abspath(state_dir))
    return " ".join(("flightdeck", *words, "--state-dir", shlex.quote(folder)))
