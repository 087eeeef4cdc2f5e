"""A key the operator types (into a goal, a context, a steer or an answer) is redacted as the
batch takes it: never stored, shown, reported or sent to the model (owner/keys.py).

Each test plants a unique fake key, runs a real batch against the loopback server (real SDKs,
real SQLite), and greps every file under the state folder and what the commands print."""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from types import MappingProxyType

from flightdeck.engine.api import Engine
from flightdeck.engine.inputs.tasks import Batch, Task
from flightdeck.tui.exitcodes import ExitCode

from helpers import flightdeck, run_to_end, settings, until
from loopback import KEY_ENV, Loopback, Received, Reply, ToolUse, route_for

KEY = "sk-TYPEDKEY-4f3e2d1c0b9a"
GATEWAY = "gw-TYPEDHDR-8a7b6c5d4e3f"  # a route's header value
MARK = b"TYPED"  # in both, and nowhere else


def leaks(state: Path, *printed: str) -> list[str]:
    """Every file under `state` (the database, its WAL, transcripts, search index, manifest,
    logs) and every printed text that holds a planted key."""
    found = [str(p) for p in state.rglob("*") if p.is_file() and MARK in p.read_bytes()]
    return found + [text for text in printed if MARK.decode() in text]


def shown(state: Path, batch_id: str, *children: str) -> list[str]:
    """What `ls`, `report` (both formats), `logs` and `grep` print of the batch."""
    runs = [
        flightdeck("ls", "--state-dir", str(state), cwd=state.parent),
        flightdeck("report", batch_id, "--state-dir", str(state), cwd=state.parent),
        flightdeck(
            "report", batch_id, "--format", "json", "--state-dir", str(state), cwd=state.parent
        ),
        flightdeck("grep", batch_id, "REDACTED", "--state-dir", str(state), cwd=state.parent),
        *(
            flightdeck("logs", batch_id, child, "--state-dir", str(state), cwd=state.parent)
            for child in children
        ),
    ]
    for run in runs:
        assert run.returncode in (ExitCode.OK, ExitCode.INCOMPLETE), (run.args, run.stderr)
    return [out for run in runs for out in (run.stdout, run.stderr)]


def gated_route(server: Loopback):  # type: ignore[no-untyped-def]
    route = route_for(server, "openai", ask_operator=True)
    headers = {"X-Gateway-Key": GATEWAY}
    return dataclasses.replace(
        route, options=MappingProxyType({**route.options, "headers": headers})
    )


def test_a_key_typed_into_a_goal_or_context_is_never_stored_shown_or_sent(
    tmp_path: Path,
) -> None:
    # Found by an audit: a goal or context holding the batch's key (or a header's value) was
    # stored in clear (children.goal, the batch's spec kept for resume) and printed by
    # `report`; the transcript alone redacted it.
    with Loopback(lambda received: Reply(text="done")) as server:
        tasks = (
            Task(id="goal", goal=f"deploy with {KEY} please", seq=0),
            Task(id="ctx", goal="deploy", context=f"the gateway takes {GATEWAY}", seq=1),
        )
        engine = Engine(
            Batch(name="typed", tasks=tasks),
            settings(gated_route(server)),
            state_dir=tmp_path / "state",
            env={KEY_ENV: KEY},
        )
        engine.start()
        rows = run_to_end(engine).children
        sent = [json.dumps(r.body) for r in server.received]
    assert [r.status.value for r in rows] == ["completed", "completed"]
    assert {r.id: r.goal for r in rows}["goal"] == "deploy with [REDACTED] please"
    assert any("[REDACTED]" in body for body in sent) and not any("TYPED" in b for b in sent)
    state = tmp_path / "state"
    assert leaks(state, *shown(state, engine.batch_id, "goal", "ctx")) == []


