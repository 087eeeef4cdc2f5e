"""The `flightdeck` command as a user runs it: a real subprocess, real files, real exit codes."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import errno
import gc
import io
import json
import os
import queue
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path
from typing import IO

import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.inputs.settings import Budget
from flightdeck.engine.model import (
    Activity,
    BatchStatus,
    ChildFinished,
    ChildRow,
    ChildStatus,
    Snapshot,
    Usage,
)
from flightdeck.engine.owner.run import BatchRun
from flightdeck.engine.records.reader import StoreReader
from flightdeck.engine.records.store import Store
from flightdeck.tui.console import PipeSafeConsole
from flightdeck.tui.exitcodes import ExitCode
from flightdeck.tui.headless import left_text, run_headless
from flightdeck.tui.output import completion_text, print_lines
from rich.console import Console

from helpers import (
    HANG_S,
    Hold,
    batch,
    cli,
    finished_here,
    flightdeck,
    laughs,
    settings,
    signals_as_a_shell_gives_them,
    sim_route,
    summary_of,
)

FAST_CONFIG = """
[engine]
max_concurrent = 4

[routes.sim]
time_scale = 0.001
latency_ms = 20
tokens_per_s = 400
retry = { attempts = 6, base_s = 0.1, max_s = 1 }

[routes.broken]
provider = "sim"
fail_rate = 1.0
"""


class Lines:
    """A pipe read on a thread, line by line: waiting for a line fails at a deadline instead of
    hanging the test."""

    def __init__(self, stream: IO[str]) -> None:
        self.seen: list[str] = []
        self._stream = stream
        self._queue: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self._stream:
            self._queue.put(line)
        self._queue.put(None)  # the end of the output

    def wait_for(self, start: str, timeout: float = 90) -> str:
        """The next line that starts with `start`."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line {start!r}… in {timeout}s: {self.seen}") from None
            if line is None:
                raise AssertionError(f"the output ended before a line {start!r}…: {self.seen}")
            self.seen.append(line)
            if line.startswith(start):
                return line

    def close(self, timeout: float = 10) -> None:
        """Wait for the end of the output, then close the pipe (not under the reading thread)."""
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self._stream.close()

    def rest(self, timeout: float = 10) -> str:
        """The whole output, once the pipe is closed."""
        self.close(timeout)
        assert not self._thread.is_alive(), f"the pipe is still open: {self.seen}"
        while True:
            try:
                line = self._queue.get_nowait()
            except queue.Empty:
                return "".join(self.seen)
            if line is not None:
                self.seen.append(line)


def signal_state(pid: int) -> str:
    """The process's blocked, ignored and caught signal masks, for a failure's message."""
    with contextlib.suppress(OSError):
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        return " ".join(line for line in status if line.startswith(("SigBlk", "SigIgn", "SigCgt")))
    return "(no /proc)"


class Headless:
    """`flightdeck run BATCH --headless` as a process the test can send signals to; killed on
    leaving the `with` block, so a test that fails half-way leaves nothing running."""

    def __init__(self, project: Path, batch_file: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "flightdeck.tui.cli", "run", batch_file, "--headless"],
            cwd=project,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=signals_as_a_shell_gives_them,
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.out, self.err = Lines(self.proc.stdout), Lines(self.proc.stderr)

    def __enter__(self) -> Headless:
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()  # nothing if it has exited
        self.proc.wait()
        self.out.close()
        self.err.close()

    def wait_for(self, start: str, timeout: float = 90) -> str:
        """The next line of stdout that starts with `start`; a failure shows stderr too."""
        try:
            return self.out.wait_for(start, timeout)
        except AssertionError as exc:
            self.proc.kill()
            raise AssertionError(f"{exc}\nstderr: {self.err.rest()}") from None

    def finish(self, timeout: float) -> tuple[int, str, str]:
        """Wait for the exit: the exit code, stdout and stderr."""
        code = self.proc.wait(timeout)
        return code, self.out.rest(), self.err.rest()


def held(project: Path, config: str = "flightdeck.toml") -> Hold:
    """A config whose sim children are held (before their first token) until released."""
    hold = Hold(project / "hold")
    (project / config).write_text("[routes.sim]\ntime_scale = 0.001\n" + hold.toml())
    return hold


def wait_until_running(project: Path, batch_id: str, child_id: str, timeout: float = 90) -> None:
    """Poll the batch's store, read-only, until `child_id` runs: a signal sent then has a running
    child to stop, not only queued ones."""
    deadline = time.monotonic() + timeout
    with StoreReader(project / ".flightdeck" / "flightdeck.db") as reader:
        while True:
            row = reader.child(batch_id, child_id)
            if row is not None and row.status is ChildStatus.RUNNING:
                return
            assert time.monotonic() < deadline, f"{child_id} not running after {timeout}s: {row}"
            time.sleep(0.01)


def sleeps_reading_a_pipe(pid: int) -> bool:
    """Whether the process is blocked reading a pipe or FIFO, as Linux's /proc tells."""
    try:
        wchan = Path(f"/proc/{pid}/wchan").read_text()
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return True  # no /proc: no way to tell
    # The wait channel reads "0" while the process runs, and always where the kernel hides it.
    return "pipe" in wchan or (wchan == "0" and state == "S")


def table_cells(line: str) -> list[str]:
    """The cells of one row of a Rich table (header or body)."""
    return [cell.strip() for cell in re.split("[┃│]", line)[1:-1]]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "flightdeck.toml").write_text(FAST_CONFIG)
    lines = [json.dumps({"id": f"job-{i}", "goal": f"Summarize file {i}"}) for i in range(6)]
    (tmp_path / "tasks.jsonl").write_text("\n".join(lines) + "\n")
    return tmp_path


@pytest.mark.slow
def test_headless_run_prints_id_lines_and_summary(project: Path) -> None:
    result = flightdeck("run", "tasks.jsonl", cwd=project)
    assert result.returncode == ExitCode.OK, result.stderr
    out = result.stdout.splitlines()
    batch_id = re.fullmatch(r"batch (\S+)", out[0])
    assert batch_id, out[0]
    done = [line for line in out if re.match(r"✓ \[\d/6\] job-\d  api=\d+ tools=\d+  ", line)]
    assert len(done) == 6
    assert sorted(int(re.search(r"\[(\d)/6\]", d).group(1)) for d in done) == [1, 2, 3, 4, 5, 6]  # type: ignore[union-attr]
    assert f"batch {batch_id.group(1)} — completed" in out  # the summary table's title
    header, totals = summary_of(out)
    assert header == [
        "children",
        "ok",
        "failed",
        "stopped",
        "tokens in",
        "tokens out",
        "cached",
        "cost",
        "cache saved",
    ]
    assert totals[:4] == ["6", "6", "0", "0"]
    assert all(re.fullmatch(r"\d+(\.\d+k)?", tokens) for tokens in totals[4:7]), totals
    assert re.fullmatch(r"\$0\.\d+", totals[7]), totals
    assert re.fullmatch(r"\$0\.\d+", totals[8]), totals
    assert (project / ".flightdeck" / "flightdeck.db").exists()

    report = json.loads(flightdeck("report", "--format", "json", cwd=project).stdout)
    assert report["batch_id"] == batch_id.group(1)
    assert report["status"] == "completed"
    assert report["totals"]["children"] == 6 and report["totals"]["completed"] == 6
    assert report["totals"]["cost_usd"] > 0
    child = report["children"][0]
    for key in ("id", "status", "api_calls", "tool_calls", "tokens_in", "tokens_out", "cost_usd"):
        assert key in child
    assert Path(child["transcript"]).exists()

    md = flightdeck("report", batch_id.group(1), cwd=project).stdout
    assert "| job-0 |" in md.replace("`", "")
    listing = flightdeck("ls", cwd=project).stdout
    assert batch_id.group(1)[:8] in listing


def test_quitting_the_tui_prints_the_summary_and_the_report_hint(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # On a terminal `run` starts the owner process and attaches the TUI to it through the store.
    from flightdeck.engine.attached.view import StoreView
    from flightdeck.engine.model import BatchStatus
    from flightdeck.tui.app import FlightdeckApp
    from flightdeck.tui.cli import main

    def run_app(app: FlightdeckApp) -> bool:  # the operator watches the batch end, then quits
        assert isinstance(app.view, StoreView)
        deadline = time.monotonic() + HANG_S
        while app.view.snapshot().status is BatchStatus.RUNNING:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        print("<app screen>")
        return False

    monkeypatch.setattr(FlightdeckApp, "run", run_app)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)  # what sends `run` to the TUI
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(project)
    assert main(["run", "tasks.jsonl"]) == ExitCode.OK
    out = re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out).splitlines()  # bold, italic
    assert out[0] == "<app screen>"  # all of it after the app has gone
    batch_id = re.fullmatch(r"batch (\S+) — completed", out[1])  # the summary table's title
    assert batch_id, out
    header, totals = summary_of(out)
    assert header[:4] == ["children", "ok", "failed", "stopped"]
    assert totals[:4] == ["6", "6", "0", "0"]
    assert out[-1].startswith(f"report: flightdeck report {batch_id.group(1)} --state-dir ")


def test_a_failed_child_gives_exit_1_with_the_reason(project: Path) -> None:
    (project / "mixed.jsonl").write_text(
        '{"id": "good", "goal": "fine"}\n{"id": "bad", "goal": "doomed", "route": "broken"}\n'
    )
    result = flightdeck("run", "mixed.jsonl", "--headless", cwd=project)
    assert result.returncode == ExitCode.INCOMPLETE
    [line] = [x for x in result.stdout.splitlines() if " bad " in x]
    assert line.startswith("✗") and "failed: FatalError" in line


