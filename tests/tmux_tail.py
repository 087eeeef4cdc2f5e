"""Reading a transcript pane in tmux: what `flightdeck attach` shows of a growing transcript,
for test_tmux_attach (does the pane follow?) and bench_tail.py (how far behind is it?)."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

# A child that writes in bursts: a reply streams 8 tokens a second, then a tool turn writes
# several lines at once; thirty turns keep it writing for well over a minute.
BURSTY = """
[routes.sim]
time_scale = 1.0
latency_ms = 300
tokens_per_s = 8
tool_turns = 30
"""
SCROLLBAR = "▁▂▃▄▅▆▇█▉▊▋▌▍▎▏▐┃╹╻"


def words(line: str) -> list[str]:
    """A transcript line's (or a screen row's) words, without separators and scrollbars."""
    return [w for w in line.split() if w != "│" and w.strip(SCROLLBAR)]


def ends_with(shown: list[str], line: str) -> bool:
    """Whether the screen row `shown` is the last row `line` folds into: its last words (the
    first of them possibly the end of a word broken across rows)."""
    whole = words(line)
    if not shown or len(shown) > len(whole):
        return False
    tail = whole[len(whole) - len(shown) :]
    return tail[1:] == shown[1:] and tail[0].endswith(shown[0])


def pane_last_row(screen: str, child_id: str) -> list[str] | None:
    """The last non-blank row of the transcript pane on a captured screen; None if no pane."""
    rows = screen.splitlines()
    title = next(
        (i for i, r in enumerate(rows) if r.strip().startswith(f"transcript  {child_id}")), None
    )
    if title is None:
        return None
    body: list[str] = []
    for row in rows[title + 1 :]:
        if row.startswith(" batch "):  # the status bar under the pane
            break
        body.append(row)
    shown = [words(r) for r in body if words(r)]
    return shown[-1] if shown else []


class Transcript:
    """A transcript file's ended lines, each with when it was first seen here: a line was the
    file's last until the next one came (which may have been a millisecond later, between two
    looks). A torn last line (being written) is read whole next time."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.lines: list[str] = []
        self.seen_at: list[float] = []
        self.partial = ""  # the line being written, as far as it was at the last look

    def look(self) -> None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return
        now = time.monotonic()
        cut = data.rfind(b"\n") + 1
        ended = data[:cut].decode("utf-8", "replace").splitlines()
        self.partial = data[cut:].decode("utf-8", "replace")
        for line in ended[len(self.lines) :]:
            self.lines.append(line)
            self.seen_at.append(now)


def screen(tmux: list[str]) -> str:
    """The pane's screen as text."""
    capture = [*tmux, "capture-pane", "-p", "-t", "0"]
    return subprocess.run(capture, check=True, capture_output=True, text=True).stdout
