"""Command children (engine/agents): real processes from the fake CLIs in tests/fakes/, run
through the whole engine with settings read from a real flightdeck.toml."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import psutil
import pytest
from flightdeck.engine.agents.process import Process
from flightdeck.engine.api import Engine
from flightdeck.engine.attached.store import build_report, render_markdown
from flightdeck.engine.attached.view import StoreView
from flightdeck.engine.child import supervise
from flightdeck.engine.inputs.settings import Settings, load_settings
from flightdeck.engine.inputs.tasks import Batch, Task
from flightdeck.engine.model import ChildRow, ChildStatus, SteerState
from flightdeck.engine.money import fmt_usd
from flightdeck.engine.records.reader import StoreReader
from flightdeck.tui.commands import LS_COLUMNS, ls_cells
from flightdeck.tui.fmt import fmt_row_cost, fmt_spent

from tests.helpers import HANG_S, SkipClock, run_to_end, until, watched

FAKES = Path(__file__).parent / "fakes"
PY = sys.executable
KEY = "sk-fake-test-key-0123456789"
GRACE = 0.3  # kill_grace_s in these tests
# How long a stop may take before the test calls it hung: a ceiling a loaded machine cannot
# reach, not a latency target (a stop normally ends within GRACE and a fraction of a second).
STOP_CEILING = 30.0


def config(tmp_path: Path, route: str, *, engine: str = "") -> Settings:
    text = f'[engine]\ndefault_route = "cli"\n{engine}\n[routes.cli]\nprovider = "command"\n'
    path = tmp_path / "flightdeck.toml"
    path.write_text(text + route)
    return load_settings(path)


def fake(name: str, *args: str) -> str:
    """An argv list in TOML: this Python running one of the fakes."""
    return "argv = " + repr([PY, str(FAKES / name), *args]).replace("'", '"') + "\n"


def one(goal: str = "review the change", workspace: Path | None = None, n: int = 1) -> Batch:
    tasks = tuple(Task(id=f"t{i}", goal=goal, seq=i) for i in range(n))
    return Batch(name="agents", tasks=tasks, workspace=workspace)


_started: list[Engine] = []


@pytest.fixture(autouse=True)
def _close_engines() -> Iterator[None]:
    """Every engine a test started is closed after it, its processes stopped: a test that fails
    half-way (a held fake CLI still running) leaves nothing behind for the rest of the run."""
    yield
    while _started:
        _started.pop().close()


def engine_for(
    tmp_path: Path,
    settings: Settings,
    batch: Batch | None = None,
    clock: SkipClock | None = None,
    **env: str,
) -> Engine:
    environment = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), **env}
    state = tmp_path / "state"
    engine = Engine(batch or one(), settings, state_dir=state, env=environment, clock=clock)
    _started.append(engine)
    engine.start()
    return engine


def row_of(engine: Engine, child: str = "t0") -> ChildRow:
    row = engine.snapshot().child(child)
    assert row is not None
    return row


def transcript(row: ChildRow) -> str:
    return Path(row.transcript).read_text()


def written(engine: Engine, text: str, child: str = "t0") -> bool:
    engine.flush(1.0)
    path = Path(row_of(engine, child).transcript)
    return path.exists() and text in path.read_text()


# --- formats, results, exit codes ------------------------------------------------------------


def test_claude_stream_json_gives_result_tools_usage_and_cost(tmp_path: Path) -> None:
    route = fake("fake_claude.py", "-p", "--output-format", "stream-json", "--verbose", "{goal}")
    route += 'format = "claude-stream-json"\n'
    snap = run_to_end(engine_for(tmp_path, config(tmp_path, route)))
    row = snap.children[0]
    assert row.status is ChildStatus.COMPLETED, row.error
    assert row.result == "got: review the change"
    assert row.cost_usd == Decimal("0.0127")  # the CLI's own report: its side call's too
    # The tokens the cost is for (modelUsage: both models), not `usage` (the main loop's).
    assert row.usage.input_tokens == 500 and row.usage.output_tokens == 50
    assert row.usage.cache_read_tokens == 2000 and row.usage.cache_write_tokens == 100
    assert row.activity.tool_calls == 1 and row.activity.current_tool is None
    assert row.activity.api_calls == 2  # num_turns: the CLI's own API calls
    assert row.model == "claude-fake-4"  # what it reported, not the route's
    assert snap.totals.cost_usd == Decimal("0.0127") and snap.totals.cost_unknown == 0
    text = transcript(row)
    assert 'tool-call │ Bash {"command": "ls"}' in text
    assert "tool      │ README.md" in text
    assert "assistant │ got: review the change" in text


def test_a_cli_repeating_its_tool_call_is_flagged_as_looping(tmp_path: Path) -> None:
    argv = ("-p", "--output-format", "stream-json", "--verbose", "--fake-repeat", "3", "{goal}")
    route = fake("fake_claude.py", *argv)
    route += 'format = "claude-stream-json"\n[routes.cli.loops]\nrepeat_calls = 3\n'
    snap = run_to_end(engine_for(tmp_path, config(tmp_path, route)))
    row = snap.children[0]
    assert row.status is ChildStatus.COMPLETED, row.error
    assert row.loop is not None and row.loop.kind == "repeat"
    assert row.loop.calls == ('Bash {"command": "ls"}',) * 3
    assert "looping (repeat): Bash" in transcript(row)


def test_codex_json_gives_usage_and_no_cost_without_a_price(tmp_path: Path) -> None:
    route = fake("fake_codex.py", "exec", "--json", "{goal}") + 'format = "codex-json"\n'
    row = run_to_end(engine_for(tmp_path, config(tmp_path, route))).children[0]
    assert row.status is ChildStatus.COMPLETED, row.error
    assert row.result == "done: review the change"
    assert (row.usage.input_tokens, row.usage.cache_read_tokens) == (500, 1500)
    assert row.usage.output_tokens == 300
    assert row.cost_usd is None  # codex reports no cost, the route has no price: `$?`
    assert row.activity.tool_calls == 1
    text = transcript(row)
    assert "tool-call │ shell /bin/bash -lc ls" in text and "file change: add notes.md" in text


def test_codex_tokens_are_priced_by_the_route_price(tmp_path: Path) -> None:
    route = fake("fake_codex.py", "exec", "--json", "{goal}") + 'format = "codex-json"\n'
    route += "price = { input_per_mtok = 1.0, output_per_mtok = 10.0, cache_read_per_mtok = 0.1 }\n"
    row = run_to_end(engine_for(tmp_path, config(tmp_path, route))).children[0]
    # 500 in at $1, 1500 cached at $0.10, 300 out at $10 per million
    assert row.cost_usd == Decimal("0.00365")


PRICE = "price = { input_per_mtok = 1.0, output_per_mtok = 10.0, cache_read_per_mtok = 0.1 }\n"


def test_a_codex_turn_under_way_is_pending_until_its_end_reports_it(tmp_path: Path) -> None:
    # Codex reports a turn's usage at its end: until then its row read `$0.00` and the meter
    # counted nothing, as if the turn were free.
    gate = tmp_path / "gate"
    route = fake("fake_codex.py", "exec", "--json", "--fake-gate", str(gate), "{goal}")
    engine = engine_for(tmp_path, config(tmp_path, route + 'format = "codex-json"\n' + PRICE))
    until(lambda: row_of(engine).activity.current_tool == "shell", timeout=60)
    row = row_of(engine)
    assert row.activity.unreported and row.cost_usd == 0
    assert engine.snapshot().totals.pending == 1
    # An attached view (`flightdeck run` on a terminal) reads it from the owner's live figures.
    view = StoreView(tmp_path / "state" / "flightdeck.db", engine.batch_id, watch=False)
    try:
        until(lambda: view.refresh() and view.snapshot().totals.pending == 1, HANG_S)
        assert view.snapshot().children[0].activity.unreported
    finally:
        view.close()
    # So does `flightdeck report` of the running batch: its `$0.00` read as a free turn.
    db = tmp_path / "state" / "flightdeck.db"
    report = _report(db, engine.batch_id)
    assert report["children"][0]["cost_pending"] and report["totals"]["cost_pending_children"]
    text = render_markdown(report)
    assert "| cost | $0.00 (+1 pending) |" in text and "| $0.00+? |" in text
    assert _ls_cost(db, engine.batch_id) == "$0.00+?"  # and `flightdeck ls`
    gate.touch()
    snap = run_to_end(engine)
    assert not snap.children[0].activity.unreported and snap.totals.pending == 0
    assert snap.children[0].cost_usd == Decimal("0.00365")
    ended = render_markdown(_report(db, engine.batch_id))
    assert "pending" not in ended and "+?" not in ended
    assert _ls_cost(db, engine.batch_id) == "$0.0036"


def _report(db: Path, batch_id: str) -> dict[str, Any]:
    with StoreReader(db) as reader:
        return build_report(reader, batch_id)


def _ls_cost(db: Path, batch_id: str) -> str:
    with StoreReader(db) as reader:
        info = reader.batch(batch_id)
    assert info is not None
    return ls_cells(db, info)[LS_COLUMNS.index("cost")]


def test_a_claude_turn_stopped_mid_way_stays_spent_at_its_estimate(tmp_path: Path) -> None:
    # Found watching a stop: the interrupted turn's live estimate moved from the meter's spent
    # to unknown, and spent went down ($0.1761 became $0.1188 (+4 unknown)).
    gate = tmp_path / "gate"  # never made: it is stopped inside its tool
    argv = ("-p", "--output-format", "stream-json", "--verbose", "--fake-gate", str(gate))
    route = fake("fake_claude.py", *argv, "{goal}") + 'format = "claude-stream-json"\n' + PRICE
    engine = engine_for(tmp_path, config(tmp_path, route + f"kill_grace_s = {GRACE}\n"))
    until(lambda: row_of(engine).activity.current_tool == "Bash", timeout=60)
    shown = engine.snapshot().totals
    assert shown.cost_usd > 0 and shown.cost_unknown == 0
    engine.stop(["t0"])
    snap = run_to_end(engine)
    row = snap.children[0]
    assert row.status is ChildStatus.STOPPED
    assert row.cost_usd == shown.cost_usd and snap.totals.cost_unknown == 0
    assert "billed as an estimate: a run ended before it reported its usage" in transcript(row)
    stored = StoreReader(tmp_path / "state" / "flightdeck.db").child(engine.batch_id, "t0")
    assert stored is not None and stored.cost_usd == shown.cost_usd  # ls, report, attached


ONE_CODEX_TURN = Decimal("0.00365")  # the fake Codex's turn at PRICE


def test_a_codex_turn_stopped_mid_way_keeps_the_turns_reported_before_spent(
    tmp_path: Path,
) -> None:
    # Found watching a stop: a Codex child stopped in its second turn (the first reported) went
    # from `$0.0786 (+1 pending)` to `$0.0524 (+1 unknown)`: its first turn left the spend.
    gate, second = tmp_path / "gate", tmp_path / "second"  # `second` is never made
    route = fake("fake_codex.py", "exec", "--json", "--fake-gate", str(gate), "{goal}")
    resume = ("exec", "resume", "{session}", "--json", "--fake-gate", str(second), "{message}")
    route += "resume_" + fake("fake_codex.py", *resume)
    route += f'format = "codex-json"\nsteer = "resume"\nkill_grace_s = {GRACE}\n' + PRICE
    engine = engine_for(tmp_path, config(tmp_path, route))
    until(lambda: written(engine, "codex thread thread-42"), timeout=60)
    engine.steer(["t0"], "and the changelog")
    gate.touch()
    until(lambda: written(engine, "delivered: and the changelog (resume)"), timeout=60)
    until(lambda: row_of(engine).activity.current_tool == "shell", timeout=60)
    shown = engine.snapshot().totals
    assert (shown.cost_usd, shown.pending, shown.cost_unknown) == (ONE_CODEX_TURN, 1, 0)
    assert fmt_spent(shown.cost_usd, shown.cost_unknown, pending=shown.pending) == (
        "$0.0036",
        " (+1 pending)",
    )
    engine.stop(["t0"])
    assert engine.wait(STOP_CEILING)
    snap = engine.snapshot()
    row = snap.children[0]
    assert row.status is ChildStatus.STOPPED
    # Its second turn is unknown, its first still spent: `$0.0036+?`, never less than shown.
    t = snap.totals
    assert fmt_spent(t.cost_usd, t.cost_unknown, pending=t.pending) == ("$0.0036", " (+1 unknown)")
    assert (t.cost_usd, t.cost_unknown, t.pending) == (ONE_CODEX_TURN, 1, 0)
    assert fmt_row_cost(row) == "$0.0036+?"
    assert row.cost_usd is None and row.cost_known_usd == ONE_CODEX_TURN
    assert "cost $0.0036 known, the rest unknown: a run ended before" in transcript(row)
    # As the store keeps it: `report` (JSON and Markdown), `ls` and an attached view.
    db = tmp_path / "state" / "flightdeck.db"
    engine.flush(5.0)
    report = _report(db, engine.batch_id)
    (child,) = report["children"]
    assert child["cost_usd"] is None and child["cost_known_usd"] == float(ONE_CODEX_TURN)
    assert report["totals"]["cost_known_usd"] == float(ONE_CODEX_TURN)
    text = render_markdown(report)
    assert "| $0.0036+? |" in text and "| cost | $0.0036 + unknown for 1 child |" in text
    assert _ls_cost(db, engine.batch_id) == "$0.0036+?"
    view = StoreView(db, engine.batch_id, watch=False)
    try:
        attached = view.snapshot()
        assert attached.totals.cost_usd == ONE_CODEX_TURN and attached.totals.cost_unknown == 1
        assert fmt_row_cost(attached.children[0]) == "$0.0036+?"
    finally:
        view.close()
    # A retry carries it: its own turn adds to the part known, the rest stays unknown.
    engine.retry(["t0"])
    snap = run_to_end(engine)
    row = snap.children[0]
    assert row.status is ChildStatus.COMPLETED and row.attempt == 2, row.error
    assert row.cost_usd is None and row.cost_known_usd == 2 * ONE_CODEX_TURN
    assert snap.totals.cost_usd == 2 * ONE_CODEX_TURN and snap.totals.cost_unknown == 1


def test_a_claude_run_stopped_before_its_first_message_keeps_the_turns_before_spent(
    tmp_path: Path,
) -> None:
    # The same for Claude Code: its resumed run stopped before it streamed anything.
    gate, hold = tmp_path / "gate", tmp_path / "hold"  # `hold` is never made
    args = ("-p", "--output-format", "stream-json", "--verbose")
    route = fake("fake_claude.py", *args, "--fake-gate", str(gate), "{goal}")
    resume = (*args, "--fake-hold", str(hold), "--resume", "{session}", "{message}")
    route += "resume_" + fake("fake_claude.py", *resume)
    route += f'format = "claude-stream-json"\nsteer = "resume"\nkill_grace_s = {GRACE}\n'
    engine = engine_for(tmp_path, config(tmp_path, route + PRICE))
    until(lambda: written(engine, "claude session sess-0001"), timeout=60)
    engine.steer(["t0"], "focus on security")
    gate.touch()
    until(lambda: written(engine, "delivered: focus on security (resume)"), timeout=60)
    # Its resumed run has started (and is held before its turn): nothing of it is reported.
    until(lambda: transcript(row_of(engine)).count("run: ") == 2, timeout=60)
    until(lambda: row_of(engine).activity.unreported, timeout=60)
    first = row_of(engine).cost_usd
    assert first is not None and first > 0
    engine.stop(["t0"])
    snap = run_to_end(engine, STOP_CEILING)
    row = snap.children[0]
    assert row.status is ChildStatus.STOPPED
    assert snap.totals.cost_usd == first and snap.totals.cost_unknown == 1
    assert row.cost_usd is None and row.cost_known_usd == first
    # Worded as the row reads `$…+?`: the part known, not "cost unknown" as if none were.
    said = f"cost {fmt_usd(first)} known, the rest unknown: a run ended before it reported"
    assert said in transcript(row)


def test_plain_output_completes_with_its_last_lines_and_unknown_cost(tmp_path: Path) -> None:
    route = fake("workspace_probe.py", "{id}", "{workspace}")
    row = run_to_end(engine_for(tmp_path, config(tmp_path, route))).children[0]
    assert row.status is ChildStatus.COMPLETED
    assert row.result is not None and row.result.splitlines()[-1].startswith("workspace ")
    assert row.cost_usd is None and row.usage.total == 0  # never shown as zero dollars


def test_a_child_stopped_before_it_started_spent_a_known_nothing(tmp_path: Path) -> None:
    # Found by a walk-through: on a route whose CLI reports no usage, every child a stop-all
    # ended in the queue counted in `$? (N unknown)`, though none of them ever ran.
    route = fake("ignore_term.py") + f"kill_grace_s = {GRACE}\n"
    settings = config(tmp_path, route, engine="max_concurrent = 1")
    engine = engine_for(tmp_path, settings, one(n=3))
    _pid_in(engine, r"pid (\d+) ignoring")  # t0 runs; t1 and t2 wait in the queue
    engine.stop_all()
    rows = {r.id: r for r in run_to_end(engine).children}
    assert rows["t0"].cost_usd is None  # it ran, and its CLI said nothing of its spend
    assert [rows[c].cost_usd for c in ("t1", "t2")] == [Decimal(0), Decimal(0)]
    assert [rows[c].status for c in ("t1", "t2")] == [ChildStatus.STOPPED] * 2
    assert engine.snapshot().totals.cost_unknown == 1


def test_nonzero_exit_fails_with_the_last_stderr_lines(tmp_path: Path) -> None:
    row = run_to_end(engine_for(tmp_path, config(tmp_path, fake("exit3.py")))).children[0]
    assert row.status is ChildStatus.FAILED
    assert row.error == "exit 3: warning: something odd\nfatal: could not finish"
    assert "stderr    │ fatal: could not finish" in transcript(row)


def test_a_failure_reason_is_stored_without_the_cli_escape_sequences(tmp_path: Path) -> None:
    # `report --json` and exports read row.error as stored: the CLI's colours, bells and
    # carriage returns are not kept there, its words and line breaks are.
    script = tmp_path / "ansi_fail.py"
    script.write_text(
        "import sys\n"
        "sys.stderr.write('\\x1b[1;31merror:\\x1b[0m disk\\tfull\\r\\n')\n"
        "sys.stderr.write('\\x1b]0;title\\x07\\x1b[0m\\n')\n"  # only escapes: no line
        "sys.stderr.write('\\x07try \\x1b[4magain\\x1b[24m\\n')\n"
        "sys.exit(2)\n"
    )
    route = "argv = " + repr([PY, str(script)]).replace("'", '"') + "\n"
    row = run_to_end(engine_for(tmp_path, config(tmp_path, route))).children[0]
    assert row.status is ChildStatus.FAILED
    assert row.error == "exit 2: error: disk\tfull\ntry again"
    claude = fake("fake_claude.py", "-p", "--output-format", "stream-json", "--verbose")
    claude += 'format = "claude-stream-json"\n'
    fail = '"--fake-fail", "\\u001b[31mAPI Error\\u001b[0m: 529\\u0007"]'
    claude = claude.replace('"--verbose"]', f'"--verbose", {fail}')
    row = run_to_end(engine_for(tmp_path / "c", config(tmp_path, claude))).children[0]
    assert row.status is ChildStatus.FAILED
    assert row.error == "the CLI reported an error: API Error: 529"


def test_argv_placeholders_stay_whole_arguments(tmp_path: Path) -> None:
    route = fake("workspace_probe.py", "{id}", "--at={workspace}")
    goal = "a goal; with `quotes` and $(rm -rf ~) in it"
    settings = config(tmp_path, route.replace('"{id}"', '"{goal}"'))
    row = run_to_end(engine_for(tmp_path, settings, one(goal, tmp_path / "ws"))).children[0]
    assert row.status is ChildStatus.COMPLETED, row.error
    # The goal, one argument, became the name of the file the probe wrote.
    assert (tmp_path / "ws" / f"{goal}.txt").exists()
    assert f"workspace --at={tmp_path / 'ws'}" in (row.result or "")


def test_output_is_sanitized_keys_redacted_and_env_allowlisted(tmp_path: Path) -> None:
    route = fake("noisy.py") + 'api_key_env = "FAKE_KEY"\nenv_pass = ["PASSED_ON"]\n'
    engine = engine_for(
        tmp_path, config(tmp_path, route), FAKE_KEY=KEY, PASSED_ON="1", NOT_PASSED="1"
    )
    row = run_to_end(engine).children[0]
    assert row.status is ChildStatus.COMPLETED
    text = transcript(row)
    assert KEY not in text and "key=[REDACTED]" in text
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "red" in text and "stderr key=[REDACTED]" in text
    env_line = next(line for line in text.splitlines() if "env: " in line)
    names = set(env_line.split("env: ", 1)[1].split())
    allowed = {"PATH", "HOME", "LANG", "TERM", "FAKE_KEY", "PASSED_ON", "LC_CTYPE"}
    assert names <= allowed | {"FLIGHTDECK_CHILD"}  # its tag: engine/agents/tree.py
    assert "PASSED_ON" in names and "NOT_PASSED" not in names
    assert KEY not in (row.result or "")


def test_a_command_gets_dev_null_read_write_and_nothing_of_the_gate_it_was_held_at(
    tmp_path: Path,
) -> None:
    """Its stdin as `Popen`'s DEVNULL gave it; no descriptor beyond its three streams (the pipe
    its shell waited on is not left open in it)."""
    probe = (
        "import fcntl, os\n"
        "mode = fcntl.fcntl(0, fcntl.F_GETFL) & os.O_ACCMODE\n"
        "print(os.readlink('/proc/self/fd/0'), mode == os.O_RDWR)\n"
        "others = []\n"
        "for fd in sorted(int(fd) for fd in os.listdir('/proc/self/fd') if int(fd) > 2):\n"
        "    try:\n"
        "        others.append(os.readlink('/proc/self/fd/%d' % fd))\n"
        "    except OSError:\n"
        "        pass\n"  # the listing's own, closed since
        "print('others', others)\n"
    )  # no braces: the route's placeholders
    route = "argv = " + json.dumps([PY, "-c", probe]) + "\n"
    row = run_to_end(engine_for(tmp_path, config(tmp_path, route))).children[0]
    assert row.status is ChildStatus.COMPLETED, row.error
    assert (row.result or "").splitlines() == ["/dev/null True", "others []"]


def test_an_escape_sequence_one_output_line_leaves_open_hides_no_later_line(
    tmp_path: Path,
) -> None:
    # Found in a walkthrough: a CLI printed an OSC it never closed, then more lines in the same
    # write; the run of lines was sanitized as one text and the transcript kept none after it.
    script = "printf 'start\\033]0;title never closed\\nwrote x.txt\\ndone\\n'"
    route = "argv = " + json.dumps(["sh", "-c", script]) + "\n"
    row = run_to_end(engine_for(tmp_path, config(tmp_path, route))).children[0]
    assert row.status is ChildStatus.COMPLETED
    text = transcript(row)
    assert "\x1b" not in text
    assert "│ start\n" in text and "│ wrote x.txt\n" in text and "│ done\n" in text, text


# --- stop and stall --------------------------------------------------------------------------


def _pid_in(engine: Engine, pattern: str) -> int:
    """A pid the fake printed, from the transcript."""
    found: list[int] = []

    def seen() -> bool:
        engine.flush(1.0)
        path = Path(row_of(engine).transcript)
        match = re.search(pattern, path.read_text()) if path.exists() else None
        found.extend([int(match.group(1))] if match else [])
        return bool(found)

    until(seen, timeout=60)
    return found[0]


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_stop_kills_a_process_that_ignores_sigterm_within_the_grace(tmp_path: Path) -> None:
    grace = 2.0  # long enough for the poll below to see "stopping" on a loaded machine
    route = fake("ignore_term.py") + f"kill_grace_s = {grace}\n"
    engine = engine_for(tmp_path, config(tmp_path, route))
    pid = _pid_in(engine, r"pid (\d+) ignoring")
    t0 = time.monotonic()
    engine.stop(["t0"])
    until(lambda: row_of(engine).activity.text == "stopping", timeout=STOP_CEILING)
    until(lambda: row_of(engine).status.terminal, timeout=STOP_CEILING)
    assert time.monotonic() - t0 >= grace  # SIGKILL waited for the grace, no longer needed
    row = run_to_end(engine).children[0]
    assert row.status is ChildStatus.STOPPED
    assert _gone(pid)
    assert "SIGKILL sent" in transcript(row)


def test_what_a_process_left_running_is_waited_on_not_spun_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An exited process's pidfd reads ready for good: the waits through the grace period its
    leftover child ignores SIGTERM in must sleep, not return at once (a spin of thousands of
    rounds, each reading its files and /proc)."""
    reads: list[int] = []
    read = Process.read

    def counted(self: Process, *args: Any, **kwargs: Any) -> Any:
        reads.append(1)
        return read(self, *args, **kwargs)

    monkeypatch.setattr(Process, "read", counted)
    grace = 1.0
    route = fake("outlive_term.py") + f"kill_grace_s = {grace}\n"
    row = run_to_end(engine_for(tmp_path, config(tmp_path, route))).children[0]
    assert "SIGKILL sent" in transcript(row)
    # Reads 0.05 s apart growing to 0.25 s while nothing is written: under ten in the grace.
    assert len(reads) < 40, len(reads)


