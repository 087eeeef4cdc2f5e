"""What the app's screens take from their caller: the clock, intervals, the `[tui]` settings."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from flightdeck.engine.apilight import TuiSettings
from flightdeck.tui.lastlooked import LastLooked


@dataclass(frozen=True)
class UiOptions:
    """What tests, benchmarks and screenshots tune: the clock, poll intervals, cursor blink;
    and the `[tui]` settings, with where the last-looked mark is kept (None: nowhere)."""

    clock: Callable[[], float] = time.time
    poll_s: float = 0.3  # how often the table and meter read a fresh snapshot
    transcript_poll_s: float = 0.25
    cursor_blink: bool = True
    sort_hold_s: float = 3.0  # rows keep their places this long after a key press
    tui: TuiSettings = field(default_factory=TuiSettings)
    looked: LastLooked | None = None
