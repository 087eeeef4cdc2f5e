"""Alerts: a bell (and, opted in, a desktop notification) for each new entry of the "needs you"
queue (engine/triage/needs.py: a child asks, was denied a tool, loops, failed in a way a retry
may fix, or the soft budget holds the batch's admission), batched so a burst is one alert with
counts, and never twice for the same entry.

`AlertWatch` tells from successive queues which entries are new; `AlertBatcher` decides when to
say it; `notification` builds the OSC sequence, made of counts and a sanitized batch id only, so
no text a model or a tool wrote ever reaches the terminal this way; `title` the terminal's.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from flightdeck.engine.apilight import DesktopNotify, Need
from textual.app import App

GATHER_S = 1.0  # a burst that spans a few polls still makes one alert
_FAILED = frozenset({"failed", "timed_out", "stalled", "unknown"})
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_ID_CHARS = 64
# XTWINOPS: the terminal's window title pushed on its stack before the first change, popped on
# exit; otherwise the shell was left titled "… — 2 need you" long after the TUI had gone.
TITLE_SAVE = "\x1b[22;2t"
TITLE_RESTORE = "\x1b[23;2t"
_TITLED: weakref.WeakSet[App[Any]] = weakref.WeakSet()  # apps that saved the title


@dataclass(frozen=True, slots=True)
class Alerts:
    """How many new entries of the queue: children that failed (a retry may fix it), were
    flagged looping, ask, or were denied a tool; whether the soft budget began holding
    admission (an operator's pause is no news to the operator: it rings nothing)."""

    failed: int = 0
    looping: int = 0
    held: int = 0  # times the soft budget began to hold admission
    asks: int = 0
    denied: int = 0

    def __add__(self, other: Alerts) -> Alerts:
        return Alerts(
            self.failed + other.failed,
            self.looping + other.looping,
            self.held + other.held,
            self.asks + other.asks,
            self.denied + other.denied,
        )

    def __bool__(self) -> bool:
        return bool(self.failed or self.looping or self.held or self.asks or self.denied)

    @property
    def text(self) -> str:
        """`2 ask, 1 denied a tool, 3 failed, 1 looping, budget held`: counts only."""
        parts = []
        if self.asks:
            parts.append(f"{self.asks} ask{'s' if self.asks == 1 else ''}")
        if self.denied:
            parts.append(f"{self.denied} denied a tool")
        if self.failed:
            parts.append(f"{self.failed} failed")
        if self.looping:
            parts.append(f"{self.looping} looping")
        if self.held:
            parts.append("budget held")
        return ", ".join(parts)


class AlertWatch:
    """Which entries of each queue are new: an entry (its child, reason and since, `Need.key`)
    alerts once, never again, even if it leaves the queue and comes back. The first queue is
    the baseline (what needed the operator when the screen opened is the digest's to tell)."""

    def __init__(self) -> None:
        self._seen: set[object] | None = None
        self._held = False

    def observe(self, queue: Sequence[Need]) -> Alerts:
        held = any(n.child_id is None for n in queue)
        kinds = {n.key: n.kind for n in queue if n.child_id is not None}
        if self._seen is None:
            self._seen, self._held = set(kinds), held
            return Alerts()
        fresh = [kind for key, kind in kinds.items() if key not in self._seen]
        self._seen.update(kinds)
        new = Alerts(
            failed=sum(k in _FAILED for k in fresh),
            looping=fresh.count("looping"),
            held=int(held and not self._held),  # each time it begins to hold
            asks=fresh.count("asks"),
            denied=fresh.count("denied"),
        )
        self._held = held
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


def title(batch_id: str, waiting: int) -> str:
    """The terminal's title: the batch, and how many entries need the operator (counts and a
    sanitized id only)."""
    name = f"flightdeck {safe_id(batch_id)}".strip()
    return f"{name} — {waiting} need you" if waiting else name


def set_title(app: App[object], text: str) -> None:
    """Set the app's and the terminal window's title (OSC 2) to `text` (built by `title`); the
    terminal's own is saved first, for `restore_title`."""
    app.title = text
    if app not in _TITLED:
        _TITLED.add(app)
        _write(app, TITLE_SAVE)
    _write(app, f"\x1b]2;{text}\x07")


def restore_title(app: App[Any]) -> None:
    """Put back the terminal's title `set_title` saved, if it saved one (the app is going)."""
    if app in _TITLED:
        _TITLED.discard(app)
        _write(app, TITLE_RESTORE)


def write_to_terminal(app: App[object], sequence: str) -> None:
    """Write a notification's escape sequence to the app's terminal."""
    _write(app, sequence)


def _write(app: App[object], sequence: str) -> None:
    """Write an escape sequence to the app's terminal, in order with its screen updates.

    Textual has no public call for raw output (nor sets the terminal's title): `App.bell` and
    `App.copy_to_clipboard` write their own sequences through the driver, and so does this
    (nothing under a headless test).
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
