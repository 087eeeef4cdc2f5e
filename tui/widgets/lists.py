"""`Rows`: an OptionList that j and k move through, as they move through the children table
(the needs-you queue and the search's results)."""

from __future__ import annotations

from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.widgets import OptionList


class Rows(OptionList):
    """An OptionList with j and k beside the arrows."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("j", "cursor_down", "Down", show=False),
        Binding("k", "cursor_up", "Up", show=False),
    ]
