#!/usr/bin/env python3
"""A fake `codex exec --json PROMPT` / `codex exec resume THREAD --json PROMPT`, written from
Codex 0.171.0's captured output (tests/fixtures/agents/codex-0.171.0/): `thread.started`, a
warning item, `turn.started`, a command run, `turn.completed` with its usage (input tokens
counting the cached ones); `Reconnecting... i/5` errors while it retries, and `turn.failed` with
the reason when it gives up, exit 1, a warning on stderr. As the real one, a resumed thread's
usage counts the whole thread (here, one turn before this one). `--full-auto` is refused as the
real one refuses it (exit 2).

Fake-only flags: `--fake-sleep S` waits S seconds after the thread starts; `--fake-gate PATH`:
its command runs until PATH exists; `--fake-retries N`: N reconnects first; `--fake-fail`: it
gives up on a 429; `--fake-pidfile PATH`: its pid is written there; `--fake-exit N`: it exits
N after its turn completed (a run that billed a turn, then failed); `--fake-leave PATH`: its
command outlives the turn, never completed (as left_running.jsonl), and it exits once PATH exists.
"""

import argparse
import json
import os
import sys
import time

if "--full-auto" in sys.argv:
    print("error: unexpected argument '--full-auto' found", file=sys.stderr)
    sys.exit(2)
parser = argparse.ArgumentParser()
parser.add_argument("exec")
parser.add_argument("rest", nargs="+")
parser.add_argument("--json", action="store_true")
parser.add_argument("--skip-git-repo-check", action="store_true")
parser.add_argument("--sandbox")
parser.add_argument("-c", action="append", default=[])
parser.add_argument("--fake-sleep", type=float, default=0.0)
parser.add_argument("--fake-gate")
parser.add_argument("--fake-retries", type=int, default=0)
parser.add_argument("--fake-fail", action="store_true")
parser.add_argument("--fake-pidfile")
parser.add_argument("--fake-exit", type=int, default=0)
parser.add_argument("--fake-leave")
args = parser.parse_intermixed_args()
assert args.exec == "exec" and args.json
if args.fake_pidfile:
    with open(args.fake_pidfile, "w") as f:
        f.write(str(os.getpid()))
if args.rest[0] == "resume":
    thread, prompt, text = args.rest[1], args.rest[2], f"resumed {args.rest[1]}: {args.rest[2]}"
else:
    thread, prompt, text = "thread-42", args.rest[0], f"done: {args.rest[0]}"


def emit(event):
    print(json.dumps(event), flush=True)


print(
    "WARNING: proceeding, even though we could not create PATH aliases: Refusing to create "
    'helper binaries under temporary dir "/tmp"',
    file=sys.stderr,
    flush=True,
)
emit({"type": "thread.started", "thread_id": thread})
emit(
    {
        "type": "item.completed",
        "item": {
            "id": "item_0",
            "type": "error",
            "message": "Model metadata for `gpt-fake` not found. Defaulting to fallback metadata",
        },
    }
)
time.sleep(args.fake_sleep)
emit({"type": "turn.started"})
for attempt in range(1, args.fake_retries + 1):
    reason = "exceeded retry limit, last status: 429 Too Many Requests"
    emit({"type": "error", "message": f"Reconnecting... {attempt}/5 ({reason})"})
if args.fake_fail:
    reason = "exceeded retry limit, last status: 429 Too Many Requests"
    emit({"type": "error", "message": reason})
    emit({"type": "turn.failed", "error": {"message": reason}})
    sys.exit(1)
command = {"id": "item_1", "type": "command_execution", "command": "/bin/bash -lc ls"}
emit(
    {"type": "item.started", "item": {**command, "aggregated_output": "", "status": "in_progress"}}
)
while args.fake_gate and not os.path.exists(args.fake_gate):
    time.sleep(0.02)
if not args.fake_leave:
    emit(
        {
            "type": "item.completed",
            "item": {
                **command,
                "aggregated_output": "README.md\n",
                "exit_code": 0,
                "status": "completed",
            },
        }
    )
emit(
    {"type": "item.completed", "item": {"id": "item_2", "type": "reasoning", "text": "**Reading**"}}
)
emit(
    {
        "type": "item.completed",
        "item": {
            "id": "item_3",
            "type": "file_change",
            "changes": [{"path": "notes.md", "kind": "add"}],
            "status": "completed",
        },
    }
)
emit({"type": "item.completed", "item": {"id": "item_4", "type": "agent_message", "text": text}})
turns = 2 if args.rest[0] == "resume" else 1
emit(
    {
        "type": "turn.completed",
        "usage": {
            "input_tokens": 2000 * turns,
            "cached_input_tokens": 1500 * turns,
            "cache_write_input_tokens": 0,
            "output_tokens": 300 * turns,
            "reasoning_output_tokens": 0,
        },
    }
)
while args.fake_leave and not os.path.exists(args.fake_leave):
    time.sleep(0.02)
sys.exit(args.fake_exit)
