#!/usr/bin/env python3
"""Prints one JSON line nested past Python's stack, then waits (tests/test_agents.py)."""

import sys
import time

print("[" * 30_000, flush=True)
sys.stdout.write('{"type": "system", "subtype": "init", "x": ' + "[" * 30_000 + "\n")
sys.stdout.flush()
while True:
    time.sleep(1)
