"""Keys in a real terminal: `j` / `k` to the screen showing the moved cursor, in tmux.

A real owner (`flightdeck run --headless`) runs BENCH_KEYS_CHILDREN (5,000) slow sim children,
BENCH_KEYS_RUNNING (1,000) at a time; a real `flightdeck attach` runs in a tmux pane (160x50).
The table is put in id order (`o` four times), so the row under the cursor is one child until a
key moves it. This process drives tmux through one control-mode client (`tmux -C`): no process
is started per key or per look. A sample: `send-keys j` (or `k`, alternately, so the cursor
stays near the top), then `capture-pane` again and again until the cursor row (its background,
read from the screen) is on the next (previous) child; from writing the key to the first
capture that shows it. Keys are spaced 0.1–0.3 s apart, at phases unrelated to the screen's
poll. Baseline, in the same run: tmux's own echo (the same key into a pane running `cat`, until
the capture shows it).

Knobs: BENCH_KEYS_CHILDREN, BENCH_KEYS_RUNNING, BENCH_KEYS (presses), BENCH_DIR;
BENCH_KEYS_HOLD=1 holds every child at its first call (the sim's `hold_dir`) until the run
ends, so that none can end before the screen is up on a loaded machine (the smoke test's).
BENCH_KEYS_TRACE=FILE starts attach through trace_keys.py (its event loop timed, to FILE) and
writes each key's send time and latency to FILE.keys, for `trace_keys.py --report FILE`.
"""

from __future__ import annotations

import json
import os
import queue
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

CHILDREN = int(os.environ.get("BENCH_KEYS_CHILDREN", "5000"))
RUNNING = int(os.environ.get("BENCH_KEYS_RUNNING", "1000"))
KEYS = int(os.environ.get("BENCH_KEYS", "100"))
# How long the screen may take to come up with the pool running, and tmux to answer a command.
READY_S = float(os.environ.get("BENCH_KEYS_READY_S", "300"))
READ_TIMEOUT_S = 30.0
HOLD = os.environ.get("BENCH_KEYS_HOLD") == "1"
TRACE = os.environ.get("BENCH_KEYS_TRACE")
# Children that stay running for minutes: many slow turns (each task allows them all).
SLOW = "[routes.sim]\nlatency_ms = 500\ntokens_per_s = 5\ntool_turns = 30\n"
MAX_TURNS = 40
CLI = (sys.executable, "-m", "flightdeck.tui.cli")
TRACE_SCRIPT = Path(__file__).with_name("trace_keys.py")
RUN = (*CLI, "run", "--detach", "tasks.jsonl")
BG = re.compile(rb"\x1b\[[0-9;]*48;5;(\d+)[0-9;]*m")
SGR = re.compile(rb"\x1b\[[0-9;]*m")
ID = re.compile(rb"\bc\d{5}\b")
RUNNING_ON_SCREEN = re.compile("● ?([\\d,]+) run".encode())  # the meter: "● 12 running", "●12 run"


class Control:
    """One tmux control-mode client: commands in, their output blocks back. Every read has a
    deadline: a tmux that ended or stopped answering fails the run with what it printed."""

    def __init__(self, tmux: list[str], session: str) -> None:
        self.process = subprocess.Popen(
            [*tmux, "-C", "attach", "-t", session],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert self.process.stdin is not None and self.process.stdout is not None
        self._in: IO[bytes] = self.process.stdin
        # A thread reads, so that a silent tmux is a timeout here rather than a hang.
        self._lines: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True).start()
        while not self._line().startswith(b"%end"):  # the attach's own reply
            pass
        self.run("refresh-client -f no-output")  # no %output notifications to wade through

    def _read(self, out: IO[bytes]) -> None:
        for line in out:
            self._lines.put(line)
        self._lines.put(b"")  # the end

    def _line(self) -> bytes:
        try:
            line = self._lines.get(timeout=READ_TIMEOUT_S)
        except queue.Empty:
            raise AssertionError(f"tmux said nothing for {READ_TIMEOUT_S} s") from None
        if not line:
            self.process.wait(5)
            error = self.process.stderr.read() if self.process.stderr else b""
            raise AssertionError(f"the tmux control client ended: {error!r}")
        return line

    def run(self, command: str) -> list[bytes]:
        self._in.write(command.encode() + b"\n")
        self._in.flush()
        lines: list[bytes] = []
        inside = False
        while True:
            line = self._line()
            if line.startswith(b"%begin"):
                inside, lines = True, []
            elif line.startswith((b"%end", b"%error")) and inside:
                assert line.startswith(b"%end"), (command, lines)
                return lines
            elif inside:
                lines.append(line.rstrip(b"\n"))

    def close(self) -> None:
        self._in.close()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()