def test_stop_kills_a_setsid_grandchild_outside_the_group(tmp_path: Path) -> None:
    route = fake("setsid_grandchild.py") + f"kill_grace_s = {GRACE}\n"
    engine = engine_for(tmp_path, config(tmp_path, route))
    grandchild = _pid_in(engine, r"grandchild (\d+)")
    assert os.getsid(grandchild) == grandchild and not _gone(grandchild)  # out of our group
    engine.stop(["t0"])  # the tree is walked at the stop: no need to wait for a sweep
    until(lambda: row_of(engine).status.terminal, timeout=STOP_CEILING)  # the whole tree reaped
    row = run_to_end(engine).children[0]
    assert row.status is ChildStatus.STOPPED
    assert _gone(grandchild)


def _zombie_children() -> set[int]:
    """This process's children that have ended and wait to be reaped (every thread's)."""
    found: set[int] = set()
    for task in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):
            for pid in Path(f"/proc/self/task/{task}/children").read_text().split():
                with contextlib.suppress(OSError):
                    if Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] == "Z":
                        found.add(int(pid))
    return found


def test_orphans_that_end_after_the_process_are_reaped_not_left_zombies(tmp_path: Path) -> None:
    """The owner is the subreaper of what a command child starts: an orphan that ends is its
    child to reap, though its tag can no longer be read (a zombie has no environment)."""
    route = fake("leave_orphans.py") + f"kill_grace_s = {GRACE}\n"
    row = run_to_end(engine_for(tmp_path, config(tmp_path, route))).children[0]
    assert row.status is ChildStatus.COMPLETED, row.error
    found = re.search(r"root \d+ orphans (\d+) (\d+)", transcript(row))
    assert found is not None
    orphans = {int(found.group(1)), int(found.group(2))}
    assert not orphans & _zombie_children()
    assert not any(Path(f"/proc/{pid}").exists() for pid in orphans)


