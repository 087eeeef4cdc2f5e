"""The real Claude Code and Codex when their owner is killed (`make test-agents`): `resume`
adopts the running CLIs with no second run of a task, a steer reaches an adopted CLI, and a
steer the dead owner had written is never written again (realcli.py sets them up).
"""

from __future__ import annotations

import json
import os
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from flightdeck.engine.child.cliinput import user_turn
from flightdeck.engine.model import ChildStatus, SteerState
from flightdeck.engine.records.reader import StoreReader
from realcli import (
    CLIS,
    Flightdeck,
    called,
    goal,
    latest,
    owned_in_tool,
    project,
    read,
    tagged,
    the_steers_once_done,
    told,
    unread,
)

from agentserver import AgentServer
from helpers import ADOPTED, HANG_S, until


@pytest.mark.parametrize("cli", CLIS)
def test_a_killed_owner_is_resumed_with_no_doubles(
    tmp_path: Path, server: AgentServer, cli: str, figures: list[dict[str, Any]]
) -> None:
    repo, env = project(tmp_path, cli, server)
    names = ["t0", "t1"]
    tasks = {
        "batch": {"name": "agents", "workspace": str(repo)},
        "tasks": [{"id": name, "goal": goal(tmp_path, name)} for name in names],
    }
    (tmp_path / "tasks.yaml").write_text(json.dumps(tasks))  # JSON is YAML

    flightdeck = Flightdeck(tmp_path, env)
    owner = flightdeck.owner
    db = tmp_path / "state" / "flightdeck.db"

    def started() -> bool:
        assert owner.poll() is None, owner.communicate()
        return db.is_file()

    until(started, what="the database")
    batch: list[str] = []
    until(lambda: bool(batch.extend(filter(None, [latest(db)])) or batch), what="the batch")
    batch_id = batch[0]
    logs = tmp_path / "state" / "batches" / batch_id
    # Killed mid-tool: each CLI has called its tool (its goal names the gate from the start).
    until(lambda: all(called(read(logs / f"{n}.log")) for n in names), what="both in tools")
    before = tagged(batch_id)
    owner.send_signal(signal.SIGKILL)
    owner.communicate(timeout=HANG_S)
    assert sorted(before) == names and all(len(p) == 1 for p in before.values()), before
    doubles: list[dict[str, list[int]]] = []
    resume = flightdeck("resume", batch_id)
    until(lambda: all(ADOPTED in read(logs / f"{n}.log") for n in names), what="adopted")
    for _ in range(20):  # sampled while both run under the new owner
        now = tagged(batch_id)
        doubles += [now] if any(len(p) > 1 for p in now.values()) else []
        time.sleep(0.05)
    (tmp_path / "gate").touch()
    out, err = resume.communicate(timeout=120)
    assert resume.returncode == 0, out + err
    assert "2 adopted" in out and doubles == []
    with StoreReader(db) as reader:
        rows = {r.id: r for r in reader.children(batch_id)}
    for name in names:
        assert rows[name].status is ChildStatus.COMPLETED, rows[name].error
        text = read(logs / f"{name}.log")
        assert text.count("engine    │ run: ") == 1 and "gate open" in text
    assert tagged(batch_id) == {}
    figures.append({"cli": cli, "test": "kill -9 + resume", "adopted": 2, "doubles": 0})


@pytest.mark.parametrize("cli", CLIS)
def test_a_steer_to_an_adopted_child_is_delivered(
    tmp_path: Path, server: AgentServer, cli: str
) -> None:
    """`steer` (at the next turn) to a CLI adopted by `resume`: Claude Code takes it on its
    reopened input, Codex by resuming its session once the adopted process ended well (its
    exit status is unknown to the adopter: its result says it ended well)."""
    flightdeck, db, batch_id, log = owned_in_tool(tmp_path, server, cli)
    owner = flightdeck.owner
    owner.send_signal(signal.SIGKILL)
    owner.communicate(timeout=HANG_S)
    resume = flightdeck("resume", batch_id)
    until(lambda: ADOPTED in read(log), what="adopted")
    # It waits until the steer is delivered, which the tool's end (the gate) comes before.
    steer = flightdeck("steer", batch_id, "t0", "-m", "also the docs")
    # Claude Code: once it has read it (a gate opened before that ends the turn first).
    taken = "queued by the CLI: " if cli == "claude" else "steer (at next turn): "
    until(lambda: taken + "also the docs" in read(log), what="the steer taken")
    (receipt,) = the_steers_once_done(tmp_path, resume, db, batch_id)
    out, err = steer.communicate(timeout=60)
    assert steer.returncode == 0 and "t0: delivered" in out, out + err
    assert receipt.state is SteerState.DELIVERED, receipt
    how = "into the running turn" if cli == "claude" else "by resuming the session"
    assert receipt.how == how
    assert tagged(batch_id) == {}


