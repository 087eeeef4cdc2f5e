"""Readers of a CLI's stdout, one module per format; `reader_for` picks one for a route."""

from __future__ import annotations

from flightdeck.engine.agents.formats.base import (
    Denied,
    Event,
    Lifecycle,
    Live,
    Model,
    OutputReader,
    Report,
    Result,
    Retrying,
    Session,
    Shown,
    ToolEnded,
    ToolStarted,
)
from flightdeck.engine.agents.formats.claude import ClaudeStreamJson
from flightdeck.engine.agents.formats.codex import CodexJson
from flightdeck.engine.agents.formats.plain import Plain
from flightdeck.engine.inputs.settings.values import OutputFormat

__all__ = [
    "Denied",
    "Event",
    "Lifecycle",
    "Live",
    "Model",
    "OutputReader",
    "Report",
    "Result",
    "Retrying",
    "Session",
    "Shown",
    "ToolEnded",
    "ToolStarted",
    "reader_for",
]


def reader_for(name: OutputFormat) -> OutputReader:
    """A fresh reader (each run of a process has its own)."""
    if name == "claude-stream-json":
        return ClaudeStreamJson()
    if name == "codex-json":
        return CodexJson()
    return Plain()
