#!/usr/bin/env python3
"""Starts a grandchild in a session of its own (out of our process group) that ignores
SIGTERM and keeps our stdout open, then waits (tests/test_agents.py)."""

import subprocess
import sys
import time

CODE = (
    "import signal, time\n"
    "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "while True: time.sleep(1)\n"
)
grandchild = subprocess.Popen([sys.executable, "-c", CODE], start_new_session=True)
print(f"grandchild {grandchild.pid}", flush=True)
while True:
    time.sleep(1)
