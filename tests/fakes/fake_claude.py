#!/usr/bin/env python3
"""A fake `claude -p --output-format stream-json --verbose` (tests/test_agents.py).

`--input-format stream-json`: reads user turns on stdin, answers each, exits when stdin ends.
`--resume SESSION`: continues that session. `--fake-sleep S`: waits S seconds after the init
event (so a test can steer it while it runs). `--fake-repeat N`: runs its one tool call N
times per answer (a CLI stuck in a loop). The prompt is the last argument.
"""

import argparse
import json
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("-p", action="store_true")
parser.add_argument("--output-format")
parser.add_argument("--input-format", default="text")
parser.add_argument("--verbose", action="store_true")
parser.add_argument("--resume")
parser.add_argument("--fake-sleep", type=float, default=0.0)
parser.add_argument("--fake-repeat", type=int, default=1)
parser.add_argument("prompt", nargs="?", default="")
args = parser.parse_args()

session = args.resume or "sess-0001"
cost = 0.0


def emit(event):
    print(json.dumps(event), flush=True)


def tool(use_id):
    emit(
        {
            "type": "assistant",
            "session_id": session,
            "message": {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": "Looking at the files."},
                    {
                        "type": "tool_use",
                        "id": use_id,
                        "name": "Bash",
                        "input": {"command": "ls"},
                    },
                ],
            },
        }
    )
    emit(
        {
            "type": "user",
            "session_id": session,
            "message": {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": use_id,
                        "content": "README.md\nsetup.py",
                    }
                ],
            },
        }
    )


def answer(prompt, turn):
    global cost
    for n in range(args.fake_repeat):
        tool(f"tu{turn}.{n}" if n else f"tu{turn}")
    text = f"resumed {session}: {prompt}" if args.resume else f"got: {prompt}"
    emit(
        {
            "type": "assistant",
            "session_id": session,
            "message": {"role": "assistant", "content": [{"type": "text", "text": text}]},
        }
    )
    cost += 0.0123  # the session's running total, as Claude Code reports it
    emit(
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "num_turns": 2,
            "result": text,
            "session_id": session,
            "total_cost_usd": round(cost, 6),
            "usage": {
                "input_tokens": 100,
                "output_tokens": 20,
                "cache_read_input_tokens": 1000,
                "cache_creation_input_tokens": 50,
            },
        }
    )


emit(
    {
        "type": "system",
        "subtype": "init",
        "session_id": session,
        "model": "claude-fake",
        "tools": ["Bash"],
    }
)
time.sleep(args.fake_sleep)
if args.input_format == "stream-json":
    for turn, line in enumerate(sys.stdin, 1):
        message = json.loads(line)
        assert message["type"] == "user", message
        answer(message["message"]["content"], turn)
else:
    answer(args.prompt, 1)
