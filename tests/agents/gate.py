"""A tool command for the real-CLI suite: waits until its gate file exists (a turn held open
without `sleep`, which Claude Code refuses to run for long), then says so. With `--tree`, it
first starts a grandchild in a session of its own that ignores SIGTERM, as a tool may."""

import os
import signal
import subprocess
import sys
import time

if "--tree" in sys.argv:
    code = "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(10**6)"
    child = subprocess.Popen(
        [sys.executable, "-c", code, "flightdeck-tree-marker"], start_new_session=True
    )
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
while not os.path.exists(sys.argv[1]):
    time.sleep(0.05)
print("gate open")
