"""Helpers for the `flightdeck serve` tests: a real owner, a real server, tabs over websockets."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import aiohttp
import psutil

from helpers import flightdeck

# Children that wait a day for their first token: running, and held there until stopped (the
# sim's wait wakes on stop), however loaded the machine and however long the tests sharing them
# take (test_serve's batch lasts its whole module: ten minutes, 6 to 14 with the sim's spread,
# a long module could outlast). The watchdog's stall limit is a day too: at its default, 120 s,
# a child silent that long is stalled, and on a loaded machine the module's batch had ended
# `failed` (its three children stalled) before its last test read it running.
HELD = "[engine]\nstall_after_s = 86400\n[routes.sim]\ntime_scale = 1.0\nlatency_ms = 86400000\n"
SERVE = (sys.executable, "-m", "flightdeck.tui.cli", "serve")
SESSION_MODULE = "flightdeck.tui.web.session"
_ESCAPE = re.compile(rb"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")


def start_batch(
    folder: Path, config: str = HELD, children: int = 3, tasks: Sequence[dict[str, object]] = ()
) -> str:
    """A batch run by a real owner process in the background (`run --detach`); its id. Its
    tasks (default: c1, c2, ... "Review item N")."""
    tasks = tasks or [
        {"id": f"c{i}", "goal": f"Review item {i}", "max_turns": 8} for i in range(1, children + 1)
    ]
    (folder / "flightdeck.toml").write_text(config, encoding="utf-8")
    (folder / "tasks.jsonl").write_text(
        "".join(json.dumps(task) + "\n" for task in tasks), encoding="utf-8"
    )
    result = flightdeck("run", "--detach", "tasks.jsonl", "--state-dir", "state", cwd=folder)
    assert result.returncode == 0, result.stderr
    return result.stdout.strip()


def end_batch(folder: Path, batch_id: str) -> None:
    """Stop every child and wait for the owner to record the end."""
    flightdeck("stop", batch_id, "--all", "--state-dir", "state", cwd=folder)
    flightdeck("wait", batch_id, "--state-dir", "state", cwd=folder)


def requests_of(folder: Path, batch_id: str) -> list[tuple[str, str | None]]:
    """Every command a client recorded for the batch: (kind, message)."""
    db = folder / "state" / "flightdeck.db"
    with sqlite3.connect(f"{db.resolve().as_uri()}?mode=ro", uri=True) as conn:
        rows = conn.execute(
            "SELECT kind, payload FROM requests WHERE batch_id = ? ORDER BY id", (batch_id,)
        ).fetchall()
    return [(str(kind), json.loads(payload or "{}").get("message")) for kind, payload in rows]


def wait_until(condition: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    """Poll `condition` until it holds; fail naming `what` after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}")
        time.sleep(0.05)


def ended(process: psutil.Process) -> bool:
    """Whether `process` has ended (gone, or a zombie not reaped yet). A process reaped between
    two looks raises NoSuchProcess on the second: that is ended too, not an error."""
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


class Serving:
    """A real `flightdeck serve` process on a free port, and the URL it printed."""

    def __init__(self, folder: Path, *args: str, state: str = "state") -> None:
        self.process = subprocess.Popen(
            [*SERVE, "--port", "0", "--state-dir", state, *args],
            cwd=folder,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "NO_COLOR": "1"},
        )
        assert self.process.stdout is not None
        self.url = self.process.stdout.readline().strip()
        assert "/?token=" in self.url, (self.url, self.stop())
        self.base, self.token = self.url.split("/?token=")
        self.port = int(self.base.rsplit(":", 1)[1])
        self.cookie = {f"flightdeck-{self.port}": self.token}

    def sessions(self) -> list[psutil.Process]:
        """The app processes of the open tabs."""
        found = []
        for p in psutil.Process(self.process.pid).children(recursive=True):
            try:
                if SESSION_MODULE in p.cmdline() and p.status() != psutil.STATUS_ZOMBIE:
                    found.append(p)
            except psutil.NoSuchProcess:
                continue
        return found

    def stop(self) -> str:
        """Ctrl+C, as an operator stops it; what it wrote on stderr."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        assert self.process.stdout is not None and self.process.stderr is not None
        self.process.stdout.close()
        err = self.process.stderr.read()
        self.process.stderr.close()
        return err


class Tab:
    """One browser tab's websocket, driven by hand: what the page's script would send."""

    def __init__(self, client: aiohttp.ClientSession, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.client = client
        self.ws = ws
        self.received = b""

    @classmethod
    async def open(cls, serving: Serving, path: str = "/batch/{}/ws", batch_id: str = "") -> Tab:
        client = aiohttp.ClientSession(cookies=serving.cookie)
        url = serving.base + path.format(batch_id) + "?width=150&height=45"
        ws = await client.ws_connect(url, headers={"Origin": serving.base})
        tab = cls(client, ws)
        await tab.send("resize", {"width": 150, "height": 45})
        return tab

    async def send(self, kind: str, data: object) -> None:
        await self.ws.send_str(json.dumps([kind, data]))

    async def keys(self, text: str) -> None:
        """Keys as xterm.js sends them: one "stdin" message each."""
        for char in text:
            await self.send("stdin", char)

    def text(self) -> str:
        """Everything drawn so far, escape sequences taken out."""
        return _ESCAPE.sub(b"", self.received).decode("utf-8", "replace")

    async def until(self, condition: Callable[[str], bool], what: str, timeout: float = 60) -> str:
        """Read the app's output until `condition(text)` holds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not condition(self.text()):
            left = deadline - loop.time()
            if left <= 0:
                raise AssertionError(f"timed out waiting for: {what}\n{self.text()[-2000:]}")
            try:
                message = await asyncio.wait_for(self.ws.receive(), min(left, 1.0))
            except TimeoutError:
                continue
            if message.type is aiohttp.WSMsgType.BINARY:
                self.received += message.data
            elif message.type is not aiohttp.WSMsgType.TEXT:
                raise AssertionError(f"the session ended ({message.type}) before: {what}")
        return self.text()

    async def closed_by_server(self, timeout: float = 20) -> bool:
        """Whether the server closes this tab's websocket within `timeout` s (the page then
        says "Session ended"), whatever the app drew before."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while (left := deadline - loop.time()) > 0:
            try:
                message = await asyncio.wait_for(self.ws.receive(), min(left, 1.0))
            except TimeoutError:
                continue
            if message.type not in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):
                return True
        return False

    async def close(self) -> None:
        await self.ws.close()
        await self.client.close()
