"""The engine's warnings and errors, shown to the operator.

The engine only logs (`logging`, under "flightdeck"): a store write that failed, a transcript
that could not be appended to, a writer process that died. Left alone, Python prints those to
stderr, which the TUI swallows and which headless output mixes into its lines unsanitized.
`forward_logs` hands each one, as one sanitized line, to whatever shows it: a notification in the
TUI, a line on stderr headless. Every other command (`merge`, `discard`, `ls`, ...) prints them on
stderr the same way (`log_to_stderr`): Python's last resort would print them as they are, and
they may quote a child's output or a file name, escape sequences and all.

A failing disk fails every write: one kind of message is shown at most once per `EVERY_S`, and
the next one says how many like it were held back.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import threading
import time
from collections.abc import Callable
from typing import Literal

from flightdeck.engine.sanitize import one_line

EVERY_S = 5.0
MAX_CHARS = 300

Severity = Literal["warning", "error"]
Show = Callable[[str, Severity], None]  # called on the thread that logged


class _Forward(logging.Handler):
    def __init__(self, show: Show, clock: Callable[[], float]) -> None:
        super().__init__(logging.WARNING)
        self._show = show
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[tuple[str, object], float] = {}  # (logger, message template) -> shown
        self._held: dict[tuple[str, object], int] = {}

    def emit(self, record: logging.LogRecord) -> None:
        try:
            key = (record.name, record.msg)
            now = self._clock()
            with self._lock:
                last = self._last.get(key)
                if last is not None and now - last < EVERY_S:
                    self._held[key] = self._held.get(key, 0) + 1
                    return
                self._last[key] = now
                held = self._held.pop(key, 0)
            text = record.getMessage()
            exc = record.exc_info[1] if record.exc_info else None
            if exc is not None:  # the exception, not its traceback: one line
                text += f": {type(exc).__name__}: {exc}"
            if held:
                text += f" ({held} more like this held back)"
            severity: Severity = "error" if record.levelno >= logging.ERROR else "warning"
            self._show(one_line(text, MAX_CHARS), severity)
        except Exception:
            self.handleError(record)


_stderr: _Forward | None = None  # log_to_stderr's, set aside while forward_logs has the lines


def _print(text: str, severity: Severity) -> None:
    with contextlib.suppress(OSError, ValueError):  # stderr closed: nowhere left to say it
        sys.stderr.write(f"flightdeck: {severity}: {text}\n")
        sys.stderr.flush()


def log_to_stderr() -> None:
    """From now on (for every command), flightdeck's warnings and errors go to stderr as one
    sanitized line each, unless `forward_logs` shows them elsewhere meanwhile."""
    global _stderr
    if _stderr is None:
        _stderr = _Forward(_print, time.monotonic)
        logging.getLogger("flightdeck").addHandler(_stderr)


def forward_logs(show: Show, clock: Callable[[], float] = time.monotonic) -> Callable[[], None]:
    """From now on, flightdeck's warnings and errors go to `show` (instead of stderr, where they
    would be said twice). Returns the function that stops it."""
    logger = logging.getLogger("flightdeck")
    handler = _Forward(show, clock)
    logger.addHandler(handler)
    aside = _stderr if _stderr in logger.handlers else None
    if aside is not None:
        logger.removeHandler(aside)

    def stop() -> None:
        logger.removeHandler(handler)
        if aside is not None:
            logger.addHandler(aside)

    return stop
