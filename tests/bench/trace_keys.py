"""What a key waits behind in the real attached process: its event loop and frames, timed.

`python tests/bench/trace_keys.py TRACE.jsonl attach BATCH --state-dir DIR` runs `flightdeck
attach` (any `flightdeck` command line) with Textual's and flightdeck's methods wrapped in
timers before the app starts; nothing else changes. `bench_keys.py` starts attach through it
with `BENCH_KEYS_TRACE=TRACE.jsonl`, and writes its keys beside it (`TRACE.jsonl.keys`).
`python tests/bench/trace_keys.py --report TRACE.jsonl` then says, for the slowest keys, where
each one's time went and what the event loop ran meanwhile.

One JSON object a line; times are `time.monotonic()` (CLOCK_MONOTONIC: the same clock in the
bench's process), durations in ms, `cpu` the thread's CPU ms meanwhile (wall well above it: the
thread waited for the GIL or a core):

- `cb`: an event-loop callback (a task's step: a message pump's messages, a timer's tick)
  longer than CB_MS, named by its task;
- `span`: one of the named calls below longer than SPAN_MS (any thread), `msg` a message's
  dispatch (`to` whom, which `msg`), `gc0`-`gc2` the garbage collector's passes; frames say
  their dirty widgets and what asked for a layout;
- `key` (`at`: `read` by the driver's thread, `app` when the app took it), `cursor` (the
  table's cursor moved), `display` (a frame handed to the writer thread), `written` (the
  writer thread wrote it to the terminal);
- `census` (with TRACE_KEYS_CENSUS=N): the tracked objects by type at the Nth full collection.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import inspect
import json
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

CB_MS = 2.0
SPAN_MS = 1.0
# At this full collection (the first is 1), count the tracked objects by type, once.
CENSUS = int(os.environ.get("TRACE_KEYS_CENSUS", "0"))
_now = time.monotonic
_cpu = time.thread_time


class Trace:
    """A JSON-lines file any thread may append to."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("w", encoding="utf-8", buffering=1 << 16)
        self._lock = threading.Lock()

    def __call__(self, **record: Any) -> None:
        line = json.dumps(record) + "\n"
        with self._lock:
            self._file.write(line)
            if record["k"] == "written":  # a few times a second: a kill loses little
                self._file.flush()

    def close(self) -> None:
        with self._lock:
            self._file.close()


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 2)


def _wrap(
    trace: Trace, owner: type, name: str, label: str, extra: Callable[..., dict] | None = None
) -> None:
    """Record calls of `owner.name` longer than SPAN_MS as spans called `label`."""
    original = getattr(owner, name)

    def record(t0: float, c0: float, args: tuple[Any, ...], info: dict[str, Any] | None) -> None:
        wall = _now() - t0
        if wall * 1000 >= SPAN_MS:
            thread = threading.current_thread().name
            fields = info or {}
            trace(
                k="span",
                what=label,
                t=round(t0, 6),
                ms=_ms(wall),
                cpu=_ms(_cpu() - c0),
                thread=thread,
                **fields,
            )

    if inspect.iscoroutinefunction(original):

        @functools.wraps(original)
        async def timed_async(*args: Any, **kwargs: Any) -> Any:
            info = extra(*args) if extra else None
            t0, c0 = _now(), _cpu()
            try:
                return await original(*args, **kwargs)
            finally:
                record(t0, c0, args, info)

        setattr(owner, name, timed_async)
    else:

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            info = extra(*args) if extra else None
            t0, c0 = _now(), _cpu()
            try:
                return original(*args, **kwargs)
            finally:
                record(t0, c0, args, info)

        setattr(owner, name, timed)


def _loop_callbacks(trace: Trace) -> None:
    """Every event-loop callback on the main thread longer than CB_MS, named by its task."""
    handle_run = asyncio.events.Handle._run
    main = threading.main_thread()

    def run(self: asyncio.events.Handle) -> None:
        if threading.current_thread() is not main:
            handle_run(self)
            return
        t0, c0 = _now(), _cpu()
        handle_run(self)
        wall = _now() - t0
        if wall * 1000 >= CB_MS:
            callback = self._callback  # type: ignore[attr-defined]
            task = getattr(callback, "__self__", None)
            if isinstance(task, asyncio.Task):
                what = task.get_name()
            else:
                what = getattr(callback, "__qualname__", repr(callback))
            trace(k="cb", what=what[:120], t=round(t0, 6), ms=_ms(wall), cpu=_ms(_cpu() - c0))

    asyncio.events.Handle._run = run  # type: ignore[method-assign]


