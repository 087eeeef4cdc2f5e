#!/usr/bin/env python3
"""A plain command that holds a process tree (tests/test_adoption.py): it ignores SIGTERM and
starts a grandchild in a session of its own (out of its process group) that ignores SIGTERM
too, prints both pids, and waits for ever. Run again (MARKER exists), it says so and ends."""

import os
import signal
import subprocess
import sys
import time

marker = sys.argv[1]
if os.path.exists(marker):
    print("ran again", flush=True)
    sys.exit(0)
open(marker, "w").close()
signal.signal(signal.SIGTERM, signal.SIG_IGN)
CODE = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(10**6)\n"
grandchild = subprocess.Popen([sys.executable, "-c", CODE], start_new_session=True)
print(f"root {os.getpid()} grandchild {grandchild.pid}", flush=True)
while True:
    time.sleep(1)
