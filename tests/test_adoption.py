"""A killed owner neither orphans nor doubles a command child (issue 30): a real owner process
(`flightdeck run --headless`) is killed with SIGKILL while its children's processes run, then
`flightdeck resume` runs the batch to the end. Counted from the processes' side: a sampler
reads the process table every few milliseconds and records, per task, the processes it saw."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path

import psutil
import pytest
from flightdeck.engine.model import BatchStatus, ChildStatus, Usage
from flightdeck.engine.records.processes import processes, still_running
from flightdeck.engine.records.reader import StoreReader

from helpers import ADOPTED, HANG_S, signals_as_a_shell_gives_them, until

FAKES = Path(__file__).parent / "fakes"
PY = sys.executable


def flightdeck(folder: Path, *args: str, as_a_shell: bool = False) -> subprocess.Popen[str]:
    """The CLI in `folder`; `as_a_shell`: its signals as a shell's job gets them (a Ctrl+C)."""
    return subprocess.Popen(
        [PY, "-m", "flightdeck.tui.cli", *args],
        cwd=folder,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
        preexec_fn=signals_as_a_shell_gives_them if as_a_shell else None,
    )


def project(folder: Path, route: str, ids: list[str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tasks.jsonl").write_text(
        "".join(f'{{"id": "{i}", "goal": "task {i}"}}\n' for i in ids)
    )
    (folder / "flightdeck.toml").write_text(
        '[engine]\nmax_concurrent = 4\ndefault_route = "cli"\nstate_dir = "state"\n'
        'stall_after_s = 60\n\n[routes.cli]\nprovider = "command"\nkill_grace_s = 0.5\n' + route
    )
    return folder


def argv(*args: str) -> str:
    return "argv = " + repr([PY, *args]).replace("'", '"') + "\n"


class Sampler:
    """Every process of the fakes, by task: what ran, and whether two ran at once."""

    def __init__(self, pattern: str) -> None:
        self._pattern = re.compile(pattern)
        self.seen: dict[str, set[int]] = defaultdict(set)  # task -> pids ever seen
        self.doubles: list[tuple[str, list[int]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._lock = threading.Lock()

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(HANG_S)
        for pids in self.now().values():  # a failed test leaves nothing running
            for pid in pids:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)

    def now(self) -> dict[str, list[int]]:
        """Live processes (zombies aside) of each task. Read from /proc directly: psutil's
        process_iter took 19 ms of CPU a scan (a scan every 24 ms with the 5 ms sleep: 80 % of
        a core for the whole test); this takes 4 ms (with 15 ms of sleep, a scan every 19 ms)."""
        found: dict[str, list[int]] = defaultdict(list)
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as file:
                    cmdline = file.read().replace(b"\0", b" ").decode(errors="replace")
                match = self._pattern.search(cmdline)
                if match and runs(int(entry.name)):
                    found[match.group(1)].append(int(entry.name))
            except OSError:  # the process ended meanwhile
                continue
        return found

    def _run(self) -> None:
        while not self._stop.is_set():
            for task, pids in self.now().items():
                with self._lock:
                    self.seen[task].update(pids)
                    if len(pids) > 1:
                        self.doubles.append((task, pids))
            time.sleep(0.015)


def kill_owner(owner: subprocess.Popen[str]) -> None:
    owner.send_signal(signal.SIGKILL)
    owner.wait(HANG_S)
    owner.communicate()


def batch_of(folder: Path) -> str:
    db = folder / "state" / "flightdeck.db"
    until(db.is_file, what="the database")
    found: list[str] = []

    def recorded() -> bool:
        with StoreReader(db) as reader:
            batch_id = reader.latest_batch_id()
        found.extend([batch_id] if batch_id else [])
        return bool(found)

    until(recorded, what="the batch row")
    return found[0]


def runs(pid: int) -> bool:
    """Whether `pid` runs: a zombie has ended (reparented to init, it is reaped when init
    gets to it, which on some machines takes seconds)."""
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    return False


def transcript(folder: Path, batch_id: str, child: str) -> str:
    path = folder / "state" / "batches" / batch_id / f"{child}.log"
    return path.read_text() if path.exists() else ""


def claude_project(tmp_path: Path, gate: Path) -> Path:
    """Two fake Claude Code children, "keep" and "halt", whose tool holds until `gate` exists."""
    claude = (FAKES / "fake_claude.py", "-p", "--input-format", "stream-json")
    claude += ("--output-format", "stream-json", "--verbose", "--replay-user-messages")
    route = argv(*map(str, claude), "--fake-gate", str(gate), "--fake-pidfile", "{id}.pid")
    route += 'format = "claude-stream-json"\nstdin = true\nsteer = "stdin"\n'
    return project(tmp_path / "p", route, ["keep", "halt"])


def in_tools(folder: Path, batch_id: str, children: tuple[str, ...]) -> None:
    """Wait until each of `children` is inside its (held) tool."""
    until(
        lambda: all("tool-call │ Bash" in transcript(folder, batch_id, c) for c in children),
        what="the children inside their tool",
    )


def held_in_tools(tmp_path: Path) -> tuple[Path, Path, subprocess.Popen[str], str]:
    """claude_project's two children run headless until both are inside their tool: the gate
    that holds them, the project folder, the owner and the batch id."""
    gate = tmp_path / "gate"
    folder = claude_project(tmp_path, gate)
    owner = flightdeck(folder, "run", "tasks.jsonl", "--headless")
    batch_id = batch_of(folder)
    in_tools(folder, batch_id, ("keep", "halt"))
    return gate, folder, owner, batch_id


def processes_of(tmp_path: Path) -> Sampler:
    """A sampler of this test's fake CLIs only (the gate's path is unique to it)."""
    return Sampler(re.escape(str(tmp_path / "gate")) + r" --fake-pidfile (\w+)\.pid")


@pytest.mark.slow
def test_a_claude_child_running_when_its_owner_dies_is_adopted_and_completes_once(
    tmp_path: Path,
) -> None:
    with processes_of(tmp_path) as sampler:
        gate, folder, owner, batch_id = held_in_tools(tmp_path)
        before = {c: sampler.now()[c] for c in ("keep", "halt")}
        kill_owner(owner)
        # From the processes' side: the dead owner's children still run, and `ls` says so.
        assert all(len(pids) == 1 for pids in before.values()), before
        assert still_running(folder / "state" / "flightdeck.db", batch_id) == 2
        ls = flightdeck(folder, "ls")
        assert "abandoned (2 still running)" in ls.communicate(timeout=HANG_S)[0]
        wait = flightdeck(folder, "wait", batch_id)
        assert "2 of its children still run" in wait.communicate(timeout=HANG_S)[1]
        resume = flightdeck(folder, "resume", batch_id)
        until(
            lambda: all(ADOPTED in transcript(folder, batch_id, c) for c in ("keep", "halt")),
            what="both adopted",
        )
        # Steer and stop reach an adopted child: its input is the FIFO, its tree is known.
        # (`steer` waits for its receipt: delivered once the turn takes it, past the gate.)
        steer = flightdeck(folder, "steer", batch_id, "keep", "-m", "also the docs")
        stop = flightdeck(folder, "stop", batch_id, "halt")
        stopped = stop.communicate(timeout=HANG_S)
        assert stop.returncode == 0, stopped
        until(
            lambda: "queued by the CLI: also the docs" in transcript(folder, batch_id, "keep"),
            what="the steer read by the CLI",
        )
        gate.touch()
        steered = steer.communicate(timeout=HANG_S)
        # How the CLI took it, as the transcript says (it printed a bare "delivered").
        assert steer.returncode == 0, steered
        assert steered[0].splitlines()[-1] == "keep: delivered into the running turn", steered
        out, err = resume.communicate(timeout=60)
    assert resume.returncode == 1, out + err  # one child stopped
    assert "2 adopted" in out, out
    assert sampler.doubles == []  # no task ever had two processes at once
    assert sampler.seen["keep"] == set(before["keep"])  # never run again
    assert sampler.seen["halt"] == set(before["halt"])
    assert not sampler.now()  # and nothing is left running
    with StoreReader(folder / "state" / "flightdeck.db") as reader:
        assert reader.batch(batch_id).status == BatchStatus.STOPPED  # type: ignore[union-attr]
        rows = {r.id: r for r in reader.children(batch_id)}
    keep, halt = rows["keep"], rows["halt"]
    assert keep.status is ChildStatus.COMPLETED, keep.error
    assert keep.result == "got: task keep + also the docs"  # the steer went into its turn
    assert halt.status is ChildStatus.STOPPED
    text = transcript(folder, batch_id, "keep")
    # Whole: what came before the kill, the adoption, what came after; one run, one end.
    order = ["user      │ task keep", "tool-call │ Bash", ADOPTED, "tool      │ README.md"]
    order += ["delivered into the running turn: also the docs", "engine    │ completed"]
    places = [text.index(line) for line in order]
    assert places == sorted(places), text
    assert text.count("engine    │ run: ") == 1 and text.count("completed") == 1
    assert keep.cost_usd is not None and keep.cost_usd > 0
    # Its files went with it: the copy of what its input was written too (engine/agents/sent.py).
    assert not list((folder / "state" / "batches" / batch_id / "io").iterdir())


@pytest.mark.slow
def test_resume_says_what_it_adopted_as_it_starts_not_once_the_batch_has_ended(
    tmp_path: Path,
) -> None:
    # Found by a walk-through: `resume` of a batch whose Claude Code children were held in
    # their tools said nothing but the batch id until every child had ended, then
    # `8 adopted (their processes still ran; ...)`: the operator could not tell, while it ran,
    # that nothing would run twice.
    gate, folder, owner, batch_id = held_in_tools(tmp_path)
    kill_owner(owner)
    resume = flightdeck(folder, "resume", batch_id)
    said: list[str] = []
    assert resume.stdout is not None
    out = resume.stdout
    reader = threading.Thread(target=lambda: said.extend(out), daemon=True)
    reader.start()
    try:
        until(lambda: any("adopted" in line for line in said), HANG_S, what="the adopted line")
        assert resume.poll() is None  # said while both still hold in their tools
        assert said[0] == f"batch {batch_id}\n", said
        assert said[1].startswith("2 adopted (their processes outlived the owner"), said
        assert said[1].endswith(": halt, keep\n") or said[1].endswith(": keep, halt\n"), said
    finally:
        gate.touch()
        resume.wait(60)
        reader.join(HANG_S)
        for stream in (resume.stdout, resume.stderr):
            assert stream is not None
            stream.close()
    assert resume.returncode == 0, said
    assert sum("adopted" in line for line in said) == 1, said  # said once


@pytest.mark.slow
def test_an_adopted_child_s_tool_runs_since_it_began_not_since_the_adoption(
    tmp_path: Path,
) -> None:
    # Found by a walk-through: Claude Code in its tool for 29 s when `resume` adopted it read
    # `tool: Bash 14s` in the table (the replay of its output started the tool's clock again).
    gate, folder, owner, batch_id = held_in_tools(tmp_path)
    db = folder / "state" / "flightdeck.db"

    def since(by_adopter: float = 0.0) -> dict[str, float | None]:
        """Each child's tool start as stored, of the rows written after `by_adopter` only."""
        with StoreReader(db) as reader:
            return {
                r.id: r.activity.tool_started_ts
                for r in reader.children(batch_id)
                if (r.activity.last_activity_ts or 0.0) > by_adopter
            }

    def booked() -> bool:
        """Each process's output read to its end (its tool call) and that recorded: all an
        adopter replays, so the tool is running when the replay ends."""
        rows = processes(db, batch_id)
        return len(rows) == 2 and all(
            r.out_offset == Path(r.out_path).stat().st_size > 0 for r in rows
        )

    until(lambda: None not in since().values() and booked(), what="the tools recorded")
    before = since()
    kill_owner(owner)
    killed = time.time()  # the adopter's rows are those whose activity came after
    resume = flightdeck(folder, "resume", batch_id)
    try:
        # Waited on, not slept on: the adopter's own rows, with the dead owner's start (on the
        # old code they keep the replay's, and this never comes).
        until(lambda: since(killed) == before, what="the adopted rows with the tools' start")
    finally:
        gate.touch()
        resume.communicate(timeout=60)


@pytest.mark.slow
def test_a_process_that_cannot_be_adopted_is_ended_tree_and_all_before_its_task_reruns(
    tmp_path: Path,
) -> None:
    route = argv(str(FAKES / "tree_holder.py"), str(tmp_path / "{id}.ran"))
    folder = project(tmp_path / "p", route, ["t0", "t1"])
    roots: dict[str, int] = {}
    grandchildren: dict[str, int] = {}
    owner = flightdeck(folder, "run", "tasks.jsonl", "--headless")
    batch_id = batch_of(folder)
    for child in ("t0", "t1"):
        until(lambda c=child: "grandchild" in transcript(folder, batch_id, c), what="its tree")
        found = re.search(r"root (\d+) grandchild (\d+)", transcript(folder, batch_id, child))
        assert found is not None
        roots[child], grandchildren[child] = int(found.group(1)), int(found.group(2))
    kill_owner(owner)
    old = [*roots.values(), *grandchildren.values()]
    assert all(os.getsid(g) == g for g in grandchildren.values())  # out of their groups
    assert all(psutil.pid_exists(p) for p in old)  # the dead owner's trees still run

    def old_alive() -> list[int]:
        alive = []
        for pid in old:
            with contextlib.suppress(psutil.Error):
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
        return alive

    # When each task's second run starts ("ran again"), none of the old trees may be alive.
    seen_at_rerun: list[list[int]] = []

    def watch() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(seen_at_rerun) < 2:
            for child in ("t0", "t1"):
                path = folder / "state" / "batches" / batch_id / f"{child}.log"
                if "ran again" in path.read_text() and len(seen_at_rerun) < 2:
                    seen_at_rerun.append(old_alive())
            time.sleep(0.005)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    resume = flightdeck(folder, "resume", batch_id)
    out, err = resume.communicate(timeout=60)
    watcher.join(60)
    assert resume.returncode == 0, out + err
    assert "2 ended" in out, out
    assert old_alive() == [] and all(alive == [] for alive in seen_at_rerun)
    with StoreReader(folder / "state" / "flightdeck.db") as reader:
        rows = {r.id: r for r in reader.children(batch_id)}
    assert all(r.status is ChildStatus.COMPLETED for r in rows.values())
    text = transcript(folder, batch_id, "t0")
    assert "was not adopted (format 'plain' gives no outcome but the exit status)" in text
    assert text.index("its tree was ended") < text.index("ran again")


@pytest.mark.slow
def test_resume_no_rerun_says_the_ended_process_s_task_is_left_unknown(tmp_path: Path) -> None:
    # Found by a walk-through: `resume --no-rerun` said the trees it ended were ended "before
    # their tasks ran again", tasks it leaves unknown and never runs.
    route = argv(str(FAKES / "tree_holder.py"), str(tmp_path / "{id}.ran"))
    folder = project(tmp_path / "p", route, ["t0"])
    owner = flightdeck(folder, "run", "tasks.jsonl", "--headless")
    batch_id = batch_of(folder)
    until(lambda: "grandchild" in transcript(folder, batch_id, "t0"), what="its tree")
    # Its process ran once its row was committed (engine/agents/gate.py): no wait for it.
    assert still_running(folder / "state" / "flightdeck.db", batch_id) == 1
    kill_owner(owner)
    resume = flightdeck(folder, "resume", batch_id, "--no-rerun")
    out, err = resume.communicate(timeout=60)
    assert resume.returncode == 1, out + err  # an unknown child: the batch did not complete
    assert "1 ended, whole process trees, their tasks left unknown: t0\n" in out, out
    assert "ran again" not in out + transcript(folder, batch_id, "t0")
    with StoreReader(folder / "state" / "flightdeck.db") as reader:
        [row] = reader.children(batch_id)
    assert row.status is ChildStatus.UNKNOWN


@pytest.mark.slow
def test_a_codex_child_that_finished_while_its_owner_was_dead_is_read_to_its_end_not_rerun(
    tmp_path: Path,
) -> None:
    # Found by an audit with the real Codex: it ended its turn between the kill and `resume`,
    # which ended "its tree" (already gone) and ran the task again from the start.
    gate = tmp_path / "gate"
    route = argv(str(FAKES / "fake_codex.py"), "exec", "--json", "--fake-gate", str(gate))
    route = route.replace('"]\n', '", "--fake-pidfile", "{id}.pid", "{goal}"]\n')
    route += 'format = "codex-json"\nprice = { input_per_mtok = 1.0, output_per_mtok = 2.0 }\n'
    folder = project(tmp_path / "p", route, ["done"])
    with Sampler(re.escape(str(gate)) + r" --fake-pidfile (\w+)\.pid") as sampler:
        owner = flightdeck(folder, "run", "tasks.jsonl", "--headless")
        batch_id = batch_of(folder)
        until(
            lambda: (
                "command_execution" in transcript(folder, batch_id, "done")
                or "tool-call" in transcript(folder, batch_id, "done")
            ),
            what="inside its command",
        )
        [pid] = sampler.now()["done"]
        with StoreReader(folder / "state" / "flightdeck.db") as reader:
            began = reader.child(batch_id, "done").started_ts  # type: ignore[union-attr]
        kill_owner(owner)
        gate.touch()  # it finishes its turn with nobody watching
        until(lambda: not sampler.now(), what="the process to end on its own")
        resume = flightdeck(folder, "resume", batch_id)
        out, err = resume.communicate(timeout=60)
    assert resume.returncode == 0, out + err
    assert "1 adopted" in out, out
    assert sampler.seen["done"] == {pid}  # never run again
    with StoreReader(folder / "state" / "flightdeck.db") as reader:
        [row] = reader.children(batch_id)
    assert row.status is ChildStatus.COMPLETED, row.error
    assert row.usage.total > 0 and row.cost_usd  # what it spent is kept
    assert row.started_ts == began  # its run began with its process, not at the adoption
    text = transcript(folder, batch_id, "done")
    assert text.count("engine    │ run: ") == 1 and "restarts from the start" not in text


@pytest.mark.slow
def test_a_stop_sent_while_the_owner_was_dead_ends_the_adopted_process_and_keeps_its_spend(
    tmp_path: Path,
) -> None:
    # Found by an audit with the real Claude Code: `resume` applied the pending stop before it
    # watched the adopted process, as to a child never started ("stopped before start"), and
    # the process ran on after `resume` had exited, its spend forgotten.
    with processes_of(tmp_path) as sampler:
        gate, folder, owner, batch_id = held_in_tools(tmp_path)
        spent: dict[str, Usage] = {}

        def billed() -> bool:  # its first call, in the store before the kill
            with StoreReader(folder / "state" / "flightdeck.db") as reader:
                spent.update((r.id, r.usage) for r in reader.children(batch_id))
            return spent["halt"].total > 0

        until(billed, what="the stopped child's first call recorded")
        kill_owner(owner)
        stop = flightdeck(folder, "stop", batch_id, "halt")
        said = stop.communicate(timeout=HANG_S)
        assert stop.returncode == 1 and "the request stays pending" in said[1], said
        resume = flightdeck(folder, "resume", batch_id)
        until(lambda: "halt" not in sampler.now(), what="the stopped child's process to end")
        gate.touch()
        out, err = resume.communicate(timeout=60)
        assert not sampler.now()  # nothing outlives the batch
    assert resume.returncode == 1, out + err  # one child stopped
    assert "2 adopted" in out, out
    with StoreReader(folder / "state" / "flightdeck.db") as reader:
        rows = {r.id: r for r in reader.children(batch_id)}
    assert rows["keep"].status is ChildStatus.COMPLETED, rows["keep"].error
    halt = rows["halt"]
    assert halt.status is ChildStatus.STOPPED and "before start" not in (halt.error or "")
    assert halt.usage.total >= spent["halt"].total  # its spend is kept


@pytest.mark.slow
def test_an_adopted_codex_resume_is_billed_only_what_it_adds_to_its_thread(
    tmp_path: Path,
) -> None:
    # Codex's `turn.completed` counts the whole thread. A `retry --continue` by a new owner
    # (the session read back from the store), its process adopted by a third after a kill:
    # each read the resumed thread's report from zero and billed its first turn again.
    gate = tmp_path / "gate"
    fake = str(FAKES / "fake_codex.py")
    route = argv(fake, "exec", "--json", "--fake-exit", "1", "{goal}")
    route += "resume_" + argv(fake, "exec", "resume", "{session}", "--json", "--fake-gate")
    route = route.replace('"--fake-gate"]', f'"--fake-gate", "{gate}", "{{message}}"]')
    route += 'format = "codex-json"\n'
    folder = project(tmp_path / "p", route, ["t0"])
    run = flightdeck(folder, "run", "tasks.jsonl", "--headless")
    out, err = run.communicate(timeout=60)
    assert run.returncode == 1, out + err  # its run billed a turn, then failed
    batch_id = batch_of(folder)
    db = folder / "state" / "flightdeck.db"
    retry = flightdeck(folder, "retry", batch_id, "t0", "--continue")
    out, err = retry.communicate(timeout=60)
    owner = re.search(r"owner pid (\d+) started", err)
    assert retry.returncode == 0 and owner is not None, out + err
    try:
        until(
            lambda: transcript(folder, batch_id, "t0").count("tool-call │ shell") == 2,
            what="the resumed run inside its command",
        )
    finally:
        os.kill(int(owner.group(1)), signal.SIGKILL)
    until(lambda: not psutil.pid_exists(int(owner.group(1))), what="the owner gone")
    resume = flightdeck(folder, "resume", batch_id)
    try:
        until(lambda: ADOPTED in transcript(folder, batch_id, "t0"), what="adopted")
    finally:
        gate.touch()
    out, err = resume.communicate(timeout=60)
    assert resume.returncode == 0, out + err
    with StoreReader(db) as reader:
        [row] = reader.children(batch_id)
    assert row.status is ChildStatus.COMPLETED and row.attempt == 2, row.error
    one_turn = Usage(input_tokens=500, output_tokens=300, cache_read_tokens=1500)
    assert row.usage == one_turn + one_turn  # what the fake's two turns served


@pytest.mark.slow
def test_a_child_stopped_as_its_owner_died_is_not_run_again_and_its_tree_is_ended(
    tmp_path: Path,
) -> None:
    # Found by a walk-through: `stop` applied, the owner killed within the process's
    # kill_grace_s, and `resume` ran the stopped child again from the start.
    route = argv(str(FAKES / "tree_holder.py"), str(tmp_path / "{id}.ran"))
    folder = project(tmp_path / "p", route, ["t0", "t1"])
    config = folder / "flightdeck.toml"
    config.write_text(config.read_text().replace("kill_grace_s = 0.5", "kill_grace_s = 8"))
    owner = flightdeck(folder, "run", "tasks.jsonl", "--headless")
    batch_id = batch_of(folder)
    for child in ("t0", "t1"):
        until(lambda c=child: "grandchild" in transcript(folder, batch_id, c), what="its tree")
    found = re.search(r"root (\d+) grandchild (\d+)", transcript(folder, batch_id, "t0"))
    assert found is not None
    stop = flightdeck(folder, "stop", batch_id, "t0")
    out, err = stop.communicate(timeout=60)
    assert stop.returncode == 0 and "stop applied: t0" in out, out + err
    kill_owner(owner)  # its SIGKILL to t0's tree was 8 s away
    resume = flightdeck(folder, "resume", batch_id)
    out, err = resume.communicate(timeout=120)
    assert resume.returncode == 1, out + err  # the batch ends stopped
    assert "1 ended, whole process trees, as stopped: t0\n" in out, out
    assert "1 ended, whole process trees, before their tasks ran again: t1\n" in out, out
    assert not [p for p in found.groups() if runs(int(p))]
    text = transcript(folder, batch_id, "t0")
    assert "after the operator's stop: it is not run again" in text and "ran again" not in text
    with StoreReader(folder / "state" / "flightdeck.db") as reader:
        rows = {r.id: r.status for r in reader.children(batch_id)}
    assert rows == {"t0": ChildStatus.STOPPED, "t1": ChildStatus.COMPLETED}


def suspended(pids: list[int]) -> bool:
    return all(psutil.Process(p).status() == psutil.STATUS_STOPPED for p in pids)


@pytest.mark.slow
@pytest.mark.parametrize("continued", [False, True], ids=["suspended", "continued-unrecorded"])
def test_a_child_paused_as_its_owner_died_is_adopted_paused_and_continue_runs_it(
    tmp_path: Path, continued: bool
) -> None:
    # Found walking through with the real Claude Code: adopted, the child paused by the
    # operator (its process group suspended) showed `running`, `continue` said "not paused",
    # and its process stayed stopped for good. `continued`: the owner sends SIGCONT, then
    # records `running`; killed between the two, its row says paused while the process runs,
    # and adopted paused it must be suspended again, not left to run on unwatched.
    with processes_of(tmp_path) as sampler:
        gate, folder, owner, batch_id = held_in_tools(tmp_path)
        db = folder / "state" / "flightdeck.db"

        def status(child: str) -> ChildStatus:
            with StoreReader(db) as reader:
                return {r.id: r.status for r in reader.children(batch_id)}[child]

        pause = flightdeck(folder, "pause", batch_id, "halt")
        assert pause.communicate(timeout=HANG_S) and pause.returncode == 0
        until(lambda: status("halt") is ChildStatus.PAUSED, what="halt paused")
        until(lambda: suspended(sampler.now()["halt"]), what="halt's process suspended")
        kill_owner(owner)
        if continued:
            for pid in sampler.now()["halt"]:  # the dead owner's continue, not recorded
                os.kill(pid, signal.SIGCONT)
            until(lambda: not any(suspended([p]) for p in sampler.now()["halt"]), what="it runs")
        resume = flightdeck(folder, "resume", batch_id)
        until(lambda: ADOPTED in transcript(folder, batch_id, "halt"), what="halt adopted")
        until(lambda: suspended(sampler.now()["halt"]), what="halt suspended")
        gate.touch()
        until(lambda: status("keep") is ChildStatus.COMPLETED, what="keep completed")
        # Paused still: its row says so and its process has not run on past the open gate.
        until(lambda: status("halt") is ChildStatus.PAUSED, what="halt paused still")
        assert suspended(sampler.now()["halt"])
        go = flightdeck(folder, "continue", batch_id, "halt")
        said = go.communicate(timeout=HANG_S)
        assert go.returncode == 0, said
        out, err = resume.communicate(timeout=60)
        assert not sampler.now()
    assert resume.returncode == 0, out + err
    assert status("halt") is ChildStatus.COMPLETED


# A plain command that ends on SIGTERM (its default): it prints its pid and waits; run again
# (its marker exists), it says so and ends.
OBEDIENT = (
    "import os, pathlib, sys, time\n"
    "marker = pathlib.Path(sys.argv[1])\n"
    "if marker.exists():\n"
    "    print('ran again', flush=True)\n"
    "    sys.exit(0)\n"
    "marker.touch()\n"
    "print('pid', os.getpid(), flush=True)\n"
    "time.sleep(600)\n"
)


@pytest.mark.slow
def test_a_plain_child_paused_as_its_owner_died_is_ended_by_sigterm_and_waits_for_continue(
    tmp_path: Path,
) -> None:
    # Found by a walk-through: the paused child's process, suspended (SIGSTOP) by its dead
    # owner, was sent SIGTERM alone, which a stopped process does not act on: `resume` waited
    # out its whole kill_grace_s, then SIGKILL; and it said the child's task ran again, while
    # it waits, paused, for `continue`.
    script = tmp_path / "obedient.py"
    script.write_text(OBEDIENT)
    route = argv(str(script), str(tmp_path / "{id}.ran"))
    folder = project(tmp_path / "p", route, ["t0", "t1"])
    config = folder / "flightdeck.toml"
    config.write_text(config.read_text().replace("kill_grace_s = 0.5", "kill_grace_s = 600"))
    db = folder / "state" / "flightdeck.db"

    def status(child: str) -> ChildStatus:
        with StoreReader(db) as reader:
            return {r.id: r.status for r in reader.children(batch_id)}[child]

    owner = flightdeck(folder, "run", "tasks.jsonl", "--headless")
    batch_id = batch_of(folder)
    pids = {}
    for child in ("t0", "t1"):
        until(lambda c=child: "pid " in transcript(folder, batch_id, c), what="its process")
        found = re.search(r"pid (\d+)", transcript(folder, batch_id, child))
        assert found is not None
        pids[child] = int(found.group(1))
    pause = flightdeck(folder, "pause", batch_id, "t0")
    assert pause.communicate(timeout=30) and pause.returncode == 0
    until(lambda: status("t0") is ChildStatus.PAUSED, what="t0 paused")
    until(lambda: suspended([pids["t0"]]), what="t0's process suspended")
    kill_owner(owner)
    resume = flightdeck(folder, "resume", batch_id)
    try:
        # Told SIGTERM, it ends long before its grace is over (a SIGKILL would be 600 s away).
        until(lambda: not runs(pids["t0"]) and not runs(pids["t1"]), 30, what="both ended")
        until(lambda: status("t1") is ChildStatus.COMPLETED, what="t1 ran again")
        assert status("t0") is ChildStatus.PAUSED
        go = flightdeck(folder, "continue", batch_id, "t0")
        said = go.communicate(timeout=30)
        assert go.returncode == 0, said
        out, err = resume.communicate(timeout=60)
    finally:
        for pid in pids.values():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if resume.poll() is None:
            resume.kill()
            resume.communicate()
    assert resume.returncode == 0, out + err
    assert "1 ended, whole process trees, before their tasks ran again: t1\n" in out, out
    assert "1 ended, whole process trees, paused: their tasks run again once continued: t0\n" in out
    assert "ran again" in transcript(folder, batch_id, "t0")
    assert status("t0") is ChildStatus.COMPLETED


# A plain command that takes its time to stop: it ignores SIGTERM until `gate` exists.
SLOW_TO_STOP = (
    "import os, pathlib, signal, sys, time\n"
    "gate = pathlib.Path(sys.argv[1])\n"
    "signal.signal(signal.SIGTERM, lambda *a: gate.exists() and sys.exit(0))\n"
    "print('pid', os.getpid(), flush=True)\n"
    "time.sleep(600)\n"
)


@pytest.mark.slow
def test_a_second_ctrl_c_says_which_processes_it_left_running_and_resume_ends_them(
    tmp_path: Path,
) -> None:
    # Found by a walk-through: a second Ctrl+C while command children stopped said only "left
    # without waiting for children still stopping"; their processes ran on, unsaid, and the
    # batch read abandoned, with nothing telling the operator that `resume` ends them.

    script, gate = tmp_path / "slow.py", tmp_path / "gate"
    script.write_text(SLOW_TO_STOP)
    folder = project(tmp_path / "p", argv(str(script), str(gate)), ["t0", "t1"])
    config = folder / "flightdeck.toml"
    config.write_text(config.read_text().replace("kill_grace_s = 0.5", "kill_grace_s = 600"))
    owner = flightdeck(folder, "run", "tasks.jsonl", "--headless", as_a_shell=True)
    batch_id = batch_of(folder)
    pids = []
    try:
        for child in ("t0", "t1"):
            until(lambda c=child: "pid " in transcript(folder, batch_id, c), what="its process")
            found = re.search(r"pid (\d+)", transcript(folder, batch_id, child))
            assert found is not None
            pids.append(int(found.group(1)))
        owner.send_signal(signal.SIGINT)
        until(lambda: all("SIGTERM sent" in transcript(folder, batch_id, c) for c in ("t0", "t1")))
        owner.send_signal(signal.SIGINT)
        out, err = owner.communicate(timeout=60)
        assert owner.returncode == 130, out + err
        assert all(runs(p) for p in pids)  # left running, as said
        resume_line = f"flightdeck resume {batch_id} --state-dir {folder / 'state'}"
        said = f"2 of their processes still run (`{resume_line}` ends them and records"
        assert said in " ".join(err.split()), err
        gate.touch()  # they take the next SIGTERM
        resume = flightdeck(folder, "resume", batch_id)
        out, err = resume.communicate(timeout=60)
        assert resume.returncode == 1, out + err  # the batch ends stopped
        assert re.search(r"^2 ended, whole process trees, as stopped: t[01], t[01]$", out, re.M), (
            out
        )
        assert not [p for p in pids if runs(p)]
    finally:
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if owner.poll() is None:
            owner.kill()
            owner.communicate()


# A plain command slow to end: told SIGTERM, it notes it (`{id}.term`) and runs on, until the
# gate exists; run again once it does, it ends at once.
UNTIL_GATE = (
    "import os, pathlib, signal, sys, time\n"
    "gate, term = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])\n"
    "signal.signal(signal.SIGTERM, lambda *a: term.touch())\n"
    "print('pid', os.getpid(), flush=True)\n"
    "while not gate.exists():\n"
    "    time.sleep(0.01)\n"
)


def gated_and_orphaned(tmp_path: Path) -> tuple[Path, str, Path, list[int]]:
    """Two children, t0 and t1, that run until `gate` (UNTIL_GATE: a SIGTERM noted in
    `{id}.term`, not acted on; kill_grace_s 600), their owner killed once both processes run
    (recorded before they ran): (folder, batch id, gate, their pids)."""
    script, gate = tmp_path / "slow.py", tmp_path / "gate"
    script.write_text(UNTIL_GATE)
    route = argv(str(script), str(gate), str(tmp_path / "{id}.term"))
    folder = project(tmp_path / "p", route, ["t0", "t1"])
    config = folder / "flightdeck.toml"
    config.write_text(config.read_text().replace("kill_grace_s = 0.5", "kill_grace_s = 600"))
    owner = flightdeck(folder, "run", "tasks.jsonl", "--headless")
    try:
        batch_id = batch_of(folder)
        pids = []
        for child in ("t0", "t1"):
            until(lambda c=child: "pid " in transcript(folder, batch_id, c), what="its process")
            found = re.search(r"pid (\d+)", transcript(folder, batch_id, child))
            assert found is not None
            pids.append(int(found.group(1)))
        assert still_running(folder / "state" / "flightdeck.db", batch_id) == 2
    except BaseException:
        gate.touch()  # its children end rather than wait for ever
        raise
    finally:
        kill_owner(owner)
    return folder, batch_id, gate, pids


@pytest.mark.slow
def test_a_ctrl_c_while_resume_ends_the_trees_does_not_make_them_stopped_by_the_operator(
    tmp_path: Path,
) -> None:
    # Found by a walk-through: Ctrl+C while `resume` waited for the dead owner's processes to
    # end (within their kill_grace_s) stopped every child, and resume then said the trees were
    # ended "as stopped" (what it says of a child the operator stopped before the owner died),
    # beside "resumed: 2 re-run".
    from helpers import read_until

    folder, batch_id, gate, pids = gated_and_orphaned(tmp_path)
    resume: subprocess.Popen[str] | None = None
    try:
        resume = flightdeck(folder, "resume", batch_id, as_a_shell=True)
        # Both told SIGTERM by the resume, which waits for them to end.
        until(lambda: all((tmp_path / f"{c}.term").exists() for c in ("t0", "t1")), 60)
        resume.send_signal(signal.SIGINT)
        assert resume.stdout is not None
        said = read_until(resume.stdout.fileno(), "stopping all children")
        gate.touch()  # they end: the resume goes on, and stops every child
        out, err = resume.communicate(timeout=60)
        out = said + out
    finally:
        gate.touch()
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if resume is not None and resume.poll() is None:
            resume.kill()
            resume.communicate()
    assert resume.returncode == 130, out + err
    assert "as stopped" not in out, out
    assert re.search(r"^2 ended, whole process trees, before their tasks ran again: ", out, re.M)
    assert "resumed: 2 re-run" in out, out


@pytest.mark.slow
def test_resume_says_it_ends_the_dead_owner_s_processes_before_it_waits_for_them(
    tmp_path: Path,
) -> None:
    # Found by a walk-through: a resume whose dead owner's processes ignored SIGTERM said
    # nothing at all, not even the batch id, for their whole kill_grace_s.
    from helpers import read_until

    folder, batch_id, gate, _ = gated_and_orphaned(tmp_path)
    resume = flightdeck(folder, "resume", batch_id)
    try:
        assert resume.stderr is not None
        said = read_until(resume.stderr.fileno(), "kill_grace_s)")
        assert f"batch {batch_id}: 2 process(es) its dead owner left still run" in said, said
        until(lambda: all((tmp_path / f"{c}.term").exists() for c in ("t0", "t1")), 60)
        assert resume.poll() is None  # it waits for them, the line said
    finally:
        gate.touch()  # they end; their tasks run again, and end at once
    out, err = resume.communicate(timeout=60)
    assert resume.returncode == 0, out + err
    assert "2 ended, whole process trees, before their tasks ran again" in out, out
