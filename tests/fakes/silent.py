#!/usr/bin/env python3
"""Says nothing, ever (a stalled CLI; tests/test_agents.py)."""

import time

while True:
    time.sleep(1)
