#!/usr/bin/env python3
"""Edits files in its working folder (a child's worktree): each FILE=TEXT argument writes TEXT
and a newline to FILE. `--hold PATH`: first waits until PATH exists (a test holds it running);
`--hold-after PATH`: the same once it has edited (held running with its changes made);
`--fail-unless PATH`: after editing, fails (exit 3) unless PATH exists (a retry then succeeds)."""

import argparse
import os
import sys
import time
from pathlib import Path

parser = argparse.ArgumentParser()
parser.add_argument("--hold")
parser.add_argument("--hold-after")
parser.add_argument("--fail-unless")
parser.add_argument("edits", nargs="*")
args = parser.parse_args()


def hold(path: str) -> None:
    deadline = time.monotonic() + 60
    print("holding", flush=True)
    while not os.path.exists(path) and time.monotonic() < deadline:
        time.sleep(0.02)


if args.hold:
    hold(args.hold)
for edit in args.edits:
    name, _, text = edit.partition("=")
    Path(name).parent.mkdir(parents=True, exist_ok=True)
    Path(name).write_text(text + "\n")
if args.hold_after:
    hold(args.hold_after)
print(f"edited {len(args.edits)} file(s) in {os.getcwd()}")
if args.fail_unless and not os.path.exists(args.fail_unless):
    print(f"not done: {args.fail_unless} is missing", file=sys.stderr)
    sys.exit(3)