def test_a_steer_the_dead_owner_wrote_is_not_written_again(
    tmp_path: Path, server: AgentServer
) -> None:
    """A steer Claude Code had read when its owner was killed is still queued in the store: the
    owner that adopts the CLI knows it by its uuid when the CLI names it, and never writes it
    again (it went into the running turn; a second copy was a second turn)."""
    flightdeck, db, batch_id, log = owned_in_tool(tmp_path, server, "claude")
    owner = flightdeck.owner
    steer = flightdeck("steer", batch_id, "t0", "-m", "also the docs")  # waits: not waited on
    until(lambda: "queued by the CLI: also the docs" in read(log), what="the steer read")
    owner.send_signal(signal.SIGKILL)
    owner.communicate(timeout=HANG_S)
    steer.communicate(timeout=60)  # it gives up on the dead owner
    resume = flightdeck("resume", batch_id)
    until(lambda: ADOPTED in read(log), what="adopted")
    (receipt,) = the_steers_once_done(tmp_path, resume, db, batch_id)
    assert (receipt.state, receipt.how) == (SteerState.DELIVERED, "into the running turn")
    assert read(log).count("sent to its input: also the docs") == 1
    assert tagged(batch_id) == {}


def test_a_steer_the_dead_owner_wrote_unread_is_not_written_again(
    tmp_path: Path, server: AgentServer
) -> None:
    """A steer written to Claude Code's input that the CLI had not read when its owner was
    killed (the CLI reads its input at once, mid-turn too: here it is stopped) is in the FIFO
    still: the adopter never writes it again, and it is delivered once, when the CLI reads it."""
    flightdeck, db, batch_id, log = owned_in_tool(tmp_path, server, "claude")
    ((cli,),) = tagged(batch_id).values()
    os.kill(cli, signal.SIGSTOP)
    try:
        first = flightdeck("steer", batch_id, "t0", "-m", "also the docs")
        until(lambda: "sent to its input: also the docs" in read(log), what="the steer written")
        flightdeck.owner.send_signal(signal.SIGKILL)
        flightdeck.owner.communicate(timeout=HANG_S)
        first.communicate(timeout=60)  # it gives up on the dead owner
        resume = flightdeck("resume", batch_id)
        until(lambda: ADOPTED in read(log), what="adopted")
        # The adopter takes its inbox in order: this one is written after the first was dealt
        # with (written again, before the fix).
        second = flightdeck("steer", batch_id, "t0", "-m", "and the tests")
        until(lambda: "sent to its input: and the tests" in read(log), what="the second written")
        # Its input holds, unread, each steer once (Claude Code 2.1 drops a second copy with
        # the same uuid, so the server cannot tell).
        lines = [user_turn(m, str(uuid.UUID(int=0))) for m in ("also the docs", "and the tests")]
        assert unread(log.parent / "io" / "t0.in") == sum(len(line.encode()) for line in lines)
    finally:
        os.kill(cli, signal.SIGCONT)
    receipts = the_steers_once_done(tmp_path, resume, db, batch_id)
    second.communicate(timeout=60)
    assert read(log).count("sent to its input: also the docs") == 1
    assert [(r.message, r.state) for r in receipts] == [
        ("also the docs", SteerState.DELIVERED),
        ("and the tests", SteerState.DELIVERED),
    ]
    assert told(server, str(tmp_path)).count("also the docs") == 1
    assert tagged(batch_id) == {}
