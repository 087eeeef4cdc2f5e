"""The flightdeck command lines printed for an operator to paste back into a shell (report,
attach, resume, answer, ...): each names its state folder, so it finds the batch from any
folder, whichever `--state-dir`, FLIGHTDECK_HOME or flightdeck.toml chose it."""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path

from flightdeck.engine.records.faults import disk_full
from flightdeck.engine.sanitize import UNSAFE_CHARS

# What a terminal could act on or hides (what sanitize.py strips), and tab and newline, which
# would break the line: a word holding any is quoted as bash's $'...', escaped byte by byte.
_UNSHOWABLE = re.compile(f"[\t\n{UNSAFE_CHARS}]")
_NAMED = {"\\": "\\\\", "'": "\\'", "\t": "\\t", "\n": "\\n"}


def command_line(state_dir: Path | str, *words: str) -> str:
    """`flightdeck WORDS --state-dir DIR`, each word quoted for a shell where it needs it (but
    `…`, left for the operator to fill in); the folder absolute, for any working folder. A word
    with control characters (it came from the command line or flightdeck.toml: untrusted text)
    is quoted so that the shell reads back the very bytes, never shown raw nor altered: a
    sanitized folder would name another one."""
    words = (*words, "--state-dir", os.path.abspath(state_dir))
    return " ".join(["flightdeck", *(w if w == "…" else shell_word(w) for w in words)])


def shell_word(word: str) -> str:
    """`word` quoted for bash: as shlex does when every character shows, else as $'...'."""
    if _UNSHOWABLE.search(word) is None:
        return shlex.quote(word)
    return "$'" + "".join(_escaped(ch) for ch in word) + "'"


def _escaped(ch: str) -> str:
    if ch in _NAMED:
        return _NAMED[ch]
    if _UNSHOWABLE.match(ch) is None:
        return ch
    try:  # the bytes the name holds: a byte no UTF-8 decodes to came as a lone surrogate
        data = os.fsencode(ch)
    except UnicodeEncodeError:  # a lone surrogate no file name or argument can hold
        data = "\ufffd".encode()
    return "".join(f"\\x{b:02x}" for b in data)


def soft_lift(state_dir: Path | str, batch_id: str) -> str:
    """The commands that lift the soft budget's hold on admission: raise it, or drop it."""
    limits = command_line(state_dir, "limits", batch_id, "--soft-cost", "USD")
    return f"To go on: {limits} (raise it) or --soft-cost off (drop it)"


def gone(state_dir: Path, pid: int | None = None) -> str:
    """What is known of a batch abandoned: its owner died; or, the disk holding its store full
    now, its owner has ended, maybe as the store gave up there (no row can say: none could be
    written)."""
    owner = "its owner" if pid is None else f"its owner process (pid {pid})"
    if disk_full(state_dir):
        return f"{owner} has ended and the disk holding its store is full"
    return f"{owner} died"


def resume_hint(state_dir: Path, batch_id: str) -> str:
    """What runs an abandoned batch on: `resume`, once there is room when the disk is full."""
    resume = f"`{command_line(state_dir, 'resume', batch_id)}` runs it to the end"
    return f"free some space, then {resume}" if disk_full(state_dir) else resume
