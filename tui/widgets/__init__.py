"""Widgets of the main screen: children table, transcript view, cost meter, status bar."""

from flightdeck.tui.widgets.children import ChildrenTable
from flightdeck.tui.widgets.meter import CostMeter
from flightdeck.tui.widgets.status import StatusBar, StatusLine
from flightdeck.tui.widgets.transcript import TranscriptView

__all__ = ["ChildrenTable", "CostMeter", "StatusBar", "StatusLine", "TranscriptView"]
