"""A real `flightdeck attach` in a real terminal (tmux), on a bursty child of an owner in another
process: the transcript pane follows the file, catching up again and again with lines written
after it last caught up (a pane that stopped following never does). How far behind it runs is
measured by tests/bench/bench_tail.py: a loaded machine may lag."""

from __future__ import annotations

import shlex
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_attach import Owner

from helpers import HANG_S
from tmux_tail import BURSTY, Transcript, ends_with, pane_last_row, screen

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
]

CATCH_UPS = 5  # times the pane must show a line written after it last caught up


def test_attach_in_tmux_keeps_up_with_the_transcripts_last_line(tmp_path: Path) -> None:
    owner = Owner(tmp_path, children=1, config=BURSTY, goal="summarize the readme", max_turns=40)
    sock = tmp_path / "tmux.sock"
    tmux = ["tmux", "-S", str(sock)]
    try:
        view = owner.view()
        deadline = time.monotonic() + HANG_S
        while (row := view.snapshot().child("c1")) is None or not Path(row.transcript).exists():
            assert time.monotonic() < deadline, "the child's transcript never appeared"
            time.sleep(0.05)
        transcript = Transcript(Path(row.transcript))
        view.close()
        attach = [sys.executable, "-m", "flightdeck.tui.cli", "attach", owner.batch_id]
        attach += ["--state-dir", str(owner.state)]
        size = ["-x", "100", "-y", "30"]
        command = [*tmux, "new-session", "-d", *size, "-c", str(tmp_path), shlex.join(attach)]
        subprocess.run(command, check=True)

        deadline = time.monotonic() + HANG_S
        while pane_last_row(screen(tmux), "c1") in (None, []):
            assert time.monotonic() < deadline, f"no transcript pane on screen:\n{screen(tmux)}"
            time.sleep(0.1)

        for catch_up in range(CATCH_UPS):
            # Lines seen from here on were written after the pane last caught up.
            transcript.look()
            since = len(transcript.lines)
            deadline = time.monotonic() + HANG_S
            while True:
                shown = pane_last_row(screen(tmux), "c1") or []
                transcript.look()
                if any(ends_with(shown, line) for line in transcript.lines[since:]):
                    break
                if time.monotonic() > deadline:
                    pytest.fail(
                        f"catch-up {catch_up}: the pane's last row {shown!r} is none of the "
                        f"{len(transcript.lines) - since} lines written since:\n"
                        + "\n".join(transcript.lines[since:])
                        + f"\n\n{screen(tmux)}"
                    )
                time.sleep(0.1)
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