def test_an_orphan_that_ends_while_the_process_runs_is_reaped_then(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(supervise, "REAP_S", 0.05)
    # This process's own children, ended before any sweep: theirs to wait for, not the engine's.
    own = [subprocess.Popen([PY, "-c", "exit(7)"], start_new_session=s) for s in (False, True)]
    until(lambda: {p.pid for p in own} <= _zombie_children())
    route = fake("leave_orphans.py", "--stay") + f"kill_grace_s = {GRACE}\n"
    engine = engine_for(tmp_path, config(tmp_path, route))
    try:
        ended = _pid_in(engine, r"root \d+ orphans (\d+)")
        kept = _pid_in(engine, r"root \d+ orphans \d+ (\d+)")
        # Ended at once, it is reaped while the process still runs; the other goes at the stop.
        until(lambda: not Path(f"/proc/{ended}").exists(), timeout=STOP_CEILING)
        assert not row_of(engine).status.terminal and Path(f"/proc/{kept}").exists()
    finally:
        engine.stop(["t0"])
        row = run_to_end(engine).children[0]
    assert row.status is ChildStatus.STOPPED
    assert not Path(f"/proc/{kept}").exists()
    assert [p.wait() for p in own] == [7, 7]


def test_a_sandbox_killed_as_the_process_exits_is_reaped_not_left_zombies(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Codex ends its turn with its tool still running: it kills the tool's sandbox (a session
    of its own) and exits without waiting; the dead sandbox processes fall to the owner. Seen
    running under the process, they are its to reap (found with the real Codex: two zombies
    per such turn, left until the owner exited)."""
    monkeypatch.setattr(supervise, "REAP_S", 0.0)  # the tree is looked at on every read
    gate = tmp_path / "gate"
    engine = engine_for(tmp_path, config(tmp_path, fake("sandboxed_tool.py", str(gate))))
    sandbox = _pid_in(engine, r"tool (\d+) \d+")
    inner = _pid_in(engine, r"tool \d+ (\d+)")
    gate.touch()
    # A line read after the pids': the tree was looked at since they were printed.
    until(lambda: "turn over" in transcript(row_of(engine)), timeout=60)
    (tmp_path / "gate.2").touch()
    row = run_to_end(engine).children[0]
    assert row.status is ChildStatus.COMPLETED, row.error
    assert not {sandbox, inner} & _zombie_children()


def test_a_silent_process_is_stalled_and_killed(tmp_path: Path) -> None:
    route = fake("silent.py") + f"kill_grace_s = {GRACE}\n"
    settings = config(tmp_path, route, engine="stall_after_s = 0.3\nstall_grace_s = 0.5")
    engine = engine_for(tmp_path, settings)
    pids: list[int] = []

    def spawned() -> bool:
        for proc in psutil.Process().children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if str(FAKES / "silent.py") in proc.cmdline():
                    pids.append(proc.pid)
        return bool(pids)

    until(spawned, timeout=60)
    row = run_to_end(engine).children[0]
    assert row.status is ChildStatus.STALLED
    assert row.error == "no activity for 0.3s"
    assert pids and all(_gone(pid) for pid in pids)


@pytest.mark.slow
def test_a_cli_waiting_out_a_retry_is_not_stalled_and_shows_why(tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    args = ("-p", "--output-format", "stream-json", "--verbose", "--fake-retries", "2")
    route = fake("fake_claude.py", *args, "--fake-retry-hold", str(hold), "{goal}")
    route += 'format = "claude-stream-json"\n'
    # stall_after_s on the steady clock too: a CLI still starting (a second or more on a busy
    # machine) is quiet before its first retry, and must not be stalled for it.
    settings = config(tmp_path, route, engine="stall_after_s = 30\nstall_grace_s = 0.3")
    clock = SkipClock()
    engine = engine_for(tmp_path, settings, clock=clock)
    until(lambda: row_of(engine).activity.retries == 2, timeout=60)
    row = row_of(engine)
    assert row.activity.retrying and row.activity.text == "429 rate_limit, retry 2/10 in 0.5s"
    clock.skip(60)  # quiet for longer than stall_after_s: a CLI in its backoff is held
    watched(engine)
    assert row_of(engine).status is ChildStatus.RUNNING
    hold.touch()
    row = run_to_end(engine).children[0]
    assert row.status is ChildStatus.COMPLETED, row.error
    assert not row.activity.retrying
    assert "api retry: 429 rate_limit, retry 1/10 in 0.5s" in transcript(row)


def test_a_codex_child_past_its_reconnects_is_not_held_in_its_tool(tmp_path: Path) -> None:
    # Found against the real Codex: once it had reconnected, its row said retrying (↻) and it
    # was held, never stalled, until its turn's end: inside a tool that hung, forever.
    gate = tmp_path / "gate"
    codex = fake("fake_codex.py", "exec", "--json", "--fake-retries", "1", "--fake-gate",
                 str(gate), "{goal}")  # fmt: skip
    route = codex + 'format = "codex-json"\n'
    engine = "tool_stall_after_s = 0.5\nstall_grace_s = 0.3"
    eng = engine_for(tmp_path, config(tmp_path, route, engine=engine))
    try:
        until(lambda: row_of(eng).activity.current_tool == "shell", timeout=60)
        running = row_of(eng).activity
        assert running.retries == 1 and not running.retrying and running.retry_reason is None
        row = run_to_end(eng).children[0]
    finally:
        gate.touch()  # a child still held ends, not the test's process
        eng.close()
    assert row.status is ChildStatus.STALLED, row.error
    assert row.error == "no activity for 0.5s"


def test_a_codex_command_left_running_at_the_turn_end_is_no_current_tool_after_it(
    tmp_path: Path,
) -> None:
    # Found against the real Codex: a command past its shell's 10 s yield runs on in its own
    # session; the turn ended first and never completed it, so the row said `tool: shell` and
    # the transcript showed the call with no end until the process was gone.
    leave = tmp_path / "leave"
    codex = fake("fake_codex.py", "exec", "--json", "--fake-leave", str(leave), "{goal}")
    eng = engine_for(tmp_path, config(tmp_path, codex + 'format = "codex-json"\n'))
    try:
        until(lambda: written(eng, "left running when the turn ended"), timeout=60)
        until(lambda: row_of(eng).activity.current_tool is None, HANG_S)
        assert row_of(eng).status is ChildStatus.RUNNING  # its process waits on `leave`
    finally:
        leave.touch()
    row = run_to_end(eng).children[0]
    assert row.status is ChildStatus.COMPLETED, row.error
    assert "shell /bin/bash -lc ls: left running when the turn ended" in transcript(row)


def test_a_codex_command_its_process_ended_before_is_closed_in_the_transcript(
    tmp_path: Path,
) -> None:
    gate = tmp_path / "gate"
    codex = fake("fake_codex.py", "exec", "--json", "--fake-gate", str(gate), "{goal}")
    eng = engine_for(tmp_path, config(tmp_path, codex + 'format = "codex-json"\n'))
    until(lambda: row_of(eng).activity.current_tool == "shell", timeout=60)
    eng.stop(["t0"])
    row = run_to_end(eng).children[0]
    assert row.status is ChildStatus.STOPPED, row.error
    lines = transcript(row)
    assert "shell /bin/bash -lc ls: no end reported before its process ended" in lines


def test_the_cli_own_error_is_the_failure_reason_not_its_stderr(tmp_path: Path) -> None:
    codex = fake("fake_codex.py", "exec", "--json", "--fake-retries", "2", "--fake-fail", "{goal}")
    route = codex + 'format = "codex-json"\n'
    row = run_to_end(engine_for(tmp_path, config(tmp_path, route))).children[0]
    assert row.status is ChildStatus.FAILED
    reason = "exceeded retry limit, last status: 429 Too Many Requests"
    assert row.error == f"the CLI reported an error: {reason}"  # not stderr's WARNING
    assert row.activity.retries == 2  # its reconnects, shown as retries
    claude = fake("fake_claude.py", "-p", "--output-format", "stream-json", "--verbose")
    claude += 'format = "claude-stream-json"\n'
    claude = claude.replace(
        '"--verbose"]', '"--verbose", "--fake-fail", "API Error: 429 slow down"]'
    )
    row = run_to_end(engine_for(tmp_path / "c", config(tmp_path, claude))).children[0]
    assert row.status is ChildStatus.FAILED
    assert row.error == "the CLI reported an error: API Error: 429 slow down"


def test_the_documented_codex_argv_runs_and_full_auto_is_refused(tmp_path: Path) -> None:
    """examples/agents/flightdeck.toml's Codex argv, on the fake (which refuses --full-auto as
    Codex 0.171 does)."""
    import tomllib

    examples = Path(__file__).resolve().parent.parent / "examples" / "agents" / "flightdeck.toml"
    documented = tomllib.loads(examples.read_text())["routes"]["codex"]["argv"]
    assert "--full-auto" not in documented and "workspace-write" in documented
    argv = [PY, str(FAKES / "fake_codex.py"), *documented[1:]]
    route = "argv = " + repr(argv).replace("'", '"') + '\nformat = "codex-json"\n'
    row = run_to_end(engine_for(tmp_path, config(tmp_path, route))).children[0]
    assert row.status is ChildStatus.COMPLETED, row.error
    old = route.replace('"--sandbox", "workspace-write"', '"--full-auto"')
    row = run_to_end(engine_for(tmp_path / "o", config(tmp_path, old))).children[0]
    assert row.error == "exit 2: error: unexpected argument '--full-auto' found"


# --- workspaces ------------------------------------------------------------------------------


def _repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    for args in (["init", "-q"], ["commit", "-q", "--allow-empty", "-m", "start"]):
        subprocess.run(["git", "-C", str(repo), *args], check=True, env=env)
    return repo


def _worktrees(repo: Path) -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(repo), "worktree", "list", "--porcelain"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("worktree ")]


def test_each_child_gets_its_own_worktree_kept_with_its_changes(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    route = fake("workspace_probe.py", "{id}", "{workspace}") + 'workspace = "worktree"\n'
    snap = run_to_end(engine_for(tmp_path, config(tmp_path, route), one(workspace=repo, n=2)))
    cwds = set()
    for row in snap.children:
        assert row.status is ChildStatus.COMPLETED, row.error
        cwd = Path(re.search(r"cwd (.+)", row.result or "").group(1))  # type: ignore[union-attr]
        cwds.add(cwd)
        assert cwd != repo and cwd.parent.name == "workspaces"
        assert f"workspace (worktree): {cwd}" in transcript(row)
        # It wrote a file: its worktree is kept (until accepted or discarded), its changes said.
        assert (cwd / f"{row.id}.txt").exists()
        assert row.changes is not None and row.changes.summary == "+1 −0 in 1 file"
        assert "kept in its worktree until accepted or discarded" in transcript(row)
    assert len(cwds) == 2
    assert not list(repo.glob("t*.txt"))  # nobody wrote into the shared checkout
    assert len(_worktrees(repo)) == 3


@pytest.mark.parametrize("keep", [False, True])
def test_a_worktree_left_as_it_was_is_removed_unless_kept(tmp_path: Path, keep: bool) -> None:
    repo = _repo(tmp_path)
    route = fake("noisy.py") + 'workspace = "worktree"\n'
    route += f"keep_worktrees = {'true' if keep else 'false'}\n"
    snap = run_to_end(engine_for(tmp_path, config(tmp_path, route), one(workspace=repo)))
    row = snap.children[0]
    assert row.status is ChildStatus.COMPLETED, row.error
    assert row.changes is None
    assert len(_worktrees(repo)) == (2 if keep else 1)


def test_worktrees_made_at_once_in_one_repository_take_turns(tmp_path: Path) -> None:
    # git fails a `worktree add` racing another in the same repository ("failed to read
    # .git/worktrees/t4/commondir"): children starting together must not fail for it.
    import threading

    from flightdeck.engine.agents.workspace import Workspace, WorkspaceError

    repo = _repo(tmp_path)
    errors: list[str] = []
    for round_ in range(3):

        def make(i: int, round_: int = round_) -> None:
            own = tmp_path / f"ws{round_}" / f"t{i}"
            workspace = Workspace("worktree", repo, own, keep=False)
            try:
                workspace.prepare()
                assert workspace.release() == (None, None)
            except WorkspaceError as exc:
                errors.append(str(exc))

        threads = [threading.Thread(target=make, args=(i,)) for i in range(12)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert errors == []
    assert len(_worktrees(repo)) == 1  # every one removed again


def test_copy_workspace_leaves_the_batch_workspace_alone(tmp_path: Path) -> None:
    shared = tmp_path / "ws"
    shared.mkdir()
    (shared / "input.txt").write_text("x")
    route = fake("workspace_probe.py", "{id}", "{workspace}") + 'workspace = "copy"\n'
    route += "keep_worktrees = true\n"
    row = run_to_end(engine_for(tmp_path, config(tmp_path, route), one(workspace=shared))).children[
        0
    ]
    assert row.status is ChildStatus.COMPLETED, row.error
    copy = Path(re.search(r"cwd (.+)", row.result or "").group(1))  # type: ignore[union-attr]
    assert (copy / "input.txt").exists() and (copy / "t0.txt").exists()
    assert not (shared / "t0.txt").exists()


# --- steer -----------------------------------------------------------------------------------


def test_a_route_that_cannot_be_steered_misses_the_steer_and_says_so(tmp_path: Path) -> None:
    route = fake("ignore_term.py") + "kill_grace_s = 0\n"
    engine = engine_for(tmp_path, config(tmp_path, route))
    until(lambda: written(engine, "ignoring SIGTERM"))
    assert row_of(engine).steerable is False
    engine.steer(["t0"], "look at tests too")
    until(
        lambda: bool(row_of(engine).steers) and row_of(engine).steers[0].state is SteerState.MISSED
    )
    assert row_of(engine).steers[0].how == "this route cannot be steered"  # said, not only shown
    engine.stop(["t0"])
    snap = run_to_end(engine)
    row = snap.children[0]
    assert "missed: look at tests too (this route cannot be steered)" in transcript(row)
    with StoreReader(tmp_path / "state" / "flightdeck.db") as reader:  # for `flightdeck steer`
        (stored,) = reader.child(snap.batch_id, "t0").steers  # type: ignore[union-attr]
    assert (stored.state, stored.how) == (SteerState.MISSED, "this route cannot be steered")


STDIN_ARGV = (
    "-p",
    "--input-format",
    "stream-json",
    "--output-format",
    "stream-json",
    "--verbose",
    "--replay-user-messages",
)
STDIN_ROUTE = 'format = "claude-stream-json"\nstdin = true\nsteer = "stdin"\n'


def test_a_steer_mid_turn_goes_into_the_running_turn_and_the_child_still_ends(
    tmp_path: Path,
) -> None:
    # Claude Code folds a message that arrives while a turn runs into that turn, and prints
    # one result for both: the child used to wait for a second result and stall.
    gate = tmp_path / "gate"
    route = fake("fake_claude.py", *STDIN_ARGV, "--fake-gate", str(gate)) + STDIN_ROUTE
    engine = engine_for(tmp_path, config(tmp_path, route, engine="stall_after_s = 5"))
    until(lambda: written(engine, "tool-call │ Bash"), timeout=60)
    assert row_of(engine).steerable
    engine.steer(["t0"], "also check the docs")
    until(lambda: written(engine, "queued by the CLI: also check the docs"), timeout=60)
    gate.touch()
    row = run_to_end(engine).children[0]
    assert row.status is ChildStatus.COMPLETED, row.error
    assert row.result == "got: review the change + also check the docs"  # one turn, both
    (receipt,) = row.steers
    assert (receipt.state, receipt.how) == (SteerState.DELIVERED, "into the running turn")
    assert "delivered into the running turn: also check the docs" in transcript(row)
    assert transcript(row).count("result: success") == 1
    stored = StoreReader(tmp_path / "state" / "flightdeck.db").controls(engine.batch_id)
    assert [c.how for c in stored] == ["into the running turn"]  # attached views see it too


def lingering(
    tmp_path: Path, engine: str = "", clock: SkipClock | None = None
) -> tuple[Engine, Path]:
    """A fake Claude Code on its input that answers, then runs on (its input closed) until
    the file returned exists, as one waiting for a command it moved to the background."""
    linger = tmp_path / "linger"
    argv = (*STDIN_ARGV, "--fake-repeat", "0", "--fake-linger", str(linger))
    route = fake("fake_claude.py", *argv) + STDIN_ROUTE
    return engine_for(tmp_path, config(tmp_path, route, engine=engine), clock=clock), linger


def test_a_steer_after_the_cli_input_closed_says_so_not_that_the_child_had_ended(
    tmp_path: Path,
) -> None:
    # Found by a walk-through: Claude Code moved its held command to the background after 120 s,
    # answered, and ran on waiting for it (row `running`); a steer then was `missed: ... (the
    # child had ended)`, of a child the table showed running.
    engine, linger = lingering(tmp_path)
    coordinator = engine._coordinator
    assert coordinator is not None
    steering = coordinator.slots.by_id["t0"].steering
    # Waited on, not slept on: a steer sent before its input is closed is delivered.
    until(lambda: steering.closed_why is not None, timeout=60, what="its input closed")
    assert row_of(engine).status is ChildStatus.RUNNING  # it runs on
    engine.steer(["t0"], "one more thing")
    until(lambda: bool(row_of(engine).steers))
    (receipt,) = row_of(engine).steers
    assert receipt.state is SteerState.MISSED
    assert receipt.how is not None and "its input was closed" in receipt.how, receipt.how
    # The transcript is written by another process: its missed note is in once flushed (read
    # before, the file was not there yet on a loaded machine).
    assert engine.flush(HANG_S)
    text = transcript(row_of(engine))
    assert "missed" in text and "had ended" not in text
    linger.touch()
    row = run_to_end(engine).children[0]
    assert row.status is ChildStatus.COMPLETED, row.error


def test_a_cli_waiting_for_its_background_command_is_in_a_tool_not_stalled(
    tmp_path: Path,
) -> None:
    # Found walking through with the real Claude Code: its command ran past the Bash tool's
    # 120 s, moved to the background, the turn ended and it waited, silent, for the command:
    # `stalled: no activity for 120s` (stall_after_s), killed, though it had answered.
    clock = SkipClock()
    # 30 s on the steady clock: a CLI still starting on a busy machine is not stalled first.
    engine, linger = lingering(tmp_path, engine="stall_after_s = 30", clock=clock)
    until(lambda: row_of(engine).activity.current_tool == "background command (1)", timeout=60)
    clock.skip(60)  # quiet for longer than stall_after_s: inside a tool, its limit holds
    watched(engine)
    row = row_of(engine)
    assert row.status is ChildStatus.RUNNING, row.error
    assert row.activity.tool_calls == 0  # the wait is no call of its own
    linger.touch()
    row = run_to_end(engine).children[0]
    assert row.status is ChildStatus.COMPLETED, row.error
    assert row.activity.current_tool is None


def test_a_steer_between_turns_starts_a_turn_of_its_own(tmp_path: Path) -> None:
    hold = tmp_path / "hold"
    argv = (*STDIN_ARGV, "--fake-hold", str(hold), "--fake-repeat", "0")  # no tool: no fold
    route = fake("fake_claude.py", *argv) + STDIN_ROUTE
    engine = engine_for(tmp_path, config(tmp_path, route))
    until(lambda: written(engine, "claude session sess-0001"), timeout=60)
    engine.steer(["t0"], "and the changelog")
    until(lambda: written(engine, "sent to its input: and the changelog"), timeout=60)
    hold.touch()
    row = run_to_end(engine).children[0]
    assert row.status is ChildStatus.COMPLETED, row.error
    assert row.result == "got: and the changelog"  # the last turn's answer
    assert [(r.state, r.how) for r in row.steers] == [(SteerState.DELIVERED, "as a new turn")]
    assert "assistant │ got: review the change" in transcript(row)
    assert row.cost_usd == Decimal("0.0254")  # two turns, each reported once


def test_a_steer_whose_input_copy_cannot_be_kept_is_missed_with_that_reason(
    tmp_path: Path,
) -> None:
    """Each write to a CLI's input is copied (`io/ID.in.sent`, for an owner that adopts the
    process), the copy opened before the write; a copy that cannot be opened means the steer is
    not written either, and the operator is told that, not that the process stopped reading its
    input (it had not)."""
    hold = tmp_path / "hold"
    argv = (*STDIN_ARGV, "--fake-hold", str(hold), "--fake-repeat", "0")
    route = fake("fake_claude.py", *argv) + STDIN_ROUTE
    engine = engine_for(tmp_path, config(tmp_path, route))
    until(lambda: written(engine, "claude session sess-0001"), timeout=60)
    (copy,) = (tmp_path / "state").rglob("t0.in.sent")
    copy.unlink()
    copy.mkdir()  # the copy can no longer be appended to (a directory in its place)
    engine.steer(["t0"], "and the changelog")
    until(
        lambda: bool(row_of(engine).steers) and row_of(engine).steers[0].state is SteerState.MISSED
    )
    assert row_of(engine).steers[0].how == "its input's copy could not be kept (Is a directory)"
    hold.touch()
    row = run_to_end(engine).children[0]
    assert row.status is ChildStatus.COMPLETED, row.error  # the CLI went on with its turn
    assert "missed: and the changelog (its input's copy could not be kept" in transcript(row)


def test_steers_waiting_between_turns_start_together_as_one_new_turn(tmp_path: Path) -> None:
    # Claude Code's next turn takes every message waiting, one after another: the second
    # was said to have gone into the running turn (the first's).
    hold = tmp_path / "hold"
    argv = (*STDIN_ARGV, "--fake-hold", str(hold), "--fake-repeat", "0")  # no tool: no fold
    route = fake("fake_claude.py", *argv) + STDIN_ROUTE
    engine = engine_for(tmp_path, config(tmp_path, route))
    until(lambda: written(engine, "claude session sess-0001"), timeout=60)
    for message in ("and the changelog", "and the readme"):
        engine.steer(["t0"], message)
        until(lambda m=message: written(engine, f"queued by the CLI: {m}"), timeout=60)
    hold.touch()
    row = run_to_end(engine).children[0]
    assert row.status is ChildStatus.COMPLETED, row.error
    assert row.result == "got: and the changelog\nand the readme"
    assert [r.how for r in row.steers] == ["as a new turn", "as a new turn"]


def test_steer_now_interrupts_the_claude_turn_and_starts_a_new_one(tmp_path: Path) -> None:
    gate = tmp_path / "gate"  # opened once the steer runs: only the interrupt ends turn one
    route = fake("fake_claude.py", *STDIN_ARGV, "--fake-gate", str(gate)) + STDIN_ROUTE
    engine = engine_for(tmp_path, config(tmp_path, route))
    until(lambda: written(engine, "tool-call │ Bash"), timeout=60)
    engine.steer(["t0"], "focus on security", now=True)
    until(lambda: written(engine, "delivered as a new turn"), timeout=60)
    gate.touch()
    row = run_to_end(engine).children[0]
    assert row.status is ChildStatus.COMPLETED, row.error
    assert row.result == "got: focus on security"
    how = "as a new turn, the running one interrupted"
    assert [(r.state, r.how) for r in row.steers] == [(SteerState.DELIVERED, how)]
    text = transcript(row)
    assert "sent after interrupting the running turn: focus on security" in text
    assert "[Request interrupted by user for tool use]" in text


def test_steers_waiting_when_steer_now_interrupts_go_in_with_it_as_one_new_turn(
    tmp_path: Path,
) -> None:
    # Claude Code leaves the steers an interrupt finds waiting queued, and the turn after it
    # takes them all (steer_now_behind_waiting.jsonl): the second was said to have gone into
    # the running turn, which the interrupt cut.
    gate = tmp_path / "gate"  # opened once all are delivered: only the interrupt ends turn one
    route = fake("fake_claude.py", *STDIN_ARGV, "--fake-gate", str(gate)) + STDIN_ROUTE
    engine = engine_for(tmp_path, config(tmp_path, route))
    until(lambda: written(engine, "tool-call │ Bash"), timeout=60)
    for message in ("first", "second"):
        engine.steer(["t0"], message)
        until(lambda m=message: written(engine, f"queued by the CLI: {m}"), timeout=60)
    engine.steer(["t0"], "third now", now=True)
    until(lambda: all(r.state is SteerState.DELIVERED for r in row_of(engine).steers), timeout=60)
    gate.touch()
    row = run_to_end(engine).children[0]
    assert row.status is ChildStatus.COMPLETED, row.error
    assert row.result == "got: first\nsecond\nthird now"  # one turn took all three
    how = "as a new turn, the running one interrupted"
    assert [(r.message, r.state, r.how) for r in row.steers] == [
        ("first", SteerState.DELIVERED, how),
        ("second", SteerState.DELIVERED, how),
        ("third now", SteerState.DELIVERED, how),
    ]
    text = transcript(row)
    for message in ("first", "second", "third now"):
        assert f"delivered {how}: {message}" in text
    assert "into the running turn" not in text
    stored = StoreReader(tmp_path / "state" / "flightdeck.db").controls(engine.batch_id)
    assert [c.how for c in stored] == [how] * 3  # what attached views and `steer` read


def test_steer_now_stops_claude_and_resumes_its_session(tmp_path: Path) -> None:
    args = ("-p", "--output-format", "stream-json", "--verbose")
    route = fake("fake_claude.py", *args, "--fake-sleep", "30", "{goal}")
    route += "resume_" + fake("fake_claude.py", *args, "--resume", "{session}", "{message}")
    route += f'format = "claude-stream-json"\nsteer = "resume"\nkill_grace_s = {GRACE}\n'
    engine = engine_for(tmp_path, config(tmp_path, route))
    until(lambda: written(engine, "claude session sess-0001"), timeout=60)
    engine.steer(["t0"], "focus on security", now=True)
    row = run_to_end(engine).children[0]
    assert row.status is ChildStatus.COMPLETED, row.error
    assert row.result == "resumed sess-0001: focus on security"
    assert [r.state for r in row.steers] == [SteerState.DELIVERED]
    assert row.cost_usd is None  # the first run was cut short before it reported
    assert row.activity.api_calls == 2


def test_steer_at_next_turn_resumes_codex_after_it_ends(tmp_path: Path) -> None:
    # Its command held until the steer is queued (a sleep lost that race under load).
    gate = tmp_path / "gate"
    route = fake("fake_codex.py", "exec", "--json", "--fake-gate", str(gate), "{goal}")
    route += "resume_" + fake("fake_codex.py", "exec", "resume", "{session}", "--json", "{message}")
    route += 'format = "codex-json"\nsteer = "resume"\n'
    engine = engine_for(tmp_path, config(tmp_path, route))
    until(lambda: written(engine, "codex thread thread-42"), timeout=60)
    engine.steer(["t0"], "and the changelog")
    gate.touch()
    row = run_to_end(engine).children[0]
    assert row.status is ChildStatus.COMPLETED, row.error
    assert row.result == "resumed thread-42: and the changelog"
    assert [r.state for r in row.steers] == [SteerState.DELIVERED]
    assert row.usage.output_tokens == 600  # both runs reported


# --- bad configuration -----------------------------------------------------------------------

BAD = [
    ('argv = ["x", "{nope}"]\n', 6, "routes.cli.argv.1", "unknown placeholder {nope}"),
    ("argv = []\n", 6, "routes.cli.argv", "the list is empty"),
    ('argv = "claude -p"\n', 6, "routes.cli.argv", "expected a list of strings"),
    ('argv = ["{goal}"]\n', 6, "routes.cli.argv.0", "not a placeholder"),
    ('argv = [" ", "{goal}"]\n', 6, "routes.cli.argv.0", "the program is empty: give its name"),
    ('argv = ["x", "{goal!r}"]\n', 6, "routes.cli.argv.1", "bad placeholder"),
    ('argv = ["x"]\nworkspace = "mine"\n', 7, "routes.cli.workspace", "expected one of"),
    ('argv = ["x"]\nformat = "json"\n', 7, "routes.cli.format", "expected one of"),
    ('argv = ["x"]\nkill_grace_s = -1\n', 7, "routes.cli.kill_grace_s", "0 or more"),
    ('argv = ["x"]\nsteer = "stdin"\n', 7, "routes.cli.steer", "stdin = true"),
    (
        'argv = ["x"]\nsteer = "resume"\nformat = "codex-json"\n',
        4,
        "routes.cli.resume_argv",
        "required",
    ),
    (
        'argv = ["x"]\nsteer = "resume"\nresume_argv = ["x", "{message}"]\n',
        8,
        "routes.cli.resume_argv",
        "{session}",
    ),
    (
        'argv = ["x"]\nresume_argv = ["x", "{session}"]\n',
        7,
        "routes.cli.resume_argv",
        "needs format",
    ),
    ('argv = ["x"]\nrpm = 5\n', 7, "routes.cli.rpm", "not an option of provider 'command'"),
    ('argv = ["x"]\nenv_pass = ["A B"]\n', 7, "routes.cli.env_pass.0", "NAME"),
    ("stdin = true\n", 4, "routes.cli.argv", "required"),
    # The resume agents.md showed for Claude Code: its prompt in argv, it read the user turn
    # flightdeck wrote to its input as more prompt and waited for the input's end (a hang).
    (
        'argv = ["x", "--replay-user-messages"]\nstdin = true\nformat = "claude-stream-json"\n'
        'steer = "stdin"\nresume_argv = ["x", "-p", "--resume", "{session}", "{message}"]\n',
        10,
        "routes.cli.resume_argv",
        "--replay-user-messages",
    ),
]


@pytest.mark.parametrize(("route", "line", "field", "message"), BAD)
def test_bad_command_routes_are_rejected_at_their_line(
    tmp_path: Path, route: str, line: int, field: str, message: str
) -> None:
    from flightdeck.engine.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        config(tmp_path, route)
    assert (info.value.line, info.value.field) == (line, field), str(info.value)
    assert message in str(info.value)


def test_start_checks_program_workspace_key_and_budget(tmp_path: Path) -> None:
    from flightdeck.engine.errors import ConfigError

    def refused(route: str, batch: Batch | None = None, extra: str = "") -> ConfigError:
        settings = config(tmp_path, route + extra)
        with pytest.raises(ConfigError) as info:
            Engine(batch or one(), settings, state_dir=tmp_path / "state", env={"PATH": "/nowhere"})
        assert not (tmp_path / "state").exists()  # nothing written
        return info.value

    err = refused('argv = ["no-such-cli-anywhere", "{goal}"]\n')
    assert (err.line, err.field) == (6, "routes.cli.argv") and "not found on PATH" in str(err)
    err = refused('argv = ["./missing.py"]\n')
    assert "not an executable file" in str(err)
    # Held under /bin/sh until its process row commits (gate.py), such a file would run as a
    # shell script where `execve` refuses it.
    bare = tmp_path / "bare"
    bare.write_text("echo ran as a shell script\n")
    bare.chmod(0o755)
    err = refused('argv = ["./bare"]\n')
    assert (err.line, err.field) == (6, "routes.cli.argv") and "a #! line" in str(err), err
    err = refused(fake("noisy.py") + 'api_key_env = "FAKE_KEY"\n')
    assert err.field == "routes.cli.api_key_env" and "FAKE_KEY is not set" in str(err)
    not_git = tmp_path / "plain"
    not_git.mkdir()
    err = refused(fake("noisy.py") + 'workspace = "worktree"\n', one(workspace=not_git))
    assert (err.line, err.field) == (7, "routes.cli.workspace") and "not in a git" in str(err)
    err = refused(fake("noisy.py"), extra="[budget]\nmax_cost_usd = 1\n")
    assert err.field == "budget.max_cost_usd"


@pytest.mark.slow
def test_the_example_batch_fans_out_the_shipped_script(tmp_path: Path) -> None:
    from flightdeck.engine.inputs.tasks import load_batch

    examples = Path(__file__).resolve().parent.parent / "examples"
    settings = load_settings(examples / "agents" / "flightdeck.toml")
    batch = load_batch(examples / "agents" / "reviews.yaml")
    snap = run_to_end(engine_for(tmp_path, settings, batch))
    by_id = {row.id: row for row in snap.children}
    assert {i for i, r in by_id.items() if r.status is ChildStatus.COMPLETED} == {
        "review-calc",
        "review-textutil",
        "review-config",
    }
    assert "review of src/calc.py:" in (by_id["review-calc"].result or "")
    assert by_id["review-missing"].error == "exit 1: reviewer: no such file: src/missing.py"
    assert not any((tmp_path / "state" / "batches").glob("*/workspaces/*"))  # copies removed


def test_a_prompt_larger_than_the_pipe_never_blocks_the_stop(tmp_path: Path) -> None:
    route = fake("silent.py") + f"stdin = true\nkill_grace_s = {GRACE}\n"  # it never reads
    engine = engine_for(tmp_path, config(tmp_path, route), one("x" * 300_000))
    until(lambda: written(engine, "run: "))
    time.sleep(0.2)  # most likely the prompt's writer is blocked on the full pipe by now
    engine.stop(["t0"])
    until(lambda: row_of(engine).status.terminal, timeout=STOP_CEILING)  # the whole tree reaped
    assert run_to_end(engine).children[0].status is ChildStatus.STOPPED


# --- found in review ---------------------------------------------------------------------------


def test_output_nested_past_the_stack_neither_fails_nor_leaves_the_process_running(
    tmp_path: Path,
) -> None:
    route = fake("deep_json.py") + 'format = "claude-stream-json"\n' + f"kill_grace_s = {GRACE}\n"
    engine = engine_for(tmp_path, config(tmp_path, route))
    try:
        until(lambda: written(engine, "[[[["), timeout=60)  # read, and shown as output
        pids = [
            p.pid
            for p in psutil.process_iter(["cmdline"])
            if "deep_json.py" in " ".join(p.info["cmdline"] or [])
        ]
        assert pids and row_of(engine).status is ChildStatus.RUNNING
        engine.stop(["t0"])
        until(lambda: row_of(engine).status is ChildStatus.STOPPED, timeout=60)
    finally:
        engine.close()
    assert not [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != "zombie"]


def test_a_copy_never_copies_the_state_folder_inside_the_workspace_into_itself(
    tmp_path: Path,
) -> None:
    (tmp_path / "input.txt").write_text("x")
    route = fake("workspace_probe.py", "{id}", "{workspace}") + 'workspace = "copy"\n'
    route += "keep_worktrees = true\n"
    settings = config(tmp_path, route)
    # the state folder is inside the batch workspace, as with workspace = "." and ./.flightdeck
    environment = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    engine = Engine(
        one(workspace=tmp_path), settings, state_dir=tmp_path / "state", env=environment
    )
    engine.start()
    snap = run_to_end(engine)
    row = snap.children[0]
    assert row.status is ChildStatus.COMPLETED, row.error
    copy = Path(re.search(r"cwd (.+)", row.result or "").group(1))  # type: ignore[union-attr]
    assert (copy / "input.txt").exists() and not (copy / "state").exists()


def test_values_passed_by_env_pass_are_redacted_like_the_key(tmp_path: Path) -> None:
    token = "ghp-secret-token-0123456789"
    script = tmp_path / "echo_token.py"
    script.write_text("import os\nprint('token', os.environ['GH_TOKEN'])\n")
    route = "argv = " + repr([PY, str(script)]).replace("'", '"') + '\nenv_pass = ["GH_TOKEN"]\n'
    snap = run_to_end(engine_for(tmp_path, config(tmp_path, route), GH_TOKEN=token))
    row = snap.children[0]
    assert row.status is ChildStatus.COMPLETED, row.error
    assert token not in transcript(row) and token not in (row.result or "")
    assert "token" in transcript(row)


def test_a_process_killed_by_a_real_time_signal_says_so() -> None:
    from flightdeck.engine.child.command import status_text as _status_text

    assert _status_text(-40) == "killed by signal 40"
    assert _status_text(-9) == "killed by SIGKILL"


def test_a_copy_or_worktree_left_by_a_dead_owner_is_made_afresh(tmp_path: Path) -> None:
    # ... when it holds no work of its own; one that does is never removed (a child's work is
    # kept until the operator accepts or discards it).
    from flightdeck.engine.agents.workspace import Workspace, WorkspaceError

    shared = tmp_path / "ws"
    shared.mkdir()
    (shared / "a.txt").write_text("new")
    own = tmp_path / "state" / "workspaces" / "t0"
    own.mkdir(parents=True)
    (own / "a.txt").write_text("new")  # copied, and left as it was
    copy = Workspace("copy", shared, own, keep=False)
    assert (copy.prepare() / "a.txt").read_text() == "new"
    copy.release()
    own.mkdir(parents=True)
    (own / "stale.txt").write_text("from the run before the crash")
    with pytest.raises(WorkspaceError, match="earlier attempt's changes"):
        Workspace("copy", shared, own, keep=False).prepare()
    assert (own / "stale.txt").exists()
    subprocess.run(["git", "init", "-q", str(shared)], check=True)
    subprocess.run(["git", "-C", str(shared), "add", "."], check=True)
    subprocess.run(
        [
            "git",
            "-C",
            str(shared),
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "x",
        ],
        check=True,
    )
    tree = tmp_path / "state" / "workspaces" / "t1"
    Workspace("worktree", shared, tree, keep=False).prepare()  # the crashed owner's
    again = Workspace("worktree", shared, tree, keep=False)
    assert (again.prepare() / "a.txt").exists()
    assert again.release() == (None, None) and not tree.exists()


def _claude_script_child(tmp_path: Path, source: str) -> ChildRow:
    """The row of one child whose CLI is this Python `source`, read as Claude Code's output."""
    script = tmp_path / "cli.py"
    script.write_text(source)
    route = "argv = " + repr([PY, str(script)]).replace("'", '"') + "\n"
    route += 'format = "claude-stream-json"\n'
    return run_to_end(engine_for(tmp_path, config(tmp_path, route))).children[0]


