"""`flightdeck serve` in a real browser: headless Chromium (Debian's) through Playwright, on a
running batch. What the page draws is read from the websocket frames its terminal was fed;
the screenshot of the page is kept in screenshots/serve.png for the README."""

from __future__ import annotations

import re
import sqlite3
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from playwright.sync_api import BrowserContext, Page, WebSocket, sync_playwright

from serve_support import Serving, end_batch, start_batch

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOT = ROOT / "screenshots" / "serve.png"
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# Reviewers at a watchable pace: a turn every second or two, for minutes (the test stops them).
PACED = """
[routes.sim]
time_scale = 1.0
latency_ms = 500
tokens_per_s = 25
tool_turns = 40
error_rate = 0.04
retry_after_s = 2
seed = 3

[routes.sim.loops]  # reviewers reading the same files: not a loop here
repeat_calls = 0
stale_turns = 0
still_turns = 0

[routes.quick]  # one tool call, then the answer
provider = "sim"
model = "sim-1"
latency_ms = 500
tokens_per_s = 25
tool_turns = 1
"""
# Six reviewers that run for minutes, and two short tasks that are done within seconds.
TASKS = [
    {"id": "review-auth", "goal": "Review the login flow for secrets in defaults"},
    {"id": "audit-calc", "goal": "Audit src/calc.py for division by zero"},
    {"id": "tests-retry", "goal": "Propose unit tests for the retry policy"},
    {"id": "pr-412", "goal": "Review PR 412: the streaming transcript writer"},
    {"id": "pr-415", "goal": "Review PR 415: rate limits learned from 429s"},
    {"id": "docs-cli", "goal": "Check the docs for stale command examples"},
    {"id": "summarize-readme", "goal": "Summarize README.md in three sentences", "route": "quick"},
    {"id": "triage-issues", "goal": "List the open issues tagged performance", "route": "quick"},
]
_ESCAPE = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[@-Z\\-_])")


@pytest.fixture
def batch(tmp_path: Path) -> Iterator[str]:
    tasks = [{"max_turns": 50, **task} for task in TASKS]
    batch_id = start_batch(tmp_path, PACED, tasks=tasks)
    try:
        yield batch_id
    finally:
        end_batch(tmp_path, batch_id)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[BrowserContext]:
    """Debian's Chromium, headless, a fresh profile; nothing outside this machine reached."""
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "profile"),
            executable_path="/usr/bin/chromium",
            headless=True,
            args=FLAGS,
            viewport={"width": 1500, "height": 900},
        )
        context.route(re.compile(r"^(?!https?://127\.0\.0\.1[:/]).*"), lambda route: route.abort())
        try:
            yield context
        finally:
            context.close()


SHOWN: list[Screen] = []  # the page's text, for a failure to show


class Screen:
    """What the page's terminal was given to draw, from its websocket's frames."""

    def __init__(self, page: Page) -> None:
        self.data = b""
        page.on("websocket", self._watch)
        SHOWN.append(self)

    def _watch(self, ws: WebSocket) -> None:
        ws.on("framereceived", self._frame)

    def _frame(self, payload: str | bytes) -> None:
        if isinstance(payload, bytes):
            self.data += payload

    def text(self) -> str:
        return _ESCAPE.sub("", self.data.decode("utf-8", "replace"))


def wait(page: Page, condition: Callable[[], object], what: str, timeout: float = 30) -> None:
    """Let the page run until `condition` holds; fail naming `what`, with the page's text."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for: {what}\n{SHOWN[-1].text()[-3000:]}")
        page.wait_for_timeout(100)


def receipt(folder: Path, batch_id: str, message: str) -> str | None:
    with sqlite3.connect(folder / "state" / "flightdeck.db") as conn:
        row = conn.execute(
            "SELECT state FROM controls WHERE batch_id = ? AND kind = 'steer' AND message = ?",
            (batch_id, message),
        ).fetchone()
    return None if row is None else str(row[0])


def test_a_running_batch_in_chromium_steered_from_the_page(
    tmp_path: Path, batch: str, browser: BrowserContext
) -> None:
    serving = Serving(tmp_path)
    try:
        page = browser.new_page()
        screen = Screen(page)
        page.goto(serving.url)
        assert "token" not in page.url  # kept as a cookie, gone from the address bar
        page.wait_for_selector("body.-first-byte", timeout=60_000)  # the terminal has drawn
        assert page.is_visible(".xterm-screen")
        assert not page.is_visible(".intro-dialog .intro")
        wait(page, lambda: all(str(t["id"]) in screen.text() for t in TASKS), "every row")
        wait(page, lambda: "✓ 2 completed" in screen.text(), "the short tasks to complete")
        # The meter: tokens in and out, dollars spent, the burn rate (a figure, not "—").
        meter = re.compile(r"\d\S* in( · | )\d\S* out.*?\$\d+\.\d+.*?\$\d+\.\d+/min")
        wait(page, lambda: meter.search(screen.text()), "the meter")

        message = "focus on the retry path first"
        page.focus("textarea.xterm-helper-textarea")
        page.keyboard.press("s")
        wait(page, lambda: "message to the child" in screen.text(), "the steer dialog")
        page.keyboard.type(message)
        page.keyboard.press("Enter")
        wait(page, lambda: "steer queued for 1" in screen.text(), "the steer sent")
        wait(page, lambda: receipt(tmp_path, batch, message) == "delivered", "its delivery")
        wait(page, lambda: "✓ delivered" in screen.text(), "the receipt on the page")
        page.wait_for_timeout(500)  # the last frame painted
        SCREENSHOT.parent.mkdir(exist_ok=True)
        page.screenshot(path=str(SCREENSHOT))
        assert SCREENSHOT.stat().st_size > 20_000  # a drawn screen, not a blank page
        page.close()
    finally:
        serving.stop()
