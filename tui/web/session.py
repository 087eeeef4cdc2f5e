"""The program behind one browser tab: the attached TUI under Textual's web driver.

`flightdeck serve` has textual-serve start `python -m flightdeck.tui.web.session BATCH_ID
--state-dir DIR [--read-only] [--config FILE]` for each websocket. Nothing secret is on that
command line or in its environment: the app needs no token, the server checked it already.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from flightdeck.engine.errors import LocatedError
from flightdeck.engine.sanitize import one_line
from flightdeck.tui.exitcodes import ExitCode


def session_argv(
    state_dir: Path, batch_id: str, *, read_only: bool, config: Path | None
) -> list[str]:
    """The command line of a tab's app process on this batch."""
    argv = [sys.executable, "-m", __name__, batch_id, "--state-dir", str(state_dir.absolute())]
    if read_only:
        argv.append("--read-only")
    if config is not None:
        argv += ["--config", str(config.absolute())]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    """Run the attached TUI on one batch until the tab closes (the server says quit)."""
    from flightdeck.engine.apilight import load_settings
    from flightdeck.tui.attached import attach_tui, open_view

    parser = argparse.ArgumentParser(prog="flightdeck serve (session)")
    parser.add_argument("batch_id")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--config", type=Path)
    parser.add_argument("--read-only", action="store_true")
    args = parser.parse_args(argv)
    # Which driver Textual runs, read when it is first imported (below). textual-serve names
    # Textual's web driver; this one also ends the app when the server is gone.
    os.environ["TEXTUAL_DRIVER"] = "flightdeck.tui.web.driver:TabDriver"
    try:
        tui = load_settings(args.config).tui
        view = open_view(args.state_dir / "flightdeck.db", args.batch_id)
    except LocatedError as exc:  # the server shows our stderr in its log
        sys.stderr.write(f"flightdeck: {one_line(str(exc))}\n")
        return ExitCode.USAGE
    # Textual's web driver writes its packets to sys.__stdout__, the pipe to the server; the
    # lines attach_tui prints once the app has ended would only garble that stream.
    sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115 (held to the exit)
    return attach_tui(view, tui, read_only=args.read_only)


if __name__ == "__main__":
    sys.exit(main())