def _cursor(screen: list[bytes], cursor_bg: bytes) -> bytes | None:
    """The child id on the row painted with the cursor's background."""
    for line in screen:
        bg = BG.search(line)
        if bg and bg.group(1) == cursor_bg:
            found = ID.search(SGR.sub(b"", line))
            if found:
                return found.group(0)
    return None


def _rows(screen: list[bytes]) -> list[tuple[bytes, bytes]]:
    """(background, child id) of each table row on a captured screen."""
    out = []
    for line in screen:
        found = ID.search(SGR.sub(b"", line))
        bg = BG.search(line)
        if found and bg:
            out.append((bg.group(1), found.group(0)))
    return out


def _samples(
    ctl: Control, target: str, keys: int, seen: Any, sent: list[dict[str, Any]] | None = None
) -> list[float]:
    """Milliseconds from each key written to the first capture showing its effect; `sent`
    gets each key's time (time.monotonic(), as trace_keys.py's) and latency."""
    rng = random.Random(31)
    ms = []
    for i in range(keys):
        time.sleep(rng.uniform(0.1, 0.3))
        key = "j" if i % 2 == 0 else "k"
        before = seen()
        t0 = time.monotonic()
        ctl.run(f"send-keys -t {target} {key}")
        deadline = t0 + 10
        while (now := seen()) == before:
            assert time.monotonic() < deadline, f"{key} changed nothing in 10 s"
        ms.append((time.monotonic() - t0) * 1000)
        if sent is not None:
            sent.append({"key": key, "t": t0, "ms": ms[-1]})
        assert now is not None
    return ms


def _summary(ms: list[float]) -> dict[str, float]:
    ms = sorted(ms)
    return {
        "p50_ms": round(statistics.median(ms), 1),
        "p90_ms": round(ms[int(len(ms) * 0.9)], 1),
        "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 1),
        "max_ms": round(ms[-1], 1),
    }


def _attach_pid(ctl: Control) -> int:
    """The `flightdeck attach` process: the pane's, or its shell's child."""
    pid = int(ctl.run("display-message -p -t bench:0 '#{pane_pid}'")[0])
    for _ in range(3):
        if b"attach" in Path(f"/proc/{pid}/cmdline").read_bytes():
            return pid
        pid = int(Path(f"/proc/{pid}/task/{pid}/children").read_text().split()[0])
    raise AssertionError("no attach process under the pane")


def _cpu_s(pid: int) -> tuple[float, float]:
    """CPU seconds (user + system) of the process and of its main thread."""
    tick = os.sysconf("SC_CLK_TCK")

    def used(stat: Path) -> float:
        fields = stat.read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / tick

    return used(Path(f"/proc/{pid}/stat")), used(Path(f"/proc/{pid}/task/{pid}/stat"))


