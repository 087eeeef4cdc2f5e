#!/usr/bin/env python3
"""A fake `codex exec --json PROMPT` / `codex exec resume THREAD --json PROMPT`
(tests/test_agents.py). `--fake-sleep S` waits S seconds after the thread starts."""

import argparse
import json
import time

parser = argparse.ArgumentParser()
parser.add_argument("exec")
parser.add_argument("rest", nargs="+")
parser.add_argument("--json", action="store_true")
parser.add_argument("--fake-sleep", type=float, default=0.0)
args = parser.parse_intermixed_args()
assert args.exec == "exec" and args.json
if args.rest[0] == "resume":
    thread, prompt, text = args.rest[1], args.rest[2], f"resumed {args.rest[1]}: {args.rest[2]}"
else:
    thread, prompt, text = "thread-42", args.rest[0], f"done: {args.rest[0]}"


def emit(event):
    print(json.dumps(event), flush=True)


emit({"type": "thread.started", "thread_id": thread})
time.sleep(args.fake_sleep)
emit({"type": "turn.started"})
emit(
    {
        "type": "item.started",
        "item": {
            "id": "item_0",
            "type": "command_execution",
            "command": "bash -lc ls",
            "aggregated_output": "",
            "status": "in_progress",
        },
    }
)
emit(
    {
        "type": "item.completed",
        "item": {
            "id": "item_0",
            "type": "command_execution",
            "command": "bash -lc ls",
            "aggregated_output": "README.md\n",
            "exit_code": 0,
            "status": "completed",
        },
    }
)
emit(
    {
        "type": "item.completed",
        "item": {"id": "item_1", "type": "reasoning", "text": "**Reading the tree**"},
    }
)
emit(
    {
        "type": "item.completed",
        "item": {
            "id": "item_2",
            "type": "file_change",
            "changes": [{"path": "notes.md", "kind": "add"}],
            "status": "completed",
        },
    }
)
emit({"type": "item.completed", "item": {"id": "item_3", "type": "agent_message", "text": text}})
emit(
    {
        "type": "turn.completed",
        "usage": {"input_tokens": 2000, "cached_input_tokens": 1500, "output_tokens": 300},
    }
)