BAD_INPUTS = [
    ("t.jsonl", '{"goal": "ok"}\n{"goal": "ok", "id": 5}\n', "t.jsonl:2", "id"),
    ("t.jsonl", '{"goal": "ok"}\n{not json\n', "t.jsonl:2", None),
    ("t.jsonl", '{"id": "a", "goal": "x"}\n{"id": "a", "goal": "y"}\n', "t.jsonl:2", "id"),
    ("t.jsonl", '{"id": "a", "gaol": "x"}\n', "t.jsonl:1", "gaol"),
    ("t.toml", '[[tasks]]\ngoal = "a"\n\n[[tasks]]\nid = "b"\n', "t.toml:4", "goal"),
    ("t.toml", '[[tasks]]\ngoal = "x"\nmax_turns = "many"\n', "t.toml:3", "max_turns"),
    ("t.yaml", "tasks:\n  - goal: x\n  - goal: y\n    route: nowhere\n", "t.yaml:4", "route"),
    ("t.yaml", "tasks:\n  - goal: [unclosed\n", "t.yaml:", None),
    ("t.yaml", laughs(10), "t.yaml:9", None),  # a "billion laughs": refused, and at once
]


@pytest.mark.parametrize(("name", "text", "where", "field"), BAD_INPUTS)
def test_bad_task_files_exit_2_naming_line_and_field(
    project: Path, name: str, text: str, where: str, field: str | None
) -> None:
    (project / name).write_text(text)
    result = flightdeck("run", name, "--headless", cwd=project)
    assert result.returncode == ExitCode.USAGE
    assert where in result.stderr
    if field:
        assert f"{field}:" in result.stderr
    assert not (project / ".flightdeck").exists()  # nothing half-written


BAD_CONFIGS = [
    ("[engine]\nmax_concurrent = 0\n", "flightdeck.toml:2", "engine.max_concurrent"),
    ("[routes.fast]\nprovider = 'sim'\nrpmm = 5\n", "flightdeck.toml:3", "routes.fast.rpmm"),
    ("[routes.x]\nprovider = 'gpt'\n", "flightdeck.toml:2", "routes.x.provider"),
    ("[budget]\nmax_cost_usd = -1\n", "flightdeck.toml:2", "budget.max_cost_usd"),
    ("[engine\n", "flightdeck.toml:1", None),
    (
        "[routes.x]\nprovider = 'command'\nargv = ['cli', '{prompt}']\n",
        "flightdeck.toml:3",
        "routes.x.argv.1",
    ),
    (  # found missing at start, before anything is written
        "[engine]\ndefault_route = 'x'\n[routes.x]\nprovider = 'command'\nargv = ['no-such-cli']\n",
        "flightdeck.toml:5",
        "routes.x.argv",
    ),
]


@pytest.mark.parametrize(("text", "where", "field"), BAD_CONFIGS)
def test_bad_config_exits_2_naming_line_and_field(
    project: Path, text: str, where: str, field: str | None
) -> None:
    (project / "flightdeck.toml").write_text(text)
    result = flightdeck("run", "tasks.jsonl", cwd=project)
    assert result.returncode == ExitCode.USAGE, result.stdout
    assert where in result.stderr
    if field:
        assert field in result.stderr
    assert not (project / ".flightdeck").exists()


def test_task_text_over_the_configured_limit_exits_2_naming_line_and_field(
    project: Path,
) -> None:
    (project / "flightdeck.toml").write_text("[engine]\nmax_task_chars = 20\n")
    (project / "t.jsonl").write_text(
        '{"goal": "ok"}\n{"goal": "ok", "context": "' + 30 * "c" + '"}\n'
    )
    result = flightdeck("run", "t.jsonl", "--headless", cwd=project)
    assert result.returncode == ExitCode.USAGE
    assert "t.jsonl:2: context: too long: 30 characters" in result.stderr
    assert not (project / ".flightdeck").exists()


@pytest.mark.slow
def test_bad_arguments_exit_2(project: Path) -> None:
    for bad, why in [
        ("0", "between 1 and 1024, got 0"),
        ("100000", "between 1 and 1024, got 100000"),
        ("many", "expected a whole number or 'auto', got 'many'"),
    ]:
        result = flightdeck("run", "tasks.jsonl", "--max-concurrent", bad, cwd=project)
        assert result.returncode == ExitCode.USAGE, result.stderr
        assert "--max-concurrent" in result.stderr and why in result.stderr, result.stderr
    missing = flightdeck("run", "nope.jsonl", cwd=project)
    assert missing.returncode == ExitCode.USAGE and "nope.jsonl" in missing.stderr
    assert flightdeck("report", cwd=project).returncode == ExitCode.USAGE  # no state yet


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ((), "the following arguments are required: COMMAND (see `flightdeck --help`)"),
        (("fly",), "argument COMMAND: invalid choice: 'fly'"),
        (
            ("run",),
            "the following arguments are required: batch_file (see `flightdeck run --help`)",
        ),
        # The command's own --help, which lists its options; the top one lists none.
        (
            ("run", "t.jsonl", "--nope"),
            "unrecognized arguments: --nope (see `flightdeck run --help`)",
        ),
        (("report", "-f", "json"), "unrecognized arguments: -f (see `flightdeck report --help`)"),
        # An option before the command: its value was read as the command (invalid choice: '/x').
        (
            ("--state-dir", "/x", "ls"),
            "--state-dir: options go after the command: `flightdeck ls … --state-dir …` "
            "(see `flightdeck ls --help`)",
        ),
        (
            ("--headless", "run", "t.jsonl"),
            "--headless: options go after the command: `flightdeck run … --headless …`",
        ),
        # Abbreviated, as argparse takes it after the command (it said "no such option").
        (
            ("--state", "/x", "ls"),
            "--state: options go after the command: `flightdeck ls … --state …`",
        ),
        (("--head", "run", "t.jsonl"), "--head: options go after the command:"),
        (("--headless", "ls"), "--headless: `flightdeck ls` has no such option"),
        (("--head", "ls"), "--head: `flightdeck ls` has no such option"),
        (("--nope",), "--nope: options go after the command: `flightdeck COMMAND … --nope …`"),
        (("steer", "b1", "c1"), "the following arguments are required: -m/--message"),
        # Only the batch is missing: the child ids may be none (--all), so they are not named.
        (
            ("stop", "--all"),
            "the following arguments are required: batch_id (see `flightdeck stop --help`)",
        ),
        # A byte that is not UTF-8 in argv (subprocess writes "\udcff" as the byte 0xff).
        (
            ("steer", "b1", "c1", "-m", "x\udcff"),
            "argument -m/--message: not UTF-8 text: the byte 0xff at character 2",
        ),
        (("answer", "b1", "c1", "-m", "\udcc3"), "not UTF-8 text: the byte 0xc3 at character 1"),
        (("report", "--format", "xml"), "argument --format: invalid choice: 'xml'"),
    ],
)
def test_every_argument_error_is_one_line_and_exit_2(
    tmp_path: Path, args: tuple[str, ...], said: str
) -> None:
    # argparse printed its usage and then the error: two to five lines, where one is promised.
    result = flightdeck(*args, cwd=tmp_path)
    assert result.returncode == ExitCode.USAGE
    [line] = result.stderr.splitlines()
    assert line.startswith("flightdeck: ") and said in line, line
    assert result.stdout == ""