def _rss_mb(pid: int) -> float:
    """The process's resident memory now, in MB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    raise AssertionError(f"no VmRSS for pid {pid}")


def _end(pid: int) -> None:
    """Stop the owner (it records its end) and wait for it to exit."""
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not _ended(pid):
        time.sleep(0.1)


def _ended(pid: int) -> bool:
    """Gone, or a zombie: the owner's launcher exits at once, so the owner is reparented to the
    nearest subreaper, which may be a test process that never reaps it."""
    try:
        return Path(f"/proc/{pid}/stat").read_bytes().rsplit(b") ", 1)[1].startswith(b"Z")
    except (OSError, IndexError):
        return True


def main() -> dict[str, Any]:
    assert shutil.which("tmux"), "tmux is not installed"
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_DIR")) as tmp:
        folder = Path(tmp)
        config = SLOW
        if HOLD:
            (folder / "hold").mkdir()
            config += 'hold_dir = "hold"\n'
        (folder / "flightdeck.toml").write_text(config, encoding="utf-8")
        (folder / "tasks.jsonl").write_text(
            "".join(
                json.dumps({"id": f"c{i:05d}", "goal": f"Review item {i}", "max_turns": MAX_TURNS})
                + "\n"
                for i in range(CHILDREN)
            ),
            encoding="utf-8",
        )
        state = folder / "state"
        started = subprocess.run(
            [*RUN, "--state-dir", str(state), "--max-concurrent", str(RUNNING)],
            cwd=folder,
            capture_output=True,
            text=True,
            check=True,
        )
        batch_id = started.stdout.strip()
        owner_pid = int(re.search(r"owner pid (\d+)", started.stderr).group(1))  # type: ignore[union-attr]
        # No user config; a pane whose command ended stays, so its last words can be read.
        (folder / "tmux.conf").write_text("set-option -g remain-on-exit on\n", encoding="utf-8")
        tmux = ["tmux", "-S", str(folder / "tmux.sock"), "-f", str(folder / "tmux.conf")]
        cli = CLI if TRACE is None else (sys.executable, str(TRACE_SCRIPT), TRACE)
        attach = " ".join([*cli, "attach", batch_id, "--state-dir", str(state)])
        subprocess.run(
            [*tmux, "new-session", "-d", "-s", "bench", "-x", "160", "-y", "50", attach],
            cwd=folder,
            check=True,
        )
        # The window keeps its size: with `window-size latest` (tmux's default) the control
        # client's 80 columns, once attached, became the pane's, and the meter went compact.
        subprocess.run(
            [*tmux, "set-option", "-w", "-t", "bench:0", "window-size", "manual"], check=True
        )
        ctl = Control(tmux, "bench")
        try:
            running = 0
            deadline = time.monotonic() + READY_S
            while True:  # until the screen is up and the owner runs its full pool
                screen = ctl.run("capture-pane -p -e -t bench:0")
                text = SGR.sub(b"", b"\n".join(screen))
                found = RUNNING_ON_SCREEN.search(text)
                running = int(found.group(1).replace(b",", b"")) if found else 0
                if running >= RUNNING * 0.9 and len(_rows(screen)) > 5:
                    break
                dead = ctl.run("display-message -p -t bench:0 '#{pane_dead}'")
                assert dead != [b"1"], "`flightdeck attach` ended:\n" + text.decode(
                    errors="replace"
                )
                assert time.monotonic() < deadline, (
                    f"after {READY_S} s, {running} of {RUNNING} running on screen:\n"
                    + text.decode(errors="replace")
                )
                time.sleep(0.5)
            for _ in range(4):  # attention → recent → cost → tokens → id
                ctl.run("send-keys -t bench o")
            time.sleep(2)
            screen = ctl.run("capture-pane -p -e -t bench:0")
            rows = _rows(screen)
            assert rows, SGR.sub(b"", b"\n".join(screen)).decode(errors="replace")
            cursor_bg = rows[0][0]  # the cursor starts on the first row
            assert all(bg != cursor_bg for bg, _ in rows[1:3]), rows[:3]

            def cursor() -> bytes | None:
                return _cursor(ctl.run("capture-pane -p -e -t bench:0"), cursor_bg)

            pid = _attach_pid(ctl)
            cpu, t0 = _cpu_s(pid), time.monotonic()
            sent: list[dict[str, Any]] = []
            keys = _samples(ctl, "bench:0", KEYS, cursor, sent)
            if TRACE is not None:
                Path(f"{TRACE}.keys").write_text(json.dumps(sent), encoding="utf-8")
            cpu_after, seconds = _cpu_s(pid), time.monotonic() - t0
            rss_mb = _rss_mb(pid)
            # What the attached process used meanwhile, in CPU seconds a second: all its
            # threads, and its main thread (Textual's event loop, where the keys are handled).
            attach_cpu = {
                "process": round((cpu_after[0] - cpu[0]) / seconds, 3),
                "main_thread": round((cpu_after[1] - cpu[1]) / seconds, 3),
            }
            # tmux's own echo, in the same run: a pane running cat.
            ctl.run("new-window -d -t bench -n echo cat")

            def echoed() -> int:
                return sum(len(line) for line in ctl.run("capture-pane -p -t bench:echo"))

            echo = _samples(ctl, "bench:echo", min(KEYS, 50), echoed)
        finally:
            ctl.close()
            subprocess.run([*tmux, "kill-server"], capture_output=True)
            _end(owner_pid)
    return {
        "bench": "keys_tmux",
        "children": CHILDREN,
        "running": running,
        "keys": KEYS,
        "load_avg_1m": round(os.getloadavg()[0], 1),
        "key_to_screen": _summary(keys),
        "tmux_echo": _summary(echo),
        "attach_cpu_s_per_s": attach_cpu,
        "attach_rss_mb": rss_mb,
        "targets": {"p50_ms": 30, "p99_ms": 100},
    }


if __name__ == "__main__":
    r = main()
    k, e = r["key_to_screen"], r["tmux_echo"]
    print(
        f"j/k to screen in tmux, {r['children']:,} children, {r['running']:,} running "
        f"(load {r['load_avg_1m']}): p50 {k['p50_ms']} ms, p90 {k['p90_ms']}, "
        f"p99 {k['p99_ms']}, max {k['max_ms']}; tmux echo p50 {e['p50_ms']} ms; the attached "
        f"process's CPU {r['attach_cpu_s_per_s']['process']} s/s "
        f"(main thread {r['attach_cpu_s_per_s']['main_thread']}), RSS {r['attach_rss_mb']} MB"
    )
    print(json.dumps(r))
