"""The installed `flightdeck` script, interrupted while it still loads its modules."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from flightdeck.tui.exitcodes import ExitCode

from helpers import HANG_S, signals_as_a_shell_gives_them

# Loaded by `site` from PYTHONPATH: holds the import of flightdeck.tui.cli (the bulk of the
# start-up) until a signal ends the wait, having said so in a file the test waits for.
_HOLD = """
import os, sys, threading

class _Hold:
    def find_spec(self, name, path=None, target=None):
        if name == "flightdeck.tui.cli":
            open(os.environ["HOLD_MARK"], "w").close()
            threading.Event().wait(60)
        return None

sys.meta_path.insert(0, _Hold())
"""


def test_ctrl_c_while_the_script_loads_is_one_line_and_exit_130(tmp_path: Path) -> None:
    # A Ctrl+C in the first fraction of a second printed a KeyboardInterrupt traceback from
    # deep in an import (dataclasses, importlib), and the process died of the signal.
    (tmp_path / "sitecustomize.py").write_text(_HOLD)
    mark = tmp_path / "loading"
    script = Path(sys.executable).parent / "flightdeck"
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "HOLD_MARK": str(mark), "NO_COLOR": "1"}
    # Started as a shell starts it: a worker that ran other tests first may have SIGINT
    # ignored, which the script would inherit, and never hear the Ctrl+C.
    proc = subprocess.Popen(
        [str(script), "ls"],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=signals_as_a_shell_gives_them,
    )
    try:
        deadline = time.monotonic() + HANG_S
        while not mark.exists():  # the script is inside the held import
            assert proc.poll() is None and time.monotonic() < deadline, "never reached the import"
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=HANG_S)
    finally:  # failed, it is not left holding its import
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert err == "flightdeck: interrupted\n"
    assert proc.returncode == ExitCode.INTERRUPTED
