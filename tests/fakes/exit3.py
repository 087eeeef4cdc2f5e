#!/usr/bin/env python3
"""Writes a little, then fails with exit status 3 (tests/test_agents.py)."""

import sys

print("working on it")
print("warning: something odd", file=sys.stderr)
print("fatal: could not finish", file=sys.stderr)
sys.exit(3)
