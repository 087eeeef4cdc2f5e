#!/usr/bin/env python3
"""Prints escape sequences, the key the test set, and what of the environment it got."""

import os
import sys

key = os.environ.get("FAKE_KEY", "")
print(f"\x1b[31mred\x1b[0m \x1b]0;title\x07 key={key} \u202eevil")
print("env: " + " ".join(sorted(os.environ)))
print(f"stderr key={key}", file=sys.stderr)
print("last line")
