#!/usr/bin/env python3
"""Capture the real output of Claude Code and Codex into test fixtures.

Runs each CLI (installed by `make test-agents` into .cache-agents/, or named with --bin) against
the loopback server (tests/agentserver.py) in a few scenarios, and writes what it printed to
tests/fixtures/agents/<cli>-<version>/<scenario>.jsonl. The parsers (engine/agents/formats/)
are written from, and tested on, these files; run this again when a new CLI version changes
its output, and keep the folder of the version that was tested.

    .venv/bin/python tests/agents/capture.py            # both CLIs, from .cache-agents/
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from flightdeck.engine.child.cliinput import user_turn as cli_turn  # noqa: E402

from agentserver import AgentServer  # noqa: E402

ROOT = HERE.parent.parent
FIXTURES = HERE.parent / "fixtures" / "agents"


def version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    return out.stdout.split()[-1] if "codex" in binary else out.stdout.split()[0]


def printed(argv: list[str], env: dict[str, str], cwd: Path) -> list[str]:
    """What a CLI run with no input printed on stdout, line by line."""
    done = subprocess.run(
        argv,
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    return done.stdout.splitlines(keepends=True)


def user_turn(text: str) -> str:
    return cli_turn(text, str(uuid.uuid4()))


class Claude:
    """Claude Code against the server, in a scratch HOME and folder."""

    def __init__(self, binary: str, server: AgentServer, home: Path) -> None:
        self.binary = binary
        self.env = {"PATH": os.environ["PATH"], "HOME": str(home), **server.claude_env()}
        self.cwd = home / "work"
        self.cwd.mkdir(exist_ok=True)

    def once(
        self,
        prompt: str,
        *extra: str,
        env: dict[str, str] | None = None,
        allowed: str = "Bash",
    ) -> list[str]:
        argv = [self.binary, "-p", "--output-format", "stream-json", "--verbose", *extra]
        argv += ["--allowedTools", allowed, "--", prompt]
        return printed(argv, {**self.env, **(env or {})}, self.cwd)

    def turns(self, first: str, steer: str, when: str) -> list[str]:
        """Stream-json input: `first`, then `steer` sent mid-turn (during its tool), after its
        result, or `now` (an interrupt first)."""
        argv = [self.binary, "-p", "--input-format", "stream-json", "--output-format"]
        argv += ["stream-json", "--verbose", "--replay-user-messages", "--allowedTools", "Bash"]
        proc = subprocess.Popen(
            argv,
            env=self.env,
            cwd=self.cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(user_turn(first))
        proc.stdin.flush()
        lines, sent, results = [], False, 0
        for line in proc.stdout:
            lines.append(line)
            event = json.loads(line)
            kind = event.get("type")
            tool = kind == "assistant" and any(
                b.get("type") == "tool_use" for b in event["message"]["content"]
            )
            if tool and not sent and when in ("midturn", "now"):
                sent = True
                time.sleep(0.3)
                if when == "now":
                    request = {"subtype": "interrupt"}
                    proc.stdin.write(
                        json.dumps(
                            {"type": "control_request", "request_id": "r1", "request": request}
                        )
                        + "\n"
                    )
                proc.stdin.write(user_turn(steer))
                proc.stdin.flush()
            if kind == "result":
                results += 1
                if when == "after" and not sent:
                    sent = True
                    proc.stdin.write(user_turn(steer))
                    proc.stdin.flush()
            if (
                kind == "command_lifecycle"
                and sent
                and event.get("state")
                in (
                    "completed",
                    "cancelled",
                )
            ):
                states = [json.loads(x) for x in lines if '"command_lifecycle"' in x]
                open_ = {e["command_uuid"] for e in states if e["state"] == "queued"}
                done = {
                    e["command_uuid"] for e in states if e["state"] in ("completed", "cancelled")
                }
                if open_ <= done:
                    proc.stdin.close()
        proc.wait(60)
        return lines

    def waiting_then_now(self, first: str, waiting: list[str], now: str) -> list[str]:
        """Stream-json input: `first`; during its tool, each of `waiting` once the one before
        is queued; then an interrupt and `now` (a `steer --now` behind steers that wait)."""
        argv = [self.binary, "-p", "--input-format", "stream-json", "--output-format"]
        argv += ["stream-json", "--verbose", "--replay-user-messages", "--allowedTools", "Bash"]
        proc = subprocess.Popen(
            argv,
            env=self.env,
            cwd=self.cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        stdin, stdout = proc.stdin, proc.stdout
        assert stdin is not None and stdout is not None
        sent: list[str] = []

        def send(text: str) -> None:
            sent.append(str(uuid.uuid4()))
            stdin.write(cli_turn(text, sent[-1]))
            stdin.flush()

        send(first)
        todo = list(waiting)
        lines: list[str] = []
        finals: set[str] = set()
        for line in stdout:
            lines.append(line)
            event = json.loads(line)
            tool = event.get("type") == "assistant" and any(
                b.get("type") == "tool_use" for b in event["message"]["content"]
            )
            queued = event.get("state") == "queued" and event.get("command_uuid") == sent[-1]
            if (tool and len(sent) == 1) or (queued and len(sent) > 1):
                time.sleep(0.3)
                if todo:
                    send(todo.pop(0))
                elif len(sent) == len(waiting) + 1:
                    request = {"type": "control_request", "request_id": "r1"}
                    stdin.write(json.dumps(request | {"request": {"subtype": "interrupt"}}))
                    stdin.write("\n")
                    send(now)
            if event.get("state") in ("completed", "cancelled"):
                finals.add(event["command_uuid"])
            if len(sent) == len(waiting) + 2 and set(sent) <= finals and not stdin.closed:
                stdin.close()
        proc.wait(60)
        return lines


class Codex:
    """Codex against the server, in a scratch HOME and folder."""

    def __init__(self, binary: str, server: AgentServer, home: Path) -> None:
        self.binary = binary
        self.config = server.codex_config_args()
        self.env = {"PATH": os.environ["PATH"], "HOME": str(home), "LOOPBACK_KEY": "sk-dummy"}
        self.cwd = home / "work"
        self.cwd.mkdir(exist_ok=True)

    def run(self, *args: str) -> list[str]:
        argv = [self.binary, "exec", *args[:-1], "--json", "--skip-git-repo-check"]
        if args[0] != "resume":  # a resumed session keeps its sandbox
            argv += ["--sandbox", "workspace-write"]
        argv += [*self.config, args[-1]]
        return printed(argv, self.env, self.cwd)


def write(folder: Path, name: str, lines: list[str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.jsonl").write_text("".join(lines))
    print(f"{folder.name}/{name}.jsonl: {len(lines)} events")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    bin_dir = ROOT / ".cache-agents" / "node_modules" / ".bin"
    parser.add_argument("--claude", default=str(bin_dir / "claude"))
    parser.add_argument("--codex", default=str(bin_dir / "codex"))
    args = parser.parse_args()
    with AgentServer() as server, tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        claude = Claude(args.claude, server, home)
        folder = FIXTURES / f"claude-{version(args.claude)}"
        write(folder, "tool", claude.once("list the files [tool: ls]"))
        write(folder, "retry", claude.once("retry me [429: 2]"))
        limited = {"CLAUDE_CODE_MAX_RETRIES": "1"}
        write(folder, "fail_429", claude.once("give up [fail: 429]", env=limited))
        write(folder, "fail_400", claude.once("refused [fail: 400]"))
        # Its shell tool not allowed: the call is denied, and the result lists it.
        write(folder, "denied", claude.once("clean the build [tool: rm -rf build]", allowed="Read"))
        first = "first task [tool: sleep 1; echo slept]"
        write(folder, "steer_midturn", claude.turns(first, "also check the docs", "midturn"))
        write(folder, "steer_after", claude.turns("first task", "and the changelog", "after"))
        first = "long task [tool: timeout 30 tail -f /dev/null; echo waited]"
        write(folder, "steer_now", claude.turns(first, "focus on security", "now"))
        now = claude.waiting_then_now(first, ["first", "second"], "third now")
        write(folder, "steer_now_behind_waiting", now)
        session = json.loads(Path(folder / "tool.jsonl").read_text().splitlines()[0])
        resumed = claude.once("and the changelog", "--resume", session["session_id"])
        write(folder, "resume", resumed)
        codex = Codex(args.codex, server, home)
        folder = FIXTURES / f"codex-{version(args.codex)}"
        write(folder, "tool", codex.run("list the files [tool: ls]"))
        write(folder, "retry", codex.run("retry me [429: 2]"))
        write(folder, "fail_429", codex.run("give up [fail: 429]"))
        # Its command outlives the shell's 10 s yield and the turn: its item is never completed.
        write(folder, "left_running", codex.run("wait for it [tool: sleep 25; echo slept]"))
        thread = json.loads(Path(folder / "tool.jsonl").read_text().splitlines()[0])
        write(folder, "resume", codex.run("resume", thread["thread_id"], "and the changelog"))


if __name__ == "__main__":
    main()
