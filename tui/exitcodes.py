"""The process exit codes of `flightdeck`, one table for the TUI and the headless runner."""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """What `flightdeck` returns; the signal codes are 128 + the signal, as a shell shows them."""

    OK = 0
    """Every child completed (`report` and `ls`: the command did what it was asked)."""
    INCOMPLETE = 1
    """Some child failed, was stopped, timed out or stalled; or the TUI crashed."""
    USAGE = 2
    """Bad input: a task file, the config, an argument, an unusable state folder."""
    NOT_RECORDED = 3
    """The batch failed as a whole: the store could not commit (a full disk, an I/O error)
    for longer than `store_retry_s`, or an engine thread failed; stderr says why, and how many
    children's ends could not be recorded."""
    HANGUP = 129
    """SIGHUP headless (its terminal closed): every child stopped and recorded, as for SIGTERM."""
    INTERRUPTED = 130
    """Ctrl+C headless, or "stop all and quit" in the TUI: every child stopped and recorded."""
    OUTPUT_CLOSED = 141
    """The reader of our output went away (SIGPIPE): children still running were stopped."""
    TERMINATED = 143
    """SIGTERM: every child stopped and recorded, as for an interrupt."""


class OutputClosed(Exception):
    """Whoever read our output has gone (`flightdeck run … | head -1`): OUTPUT_CLOSED."""


class OutputFailed(Exception):
    """Our output could not be written whole (a full disk under `> report.md`): the message
    says where and why; INCOMPLETE."""
