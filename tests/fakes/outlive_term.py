#!/usr/bin/env python3
"""Exits at once, leaving a child in its group that ignores SIGTERM: only SIGKILL, after the
grace period, ends it (tests/test_agents.py)."""

import os
import signal
import time

signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the child inherits it
pid = os.fork()
if pid == 0:
    while True:
        time.sleep(1)
print(f"left {pid} ignoring SIGTERM", flush=True)