def _collections(trace: Trace) -> None:
    """Every pass of the cyclic garbage collector longer than SPAN_MS, on whichever thread."""
    began: dict[int, tuple[float, float]] = {}
    census: list[bool] = []

    def collected(phase: str, info: dict[str, int]) -> None:
        thread = threading.get_ident()
        if phase == "start":
            began[thread] = (_now(), _cpu())
            return
        t0, c0 = began.pop(thread, (None, 0.0))
        if t0 is not None and (wall := _now() - t0) * 1000 >= SPAN_MS:
            name = threading.current_thread().name
            trace(
                k="span",
                what=f"gc{info['generation']}",
                t=round(t0, 6),
                ms=_ms(wall),
                cpu=_ms(_cpu() - c0),
                thread=name,
                collected=info["collected"],
            )
        if info["generation"] == 2 and len(census) < CENSUS:
            census.append(True)
        if info["generation"] == 2 and len(census) == CENSUS > 0:
            census.append(True)  # once: it costs a pass over every object
            kinds = Counter(type(o).__qualname__ for o in gc.get_objects())
            top = kinds.most_common(30)
            trace(k="census", t=round(_now(), 6), tracked=sum(kinds.values()), top=top)

    gc.callbacks.append(collected)


def install(trace: Trace) -> None:
    """Wrap the methods a key's path and its neighbours go through."""
    from flightdeck.engine.attached.view import StoreView
    from flightdeck.tui.app import FlightdeckApp
    from flightdeck.tui.screens.main import MainScreen
    from flightdeck.tui.tail import Tail
    from flightdeck.tui.widgets.children import ChildrenTable
    from flightdeck.tui.widgets.transcript import TranscriptView
    from textual import events
    from textual._compositor import Compositor
    from textual.app import App
    from textual.drivers import _writer_thread
    from textual.drivers.linux_driver import LinuxDriver
    from textual.message_pump import MessagePump
    from textual.screen import Screen

    _loop_callbacks(trace)
    _collections(trace)

    def frame_info(screen: Screen[Any]) -> dict[str, Any]:
        dirty = sorted({type(w).__name__ for w in screen._dirty_widgets})
        layout = sorted({type(w).__name__ for w in screen._layout_widgets})
        return {"layout": screen._layout_required, "dirty": dirty[:12], "asked": layout[:12]}

    def message_info(pump: MessagePump, message: Any) -> dict[str, Any]:
        return {"to": type(pump).__name__, "msg": type(message).__name__}

    _wrap(trace, Screen, "_on_timer_update", "frame", frame_info)
    _wrap(trace, Screen, "_refresh_layout", "layout")
    _wrap(trace, Compositor, "render_update", "render_update")
    _wrap(trace, MessagePump, "_dispatch_message", "msg", message_info)
    _wrap(trace, MainScreen, "poll", "main.poll")
    _wrap(trace, MainScreen, "on_children_table_highlighted", "main.highlighted")
    _wrap(trace, ChildrenTable, "apply", "table.apply")
    _wrap(trace, ChildrenTable, "render_line", "table.render_line")
    _wrap(trace, TranscriptView, "_switch", "transcript.switch")
    _wrap(trace, TranscriptView, "_apply", "transcript.apply")
    _wrap(trace, TranscriptView, "poll", "transcript.poll")
    _wrap(trace, StoreView, "refresh", "store.refresh")
    _wrap(trace, Tail, "read", "tail.read")

    display = App._display

    def timed_display(self: App[Any], screen: Screen[Any], renderable: Any) -> None:
        t0, c0 = _now(), _cpu()
        display(self, screen, renderable)
        trace(k="display", t=round(t0, 6), ms=_ms(_now() - t0), cpu=_ms(_cpu() - c0))

    App._display = timed_display  # type: ignore[method-assign]

    move_to = ChildrenTable._move_to

    def timed_move(self: ChildrenTable, index: int) -> None:
        before = self.cursor_row
        move_to(self, index)
        if self.cursor_row != before:
            trace(k="cursor", t=round(_now(), 6), row=self.cursor_row)

    ChildrenTable._move_to = timed_move  # type: ignore[method-assign]

    process_message = LinuxDriver.process_message

    def read_key(self: LinuxDriver, message: Any) -> None:
        if isinstance(message, events.Key):
            trace(k="key", at="read", t=round(_now(), 6), key=message.key)
        process_message(self, message)

    LinuxDriver.process_message = read_key  # type: ignore[method-assign]

    on_event = FlightdeckApp.on_event

    async def app_key(self: FlightdeckApp, event: events.Event) -> None:
        if isinstance(event, events.Key):
            trace(k="key", at="app", t=round(_now(), 6), key=event.key)
        await on_event(self, event)

    FlightdeckApp.on_event = app_key  # type: ignore[method-assign]

    def writer_run(self: _writer_thread.WriterThread) -> None:
        # WriterThread.run, with the time each write reached the terminal.
        write, flush = self._file.write, self._file.flush
        while True:
            text = self._queue.get()
            if text is None:
                break
            write(text)
            if self._queue.qsize() == 0:
                flush()
                trace(k="written", t=round(_now(), 6), n=len(text))
        flush()

    _writer_thread.WriterThread.run = writer_run  # type: ignore[method-assign]


