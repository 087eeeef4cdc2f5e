#!/usr/bin/env python3
"""Ignores SIGTERM: only SIGKILL ends it (tests/test_agents.py)."""

import os
import signal
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(f"pid {os.getpid()} ignoring SIGTERM", flush=True)
while True:
    time.sleep(1)
