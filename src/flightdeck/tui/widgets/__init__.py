"""Widgets of the main screen: children table, transcript view, cost meter, status bar."""

from .children import ChildrenTable
from .meter import CostMeter
from .status import StatusBar, StatusLine
from .transcript import TranscriptView

__all__ = ["ChildrenTable", "CostMeter", "StatusBar", "StatusLine", "TranscriptView"]
