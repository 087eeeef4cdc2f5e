#!/usr/bin/env python3
"""A fake `claude -p --output-format stream-json --verbose`, written from Claude Code 2.1.332's
captured output (tests/fixtures/agents/claude-2.1.332/) so it behaves as the CLI does:

- `system` `init` (session, model), `assistant` events one per content block carrying the
  message id and its usage so far, `user` tool results, one `result` per turn with `num_turns`,
  `total_cost_usd` (the session's running total), `modelUsage` (two models: the main one and a
  small one for the CLI's own side calls, so `usage` counts less than the cost is for) and
  `model_usage_since_last_result`;
- `--input-format stream-json`: user turns on stdin, exiting when its input ends. A message
  that arrives while a turn runs is folded into that turn (it reaches the model with the next
  tool result) and the turn ends with one `result` for both; once a turn ends, the next one
  takes every message waiting, joined by newlines, each started in turn (the first turn takes
  the first message alone). `--replay-user-messages` echoes each message and reports
  `command_lifecycle` events (queued, started, completed, cancelled) by its uuid;
- a `control_request` `interrupt` ends the running turn at once (`error_during_execution`); the
  messages that arrived in it and had not started stay queued (its `control_response` lists
  them as `still_queued`) and open the next turn with what came after
  (steer_now_behind_waiting.jsonl).

Fake-only flags: `--fake-gate PATH`: its tool runs until PATH exists; `--fake-hold PATH`: the
first turn starts once PATH exists (what reached stdin by then waits its turn); `--fake-sleep
S`: waits after init; `--fake-repeat N`: the tool call N times per turn; `--fake-retries N`: N
`api_retry` events before the first answer (and `--fake-retry-hold PATH`: quiet until PATH
exists, as in a backoff); `--fake-fail TEXT`: the turn fails with TEXT (exit
1); `--fake-pidfile PATH`: its pid is written there; `--fake-linger PATH`: once its input
has ended, it exits only when PATH exists (as Claude Code waits on a command it moved to the
background: its `task_updated` events say so before each result, and once PATH exists).
"""

import argparse
import json
import os
import queue
import sys
import threading
import time

parser = argparse.ArgumentParser()
parser.add_argument("-p", action="store_true")
parser.add_argument("--output-format")
parser.add_argument("--input-format", default="text")
parser.add_argument("--verbose", action="store_true")
parser.add_argument("--replay-user-messages", action="store_true")
parser.add_argument("--resume")
parser.add_argument("--model", default="claude-fake-4")
parser.add_argument("--allowedTools")
parser.add_argument("--fake-gate")
parser.add_argument("--fake-hold")
parser.add_argument("--fake-sleep", type=float, default=0.0)
parser.add_argument("--fake-repeat", type=int, default=1)
parser.add_argument("--fake-retries", type=int, default=0)
parser.add_argument("--fake-retry-hold")
parser.add_argument("--fake-fail")
parser.add_argument("--fake-pidfile")
parser.add_argument("--fake-linger")
parser.add_argument("prompt", nargs="?", default="")
args = parser.parse_args()

if args.fake_pidfile:
    with open(args.fake_pidfile, "w") as f:
        f.write(str(os.getpid()))

session = args.resume or "sess-0001"
state = {"cost": 0.0, "message": 0, "tool": 0}
MAIN, SIDE = 0.0123, 0.0004  # each turn's cost: the main model's calls and a side call
inbox: "queue.Queue[dict | None]" = queue.Queue()
reading = threading.Lock()
held: list[dict] = []  # messages an interrupt left queued: the next turn takes them first


def emit(event):
    print(json.dumps(event), flush=True)


def lifecycle(message_id, name):
    if args.replay_user_messages and message_id:
        emit({"type": "command_lifecycle", "command_uuid": message_id, "state": name})


def read_stdin():
    fd, rest = sys.stdin.fileno(), b""
    while chunk := os.read(fd, 65536):
        *lines, rest = (rest + chunk).split(b"\n")
        # Queued means a turn can take it now, and it is said before any turn does: a test
        # that waits for "queued" knows the running turn's next poll folds it in. What one
        # write held (an interrupt and its message) is queued at once.
        with reading:
            for line in filter(bytes.strip, lines):
                event = json.loads(line)
                inbox.put(event)
                if event.get("type") == "user":
                    lifecycle(event.get("uuid"), "queued")
    inbox.put(None)


def take(block):
    """The next message on stdin (None: input ended), once its `queued` is out."""
    event = inbox.get(block)
    with reading:
        return event


def usage(out_tokens):
    return {
        "input_tokens": 100,
        "output_tokens": out_tokens,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 50,
    }


def assistant(blocks, out_tokens=1):
    state["message"] += 1
    message_id = f"msg_{state['message']:04d}"
    for block in blocks:  # one event per content block, the message's usage on each
        message = {"id": message_id, "model": args.model, "role": "assistant"}
        message |= {"content": [block], "usage": usage(out_tokens)}
        emit({"type": "assistant", "message": message, "session_id": session})


def waiting(first_only):
    """The user messages a new turn takes: the next one (waiting for it), and unless
    `first_only` every one queued behind it; [] once input has ended."""
    taken, held[:] = held[:], []
    while not (first_only and taken):
        try:
            event = take(block=not taken)
        except queue.Empty:
            break
        if event is None:
            inbox.put(None)  # seen again by the call after this one
            break
        if event.get("type") == "user":
            taken.append(event)
    return taken