def test_a_key_typed_into_a_steer_or_an_answer_is_never_stored_shown_or_sent(
    tmp_path: Path,
) -> None:
    # Found by an audit: a steer's or an answer's message holding a key was stored in clear
    # (the request's payload, the control, the "answer" event) and printed by `report`'s
    # operator actions; the transcript alone redacted it. By a client (`flightdeck steer`,
    # `answer`) and by the engine's own methods alike.
    from flightdeck.engine.triage.needs import needs

    def responder(received: Received) -> Reply:
        sent = json.dumps(received.body)
        if "answered" in sent:  # the tool's result is back (with the steer, if one came)
            return Reply(text="done")
        return Reply(tools=(ToolUse("q1", "ask_operator", {"question": "which key?"}),))

    state = tmp_path / "state"
    env = {**os.environ, "NO_COLOR": "1", KEY_ENV: KEY}
    with Loopback(responder) as server:
        engine = Engine(
            Batch(
                name="typed", tasks=(Task(id="a", goal="x", seq=0), Task(id="b", goal="y", seq=1))
            ),
            settings(gated_route(server)),
            state_dir=state,
            env={KEY_ENV: KEY},
        )
        engine.start()
        try:
            until(
                lambda: len([n for n in needs(engine.snapshot()) if n.kind == "asks"]) == 2,
                what="both children asking",
            )

            def cli(*args: str) -> subprocess.Popen[str]:
                return subprocess.Popen(
                    [sys.executable, "-m", "flightdeck.tui.cli", *args, "--state-dir", str(state)],
                    cwd=tmp_path,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                    env=env,
                )

            # The steer waits for its delivery, which comes once the question is answered.
            steer = cli("steer", engine.batch_id, "a", "-m", f"steer: use {KEY}")
            until(lambda: bool(engine.receipts()), what="the client's steer queued")
            # The client holds the route's key (its variable is stored), not the header's
            # value (only its name is): the owner redacts that one, and keeps the request so.
            answer = cli("answer", engine.batch_id, "a", "-m", f"it is {KEY} or {GATEWAY}")
            client = [answer.communicate(timeout=60), steer.communicate(timeout=60)]
            codes = [answer.returncode, steer.returncode]
            engine.steer(["b"], f"steer: use {GATEWAY}")
            engine.answer(["b"], f"it is {GATEWAY}")
            rows = run_to_end(engine).children
        finally:
            engine.close()
        sent = [json.dumps(r.body) for r in server.received]
    assert codes == [ExitCode.OK, ExitCode.OK], client
    assert [r.status.value for r in rows] == ["completed", "completed"]
    assert sum("[REDACTED]" in body for body in sent) >= 2, sent
    assert not any("TYPED" in body for body in sent)
    printed = [out for pair in client for out in pair]
    with sqlite3.connect(state / "flightdeck.db") as db:
        payloads = [p for (p,) in db.execute("SELECT payload FROM requests")]
    assert len(payloads) == 2 and all("[REDACTED]" in p for p in payloads), payloads
    assert leaks(state, *printed, *shown(state, engine.batch_id, "a", "b")) == []


def test_a_schedules_template_is_redacted_as_the_batchs_own_tasks_are() -> None:
    from flightdeck.engine.inputs.tasks import Schedule
    from flightdeck.engine.owner.keys import redacted_batch

    template = Task(id="w-{wave}", goal=f"check {KEY}", seq=0, context=f"via {GATEWAY}")
    plain = Task(id="p", goal="no key here", seq=1)
    batch = Batch(
        name="typed",
        tasks=(plain,),
        schedules=(Schedule(id="s", tasks=(template,), every_s=60.0),),
    )
    redacted = redacted_batch(batch, (KEY, GATEWAY))
    [made] = redacted.schedules[0].tasks
    assert (made.goal, made.context) == ("check [REDACTED]", "via [REDACTED]")
    assert redacted.tasks[0] is plain  # a task holding no key is kept as it is
    assert redacted_batch(redacted, (KEY, GATEWAY)) is redacted  # nothing left to redact
