"""One batch as a user runs it (`flightdeck run --headless`, then `ls`, `report`, `logs`,
`grep`), with a unique fake key planted everywhere a key can come back from: a route's
`api_key_env`, a gateway header (`Authorization: Bearer …`), an agent CLI's `env_pass`; echoed by
a server's errors (500 retried, 401 fatal), streamed by the model split over many chunks, read
from a file by a tool, written by `write_file`, printed by a CLI (`env`), typed into a goal and a
context. Not one byte of any of them may be in any file under the state folder or in anything
the commands print."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from pathlib import Path

from helpers import flightdeck as run_flightdeck
from loopback import Loopback, Received, Reply, ToolUse

KEY = "sk-EVERYKEY-7q8w9e0r1t2y3u4i"
TOKEN = "gw-EVERYHDR-a1s2d3f4g5h6"  # after "Bearer " in the header
PASSED = "ghp_EVERYPASS-z9x8c7v6b5"
MARK = "EVERY"  # in each, and in nothing else


def responder(received: Received) -> Reply:
    sent = json.dumps(received.body)
    if '"role": "tool"' in sent or '"tool_result"' in sent:
        return Reply(text=f"the tool said {KEY} and {TOKEN}", chunk_chars=5)
    if "ECHO" in sent:
        return Reply(text=f"here: {KEY}, Bearer {TOKEN} and {PASSED}", chunk_chars=7)
    if "FAIL500" in sent:
        return Reply(status=500, message=f"internal: {KEY} {TOKEN}")
    if "FAIL401" in sent:
        return Reply(status=401, message=f"invalid {KEY}, or token {TOKEN}")
    if "READ" in sent:
        return Reply(tools=(ToolUse("r1", "read_file", {"path": "secret.txt"}),))
    if "WRITE" in sent:
        content = f"{KEY}\n{TOKEN}\n{PASSED}"
        return Reply(tools=(ToolUse("w1", "write_file", {"path": "out.txt", "content": content}),))
    return Reply(text="done")


def test_no_planted_key_reaches_any_file_or_output(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "secret.txt").write_text(f"KEY={KEY}\nTOKEN={TOKEN}\nPASSED={PASSED}\n")
    env_cli = json.dumps(["sh", "-c", "env; cat secret.txt"])
    with Loopback(responder) as server:
        routes = ""
        for name, url in (("oa", server.openai_url), ("an", server.anthropic_url)):
            provider = "openai" if name == "oa" else "anthropic"
            routes += (
                f'[routes.{name}]\nprovider = "{provider}"\nmodel = "m"\nbase_url = "{url}"\n'
                'api_key_env = "FD_TEST_KEY"\n'
                f'headers = {{ "Authorization" = "Bearer {TOKEN}" }}\n'
                "retry = { attempts = 2, base_s = 0.01, max_s = 0.02 }\n"
                "price = { input_per_mtok = 1, output_per_mtok = 1 }\n"
            )
        (tmp_path / "flightdeck.toml").write_text(
            '[engine]\ndefault_route = "oa"\nstate_dir = "state"\n'
            + routes
            + f'[routes.cli]\nprovider = "command"\nargv = {env_cli}\napi_key_env = "FD_TEST_KEY"\n'
            'env_pass = ["FD_TEST_PASSED"]\n'
        )
        tasks = [
            {"id": f"{route}-{kind.lower()}", "goal": f"{kind} please", "route": route}
            for route in ("oa", "an")
            for kind in ("ECHO", "FAIL500", "FAIL401", "READ", "WRITE")
        ]
        tasks.append({"id": "cli", "goal": "print the environment", "route": "cli"})
        tasks.append({"id": "typed", "goal": f"use {KEY}", "context": f"{TOKEN} {PASSED}"})
        (tmp_path / "tasks.toml").write_text(
            '[batch]\nname = "everywhere"\nworkspace = "ws"\n'
            + "".join(
                "[[tasks]]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in t.items())
                for t in tasks
            )
        )
        env = {"FD_TEST_KEY": KEY, "FD_TEST_PASSED": PASSED}
        flightdeck = functools.partial(run_flightdeck, cwd=tmp_path, timeout=120, env=env)

        run = flightdeck("run", "tasks.toml", "--headless")
        sent = [json.dumps(r.body) for r in server.received]
    assert run.returncode == 1, run.stderr  # the FAIL children failed, the others completed
    batch_id = run.stdout.split()[1]  # "batch ID" heads the output
    commands = [
        run,
        flightdeck("ls"),
        flightdeck("report"),
        flightdeck("report", "--format", "json"),
        flightdeck("grep", batch_id, "REDACTED"),
        *(
            flightdeck("logs", batch_id, child)
            for child in ("oa-echo", "an-echo", "an-fail401", "oa-read", "oa-write", "cli", "typed")
        ),
    ]
    assert [c.returncode for c in commands[1:]] == [0] * (len(commands) - 1), commands
    printed = "".join(c.stdout + c.stderr for c in commands)
    assert printed.count("[REDACTED]") > 10  # what the children saw, each key redacted
    assert MARK not in printed, [c.args for c in commands if MARK in c.stdout + c.stderr]
    assert (workspace / "out.txt").read_text() == "[REDACTED]\n[REDACTED]\n[REDACTED]"
    files = [p for p in (tmp_path / "state").rglob("*") if p.is_file()]
    assert any(p.name == "search.db" for p in files) and any(p.suffix == ".log" for p in files)
    assert [str(p) for p in files if MARK.encode() in p.read_bytes()] == []
    # The goal and context were redacted at start: the model was sent what the store keeps.
    # (A tool's output goes to the model as it is: the model reads the file it asked for.)
    assert any("use [REDACTED]" in body for body in sent)
    assert not any(f"use {KEY}" in body or f"{TOKEN} {PASSED}" in body for body in sent)


def test_a_key_in_a_name_is_one_clear_error_and_nothing_is_written(tmp_path: Path) -> None:
    """A goal's key is redacted; a name's cannot be (two tasks could end up one, a resume would
    not find its children), so a task id or group, or the batch's name, holding a key stops the
    batch before it starts, naming the file, the line and the field, without repeating the key.
    Only what redaction would replace counts: a short value passed to the children (`test`)
    inside a longer word of a name (`unit-tests`) is left alone there, and so is the name."""
    (tmp_path / "flightdeck.toml").write_text(
        '[engine]\ndefault_route = "cli"\nstate_dir = "state"\n'
        '[routes.cli]\nprovider = "command"\nargv = ["true"]\napi_key_env = "FD_TEST_KEY"\n'
        'env_pass = ["FD_SHORT"]\n'
    )
    env = {**os.environ, "NO_COLOR": "1", "FD_TEST_KEY": KEY, "FD_SHORT": "test"}
    said = "holds a value the batch redacts"
    cases = {
        "id": ('[batch]\nname = "ok"\n', f'[[tasks]]\nid = "t-{KEY}"\ngoal = "g"\n', ":3: id:"),
        "group": ('[batch]\nname = "ok"\n', f'[[tasks]]\nid = "t"\ngoal = "g"\ngroup = "{KEY}"\n',
                  ":3: group:"),
        "name": (f'[batch]\nname = "n {KEY}"\n', '[[tasks]]\nid = "t"\ngoal = "g"\n',
                 ":2: batch.name:"),
        "none": ('[batch]\nname = "unit-tests"\n', '[[tasks]]\nid = "unit-tests"\ngoal = "g"\n',
                 None),
    }  # fmt: skip
    for field, (head, task, where) in cases.items():
        (tmp_path / "tasks.toml").write_text(head + task)
        run = subprocess.run(
            [sys.executable, "-m", "flightdeck.tui.cli", "run", "tasks.toml", "--headless"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
        )
        if where is None:  # nothing redaction would touch: it runs
            assert run.returncode == 0, (field, run.stdout, run.stderr)
            continue
        assert run.returncode == 2, (field, run.stdout, run.stderr)
        assert f"tasks.toml{where} {said}" in run.stderr, run.stderr
        assert MARK not in run.stdout + run.stderr
        batches = tmp_path / "state" / "batches"
        assert not batches.exists() or not any(batches.iterdir()), field


def test_a_key_in_a_file_name_is_not_recorded(tmp_path: Path) -> None:
    """A file whose name holds a key, made in a child's own worktree: by a model with
    `write_file` (its path is the model's text, as its content is), and by an agent CLI (a
    command child). The model's write is refused (it is told why, and writes nothing); the
    CLI's file name reaches neither the store (the child's changes, whose files the detail pane
    and `report --format json` list) nor what `report` and `logs` print."""
    from gitrepo import GIT_ENV, make_repo

    repo = make_repo(tmp_path / "repo", {"README.md": "hello\n"})

    def writer(received: Received) -> Reply:
        if '"role": "tool"' in json.dumps(received.body):
            return Reply(text="done")
        args = {"path": f"notes-{KEY}.txt", "content": "some notes\n"}
        return Reply(tools=(ToolUse("w1", "write_file", args),))

    cli = json.dumps(["sh", "-c", 'echo hi > "cli-$FD_TEST_KEY.txt"'])
    with Loopback(writer) as server:
        (tmp_path / "flightdeck.toml").write_text(
            '[engine]\ndefault_route = "oa"\nstate_dir = "state"\n'
            f'[routes.oa]\nprovider = "openai"\nmodel = "m"\nbase_url = "{server.openai_url}"\n'
            'api_key_env = "FD_TEST_KEY"\nworkspace = "worktree"\n'
            "price = { input_per_mtok = 1, output_per_mtok = 1 }\n"
            f'[routes.cli]\nprovider = "command"\nargv = {cli}\napi_key_env = "FD_TEST_KEY"\n'
            'workspace = "worktree"\n'
        )
        (tmp_path / "tasks.toml").write_text(
            f'[batch]\nname = "names"\nworkspace = "{repo}"\n'
            '[[tasks]]\nid = "model"\ngoal = "write your notes"\n'
            '[[tasks]]\nid = "cli"\ngoal = "write a file"\nroute = "cli"\n'
        )
        env = {**GIT_ENV, "FD_TEST_KEY": KEY}
        flightdeck = functools.partial(run_flightdeck, cwd=tmp_path, timeout=120, env=env)

        run = flightdeck("run", "tasks.toml", "--headless")
    assert run.returncode == 0, run.stdout + run.stderr
    batch_id = run.stdout.split()[1]
    report = flightdeck("report", "--format", "json")
    logs = flightdeck("logs", batch_id, "model")
    assert report.returncode == 0 and logs.returncode == 0, report.stderr + logs.stderr
    data = json.loads(report.stdout)
    changed = {c["child_id"]: (c["summary"], c["files"]) for c in data["changes"]}
    assert changed == {"cli": ("+1 −0 in 1 file", ["cli-[REDACTED].txt"])}, changed
    said = "error: path 'notes-[REDACTED].txt' holds a value the batch redacts"
    assert said in logs.stdout, logs.stdout
    printed = run.stdout + run.stderr + report.stdout + logs.stdout + logs.stderr
    assert MARK not in printed
    state = tmp_path / "state"
    own = state / "batches" / batch_id / "workspaces"
    assert not (own / "model").exists()  # it changed nothing: removed at its end
    # Only the CLI's own file holds the key in its name (the CLI's, as its workspace's files are).
    outside = [p for p in state.rglob("*") if own / "cli" not in p.parents and p != own / "cli"]
    assert [str(p) for p in outside if MARK in p.name] == []
    files = [p for p in outside if p.is_file()]
    assert any(p.name == "flightdeck.db" for p in files)
    assert [str(p) for p in files if MARK.encode() in p.read_bytes()] == []
