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
    Waiting,
)
from flightdeck.engine.agents.formats.claude import ClaudeStreamJson
from flightdeck.engine.agents.formats.codex import CodexJson
from flightdeck.engine.agents.formats.plain import Plain
from flightdeck.engine.inputs.settings.values import OutputFormat
from flightdeck.engine.model import Usage

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
    "Waiting",
    "reader_for",
]


def reader_for(name: OutputFormat, thread_usage: Usage | None = None) -> OutputReader:
    """A fresh reader (each run of a process has its own); `thread_usage`: what the session it
    resumes was reported to have used (Codex reports a thread's total)."""
    if name == "claude-stream-json":
        return ClaudeStreamJson()
    if name == "codex-json":
        return CodexJson(thread_usage)
    return Plain()