def test_a_json_event_of_hundreds_of_kilobytes_is_read_whole(tmp_path: Path) -> None:
    row = _claude_script_child(
        tmp_path,
        "import json\n"
        "print(json.dumps({'type': 'result', 'subtype': 'success', 'is_error': False,\n"
        "    'result': 'x' * 300_000, 'total_cost_usd': 0.5, 'session_id': 's1',\n"
        "    'usage': {'input_tokens': 10, 'output_tokens': 20}}))\n",
    )
    assert row.status is ChildStatus.COMPLETED, row.error
    assert row.cost_usd == Decimal("0.5") and row.usage.output_tokens == 20


def test_a_line_of_megabytes_is_cut_in_the_transcript_and_the_event_after_it_read(
    tmp_path: Path,
) -> None:
    # A tool's dump with no newline (3 MB) on stdout and stderr: shown cut, not whole.
    row = _claude_script_child(
        tmp_path,
        "import json, sys\n"
        "sys.stdout.write('z' * 3_000_000 + '\\n')\n"
        "sys.stderr.write('e' * 3_000_000 + '\\n')\n"
        "print(json.dumps({'type': 'result', 'subtype': 'success', 'is_error': False,\n"
        "    'result': 'ok', 'total_cost_usd': 0.5, 'session_id': 's1'}))\n",
    )
    assert row.status is ChildStatus.COMPLETED and row.result == "ok", row.error
    text = transcript(row)
    assert len(text) < 200_000 and text.count("more characters)") == 2
    assert max(len(line) for line in text.splitlines()) < supervise.SHOWN_LINE_CHARS + 100


