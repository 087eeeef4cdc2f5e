"""`format = "plain"`: every line as it comes; nothing is known of tools, usage or cost."""

from __future__ import annotations

from flightdeck.engine.agents.formats.base import Event, Shown


class Plain:
    """Each stdout line is one transcript line."""

    def feed(self, line: str) -> list[Event]:
        return [Shown("output", line)]

    def ended(self) -> list[Event]:
        return []