def test_child_ids_after_an_option_are_taken(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `flightdeck stop B --state-dir D c1 c2`, `steer B -m hi c1`: argparse takes the CHILD...
    # list in one run, so the ids after an option were "unrecognized arguments".
    batch_id = finished_here(project)
    result = flightdeck(  # as a user runs it: a process; the rest in this one
        "stop", batch_id, "job-0", "--state-dir", ".flightdeck", "job-1", "job-0", cwd=project
    )
    assert result.returncode == ExitCode.OK, result.stderr
    assert result.stdout.splitlines() == [
        "job-0: had already ended (completed)",
        "job-1: had already ended (completed)",
    ]
    monkeypatch.chdir(project)
    code, _, err = cli(capsys, "pause", batch_id, "--state-dir", ".flightdeck", "job-9")
    assert code == ExitCode.USAGE
    assert err == f"flightdeck: no child with id 'job-9' in batch {batch_id}\n"
    # An option it does not know is still said, alone.
    _, _, err = cli(capsys, "stop", batch_id, "--state-dir", ".flightdeck", "job-1", "-x")
    assert err == "flightdeck: unrecognized arguments: -x (see `flightdeck stop --help`)\n"
    # POSIX `--` ends the options: what follows is a child's id, even one like an option (it
    # said "unrecognized arguments: --" once an option came before it).
    ended = cli(capsys, "stop", batch_id, "--state-dir", ".flightdeck", "--", "job-1")
    assert ended == (ExitCode.OK, "job-1: had already ended (completed)\n", "")
    _, _, err = cli(capsys, "stop", batch_id, "--state-dir", ".flightdeck", "--", "-x")
    assert err == f"flightdeck: no child with id '-x' in batch {batch_id}\n"


def test_a_dashes_word_after_the_options_end_is_a_word(capsys: pytest.CaptureFixture[str]) -> None:
    # Found in review: argparse (3.11) dropped a `--` after the options' end, so `grep B -- --`
    # (searching for `--`) failed with a traceback on a PATTERN of [], and a child id was lost.
    from flightdeck.tui import cli

    parse = cli._parser().parse_args
    assert parse(["grep", "b1", "--", "--"]).pattern == "--"
    assert parse(["grep", "b1", "--state-dir", "D", "--", "--"]).pattern == "--"
    assert parse(["logs", "b1", "--", "--"]).child_id == "--"
    assert parse(["stop", "b1", "--", "c1", "--", "-x"]).child_ids == ["c1", "--", "-x"]
    assert parse(["stop", "b1", "--state-dir", "D", "--", "c1", "--"]).child_ids == ["c1", "--"]
    assert parse(["run", "--", "--"]).batch_file == Path("--")
    with pytest.raises(SystemExit) as exits:  # one word too many is said, not taken in silence
        parse(["logs", "b1", "--", "c1", "--"])
    assert exits.value.code == ExitCode.USAGE
    said = "flightdeck: unrecognized arguments: -- (see `flightdeck logs --help`)\n"
    assert capsys.readouterr().err == said


def test_a_pattern_like_an_option_is_said_to_go_after_dashes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Found in a walk-through: `grep B --force` (searching for `--force`) said only "the
    # following arguments are required: PATTERN", of the pattern it was given.
    from flightdeck.tui import cli

    for argv, hint in (
        (["grep", "b1", "--force"], "; '--force' reads as an option: a word that starts with"),
        (["grep", "b1", "--state-dir", "D", "-rf"], "; '-rf' reads as an option: a word that"),
        (["grep", "b1"], ""),  # nothing like an option given: the word was left out
        (["grep", "b1", "--", "-x", "--force"], ""),  # after `--`: a word, one too many
        (["merge", "b1", "c1", "--bogus"], ""),  # what is missing is an option (--into)
    ):
        with pytest.raises(SystemExit) as exits:
            cli._parser().parse_args(argv)
        assert exits.value.code == ExitCode.USAGE, argv
        err = capsys.readouterr().err
        if hint:
            assert err.startswith(
                f"flightdeck: the following arguments are required: PATTERN{hint}"
            )
            assert err.endswith(" goes after `--` (see `flightdeck grep --help`)\n"), err
        else:
            assert "reads as an option" not in err, err


def test_an_empty_state_dir_argument_is_bad_input(project: Path) -> None:
    # `--state-dir "$UNSET"`: Path("") is the current folder, which run filled with its
    # database and batches and made private (mode 0700), the user's project folder.
    mode = project.stat().st_mode
    for args in (("run", "tasks.jsonl", "--headless"), ("ls",), ("retry", "b1", "c1")):
        result = flightdeck(*args, "--state-dir", "", cwd=project)
        assert result.returncode == ExitCode.USAGE, (args, result.stderr)
        [line] = result.stderr.splitlines()
        assert "argument --state-dir: must name a folder, got an empty string" in line
    assert sorted(p.name for p in project.iterdir()) == ["flightdeck.toml", "tasks.jsonl"]
    assert project.stat().st_mode == mode


def test_a_byte_that_is_not_utf8_in_an_id_or_pattern_is_bad_input(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # A lone surrogate (argv's 0xff) reached SQLite: a UnicodeEncodeError's traceback, exit 1,
    # from every command that looks a batch, a child or a pattern up.
    batch_id = finished_here(project)
    # The byte in a process's argv (subprocess writes "\udcff" as 0xff), then in this process
    # the argv Python decodes it to.
    result = flightdeck("report", "b\udcff", cwd=project)
    said = [(result.returncode, result.stdout, result.stderr, "batch_id")]
    monkeypatch.chdir(project)
    for args, label in (
        (("wait", "b\udcff"), "batch_id"),
        (("logs", batch_id, "c\udcff"), "child_id"),
        (("grep", batch_id, "x\udcff"), "PATTERN"),
        (("stop", batch_id, "--where", "\udcff"), "--where"),
        (("retry", batch_id, "job-0", "c\udcff"), "CHILD"),
    ):
        said.append((*cli(capsys, *args), label))
    for code, out, err, label in said:
        assert (code, out) == (ExitCode.USAGE, ""), (label, err)
        [line] = err.splitlines()
        assert line.startswith(f"flightdeck: {label}: not UTF-8 text: the byte 0xff at "), line


def test_headless_and_detach_are_alternatives(project: Path) -> None:
    # Both were taken, and the batch detached: the synopsis shows [--headless | --detach].
    result = flightdeck("run", "tasks.jsonl", "--headless", "--detach", cwd=project)
    assert result.returncode == ExitCode.USAGE
    assert result.stderr == (
        "flightdeck: argument --detach: not allowed with argument --headless "
        "(see `flightdeck run --help`)\n"
    )
    assert result.stdout == "" and not (project / ".flightdeck").exists()  # nothing started


@pytest.mark.slow
def test_max_concurrent_auto_overrides_the_configs_number(project: Path) -> None:
    from flightdeck.engine.control.pool import auto_pool_size
    from flightdeck.engine.inputs.settings import default_sim_route

    result = flightdeck("run", "tasks.jsonl", "--max-concurrent", "auto", cwd=project)
    assert result.returncode == ExitCode.OK, result.stderr
    (manifest,) = (project / ".flightdeck" / "batches").glob("*/manifest.json")
    auto = auto_pool_size([default_sim_route()], os.cpu_count())  # the config says 4
    assert auto != 4 and json.loads(manifest.read_text())["pool_size"] == auto


def test_argument_errors_never_print_escape_sequences(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """argparse quotes unrecognized arguments raw, and a glob can match any file name."""
    from flightdeck.tui.cli import main

    evil = "b\x1b]0;pwned\x07\u202e\x9b2J.jsonl"
    with pytest.raises(SystemExit) as caught:
        main(["run", "a.jsonl", evil])
    assert caught.value.code == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "flightdeck: unrecognized arguments: b.jsonl" in err, err
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", err), repr(err)


def test_version_names_the_installed_package(project: Path) -> None:
    import importlib.metadata

    for spelled in ("--version", "--ver"):  # abbreviated, as argparse allows any long option
        out = flightdeck(spelled, cwd=project)
        assert out.returncode == ExitCode.OK, out.stderr
        assert out.stdout == f"flightdeck {importlib.metadata.version('flightdeck')}\n"


def test_version_into_a_closed_pipe_ends_as_every_command_does(project: Path) -> None:
    # `flightdeck --version | true`: the reader has gone before the line is written.
    read, write = os.pipe()
    os.close(read)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "flightdeck.tui.cli", "--version"],
            cwd=project,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=60,
        )
    finally:
        os.close(write)
    assert (proc.returncode, proc.stderr) == (ExitCode.OUTPUT_CLOSED, "")


@pytest.mark.slow
def test_report_and_ls_need_no_config_when_the_state_folder_is_given(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    finished_here(project, state_dir="st")
    (project / "flightdeck.toml").write_text("[engine]\nbogus = 1\n")  # broken since
    monkeypatch.chdir(project)
    for command in (["ls"], ["report", "--format", "json"]):
        given = cli(capsys, *command, "--state-dir", "st")
        assert given[0] == ExitCode.OK, given
        # FLIGHTDECK_HOME in the environment of a process, as a user sets it
        home = subprocess.run(
            [sys.executable, "-m", "flightdeck.tui.cli", *command],
            cwd=project,
            capture_output=True,
            text=True,
            env={**os.environ, "FLIGHTDECK_HOME": "st", "NO_COLOR": "1"},
        )
        assert home.returncode == ExitCode.OK, home.stderr
        # without either, flightdeck.toml would say where the state is: its error stands
        code, _, err = cli(capsys, *command)
        assert code == ExitCode.USAGE and "engine.bogus: unknown key" in err


@pytest.mark.slow
def test_the_report_hint_is_a_shell_word_naming_the_very_folder(project: Path) -> None:
    (project / "flightdeck.toml").write_text(
        FAST_CONFIG.replace("[engine]\n", '[engine]\nstate_dir = "my st\\u001b]0;x\\u0007ate"\n')
    )
    out = flightdeck("run", "tasks.jsonl", cwd=project)
    assert out.returncode == ExitCode.OK, out.stderr
    assert "\x1b" not in out.stdout and "\x07" not in out.stdout
    hint = out.stdout.splitlines()[-1]
    # the OSC sequence's bytes escaped (bash's $'...' gives the very folder back), none raw
    assert re.fullmatch(
        r"report: flightdeck report \S+ --state-dir \$'/\S+/my st\\x1b\]0;x\\x07ate'", hint
    ), hint


@pytest.mark.slow
def test_attach_and_serve_read_the_state_folder_their_config_names(
    project: Path, tmp_path: Path
) -> None:
    # As `run --config` does: [engine] state_dir of the config given, not of ./flightdeck.toml.
    config = project / "flightdeck.toml"
    config.write_text(FAST_CONFIG.replace("[engine]\n", '[engine]\nstate_dir = "st"\n'))
    finished_here(project)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for command in ("attach", "serve"):
        out = flightdeck(command, "nope", "--config", str(config), cwd=elsewhere)
        assert out.returncode == ExitCode.USAGE
        assert f"no batch 'nope' in {project / 'st'} " in out.stderr, out.stderr


def test_a_folder_named_like_the_database_is_one_clear_error(project: Path) -> None:
    (project / "st" / "flightdeck.db").mkdir(parents=True)
    for command in (["ls"], ["report"]):
        out = flightdeck(*command, "--state-dir", "st", cwd=project)
        assert out.returncode == ExitCode.USAGE, out.stderr
        assert (
            out.stderr == "flightdeck: st/flightdeck.db: not a flightdeck database (not a file)\n"
        )


@pytest.mark.slow
def test_ctrl_c_stops_every_child_and_exits_130(project: Path) -> None:
    held(project)
    with Headless(project, "tasks.jsonl") as run:
        batch_id = run.wait_for("batch ").split()[1]
        wait_until_running(project, batch_id, "job-0")
        run.proc.send_signal(signal.SIGINT)
        code, out, err = run.finish(timeout=HANG_S)  # held children: only the stop ends them
    assert code == ExitCode.INTERRUPTED, err
    assert out.count("■") == 6  # every child reported as stopped
    report = json.loads(flightdeck("report", "--format", "json", cwd=project).stdout)
    assert report["status"] == "stopped"
    assert {c["status"] for c in report["children"]} == {"stopped"}


@pytest.mark.slow
def test_sigterm_stops_every_child_records_it_and_exits_143(project: Path) -> None:
    # `kill`, a service manager or a CI timeout: the batch must not stay "running".
    held(project)
    with Headless(project, "tasks.jsonl") as run:
        batch_id = run.wait_for("batch ").split()[1]
        wait_until_running(project, batch_id, "job-0")
        run.proc.send_signal(signal.SIGTERM)
        code, out, err = run.finish(timeout=HANG_S)
    assert code == ExitCode.TERMINATED, err
    assert "stopping all children… (a second SIGTERM to force)" in out
    report = json.loads(flightdeck("report", "--format", "json", cwd=project).stdout)
    assert report["status"] == "stopped"
    assert {c["status"] for c in report["children"]} == {"stopped"}


@pytest.mark.slow
def test_a_signal_as_soon_as_the_batch_id_is_printed_still_stops_and_records(
    project: Path,
) -> None:
    # A script that reads the id and then kills the run, say. The handlers used to be installed
    # only after that line: such a signal killed the process, leaving the batch "running".
    held(project)
    with Headless(project, "tasks.jsonl") as run:
        run.wait_for("batch ")
        run.proc.send_signal(signal.SIGTERM)
        code, _, err = run.finish(timeout=HANG_S)
    assert code == ExitCode.TERMINATED, err
    report = json.loads(flightdeck("report", "--format", "json", cwd=project).stdout)
    assert report["status"] == "stopped"


@pytest.mark.slow
def test_a_second_ctrl_c_leaves_at_once(project: Path) -> None:
    # Thousands of queued children and stalled streams: stopping all of them takes a while.
    (project / "flightdeck.toml").write_text(
        "[engine]\nmax_concurrent = 64\nmax_tasks = 20000\n"
        "[routes.sim]\ntime_scale = 1.0\nstall_rate = 1.0\nread_timeout_s = 600\n"
    )
    lines = [json.dumps({"goal": f"g{i}"}) for i in range(20_000)]
    (project / "many.jsonl").write_text("\n".join(lines) + "\n")
    with Headless(project, "many.jsonl") as run:
        batch_id = run.wait_for("batch ").split()[1]
        wait_until_running(project, batch_id, "task-0001")  # children are streaming
        run.proc.send_signal(signal.SIGINT)
        run.wait_for("stopping all children…")  # the first one is handled: the next is a second
        t0 = time.monotonic()
        run.proc.send_signal(signal.SIGINT)
        run.proc.send_signal(signal.SIGINT)  # a third one changes nothing
        code, _, err = run.finish(timeout=20)
        left_after = time.monotonic() - t0
    assert code == ExitCode.INTERRUPTED, err
    # LEAVE_S (1 s) for the store, then for the transcripts, at most; the rest is room for a
    # loaded machine. Stopping every child instead takes longer.
    assert left_after < 6
    assert "Traceback" not in err
    assert "left without waiting for children still stopping" in err


def test_a_second_ctrl_c_says_children_were_left_only_if_some_had_not_ended(
    tmp_path: Path,
) -> None:
    # It used to say so after every child had ended and been printed, while the engine closed.
    hold = Hold(tmp_path / "hold")
    route = sim_route(tool_turns=0, **hold.options())
    engine = Engine(batch(1), settings(route), state_dir=tmp_path)
    assert "without waiting" in left_text(engine, started=False).plain
    try:
        engine.start()
        assert "without waiting" in left_text(engine, started=True).plain  # held, running
        # Its processes' count read from a damaged store: the line is said without it (an
        # error there was raised out of the signal handler, which then never left).
        import flightdeck.engine.attached.store as store

        def damaged(db: Path, batch_id: str) -> int:
            raise sqlite3.DatabaseError("file is not a database")

        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(store, "still_running", damaged)
            assert "without waiting" in left_text(engine, started=True).plain
        hold.release()
        assert engine.wait(60)
        assert left_text(engine, started=True).plain == (
            f"flightdeck: left before the summary "
            f"(flightdeck report {engine.batch_id} --state-dir {tmp_path})"
        )
    finally:
        engine.close()


def test_ctrl_c_while_the_batch_file_loads_exits_130_quietly(project: Path) -> None:
    # The batch file is a FIFO: its write end opens once the CLI opened it for reading, inside
    # main(), and the CLI stays there, reading, until the write end is closed.
    fifo = project / "tasks-pipe.jsonl"
    os.mkfifo(fifo)
    with Headless(project, fifo.name) as run:
        deadline = time.monotonic() + 90  # a ceiling: Python starts slowly at a load of 20
        while True:
            try:
                writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO: no reader yet
                break
            except OSError as exc:
                assert exc.errno == errno.ENXIO, exc
            assert run.proc.poll() is None, run.err.rest()
            assert time.monotonic() < deadline, "the CLI never opened the batch file"
            time.sleep(0.01)
        try:
            # A signal that lands between the CLI's open() and its read() is only seen once the
            # read returns: wait until the read blocks, so that the signal interrupts it.
            while not sleeps_reading_a_pipe(run.proc.pid):
                assert time.monotonic() < deadline, "the CLI never read the batch file"
                time.sleep(0.01)
            signals = signal_state(run.proc.pid)
            run.proc.send_signal(signal.SIGINT)
            # Closing the write end at once would race the signal: the read could see the end
            # of the file first, on a loaded machine.
            with contextlib.suppress(subprocess.TimeoutExpired):
                run.proc.wait(60)  # a ceiling: it exits as soon as the signal is handled
        finally:
            os.close(writer)  # the read ends, signal or not: the test cannot hang on it
        code, out, err = run.finish(timeout=HANG_S)
    assert code == ExitCode.INTERRUPTED, f"{err} ({signals})"
    assert (out, err) == ("", "flightdeck: interrupted\n")  # no batch started, no traceback


@pytest.mark.slow
def test_an_unusable_state_dir_is_one_clear_error(project: Path) -> None:
    (project / "blocker").write_text("a file where a folder should be")
    result = flightdeck("run", "tasks.jsonl", "--state-dir", "blocker/state", cwd=project)
    assert result.returncode == ExitCode.USAGE
    assert result.stderr.startswith("flightdeck: state_dir: cannot use ")
    assert "Traceback" not in result.stderr
    result = flightdeck("run", "tasks.jsonl", "--state-dir", "blocker", cwd=project)
    assert result.returncode == ExitCode.USAGE
    assert result.stderr.endswith("/blocker exists and is not a folder\n"), result.stderr


def test_a_state_dir_that_is_a_file_is_said_so_by_every_command(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found by an audit: `ls --state-dir FILE` said "FILE/flightdeck.db: no flightdeck state
    # here (run a batch first)", where `run` said the file is not a folder.
    from flightdeck.tui.cli import main

    (project / "blocker").write_text("a file where a folder should be")
    monkeypatch.chdir(project)
    blocker = project / "blocker"
    for args in (["ls"], *verbs_with_a_batch_id().values()):
        assert main([*args, "--state-dir", "blocker"]) == ExitCode.USAGE, args
        assert capsys.readouterr() == (
            "",
            f"flightdeck: state_dir: cannot use {blocker}: {blocker} exists and is not a folder\n",
        ), args


@pytest.mark.slow
def test_an_unusable_database_is_one_clear_error(project: Path) -> None:
    db = project / "state" / "flightdeck.db"
    db.parent.mkdir()
    db.write_text("this is not a database " * 20)
    for args in (("run", "tasks.jsonl"), ("ls",), ("report",)):
        result = flightdeck(*args, "--state-dir", "state", cwd=project)
        assert result.returncode == ExitCode.USAGE, (args, result.stderr)
        assert re.match(r"flightdeck: (\S*/)?state/flightdeck\.db: cannot ", result.stderr)
        assert "file is not a database" in result.stderr
        assert "Traceback" not in result.stderr
    assert db.read_text() == "this is not a database " * 20  # nothing was written
    assert [p.name for p in (project / "state").iterdir()] == ["flightdeck.db"]


def test_another_programs_database_is_left_alone(project: Path) -> None:
    db = project / "state" / "flightdeck.db"
    db.parent.mkdir()
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE batches (x)")
        conn.execute("CREATE TABLE notes (y)")
    result = flightdeck("run", "tasks.jsonl", "--state-dir", "state", cwd=project)
    assert result.returncode == ExitCode.USAGE, result.stderr
    assert result.stderr.endswith(
        "state/flightdeck.db: not a flightdeck database (it has other tables: batches, notes)\n"
    )
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 0
        tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    assert sorted(t[0] for t in tables) == ["batches", "notes"]
    assert sorted(p.name for p in (project / "state").iterdir())[0] == "flightdeck.db"
    assert not (project / "state" / "batches").exists()


# `flightdeck ARGS` as a user who may write only what its mode bits allow: a root process gives
# up CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH (out of the bounding set), then runs the command.
_AS_NON_WRITER = """
import ctypes, os, sys
if os.geteuid() == 0:
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2):
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            sys.exit(77)
os.execv(sys.executable, [sys.executable, "-m", "flightdeck.tui.cli", *sys.argv[1:]])
"""


def test_a_database_the_user_may_only_read_is_one_clear_error_before_the_batch(
    project: Path,
) -> None:
    # SQLite opened it read-only without a word: the batch started, printed its id, and failed
    # (exit 3) after store_retry_s of refused commits, its folder left behind.
    config = FAST_CONFIG.replace("[engine]\n", "[engine]\nstore_retry_s = 0.5\n")
    (project / "flightdeck.toml").write_text(config)
    db = project / "state" / "flightdeck.db"
    db.parent.mkdir()
    Store(db).close()
    db.chmod(0o444)
    result = subprocess.run(
        [sys.executable, "-c", _AS_NON_WRITER, "run", "tasks.jsonl", "--state-dir", "state"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "NO_COLOR": "1"},
    )
    if result.returncode == 77:
        pytest.skip("runs as root, and cannot give up the power to write any file")
    assert (result.returncode, result.stdout) == (ExitCode.USAGE, ""), result.stderr
    assert re.fullmatch(
        r"flightdeck: (\S*/)?state/flightdeck\.db: read-only here: "
        r"its permissions, or its file system, refuse writes\n",
        result.stderr,
    )
    assert not (project / "state" / "batches").exists()
    with StoreReader(db) as reader:
        assert reader.batches() == []


def test_run_widens_the_gil_switch_interval_and_gc_thresholds(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from flightdeck.engine.control.pool import GC_THRESHOLDS, GIL_SWITCH_INTERVAL_S
    from flightdeck.tui import cli

    seen: list[float] = []
    thresholds: list[tuple[int, ...]] = []
    # the test process keeps its own settings
    monkeypatch.setattr(sys, "setswitchinterval", seen.append)
    monkeypatch.setattr(gc, "set_threshold", lambda *t: thresholds.append(t))
    monkeypatch.chdir(project)
    assert cli.main(["run", "tasks.jsonl", "--headless", "--state-dir", "st"]) == ExitCode.OK
    assert seen == [GIL_SWITCH_INTERVAL_S]
    assert thresholds == [GC_THRESHOLDS]
    assert "batch " in capsys.readouterr().out


def _finished(
    child_id: str, done: int, status: str = "completed", error: str | None = None
) -> ChildFinished:
    row = ChildRow(
        id=child_id,
        seq=done - 1,
        goal="g",
        group=None,
        route="sim",
        model="sim-1",
        status=ChildStatus(status),
        activity=Activity(api_calls=4, tool_calls=3, retries=1 if error else 0),
        usage=Usage(1500, 300),
        cost_usd=Decimal("0.0042"),
        queued_ts=0.0,
        started_ts=10.0,
        finished_ts=12.3,
        error=error,
        result=None,
        transcript=f"{child_id}.log",
    )
    return ChildFinished(row, done, 24)


class _Writes(io.StringIO):
    """A text file that keeps each write."""

    def __init__(self) -> None:
        super().__init__()
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return super().write(text)


def test_engine_errors_reach_stderr_as_one_sanitized_line(tmp_path: Path) -> None:
    engine = Engine(
        batch(3), settings(sim_route(tool_turns=0)), state_dir=tmp_path, batch_id="b1"
    )  # an id given, not drawn: its folder may exist already
    (engine.batch_dir / "t0001.log").mkdir(parents=True)  # that transcript cannot be written
    out, err = io.StringIO(), io.StringIO()
    code = run_headless(engine, Console(file=out, width=200), Console(file=err, width=200))
    assert code == ExitCode.OK  # the children still completed; only a transcript was lost
    assert len([line for line in out.getvalue().splitlines() if line.startswith("✓ [")]) == 3
    lines = err.getvalue().splitlines()
    assert len(lines) == 1, lines  # every failed write of the batch, in one line
    assert re.fullmatch(
        r"flightdeck: error: \d+ transcript write\(s\) failed; last: cannot append to "
        r"transcript \S+/t0001\.log: Is a directory",
        lines[0],
    ), lines[0]


class _ClosesAtSummary(io.StringIO):
    """A pipe whose reader leaves after the last completion line, before the summary."""

    def write(self, text: str) -> int:
        if "children" in text and "stopped" in text:  # the summary table's header
            raise BrokenPipeError
        return super().write(text)


def test_output_closed_after_the_batch_ended_says_only_the_summary_is_lost(
    tmp_path: Path,
) -> None:

    engine = Engine(batch(3), settings(sim_route(tool_turns=0)), state_dir=tmp_path)
    out, err = _ClosesAtSummary(), io.StringIO()
    code = run_headless(engine, PipeSafeConsole(file=out, width=200), Console(file=err, width=200))
    assert code == ExitCode.OUTPUT_CLOSED
    assert out.getvalue().count("✓ [") == 3  # every line was read, the summary was not
    assert err.getvalue() == (
        "flightdeck: output closed; the batch had completed "
        f"(flightdeck report {engine.batch_id} --state-dir {tmp_path})\n"
    )
    assert engine.snapshot().totals.completed == 3  # nothing was stopped


def test_output_closed_at_the_last_line_while_the_batch_ends_stops_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The last child's line is printed while the engine is still ending the batch (flushing
    # the store, writing the manifest): closing the engine then stops nothing, and must not
    # say it did.

    broke = threading.Event()
    real_finish = BatchRun._finish

    def finish_after_the_break(self: BatchRun, status: object) -> object:
        assert broke.wait(60)
        return real_finish(self, status)  # type: ignore[arg-type]

    class ClosesAtTheLastLine(io.StringIO):
        def write(self, text: str) -> int:
            if "[3/3]" in text:
                broke.set()
                raise BrokenPipeError
            return super().write(text)

    monkeypatch.setattr(BatchRun, "_finish", finish_after_the_break)
    engine = Engine(batch(3), settings(sim_route(tool_turns=0)), state_dir=tmp_path)
    err = io.StringIO()
    out = PipeSafeConsole(file=ClosesAtTheLastLine(), width=200)
    code = run_headless(engine, out, Console(file=err, width=200))
    assert code == ExitCode.OUTPUT_CLOSED
    assert err.getvalue().startswith("flightdeck: output closed; the batch had completed (")
    assert engine.status.value == "completed" and engine.stopped_by_stop_all == 0


def test_output_closed_after_a_batch_its_budget_stopped_says_so(tmp_path: Path) -> None:
    # `stopped` by its budget, before the output closed: nothing was stopped on the way out.

    s = dataclasses.replace(settings(sim_route(tool_turns=0)), budget=Budget(max_runs=2))
    engine = Engine(batch(3), s, state_dir=tmp_path)
    out, err = _ClosesAtSummary(), io.StringIO()
    code = run_headless(engine, PipeSafeConsole(file=out, width=200), Console(file=err, width=200))
    assert code == ExitCode.OUTPUT_CLOSED
    assert err.getvalue().startswith("flightdeck: output closed; the batch had stopped (")
    assert engine.snapshot().totals.completed == 2


def test_piped_completion_lines_are_plain_text_in_one_write() -> None:
    out = _Writes()
    console = Console(file=out, width=200)
    events = [
        _finished("review-pr-104", 3),
        _finished("bad", 4, "failed", "RateLimited: 429\x1b[31m\nretry\tlater"),
    ]
    print_lines(console, events, styled=False)
    assert out.writes == [
        "✓ [ 3/24] review-pr-104  api=4 tools=3  1.8k tok  $0.0042  2.3s\n"
        "✗ [ 4/24] bad  api=4 tools=3 retries=1  1.8k tok  $0.0042  2.3s"
        "  failed: RateLimited: 429 retry later\n"
    ]


def test_terminal_completion_lines_are_styled_with_the_same_text() -> None:
    out = _Writes()
    console = Console(file=out, force_terminal=True, color_system="standard", width=200)
    events = [_finished(f"job-{i}", i + 1) for i in range(5)] + [
        _finished("bad", 6, "failed", "boom")
    ]
    print_lines(console, events, styled=True)
    written = "".join(out.writes)
    plain = re.sub(r"\x1b\[[0-9;]*m", "", written)
    assert plain == "".join(completion_text(e) + "\n" for e in events)
    assert "\x1b[" in written  # styled: the glyphs, ids and the reason carry colour
    assert len(out.writes) == 1  # one print for the whole drain, not one per child


def test_forced_colour_on_a_pipe_draws_no_progress_bar(project: Path) -> None:
    # CI often sets FORCE_COLOR (colour in its logs), which Rich reads as "a terminal": the
    # live bar then went to the log as cursor movements, redrawn 10 times a second.
    result = subprocess.run(
        [sys.executable, "-m", "flightdeck.tui.cli", "run", "tasks.jsonl", "--headless"],
        cwd=project,
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "FORCE_COLOR": "1"},
    )
    assert result.returncode == ExitCode.OK, result.stderr
    assert "\r" not in result.stdout and "\x1b[?25l" not in result.stdout  # no bar drawn
    assert "\x1b[2K" not in result.stdout and "\x1b[1A" not in result.stdout
    out = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout).splitlines()  # colours may stay
    assert re.fullmatch(r"batch \S+", out[0]), out
    done = [line for line in out if re.match(r"✓ \[\d/6\] job-\d  api=\d+ ", line)]
    assert len(done) == 6 and out[1:7] == done, out


def test_a_closed_pipe_ends_the_run_quietly(project: Path) -> None:
    # `flightdeck run … | head -1`: the reader is gone before the first completion line is
    # written (the children are held until then).
    hold = held(project, "slow.toml")
    proc = subprocess.Popen(
        [sys.executable, "-m", "flightdeck.tui.cli", "run", "tasks.jsonl", "--config", "slow.toml"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    batch_id = proc.stdout.readline().split()[1]
    proc.stdout.close()
    hold.release("job-0")
    with proc.stderr:
        assert (
            proc.wait(timeout=60) == ExitCode.OUTPUT_CLOSED
        )  # as a shell shows a program a closed pipe ended
        # One line, no traceback, and nothing about a flush at exit.
        state = project / ".flightdeck"
        assert proc.stderr.read() == (
            "flightdeck: output closed; children still running were stopped "
            f"(flightdeck report {batch_id} --state-dir {state})\n"
        )
    with StoreReader(project / ".flightdeck" / "flightdeck.db") as reader:
        info = reader.batch(batch_id)
        rows = reader.children(batch_id)
    assert info is not None and info.status.value == "stopped"
    assert {r.status for r in rows} <= {ChildStatus.STOPPED, ChildStatus.COMPLETED}
    assert any(r.status is ChildStatus.STOPPED for r in rows)


def test_a_closed_pipe_stops_the_children_before_the_next_line_is_due(project: Path) -> None:
    # `flightdeck run … | head -1` with every child busy: the closed pipe was found only when
    # the next line was written, minutes later (a stall), the children running and spending
    # meanwhile with nobody reading.
    held(project, "slow.toml")  # never released: no line is written after the batch id
    proc = subprocess.Popen(
        [sys.executable, "-m", "flightdeck.tui.cli", "run", "tasks.jsonl", "--config", "slow.toml"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    batch_id = proc.stdout.readline().split()[1]
    wait_until_running(project, batch_id, "job-0")
    proc.stdout.close()
    with proc.stderr:
        assert proc.wait(HANG_S) == ExitCode.OUTPUT_CLOSED
        assert proc.stderr.read().startswith("flightdeck: output closed; children still running")
    with StoreReader(project / ".flightdeck" / "flightdeck.db") as reader:
        info = reader.batch(batch_id)
        rows = reader.children(batch_id)
    assert info is not None and info.status.value == "stopped"
    assert {r.status for r in rows} == {ChildStatus.STOPPED}


@pytest.mark.slow
def test_a_report_piped_into_head_leaves_quietly(project: Path) -> None:
    finished_here(project)
    proc = subprocess.Popen(
        [sys.executable, "-m", "flightdeck.tui.cli", "report", "--format", "json"],
        cwd=project,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # before the report is written
    with proc.stderr:
        assert proc.wait(timeout=60) == ExitCode.OUTPUT_CLOSED
        assert proc.stderr.read() == ""


# --- costs nobody can price, and batches on several routes ---------------------------------------


def test_the_summary_of_a_batch_whose_every_price_is_unknown_shows_no_zero_dollars() -> None:
    from flightdeck.engine.model import BatchStatus, Snapshot
    from flightdeck.engine.records.meter import totals_of
    from flightdeck.tui.output import summary_table

    rows = tuple(
        dataclasses.replace(
            _finished(f"c{i}", i + 1).row,
            route="gpt",
            model="no-such-model-zz",
            usage=Usage(1500, 300, cache_read_tokens=900),
            cost_usd=None,
            cache_saved_usd=None,  # what the engine gives a child that read its cache, unpriced
        )
        for i in range(2)
    )
    snap = Snapshot("b1", BatchStatus.COMPLETED, 0.0, 1.0, rows, totals_of(rows), pool_size=2)
    out = io.StringIO()
    Console(file=out, width=200).print(summary_table(snap))
    header, totals = summary_of(out.getvalue().splitlines())
    assert header[-2:] == ["cost", "cache saved"] and "route" not in header  # one line
    assert totals[-2:] == ["$?", "$?"]


def test_the_summary_says_a_cache_saving_is_partly_unknown_as_the_report_does() -> None:
    # A command child whose CLI counts no tokens beside a priced child that read its cache: the
    # summary showed the priced child's $0.01 as the whole, where the report says unknown.
    from flightdeck.engine.model import BatchStatus, Snapshot
    from flightdeck.engine.records.meter import totals_of
    from flightdeck.tui.output import summary_table

    priced = dataclasses.replace(_finished("c0", 1).row, cache_saved_usd=Decimal("0.01"))
    uncounted = dataclasses.replace(
        _finished("c1", 2).row, route="cli", usage=Usage(), cost_usd=None
    )
    assert uncounted.tokens_unknown and uncounted.cache_saved_usd == 0
    for rows, said in (((priced,), "$0.01"), ((priced, uncounted), "$0.01+?")):
        snap = Snapshot("b1", BatchStatus.COMPLETED, 0.0, 1.0, rows, totals_of(rows), pool_size=2)
        out = io.StringIO()
        Console(file=out, width=200).print(summary_table(snap))
        totals = summary_of(out.getvalue().splitlines())[-1]
        assert totals[-1] == said


def test_ls_shows_an_unknown_price_as_unknown_not_zero(tmp_path: Path) -> None:
    from flightdeck.engine.records.store import Store

    from test_store import make_batch, make_child

    with Store(tmp_path / "st" / "flightdeck.db") as store:
        store.create_batch(make_batch("b-unpriced", max_cost_usd=None))
        store.add_children("b-unpriced", [make_child(i, cost_usd=None) for i in range(2)])
        store.create_batch(make_batch("b-partly", created_ts=900.0))
        store.add_children(
            "b-partly", [make_child(0, cost_usd=Decimal("0.25")), make_child(1, cost_usd=None)]
        )
    out = flightdeck("ls", "--state-dir", "st", cwd=tmp_path)
    assert out.returncode == ExitCode.OK, out.stderr
    rows = {cells[0]: cells for line in out.stdout.splitlines() if (cells := table_cells(line))}
    assert rows["batch"][7] == "cost"
    assert rows["b-unpriced"][7] == "$?"
    assert rows["b-partly"][7] == "$0.25+?"


def _quit_rows() -> tuple[ChildRow, ...]:
    """A batch the operator quit on two routes: one completed, one failed, one timed out, three
    stopped."""
    from test_store import make_child

    S = ChildStatus
    ended = [(S.COMPLETED, "a"), (S.FAILED, "a"), (S.STOPPED, "a"), (S.TIMED_OUT, "b")]
    ended += [(S.STOPPED, "b"), (S.STOPPED, "b")]
    return tuple(make_child(i, status=s, route=r) for i, (s, r) in enumerate(ended))


def test_ls_shows_stopped_apart_from_failed(tmp_path: Path) -> None:
    from flightdeck.engine.records.store import Store

    from test_store import make_batch

    with Store(tmp_path / "st" / "flightdeck.db") as store:
        store.create_batch(make_batch("b-quit"))
        store.add_children("b-quit", list(_quit_rows()))
    out = flightdeck("ls", "--state-dir", "st", cwd=tmp_path)
    assert out.returncode == ExitCode.OK, out.stderr
    rows = {cells[0]: cells for line in out.stdout.splitlines() if (cells := table_cells(line))}
    assert rows["batch"][3:7] == ["children", "completed", "failed", "stopped"]
    assert rows["b-quit"][3:7] == ["6", "1", "2", "3"]


def test_the_summary_shows_stopped_apart_from_failed_per_route() -> None:
    from flightdeck.engine.model import BatchStatus, Snapshot
    from flightdeck.engine.records.meter import totals_of
    from flightdeck.tui.output import summary_table

    rows = _quit_rows()
    snap = Snapshot("b1", BatchStatus.STOPPED, 0.0, 1.0, rows, totals_of(rows), pool_size=2)
    out = io.StringIO()
    Console(file=out, width=200).print(summary_table(snap))
    header, *lines = summary_of(out.getvalue().splitlines())
    assert header[:5] == ["route", "children", "ok", "failed", "stopped"]
    assert [cells[:5] for cells in lines] == [
        ["a", "3", "1", "1", "1"],
        ["b", "3", "0", "1", "2"],
        ["total", "6", "1", "2", "3"],
    ]


def test_a_batch_on_two_routes_is_summed_per_route_with_the_unknown_price_unknown(
    tmp_path: Path,
) -> None:
    from flightdeck.engine.inputs.tasks import Task
    from flightdeck.engine.providers.sim import SimProvider
    from flightdeck.engine.records.report import build_report
    from flightdeck.tui.fmt import fmt_cost

    from helpers import tasks_batch

    # genai-prices knows no such model: its children's cost is unknown, never guessed as $0.
    gpt = dataclasses.replace(
        sim_route("gpt", tool_turns=0), provider="openai", model="no-such-model-zz", price=None
    )
    routes = ("sim", "gpt", "sim", "gpt", "sim")
    tasks = [
        Task(id=f"t{i}", goal=f"Review item {i}", seq=i, route=r) for i, r in enumerate(routes)
    ]
    engine = Engine(
        tasks_batch(tasks),
        settings(sim_route(tool_turns=0), gpt),
        state_dir=tmp_path,
        providers={"gpt": SimProvider(sim_route("gpt", tool_turns=0))},
    )
    out = io.StringIO()
    assert run_headless(engine, Console(file=out, width=200), Console(file=io.StringIO())) == 0

    snap = engine.snapshot()
    sim_cost = sum((r.cost_usd or Decimal(0) for r in snap.children), Decimal(0))
    assert sim_cost > 0 and [r.cost_usd for r in snap.children if r.route == "gpt"] == [None] * 2
    lines = out.getvalue().splitlines()
    table = summary_of(lines)
    assert [row[0] for row in table] == ["route", "gpt", "sim", "total"]
    total = next(i for i, line in enumerate(lines) if line.startswith("total"))
    assert set(lines[total - 1]) == {"─"}  # a rule over the total (Rich's own: spaces)
    assert [row[1:4] for row in table[1:]] == [["2", "2", "0"], ["3", "3", "0"], ["5", "5", "0"]]
    assert table[0][-2:] == ["cost", "cache saved"]
    assert [row[-2] for row in table[1:]] == ["$?", fmt_cost(sim_cost), f"{fmt_cost(sim_cost)}+?"]
    assert table[1][-1] == "$?"  # the unpriced route's saving is as unknown as its cost

    with StoreReader(tmp_path / "flightdeck.db") as reader:
        report = build_report(reader, engine.batch_id)
    assert (report["totals"]["cost_usd"], report["totals"]["cost_unknown_children"]) == (None, 2)
    assert report["totals"]["cost_known_usd"] == float(sim_cost)
    (gpt_totals, sim_totals) = report["routes"]
    assert (gpt_totals["route"], gpt_totals["model"], gpt_totals["children"]) == (
        "gpt",
        "no-such-model-zz",
        2,
    )
    assert (gpt_totals["cost_usd"], gpt_totals["cost_known_usd"]) == (None, 0.0)
    assert gpt_totals["tokens_out"] == sum(r.usage.output_tokens for r in snap.children[1::2])
    assert sim_totals["route"] == "sim" and sim_totals["completed"] == 3
    assert sim_totals["cost_usd"] == sim_totals["cost_known_usd"] == float(sim_cost)


def verbs_with_a_batch_id() -> dict[str, list[str]]:
    """Every verb of the parser that takes a batch id, with arguments that reach its check of
    it: `nope` as the id, `job-0` for each other positional, `x` for each required option."""
    from flightdeck.tui.cli import _parser

    [sub] = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    verbs = {}
    for verb, parser in sub.choices.items():
        args = [verb]
        for action in parser._actions:
            if action.dest == "batch_id":
                args.append("nope")
            elif not action.option_strings:
                args.append("job-0")
            elif action.required:
                args += [action.option_strings[0], "x"]
        if "nope" in args:
            verbs[verb] = args
    return verbs


@pytest.mark.slow
def test_an_unknown_batch_id_is_said_the_same_way_by_every_command(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # logs, report and resume worded it three different ways; grep, diff and serve three
    # more; merge printed a traceback.
    from flightdeck.tui.cli import main

    finished_here(project)
    state = project / ".flightdeck"
    verbs = verbs_with_a_batch_id()
    assert {"logs", "report", "resume", "grep", "diff", "serve", "merge", "attach"} <= set(verbs)
    monkeypatch.chdir(project)
    for args in verbs.values():  # in this process: no interpreter start each
        assert main(args) == ExitCode.USAGE, args
        out, err = capsys.readouterr()
        assert (out, err) == (
            "",
            f"flightdeck: batch_id: no batch 'nope' in {state.absolute()} (flightdeck ls "
            "lists them; another state folder: --state-dir)\n",
        ), args


@pytest.mark.slow
def test_an_id_typed_with_a_stray_space_or_escape_is_named_as_typed(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found in use: `flightdeck pause B "job-0 "` said "no child with id 'job-0'" of a
    # child that exists (the space, an escape code or a newline dropped from the id it named).
    from flightdeck.tui.cli import main

    b = finished_here(project)
    monkeypatch.chdir(project)
    for args, said in (
        (["pause", b, "job-0 "], f"no child with id 'job-0 ' in batch {b}"),
        (["logs", b, "job-0\n"], f"no child with id 'job-0\\n' in batch {b}"),
        (["grep", b, "x", "--child", "job-0\x1b[31m"], "id 'job-0\\x1b[31m' in"),
        (["report", f"{b} "], f"no batch '{b} ' in "),
        (["logs", f"\u202e{b}", "job-0"], f"no batch '\\u202e{b}' in "),
    ):
        assert main(args) == ExitCode.USAGE, args
        out, err = capsys.readouterr()
        assert out == "" and said in err, (args, err)
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", err), repr(err)


@pytest.mark.slow
def test_a_child_id_given_for_the_batch_id_is_said_as_that(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found in use: `flightdeck steer job-0 -m hi` (the batch id left out) said "name the
    # children to steer", as stop, nudge and retry said theirs: the batch id was the mistake.
    from flightdeck.tui.cli import main

    batch_id = finished_here(project)
    state = project / ".flightdeck"
    monkeypatch.chdir(project)
    for verb, *rest in (
        ("steer", "-m", "hi"),
        ("stop",),
        ("nudge",),
        ("retry",),
        ("pause",),
        ("continue",),
        ("answer", "job-1", "-m", "yes"),
        # Their CHILD was required to argparse, which said so first (a walk-through's find).
        ("answer", "-m", "yes"),
        ("merge", "--into", "main"),
        ("discard",),
    ):
        assert main([verb, "job-0", *rest]) == ExitCode.USAGE, verb
        meant = f"flightdeck {verb} {batch_id} job-0 … --state-dir {state.absolute()}"
        said = (
            f"flightdeck: batch_id: no batch 'job-0' in {state.absolute()} (a child of batch "
            f"{batch_id}: did you mean `{meant}`?)\n"
        )
        assert capsys.readouterr() == ("", said), verb
    # The batch's id alone, to a command whose children are required: said as argparse did.
    for verb, *rest in (("answer", "-m", "yes"), ("merge", "--into", "main"), ("discard",)):
        assert main([verb, batch_id, *rest]) == ExitCode.USAGE, verb
        assert capsys.readouterr() == (
            "",
            "flightdeck: the following arguments are required: CHILD "
            f"(see `flightdeck {verb} --help`)\n",
        ), verb
    # An id no batch has a child of: where to look, as before.
    assert main(["steer", "job-9", "-m", "hi"]) == ExitCode.USAGE
    assert "no batch 'job-9' in " in capsys.readouterr().err


@pytest.mark.slow
def test_logs_follow_of_a_child_that_never_started_and_has_no_transcript_says_so(
    project: Path,
) -> None:
    # Found in a walk-through: `logs -f` of it printed nothing and exited 0 (as an empty
    # transcript); without -f it said so, exit 1.
    (project / "flightdeck.toml").write_text(  # one child runs; the rest never start
        FAST_CONFIG.replace("max_concurrent = 4", "max_concurrent = 1") + "[budget]\nmax_runs = 1\n"
    )
    batch_id = finished_here(project)
    state = project / ".flightdeck"
    with StoreReader(state / "flightdeck.db") as reader:
        never = next(r for r in reader.children(batch_id) if r.started_ts is None)
    Path(never.transcript).unlink()  # none written for it (deleted here)
    said = f"flightdeck: {never.id} never started (stopped): it has no transcript\n"
    for follow in ((), ("-f",)):
        logs = flightdeck("logs", batch_id, never.id, *follow, cwd=project)
        assert (logs.returncode, logs.stdout, logs.stderr) == (ExitCode.INCOMPLETE, "", said)


@pytest.mark.slow
def test_logs_and_diff_given_only_a_child_id_say_the_command_meant(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Found by a walk-through: `flightdeck logs job-0` said "the following arguments are
    # required: child_id", where steer, stop and the rest say the command meant.
    from flightdeck.tui.cli import main

    batch_id = finished_here(project)
    state = project / ".flightdeck"
    monkeypatch.chdir(project)
    for verb in ("logs", "diff"):
        assert main([verb, "job-0"]) == ExitCode.USAGE, verb
        meant = f"flightdeck {verb} {batch_id} job-0 --state-dir {state.absolute()}"
        said = (
            f"flightdeck: batch_id: no batch 'job-0' in {state.absolute()} (a child of batch "
            f"{batch_id}: did you mean `{meant}`?)\n"
        )
        assert capsys.readouterr() == ("", said), verb
        # The two ids swapped (`logs job-0 B`): the same (it said only "no batch 'job-0'").
        assert main([verb, "job-0", batch_id]) == ExitCode.USAGE, verb
        assert capsys.readouterr() == ("", said), verb
        # The batch's id alone: the child's is missing, as argparse would say it.
        assert main([verb, batch_id]) == ExitCode.USAGE, verb
        assert capsys.readouterr() == (
            "",
            "flightdeck: the following arguments are required: child_id "
            f"(see `flightdeck {verb} --help`)\n",
        ), verb
        # The child's id after an option is taken, as before it was optional to argparse
        # (`logs B -f c1` said "unrecognized arguments: c1"); a second id is still too many.
        code = main([verb, batch_id, "--state-dir", str(state), "job-0"])
        taken = capsys.readouterr()
        if verb == "logs":
            assert (code, taken.err) == (ExitCode.OK, ""), taken
            assert "Summarize file 0" in taken.out
        else:  # the child's, read: it worked in the project folder
            assert taken.err == "flightdeck: job-0 changed no file in a workspace of its own\n"
        with pytest.raises(SystemExit) as exits:  # and after `--` (the options' end)
            main([verb, batch_id, "--state-dir", str(state), "--", "job-0", "job-1"])
        assert exits.value.code == ExitCode.USAGE, verb
        assert capsys.readouterr().err == (
            f"flightdeck: unrecognized arguments: job-1 (see `flightdeck {verb} --help`)\n"
        ), verb


@pytest.mark.slow
def test_an_unknown_child_id_is_said_the_same_way_by_every_command(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # diff, merge and discard exited 1, logs, retry and grep 2, in three wordings: bad input.
    from flightdeck.tui.cli import main

    batch_id = finished_here(project)
    monkeypatch.chdir(project)
    for verb, *rest in (
        ("logs", "zz"),
        ("grep", "x", "--child", "zz"),
        ("retry", "zz"),
        ("diff", "zz"),
        ("merge", "zz", "--into", "main"),
        ("discard", "zz"),
    ):
        assert main([verb, batch_id, *rest]) == ExitCode.USAGE, verb
        said = f"flightdeck: no child with id 'zz' in batch {batch_id}\n"
        assert capsys.readouterr() == ("", said), verb


def _summary_snap() -> Snapshot:
    """A batch on a model route and on a command route whose CLI reports no usage."""

    from flightdeck.engine.records.meter import totals_of

    from test_store import make_child

    S = ChildStatus
    priced = [
        make_child(i, status=S.COMPLETED, route="claude-sonnet-reviewers", cost_usd=Decimal(c),
                   usage=Usage(12_345, 6_789, 40_000), activity=Activity(api_calls=3))
        for i, c in enumerate(("0.0457", "1.2034"))
    ]  # fmt: skip
    commands = [
        make_child(2 + i, status=S.COMPLETED, route="codex-cli", cost_usd=None,
                   activity=Activity(api_calls=1))
        for i in range(2)
    ]  # fmt: skip
    rows = (*priced, *commands)
    return Snapshot("b1", BatchStatus.COMPLETED, 0.0, 1.0, rows, totals_of(rows), pool_size=2)


def test_a_retried_childs_line_names_its_attempt() -> None:
    # Found by an audit: a retried child's line read as the same child done twice, the
    # counter going back between them.
    row = _summary_snap().children[0]
    assert " (attempt" not in completion_text(ChildFinished(row, 1, 4))
    again = dataclasses.replace(row, attempt=2)
    assert f" {row.id} (attempt 2)  api=" in completion_text(ChildFinished(again, 1, 4))


def test_a_command_routes_uncounted_tokens_read_unknown_in_the_summary_as_on_its_lines() -> None:
    from flightdeck.tui.output import completion_text, summary_table

    snap = _summary_snap()
    command = snap.children[2]
    assert " ? tok " in completion_text(ChildFinished(command, 3, 4))  # its own line
    out = io.StringIO()
    Console(file=out, width=200).print(summary_table(snap))
    header, *rows = summary_of(out.getvalue().splitlines())
    cells = {row[0]: dict(zip(header, row, strict=True)) for row in rows}
    assert [cells["codex-cli"][k] for k in ("tokens in", "tokens out")] == ["?", "?"]
    # counted tokens beside uncounted ones: a floor, not a total
    assert cells["total"]["tokens in"] == "24.7k+?"
    assert cells["claude-sonnet-reviewers"]["tokens in"] == "24.7k"


def test_a_units_line_says_its_uncounted_tokens_are_unknown_as_its_members_lines_do() -> None:
    # Found by an audit: the unit's line summed its children's counted tokens only, so a unit of
    # command children whose CLI reports no usage read `0 tok` under their own `? tok` lines.
    from flightdeck.engine.model import GroupFinished
    from flightdeck.tui.fmt import fmt_tokens

    priced, _, command, _ = _summary_snap().children
    alone = completion_text(GroupFinished.of("g", [command]))
    assert " ? tok " in alone, alone
    mixed = completion_text(GroupFinished.of("g", [priced, command]))
    assert f" {fmt_tokens(priced.usage.total)}+? tok " in mixed, mixed


def test_the_summary_is_readable_at_80_columns() -> None:
    from flightdeck.tui.output import money_lines, summary_table

    out = io.StringIO()
    Console(file=out, width=80).print(summary_table(_summary_snap()))
    lines = out.getvalue().splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    header, *rows = summary_of(lines)
    assert header[-2:] == ["cost", "cache saved"]
    costs = [row[-2] for row in rows]
    # Every figure whole (it read `$0.…`); only a long route name is cut.
    assert costs == ["$1.25", "$?", "$1.25+?"]
    # Named by route: the one whose price (or CLI) to look at.
    assert "$? and +?: 2 children's costs are not known in full on route codex-cli (" in "".join(
        money_lines(_summary_snap())[0].plain
    )
    assert all("…" not in cell for row in rows for cell in row[1:])


def test_a_cli_stopped_mid_turn_is_said_of_unknown_cost_not_of_unknown_price() -> None:
    # Found against the real Claude Code: a child stopped in its turn (its route priced: Claude
    # Code reports each turn's cost) read "no known price", sending the operator to a route's
    # `price` that would change nothing.
    from flightdeck.engine.records.meter import totals_of
    from flightdeck.tui.output import money_lines

    from test_store import make_child

    rows = [make_child(0, status=ChildStatus.STOPPED, route="claude-code", cost_usd=None)]
    snap = Snapshot("b1", BatchStatus.STOPPED, 0.0, 1.0, rows, totals_of(rows), pool_size=1)
    [line] = [t.plain for t in money_lines(snap) if t.plain.startswith("$?")]
    assert "price" not in line.split("(")[0]
    assert "1 child's cost is not known in full on route claude-code" in line
    assert "calls its CLI never reported" in line


def test_the_summarys_token_columns_add_up_to_the_childrens_lines() -> None:
    # Found by a user: a stop-all summary read "tokens in 6" under lines of "255 tok": the
    # children's first calls had written the cache, counted on each line but in no column.
    from flightdeck.engine.records.meter import totals_of
    from flightdeck.tui.output import summary_table

    from test_store import make_child

    rows = [
        make_child(i, status=ChildStatus.STOPPED, usage=Usage(6, 0, 0, 249)) for i in range(2)
    ] + [make_child(2, status=ChildStatus.COMPLETED, usage=Usage(10, 20, 249, 0))]
    snap = Snapshot("b1", BatchStatus.STOPPED, 0.0, 1.0, rows, totals_of(rows), pool_size=2)
    lines = [completion_text(ChildFinished(row, n, 3)) for n, row in enumerate(rows, 1)]
    assert [re.search(r"  (\d+) tok  ", line).group(1) for line in lines] == [  # type: ignore[union-attr]
        "255", "255", "279"
    ]  # fmt: skip
    out = io.StringIO()
    Console(file=out, width=80).print(summary_table(snap))
    header, totals = summary_of(out.getvalue().splitlines())
    cells = dict(zip(header, totals, strict=True))
    assert [cells[k] for k in ("tokens in", "tokens out", "cached")] == ["22", "20", "747"]
    assert sum(int(cells[k]) for k in ("tokens in", "tokens out", "cached")) == 255 + 255 + 279


def test_a_where_query_of_no_term_is_refused_as_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `--where '""'` (an unset variable quoted, `"\"$Q\""`) parsed to no term at all, a query
    # that keeps every child: stop, pause and steer acted on the whole batch.
    from flightdeck.tui.cli import main

    monkeypatch.chdir(tmp_path)
    for args in (
        ("stop", "b", "--where", '""'),
        ("pause", "b", "--where", '"" ""'),
        ("steer", "b", "--where", '""', "-m", "hi"),
    ):
        assert main(list(args)) == ExitCode.USAGE, args
        out, err = capsys.readouterr()
        assert out == "" and "--where: the query is empty" in err, args
        assert len(err.splitlines()) == 1, err


def test_a_dumb_terminal_gets_the_run_s_lines_and_one_line_from_attach(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """TERM=dumb (Emacs's shell, a CI console) on a tty: the TUI's escape sequences came out as
    they are (seen under `script`: screens of `^[[38;2;…`, no view). `run` prints a headless
    run's lines there instead; `attach` says in one line why it will not."""
    from flightdeck.tui.app import FlightdeckApp
    from flightdeck.tui.cli import main

    def no_tui(app: FlightdeckApp) -> bool:
        raise AssertionError("the TUI drawn on a dumb terminal")

    monkeypatch.setattr(FlightdeckApp, "run", no_tui)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True)
    monkeypatch.setenv("TERM", "dumb")
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.chdir(project)
    assert main(["run", "tasks.jsonl"]) == ExitCode.OK
    out = capsys.readouterr().out
    assert re.search(r"✓ \[\d/6\] job-\d", out) and " — completed" in out, out
    assert main(["attach"]) == ExitCode.USAGE
    err = capsys.readouterr().err.strip()
    assert "attach needs a terminal that can draw it (TERM=dumb)" in err, err
    assert len(err.splitlines()) == 1, err
