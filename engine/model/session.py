"""An agent CLI's session, as a later run (a steer's resume, `retry --continue`, an owner that
adopts the process) needs it: its id, and what its turns were reported to have used."""

from __future__ import annotations

from flightdeck.engine.model import Usage
from flightdeck.engine.model.record import record


@record
class CliSession:
    """`thread`: the whole session's usage as the CLI last reported it. Codex's
    `turn.completed` counts every turn of its thread, earlier runs' too, so the run that
    resumes it is billed only what it adds beyond this (agents/formats/codex.py)."""

    id: str
    thread: Usage = Usage()


def usage_figures(usage: Usage) -> list[int]:
    """`usage` as the store's JSON keeps it."""
    return [
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_read_tokens,
        usage.cache_write_tokens,
    ]
