"""The banner: one line across the top while the engine cannot record or run as it should (the
store cannot commit, an engine thread failed); hidden otherwise."""

from __future__ import annotations

from typing import ClassVar

from flightdeck.engine.sanitize import one_line
from rich.text import Text
from textual.widgets import Static


class Banner(Static):
    """Shows `Snapshot.problem`; no space taken while there is none."""

    DEFAULT_CSS: ClassVar[str] = """
    Banner {
        display: none;
        height: auto;
        padding: 0 1;
        background: $error;
        color: $text;
        text-style: bold;
    }
    Banner.-shown {
        display: block;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id, markup=False)
        self.problem: str | None = None

    def show(self, problem: str | None) -> None:
        if problem == self.problem:
            return
        self.problem = problem
        # The reason comes from SQLite or the OS and may carry a path: sanitized, never markup.
        self.update(Text("⚠ " + one_line(problem, 400)) if problem else "")
        self.set_class(problem is not None, "-shown")
