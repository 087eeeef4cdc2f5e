#!/usr/bin/env python3
"""A stand-in for an agent CLI, shipped so anyone can try command routes with none installed.

`reviewer.py FILE` reads FILE (relative to the folder it runs in), prints what it looks at as
it goes, a line at a time, and ends with a short review: its last lines are the child's
result. It exits 1 when the file is missing, with the reason on stderr.
"""

import sys
import time
from pathlib import Path

PAUSE_S = 0.4  # slow enough to watch in the TUI

target = Path(sys.argv[1])
if not target.is_file():
    print(f"reviewer: no such file: {target}", file=sys.stderr)
    sys.exit(1)
lines = target.read_text(encoding="utf-8").splitlines()
print(f"reading {target} ({len(lines)} lines)", flush=True)
time.sleep(PAUSE_S)
functions = [
    line.split("(")[0].removeprefix("def ").strip() for line in lines if line.startswith("def ")
]
for name in functions:
    print(f"looking at {name}()", flush=True)
    time.sleep(PAUSE_S)
todos = sum("TODO" in line for line in lines)
undocumented = [
    name
    for i, line in enumerate(lines)
    if line.startswith("def ")
    for name in [line.split("(")[0].removeprefix("def ").strip()]
    if i + 1 >= len(lines) or '"""' not in lines[i + 1]
]
print(f"review of {target}:")
print(f"- {len(functions)} function(s), {todos} TODO(s)")
print(f"- without a docstring: {', '.join(undocumented) or 'none'}")