class Turn:
    """One turn: its messages, and what reached it while it ran."""

    def __init__(self, text, message_ids):
        self.text, self.message_ids = text, message_ids
        self.arrived = []  # messages that came mid-turn, not started yet
        self.folded = []  # (text, uuid) of those started in this turn
        self.calls = 0
        self.interrupted = False

    def poll(self):
        """Messages that arrived while it runs: folded in, or an interrupt."""
        while True:
            try:
                event = take(block=False)
            except queue.Empty:
                return
            if event is None:
                inbox.put(None)  # the end of input waits for the turn to end
                return
            if event.get("type") == "control_request":
                self.interrupted = True
                held.extend(self.arrived)  # not started: queued still, for the next turn
                queued = [e.get("uuid") for e in self.arrived]
                response = {"subtype": "success", "request_id": event["request_id"]}
                response["response"] = {"still_queued": queued}
                emit({"type": "control_response", "response": response})
                return
            self.arrived.append(event)

    def tool(self):
        state["tool"] += 1
        use_id = f"toolu_{state['tool']:04d}"
        self.calls += 1
        assistant(
            [
                {"type": "text", "text": "Looking at the files."},
                {"type": "tool_use", "id": use_id, "name": "Bash", "input": {"command": "ls"}},
            ]
        )
        while args.fake_gate and not os.path.exists(args.fake_gate):
            self.poll()
            if self.interrupted:
                return use_id
            time.sleep(0.02)
        self.poll()
        if self.interrupted:
            return use_id
        emit(
            {
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [
                        {"type": "tool_result", "tool_use_id": use_id, "content": "README.md"}
                    ],
                },
                "session_id": session,
            }
        )
        for event in self.arrived:  # they reach the model with the tool's result
            self.folded.append((event["message"]["content"], event.get("uuid")))
            lifecycle(event.get("uuid"), "started")
        self.arrived = []
        return None

    def run(self):
        for _ in range(args.fake_retries):
            emit(
                {
                    "type": "system",
                    "subtype": "api_retry",
                    "attempt": _ + 1,
                    "max_retries": 10,
                    "retry_delay_ms": 500,
                    "error_status": 429,
                    "error": "rate_limit",
                    "session_id": session,
                }
            )
        args.fake_retries = 0
        while args.fake_retry_hold and not os.path.exists(args.fake_retry_hold):
            time.sleep(0.02)  # the retry's backoff: quiet, and no stall
        for _ in range(args.fake_repeat):
            if self.tool() is not None:
                return self.interrupt()
        self.calls += 1
        if args.fake_fail:
            return self.result(args.fake_fail, error=True)
        texts = [self.text, *(text for text, _ in self.folded)]
        answer = ("resumed " + session + ": " if args.resume else "got: ") + " + ".join(texts)
        assistant([{"type": "text", "text": answer}], out_tokens=20)
        return self.result(answer)

    def interrupt(self):
        emit(
            {
                "type": "user",
                "message": {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "[Request interrupted by user for tool use]"}
                    ],
                },
                "session_id": session,
            }
        )
        return self.result(None, error=True, subtype="error_during_execution")

    def result(self, text, error=False, subtype="success"):
        turn = MAIN if not self.interrupted else MAIN / 2
        state["cost"] += turn + SIDE
        models = {
            args.model: {
                "inputTokens": 100 * self.calls,
                "outputTokens": 20 * self.calls,
                "cacheReadInputTokens": 1000 * self.calls,
                "cacheCreationInputTokens": 50 * self.calls,
                "costUSD": turn,
            },
            "claude-fake-haiku": {
                "inputTokens": 300,
                "outputTokens": 10,
                "cacheReadInputTokens": 0,
                "cacheCreationInputTokens": 0,
                "costUSD": SIDE,
            },
        }
        event = {
            "type": "result",
            "subtype": subtype,
            "is_error": error,
            "num_turns": self.calls,
            "result": text,
            "session_id": session,
            "total_cost_usd": round(state["cost"], 6),
            "usage": usage(20),  # the main loop's last call only, as the CLI reports it
            "modelUsage": models,  # the session's totals (this fake: the turn's)
            "model_usage_since_last_result": models,
        }
        if self.interrupted:
            event["terminal_reason"] = "aborted_tools"
        if args.fake_linger:  # its tool was moved to the background, and runs on
            task = {"type": "system", "subtype": "task_updated", "task_id": "bg1"}
            emit({**task, "patch": {"is_backgrounded": True}})
        emit(event)
        for _, message_id in self.folded:
            lifecycle(message_id, "completed")
        for message_id in self.message_ids:
            lifecycle(message_id, "cancelled" if self.interrupted else "completed")
        return 1 if error and not self.interrupted else 0


emit(
    {
        "type": "system",
        "subtype": "init",
        "session_id": session,
        "model": args.model,
        "tools": ["Bash"],
        "claude_code_version": "2.1.332-fake",
    }
)
time.sleep(args.fake_sleep)
code = 0
if args.input_format == "stream-json":
    threading.Thread(target=read_stdin, daemon=True).start()
while args.fake_hold and not os.path.exists(args.fake_hold):
    time.sleep(0.02)
if args.input_format == "stream-json":
    first = True
    while messages := waiting(first_only=first):
        first = False
        for event in messages:
            if args.replay_user_messages:
                emit({**event, "session_id": session, "isReplay": True})
            lifecycle(event.get("uuid"), "started")
        text = "\n".join(event["message"]["content"] for event in messages)
        code = Turn(text, [event.get("uuid") for event in messages]).run()
else:
    code = Turn(args.prompt, []).run()
while args.fake_linger and not os.path.exists(args.fake_linger):
    time.sleep(0.02)
if args.fake_linger:
    emit(
        {
            "type": "system",
            "subtype": "task_updated",
            "task_id": "bg1",
            "patch": {"status": "completed"},
        }
    )
    emit({"type": "system", "subtype": "background_tasks_changed", "tasks": []})
sys.exit(code)
