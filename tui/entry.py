"""The `flightdeck` console script: `cli.main`, with a Ctrl+C while the program still loads
(its imports take a fraction of a second, more on a busy machine) said as after: exit 130."""

from __future__ import annotations

import sys

from flightdeck.tui.exitcodes import ExitCode


def main() -> int:
    """Load the command line and run it; interrupted while loading, say so in one line."""
    try:
        from flightdeck.tui.cli import main as run

        return run()
    except KeyboardInterrupt:  # cli.main says its own; this is before it could (a traceback)
        sys.stderr.write("flightdeck: interrupted\n")
        return ExitCode.INTERRUPTED