# --- the report -------------------------------------------------------------------------------


def _load(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(json.JSONDecodeError):  # a killed process's last line
            out.append(json.loads(line))
    return out


def report(path: Path, worst: int = 8) -> str:
    """For the `worst` slowest keys: the path's stages and what ran on the loop meanwhile."""
    records = _load(path)
    keys = json.loads(Path(f"{path}.keys").read_text(encoding="utf-8"))
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_kind.setdefault(r["k"] if r["k"] != "key" else f"key_{r['at']}", []).append(r)

    def first(kind: str, after: float) -> float | None:
        return next((r["t"] for r in by_kind.get(kind, ()) if r["t"] >= after), None)

    def stages(t0: float) -> dict[str, float | None]:
        """When (ms after the send) the driver read the key, the app took it, the cursor moved
        and the next frame reached the terminal."""
        read = first("key_read", t0)
        app = first("key_app", read or t0)
        cursor = first("cursor", app or t0)
        shown = first("written", cursor or t0)
        at = {"read": read, "app": app, "cursor": cursor, "written": shown}
        return {k: None if t is None else round((t - t0) * 1000, 1) for k, t in at.items()}

    every = [stages(key["t"]) for key in keys]
    lines = ["stage medians and maxima (ms from the previous stage, all keys):"]
    previous = None
    for name in ("read", "app", "cursor", "written"):
        gaps = sorted(
            s[name] - (s[previous] if previous else 0)  # type: ignore[operator]
            for s in every
            if s[name] is not None and (previous is None or s[previous] is not None)
        )
        if gaps:
            lines.append(f"  {name:8} p50 {gaps[len(gaps) // 2]:.1f}  max {gaps[-1]:.1f}")
        previous = name
    ranked = sorted(keys, key=lambda k: -k["ms"])
    for key in ranked[:worst]:
        t0, end = key["t"], key["t"] + key["ms"] / 1000
        lines.append(f"key {key['key']} {key['ms']:.1f} ms: at (ms after send) {stages(t0)}")
        window = [
            r
            for r in records
            if r["k"] in ("cb", "span", "display")
            and r["t"] < end
            and r["t"] + r["ms"] / 1000 > t0 - 0.05
        ]
        for r in sorted(window, key=lambda r: r["t"]):
            at = round((r["t"] - t0) * 1000, 1)
            extra = {k: v for k, v in r.items() if k not in ("k", "t", "ms", "cpu", "what")}
            lines.append(
                f"    {at:8.1f} {r['k']:7} {r.get('what', ''):28} {r['ms']:7.1f} ms "
                f"(cpu {r.get('cpu', 0):.1f}) {extra if extra else ''}"
            )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--report"]:
        print(report(Path(argv[1]), int(argv[2]) if len(argv) > 2 else 8))
        return 0
    trace = Trace(Path(argv[0]))
    install(trace)
    from flightdeck.tui.cli import main as cli_main

    try:
        return int(cli_main(argv[1:]))
    finally:
        trace.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
