"""Alerts: a bell (and, opted in, a desktop notification) when a child fails or loops or the
soft budget holds the batch's admission, batched so a burst of failures is one alert with a count.

`AlertWatch` tells from successive snapshots what newly needs the operator; `AlertBatcher`
decides when to say it; `notification` builds the OSC sequence, made of counts and a sanitized
batch id only, so no text a model or a tool wrote ever reaches the terminal this way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from flightdeck.engine.api import DesktopNotify
from flightdeck.engine.model import ChildStatus, Snapshot
from textual.app import App

GATHER_S = 1.0  # a burst that spans a few polls still makes one alert
_FAILED = frozenset(
    {ChildStatus.FAILED, ChildStatus.TIMED_OUT, ChildStatus.STALLED, ChildStatus.UNKNOWN}
)
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_ID_CHARS = 64


@dataclass(frozen=True, slots=True)
class Alerts:
    """How many children newly failed or were flagged looping; whether the soft budget began
    holding admission (an operator's pause is no news to the operator: it rings nothing)."""

    failed: int = 0
    looping: int = 0
    held: int = 0  # times the soft budget began to hold admission

    def __add__(self, other: Alerts) -> Alerts:
        return Alerts(
            self.failed + other.failed, self.looping + other.looping, self.held + other.held
        )

    def __bool__(self) -> bool:
        return bool(self.failed or self.looping or self.held)

    @property
    def text(self) -> str:
        """`3 failed, 1 looping, budget held`: counts only."""
        parts = []
        if self.failed:
            parts.append(f"{self.failed} failed")
        if self.looping:
            parts.append(f"{self.looping} looping")
        if self.held:
            parts.append("budget held")
        return ", ".join(parts)


class AlertWatch:
    """What is new in each snapshot against the ones before; the first one is the baseline
    (what had already failed when the screen opened is the digest's to tell, not a bell's)."""

    def __init__(self) -> None:
        self._failed: set[str] | None = None
        self._looping: set[str] = set()
        self._held = False

    def observe(self, snap: Snapshot) -> Alerts:
        failed = {row.id for row in snap.children if row.status in _FAILED}
        looping = {row.id for row in snap.children if row.loop is not None}
        held = snap.limits is not None and snap.limits.soft_held is not None
        if self._failed is None:
            new = Alerts()
        else:
            new = Alerts(
                len(failed - self._failed),
                len(looping - self._looping),
                int(held and not self._held),
            )
        self._failed, self._looping, self._held = failed, looping, held
        return new


class AlertBatcher:
    """At most one alert every `every_s` seconds, carrying everything gathered since the last;
    the first of a burst waits `GATHER_S` so the rest of it joins."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self._pending = Alerts()
        self._first: float | None = None  # when the oldest pending alert came
        self._last: float | None = None  # when one was last given

    def add(self, alerts: Alerts, now: float) -> None:
        if not alerts:
            return
        if not self._pending:
            self._first = now
        self._pending = self._pending + alerts

    def due(self, now: float) -> Alerts | None:
        """The alerts to give now, or None (nothing pending, or too soon)."""
        if not self._pending or self._first is None:
            return None
        if now - self._first < GATHER_S:
            return None
        if self._last is not None and now - self._last < self.every_s:
            return None
        out, self._pending, self._first, self._last = self._pending, Alerts(), None, now
        return out


def safe_id(text: str) -> str:
    """`text` cut down to letters, digits, '.', '_' and '-': nothing a terminal could act on."""
    return _ID_UNSAFE.sub("", text)[:_ID_CHARS]


def notification(style: DesktopNotify, batch_id: str, alerts: Alerts) -> str | None:
    """The OSC sequence of a desktop notification (None for "off"): OSC 777 `notify;title;body`
    (rxvt, foot, VTE terminals, Ghostty) or OSC 9 `body` (iTerm2, Windows Terminal, kitty)."""
    if style == "off" or not alerts:
        return None
    title = f"flightdeck {safe_id(batch_id)}".strip()
    body = alerts.text  # built from integers and fixed words, nothing else
    if style == "osc777":
        return f"\x1b]777;notify;{title};{body}\x07"
    # OSC 9 has one field; the text starts with a letter, so ConEmu's "9;<digit>" progress
    # commands cannot be mistaken for it.
    return f"\x1b]9;{title}: {body}\x07"


def write_to_terminal(app: App[object], sequence: str) -> None:
    """Write an escape sequence to the app's terminal, in order with its screen updates.

    Textual has no public call for raw output: `App.bell` and `App.copy_to_clipboard` write
    their own sequences through the driver, and so does this (nothing under a headless test).
    """
    driver = app._driver
    if driver is not None and not app.is_headless:
        driver.write(sequence)


def ring(app: App[object], bell: bool, sequence: str | None) -> None:
    """Ring the terminal's bell, and write a desktop notification's sequence (`notification`)."""
    if bell:
        app.bell()
    if sequence is not None:
        write_to_terminal(app, sequence)
