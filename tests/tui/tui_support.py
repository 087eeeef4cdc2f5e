"""Helpers for the TUI tests: sim settings, an app on a real engine, a condition poller, a
view on an owner process's batch."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from flightdeck.engine.api import Engine
from flightdeck.engine.attached.view import StoreView
from flightdeck.engine.inputs.tasks import Task
from flightdeck.engine.model import ChildStatus
from flightdeck.tui.app import FlightdeckApp
from flightdeck.tui.screens.main import MainScreen, UiOptions
from flightdeck.tui.view import LiveView
from flightdeck.tui.widgets.filter import FilterInput
from textual import events
from textual.app import App
from textual.pilot import Pilot
from textual.screen import Screen

from helpers import HANG_S, Hold

# FAST: a whole child in a fraction of a second.
FAST: dict[str, Any] = {"time_scale": 0.01, "latency_ms": 400.0, "tokens_per_s": 60.0}


def held(hold: Hold, **options: Any) -> dict[str, Any]:
    """Sim options for children that must still be running while keys are pressed: each call
    waits before its first token until `hold` releases it (seven calls, six of them tools)."""
    return {**FAST, "tool_turns": 6, **hold.options(), **options}


SIZE = (160, 50)

EngineFactory = Callable[..., Engine]


def make_tasks(goals: Sequence[str], **fields: Any) -> tuple[Task, ...]:
    """Tasks c1, c2, ... with these goals."""
    return tuple(
        Task(id=f"c{i}", goal=goal, seq=i, **fields) for i, goal in enumerate(goals, start=1)
    )


def app_for(engine: Engine) -> FlightdeckApp:
    """The real app on a real engine, polling faster than a person needs."""
    return FlightdeckApp(
        LiveView(engine), UiOptions(poll_s=0.1, transcript_poll_s=0.1, cursor_blink=False)
    )


def notices_of(app: App[Any]) -> list[str]:
    """Every notice `app` posts from now on, counted as posted: a toast leaves the app's own
    list when it expires (5 s), which a few keys can outlast on a loaded machine."""
    notices: list[str] = []
    notify = app.notify

    def counted(message: str, *args: Any, **kwargs: Any) -> None:
        notices.append(message)
        notify(message, *args, **kwargs)

    app.notify = counted  # type: ignore[method-assign]
    return notices


def on_screen(app: App[Any], kind: type[Screen[Any]]) -> bool:
    """`app` shows a screen of `kind`, composed: a pushed screen is `app.screen` a frame or more
    before its widgets are mounted, and a loaded machine stretches that gap."""
    return isinstance(app.screen, kind) and app.screen.is_mounted


async def until(
    pilot: Pilot[Any], condition: Callable[[], object], what: str, timeout: float = HANG_S
) -> None:
    """Let the app run until `condition()` holds; fail naming `what` after `timeout` s."""
    await _poll(pilot, condition, what, timeout, pilot.pause)


async def until_running(pilot: Pilot[Any], app: FlightdeckApp, children: int) -> None:
    """Wait until the table holds `children` rows, every one of them running."""
    table = app.main.table
    await until(
        pilot,
        lambda: (
            len(table.rows_by_id) == children
            and all(r.status is ChildStatus.RUNNING for r in table.rows_by_id.values())
        ),
        f"{children} children running",
    )


async def until_exited(
    pilot: Pilot[Any],
    what: str = "the app exited",
    timeout: float = HANG_S,
    by: Awaitable[object] | None = None,
) -> None:
    """Let the app run until it has exited, `by` (the `pilot.press` or `pilot.click` that ends
    it) meanwhile. Not `until`: Pilot's pause first waits for every widget on the screen to take
    a message, and a widget the exit closes in that time never does (a WaitForScreenTimeout after
    30 s, seen once in an idle `make check`). A plain sleep lets the app run on this loop
    meanwhile. Nor `await pilot.press(key)` first: press and click end in that same wait, the
    app among the widgets, and an app whose exit ran before that message came never reads it
    (the quit dialog's enter, in a `make test` on a busy machine); here that wait is dropped
    once the app is over."""
    doing = asyncio.ensure_future(by if by is not None else asyncio.sleep(0))

    def over() -> bool:
        return not pilot.app.is_running or (doing.done() and doing.exception() is not None)

    try:
        await _poll(pilot, over, what, timeout, asyncio.sleep)
    finally:
        if doing.done():
            doing.result()  # what the press or click raised, if it did
        else:
            doing.cancel()


async def _poll(
    pilot: Pilot[Any],
    condition: Callable[[], object],
    what: str,
    timeout: float,
    wait: Callable[[float], Awaitable[object]],
) -> None:
    loop = pilot.app._loop
    assert loop is not None
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        await wait(0.02)


async def filter_rows(pilot: Pilot[Any], query: str) -> None:
    """Filter the table by `query` as the operator does (/, the query, enter; "" clears it), and
    wait until the box has closed and the table has the keys again. `press` returns once the app
    has read a key, not once the box has done its work: on a loaded machine a key pressed at
    once after enter went into the closing box (the operator's `!` never opened the queue)."""
    screen = pilot.app.screen
    assert isinstance(screen, MainScreen)
    box = screen.query_one("#filter", FilterInput)
    await pilot.press("slash")
    await until(pilot, lambda: box.display and box.has_focus, "the filter box open")
    box.value = query  # as a paste over the box's text
    await pilot.press("enter")
    await until(pilot, lambda: not box.display and screen.table.has_focus, "the filter applied")


async def type_text(pilot: Pilot[Any], text: str) -> None:
    """Type `text` key by key (Pilot maps punctuation to key names)."""
    await pilot.press(*text)


def view_when_ready(db: Path, batch_id: str, timeout: float = 30, **options: Any) -> StoreView:
    """A StoreView on the batch once its row is committed: a moment after an owner prints the
    batch's id, or after an in-process engine's start()."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return StoreView(db, batch_id, **options)
        except LookupError:
            assert time.monotonic() < deadline, f"no batch {batch_id} in {db} after {timeout} s"
            time.sleep(0.01)


def burst(app: FlightdeckApp, text: str) -> None:
    """`text`'s keys as a terminal delivers them together: each posted as the driver's thread
    does, none waited on, so all are queued before the first is handled."""
    for char in text:
        key = {" ": "space", "\r": "enter", "/": "slash", ":": "colon"}.get(char, char)
        key_event = events.Key(key, char)
        key_event.set_sender(app)
        app.post_message(key_event)
