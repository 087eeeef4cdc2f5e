#!/usr/bin/env python3
"""Writes a file named after its task in its working folder and prints where it ran."""

import os
import sys
from pathlib import Path

Path(f"{sys.argv[1]}.txt").write_text("written by the child\n")
print(f"cwd {os.getcwd()}")
print(f"workspace {sys.argv[2]}")
