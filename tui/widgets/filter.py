"""The filter line that `/` opens under the table: parsed as it is typed, applied on a pause."""

from __future__ import annotations

from functools import partial
from typing import ClassVar

from flightdeck.tui.widgets.rows import RowFilter, parse_filter
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.timer import Timer
from textual.widgets import Input

DEBOUNCE_S = 0.15


class FilterInput(Input):
    """Edits the table's filter: each filter to show is posted as `Applied`, the end as `Closed`.

    A bad filter submitted, or an edit abandoned with Escape, restores the filter in force when
    the box opened.
    """

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

    class Applied(Message):
        """A filter the table should show now."""

        def __init__(self, row_filter: RowFilter) -> None:
            super().__init__()
            self.row_filter = row_filter

    class Rejected(Message):
        """A submitted filter does not parse; `reason` says why."""

        def __init__(self, reason: str) -> None:
            super().__init__()
            self.reason = reason

    class Closed(Message):
        """The box closed (submitted or abandoned)."""

    _before = RowFilter()
    _timer: Timer | None = None

    def open(self, current: RowFilter) -> None:
        """Show the box with `current`'s query, to edit it."""
        self._before = current
        self.value = current.query
        self.display = True
        self.screen.set_focus(self)  # now: focus() waits its turn behind keys already read

    def on_input_changed(self, event: Input.Changed) -> None:
        if not self.display:  # a key's change read after Escape or Enter closed the box
            return
        self._stop_timer()
        # Rebuilding thousands of rows per keystroke is wasted work: wait for a pause.
        self._timer = self.set_timer(DEBOUNCE_S, partial(self._parse, event.value, submitted=False))

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self._stop_timer()
        if self._parse(event.value, submitted=True):
            self._close()
        else:
            # Live filtering may have shown a valid prefix ("status"); a bad filter submitted
            # leaves the one in force before the edit.
            self.post_message(self.Applied(self._before))

    def action_cancel(self) -> None:
        self._stop_timer()
        self.post_message(self.Applied(self._before))
        self._close()

    def _parse(self, query: str, *, submitted: bool) -> bool:
        try:
            row_filter = parse_filter(query)
        except ValueError as exc:
            self.add_class("-invalid")
            # While typing, a pause often falls on an unfinished query ("status:f"): the box
            # turns red; why is said once the query is submitted.
            if submitted:
                self.post_message(self.Rejected(str(exc)))
            return False
        self.remove_class("-invalid")
        self.post_message(self.Applied(row_filter))
        return True

    def _stop_timer(self) -> None:
        if self._timer is not None:
            self._timer.stop()

    def _close(self) -> None:
        self.display = False
        self.post_message(self.Closed())
