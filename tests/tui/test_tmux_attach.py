"""A real `flightdeck attach` in a real terminal (tmux), on a bursty child of an owner in another
process: over 30 s, the transcript pane's last line is the file's last line of at most a second
before, at nine samples in ten and never more than five seconds behind (a pane that stopped
following falls behind for good; a loaded machine may lag now and then)."""

from __future__ import annotations

import shlex
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_attach import SLOW_CONFIG, Owner

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

SAMPLE_FOR_S = 30.0
WITHIN_S = 1.0  # the pane shows the file's last line of at most this long ago...
# ... give or take how often the file is read here and how long a capture takes.
SLACK_S = 0.5
BEHIND_S = 5.0  # never further behind than this
# Bursts: a reply streams 8 tokens a second, then a tool turn writes several lines at once;
# thirty turns keep it writing for well over the sampling.
BURSTY = SLOW_CONFIG.replace("tokens_per_s = 30", "tokens_per_s = 8").replace(
    "tool_turns = 6", "tool_turns = 30"
)
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


def whole_lines(path: Path) -> list[str]:
    """The file's ended lines: a torn last line (being written) is read whole next time."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    return data[: data.rfind(b"\n") + 1].decode("utf-8", "replace").splitlines()


def test_attach_in_tmux_keeps_the_transcripts_last_line_on_screen(tmp_path: Path) -> None:
    owner = Owner(tmp_path, children=1, config=BURSTY, goal="summarize the readme", max_turns=40)
    sock = tmp_path / "tmux.sock"
    tmux = ["tmux", "-S", str(sock)]
    try:
        view = owner.view()
        deadline = time.monotonic() + 30
        while (row := view.snapshot().child("c1")) is None or not Path(row.transcript).exists():
            assert time.monotonic() < deadline, "the child's transcript never appeared"
            time.sleep(0.05)
        transcript = Path(row.transcript)
        view.close()
        attach = [sys.executable, "-m", "flightdeck.tui.cli", "attach", owner.batch_id]
        attach += ["--state-dir", str(owner.state)]
        size = ["-x", "100", "-y", "30"]
        command = [*tmux, "new-session", "-d", *size, "-c", str(tmp_path), shlex.join(attach)]
        subprocess.run(command, check=True)

        def screen() -> str:
            capture = [*tmux, "capture-pane", "-p", "-t", "0"]
            return subprocess.run(capture, check=True, capture_output=True, text=True).stdout

        # Every line of the file, with when this test first saw it: a line was the file's last
        # until the next one came, which may have been a millisecond later, between two looks.
        lines: list[str] = []
        seen_at: list[float] = []

        def look() -> None:
            now = time.monotonic()
            for line in whole_lines(transcript)[len(lines) :]:
                lines.append(line)
                seen_at.append(now)

        def last_since(since: float) -> list[str]:
            """The lines that were the file's last at some moment after `since`."""
            return [
                line
                for i, line in enumerate(lines)
                if i == len(lines) - 1 or seen_at[i + 1] >= since
            ]

        deadline = time.monotonic() + 60
        while pane_last_row(screen(), "c1") in (None, []):
            assert time.monotonic() < deadline, f"no transcript pane on screen:\n{screen()}"
            time.sleep(0.1)

        samples = 0
        late: list[int] = []  # samples more than WITHIN_S + SLACK_S behind
        end = time.monotonic() + SAMPLE_FOR_S
        next_capture = time.monotonic()
        while time.monotonic() < end:
            look()
            now = time.monotonic()
            if now >= next_capture:
                next_capture = now + 0.5
                shown = pane_last_row(screen(), "c1")
                look()
                # Lines that were the file's last at some moment of the last WITHIN_S.
                now = time.monotonic()
                recent = last_since(now - WITHIN_S - SLACK_S)
                samples += 1
                if not any(ends_with(shown or [], line) for line in recent):
                    late.append(samples)
                if not any(ends_with(shown or [], line) for line in last_since(now - BEHIND_S)):
                    pytest.fail(
                        f"sample {samples}: the pane's last row {shown!r} is none of the file's "
                        f"last lines of the last {BEHIND_S}s:\n"
                        + "\n".join(last_since(now - BEHIND_S))
                        + f"\n\n{screen()}"
                    )
            time.sleep(0.1)
        assert samples >= SAMPLE_FOR_S / 0.5 / 2  # a loaded machine samples less often
        assert len(late) <= samples // 10, f"late at samples {late} of {samples}"
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
        owner.close()


def test_attach_s_closing_summary_shows_a_route_s_name_as_written(tmp_path: Path) -> None:
    """What `attach` prints once the TUI has gone (the summary table) is the store's text, as
    the screen it leaves is: a route's name holding Rich markup (`[b]…[/b]`, `[link=…]`) is
    shown as written, never made bold or a hyperlink. A real batch on two sim routes, then
    its store as a hostile or older writer left it; `attach` in tmux, `q`, the pane read."""
    from flightdeck.engine.records.reader import StoreReader

    quick = "provider = 'sim'\ntime_scale = 0.001\nlatency_ms = 20\ntokens_per_s = 400\n"
    (tmp_path / "flightdeck.toml").write_text(
        f'[engine]\nstate_dir = "state"\n[routes.a]\n{quick}[routes.b]\n{quick}'
    )
    (tmp_path / "tasks.toml").write_text(
        '[[tasks]]\nid = "t1"\ngoal = "g"\nroute = "a"\n'
        '[[tasks]]\nid = "t2"\ngoal = "g"\nroute = "b"\n'
    )
    cli = [sys.executable, "-m", "flightdeck.tui.cli"]
    run = subprocess.run(
        [*cli, "run", "tasks.toml", "--headless"], cwd=tmp_path, capture_output=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    db = tmp_path / "state" / "flightdeck.db"
    with StoreReader(db) as reader:
        [info] = reader.batches()
    marked = "[b]bold[/b] [link=http://e.x]x[/link]"
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE children SET route = ? WHERE id = 't2'", (marked,))
    sock = tmp_path / "tmux.sock"
    tmux = ["tmux", "-S", str(sock)]
    try:
        # The pane stays once attach has printed and exited, for the capture; COLUMNS: the
        # table as wide as the pane (a pane made without a client may say 80 at first).
        attach = shlex.join(["env", "COLUMNS=200", *cli, "attach", info.id])
        attach += "; echo attach-ended; sleep 60"
        size = ["-x", "200", "-y", "40"]
        subprocess.run([*tmux, "new-session", "-d", *size, "-c", str(tmp_path), attach], check=True)

        def screen() -> str:
            capture = [*tmux, "capture-pane", "-p", "-t", "0"]
            return subprocess.run(capture, check=True, capture_output=True, text=True).stdout

        deadline = time.monotonic() + 60
        while "2/2 done" not in screen():
            assert time.monotonic() < deadline, f"no TUI on screen:\n{screen()}"
            time.sleep(0.1)
        subprocess.run([*tmux, "send-keys", "-t", "0", "q"], check=True)
        while "attach-ended" not in screen():
            assert time.monotonic() < deadline, f"attach did not end:\n{screen()}"
            time.sleep(0.1)
        summary = screen()
        assert marked in summary, summary
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)
