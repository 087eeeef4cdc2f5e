"""The filter line that `/` opens under the table."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.message import Message
from textual.widgets import Input


class FilterInput(Input):
    """An Input that reports Escape as `Cancelled`, so the screen can restore the old filter."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "escape",
            "cancel",
            "Cancel",
            show=False,
            id="filter.cancel",
            tooltip="Close the filter and restore the previous one",
        ),
    ]

    class Cancelled(Message):
        """The operator abandoned the edit."""

    def action_cancel(self) -> None:
        self.post_message(self.Cancelled())
