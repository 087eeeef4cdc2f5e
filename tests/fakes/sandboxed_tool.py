#!/usr/bin/env python3
"""A tool run the way Codex runs one (tests/test_agents.py): in a sandbox process of a session
of its own, with a child of its own. Once GATE exists, the sandbox's group is killed and this
process exits without waiting for it, as Codex does at its turn's end while its tool still
runs: both sandbox processes, dead, fall to the owner (their subreaper) to reap."""

import os
import signal
import subprocess
import sys
import time

gate = sys.argv[1]
SLEEP = "import time; time.sleep(600)"
code = f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {SLEEP!r}]); {SLEEP}"
sandbox = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
inner = []
while not inner:  # the sandbox's own child
    try:
        with open(f"/proc/{sandbox.pid}/task/{sandbox.pid}/children") as f:
            inner = f.read().split()
    except OSError:
        pass
    time.sleep(0.01)
print(f"tool {sandbox.pid} {inner[0]}", flush=True)
while not os.path.exists(gate):
    time.sleep(0.01)
print("turn over", flush=True)
while not os.path.exists(gate + ".2"):
    time.sleep(0.01)
os.killpg(sandbox.pid, signal.SIGKILL)


def ended(pid: str) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] == "Z"
    except OSError:
        return True


while not (ended(str(sandbox.pid)) and ended(inner[0])):  # dead, not reaped by their parents
    time.sleep(0.01)
os._exit(0)  # no wait for the sandbox: its zombie goes to the subreaper
