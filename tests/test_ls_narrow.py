"""`flightdeck ls` (and `ls -l`) on an 80-column terminal: each batch one line, its id, status
and cost whole (Rich squeezed every column of the bordered table to `com…`, `$0.…`, two lines
a batch)."""

from __future__ import annotations

import fcntl
import os
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

from rich.cells import cell_len

from helpers import flightdeck

ESCAPES = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def on_terminal(*args: str, cwd: Path, columns: int) -> str:
    """`flightdeck ARGS` with a terminal of `columns` as its output: what it printed."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    with subprocess.Popen(
        [sys.executable, "-m", "flightdeck.tui.cli", *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env={**env, "NO_COLOR": "1", "TERM": "xterm"},
    ) as proc:
        os.close(slave)
        out = b""
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the command has ended, and with it the pty's other side
                break
            if not chunk:
                break
            out += chunk
        assert proc.wait(timeout=60) == 0, out
    os.close(master)
    return ESCAPES.sub("", out.decode()).replace("\r\n", "\n")


def ran_batch(tmp_path: Path) -> str:
    """A batch with a name too long for the screen, run to its end in `st`: its id."""
    (tmp_path / "flightdeck.toml").write_text(
        '[routes.sim]\nprovider = "sim"\ntime_scale = 0.001\n'
    )
    (tmp_path / "a-batch-named-longer-than-the-screen-has-room-for.jsonl").write_text(
        '{"id": "a", "goal": "one"}\n{"id": "b", "goal": "two"}\n'
    )
    run = flightdeck(
        "run",
        "a-batch-named-longer-than-the-screen-has-room-for.jsonl",
        "--headless",
        "--state-dir",
        "st",
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr
    return run.stdout.split()[1]


def test_ls_on_an_80_column_terminal_keeps_each_batch_on_one_readable_line(
    tmp_path: Path,
) -> None:
    batch_id = ran_batch(tmp_path)
    wide = flightdeck("ls", "--state-dir", "st", cwd=tmp_path).stdout  # piped: 200 columns
    cost = re.search(r"\$\d\.\d+", wide)
    assert cost is not None, wide
    lines = on_terminal("ls", "--state-dir", "st", cwd=tmp_path, columns=80).splitlines()
    assert lines and max(map(cell_len, lines)) <= 80, lines
    [row] = [line for line in lines if batch_id in line]  # one line, its id whole
    assert "completed" in row and cost[0] in row and "2 2✓ 0✗ 0■" in row, row
    assert "a-batch…" in row  # what is left of the line goes to the name, cut


def test_ls_long_on_an_80_column_terminal_drops_the_date_before_cutting_the_id(
    tmp_path: Path,
) -> None:
    # The owner pid did not fit beside the rest: Rich cut the id to `20261207-223558-56…`.
    batch_id = ran_batch(tmp_path)
    wide = flightdeck("ls", "-l", "--state-dir", "st", cwd=tmp_path).stdout  # piped: whole
    [piped] = [line for line in wide.splitlines() if batch_id in line]
    *_, cost, created, pid = (cell.strip() for cell in piped.strip("│ ").split("│"))
    assert re.fullmatch(r"\$\d\.\d+", cost) and re.fullmatch(r"\d+", pid), piped
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d", created), piped  # piped keeps the date
    lines = on_terminal("ls", "-l", "--state-dir", "st", cwd=tmp_path, columns=80).splitlines()
    assert lines and max(map(cell_len, lines)) <= 80, lines
    assert lines[0].split() == ["batch", "name", "status", "children", "cost", "owner", "pid"]
    [row] = [line for line in lines if batch_id in line]  # one line, its id whole
    assert row.split()[2:] == ["completed", "2", "2✓", "0✗", "0■", cost, pid], row
    assert row.split()[1].startswith("a-batch-") and row.split()[1].endswith("…"), row