# --- pause and continue -------------------------------------------------------------------------


def _fake_pids(name: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.Process().children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if str(FAKES / name) in proc.cmdline():
                found.append(proc)
    return found


@pytest.mark.slow
def test_pause_suspends_a_process_frees_its_slot_and_continue_resumes_it(tmp_path: Path) -> None:
    # t0 is held in its tool until its gate exists, so it cannot end before the pause lands
    # (a 0.3 s sleep could, on a loaded machine); t1's gate is open from the start.
    gates = tmp_path / "gates"
    gates.mkdir()
    (gates / "t1").touch()
    args = ("-p", "--output-format", "stream-json", "--verbose", "--fake-gate", f"{gates}/{{id}}")
    route = fake("fake_claude.py", *args, "{goal}") + 'format = "claude-stream-json"\n'
    settings = config(
        tmp_path, route, engine="max_concurrent = 1\nstall_after_s = 30\nstall_grace_s = 0.3"
    )  # a stall window a loaded machine's starved child (t1) does not reach between its lines
    clock = SkipClock()
    engine = engine_for(tmp_path, settings, one(n=2), clock=clock)
    try:
        until(lambda: row_of(engine, "t0").activity.tool_calls >= 1, timeout=60)
        (proc,) = _fake_pids("fake_claude.py")
        engine.pause(["t0"])
        until(lambda: row_of(engine, "t0").status is ChildStatus.PAUSED, timeout=60)
        until(lambda: proc.status() == psutil.STATUS_STOPPED, timeout=60)  # the signal landed
        # Its slot went to the other child, which ends while this one is suspended; quiet for
        # longer than stall_after_s, and a pause is no stall.
        until(lambda: row_of(engine, "t1").status is ChildStatus.COMPLETED, timeout=60)
        clock.skip(60)
        watched(engine)
        assert row_of(engine, "t0").status is ChildStatus.PAUSED
        engine.continue_(["t0"])
        (gates / "t0").touch()
        snap = run_to_end(engine)
    finally:
        engine.close()
    row = snap.child("t0")
    assert row is not None and row.status is ChildStatus.COMPLETED, row.error
    text = transcript(row)
    assert "suspended (SIGSTOP)" in text and "resumed (SIGCONT)" in text


def test_stop_of_a_paused_process_ends_it_at_once(tmp_path: Path) -> None:
    args = ("-p", "--output-format", "stream-json", "--verbose", "--fake-sleep", "30")
    route = fake("fake_claude.py", *args, "{goal}") + 'format = "claude-stream-json"\n'
    engine = engine_for(tmp_path, config(tmp_path, route + f"kill_grace_s = {GRACE}\n"))
    try:
        until(lambda: written(engine, "claude session sess-0001"), timeout=60)
        (proc,) = _fake_pids("fake_claude.py")
        engine.pause(["t0"])
        until(lambda: row_of(engine).status is ChildStatus.PAUSED, timeout=60)
        engine.stop(["t0"])
        until(lambda: row_of(engine).status.terminal, timeout=STOP_CEILING)
        row = run_to_end(engine).children[0]
    finally:
        engine.close()
    assert row.status is ChildStatus.STOPPED
    assert "SIGKILL sent" not in transcript(row)  # SIGCONT, then SIGTERM: it ended on that
    assert not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
