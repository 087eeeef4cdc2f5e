"""Kept for the transcript pane while it moves: the Waker lives in engine/attached/watch.py."""

from flightdeck.engine.attached.watch import Waker

__all__ = ["Waker"]
