"""What the app prints when it fails: Textual's own report shows every frame's locals, where a
key can be (an attached client redacts a steer with the batch's keys, and holds the steer)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

KEY = "sk-crash-0123456789abcdef"

SCRIPT = textwrap.dedent(
    f"""
    from flightdeck.engine.api import Engine
    from types import MappingProxyType
    from flightdeck.engine.inputs.settings import Settings, default_sim_route
    from flightdeck.engine.inputs.tasks import Batch, Task
    from flightdeck.tui.app import FlightdeckApp
    from flightdeck.tui.options import UiOptions
    from flightdeck.tui.view import LiveView

    def submit(secrets):  # a frame holding a key, as Client.send's does
        raise ValueError("the store said \\x1b]8;;http://x.invalid\\x1b\\\\here\\x1b]8;;\\x1b\\\\")

    class Failing(FlightdeckApp):
        def on_ready(self):
            self.call_later(submit, ({KEY!r},))

    settings = Settings(routes=MappingProxyType({{"sim": default_sim_route(time_scale=0.001)}}))
    engine = Engine(Batch("b", (Task(id="c1", goal="g", seq=1),)), settings, state_dir="state")
    try:
        Failing(LiveView(engine), UiOptions()).run(headless=True)
    finally:
        engine.close()
    """
)


def test_a_failure_is_reported_without_locals_or_escape_sequences(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "120", "HOME": str(tmp_path)},
    )
    report = out.stdout + out.stderr
    assert "ValueError" in report and "the store said" in report, report  # it is reported
    assert "submit" in report  # with its frames
    assert KEY not in report
    assert "\x1b]" not in report
