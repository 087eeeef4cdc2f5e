"""`flightdeck serve` as a user runs it: a real server process in front of a real owner, its
routes asked over HTTP, its tabs opened as the page's script opens them (a websocket), each tab
a real attached TUI process under Textual's web driver."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import stat
import sys
from collections.abc import Iterator
from pathlib import Path
from types import MappingProxyType

import aiohttp
import psutil
import pytest
from flightdeck.engine.api import Engine
from flightdeck.engine.attached import served
from flightdeck.engine.attached.store import StoreReader, still_running
from flightdeck.engine.inputs.settings import Settings, default_sim_route
from flightdeck.engine.inputs.tasks import Batch
from flightdeck.engine.records.processes import processes
from flightdeck.tui.exitcodes import ExitCode
from tui_support import FAST, make_tasks

from helpers import HANG_S, flightdeck
from serve_support import (
    Serving,
    Tab,
    end_batch,
    ended,
    requests_of,
    start_batch,
    wait_until,
)

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder whose state holds one running batch of three held children."""
    folder = tmp_path_factory.mktemp("serve")
    batch_id = start_batch(folder)
    (folder / "batch").write_text(batch_id, encoding="utf-8")
    try:
        yield folder
    finally:
        end_batch(folder, batch_id)


@pytest.fixture
def batch(project: Path) -> str:
    return (project / "batch").read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def shared(project: Path) -> Iterator[Serving]:
    """`flightdeck serve` on the state folder (no batch named: each tab the latest running)."""
    server = Serving(project)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def serving(shared: Serving) -> Iterator[Serving]:
    yield shared
    wait_until(lambda: shared.sessions() == [], "every tab of the test closed")


async def test_every_route_refuses_a_request_without_the_token(
    serving: Serving, batch: str
) -> None:
    paths = [
        "/",
        "/batches",
        f"/batch/{batch}",
        f"/batch/{batch}/ws",
        "/static/js/textual.js",
        "/static/",
        "/download/x",
        "/no/such/route",
    ]
    wrong = {f"flightdeck-{serving.port}": "not-the-token"}
    async with aiohttp.ClientSession() as client:
        for path in paths:
            for query, cookies in (("", None), ("?token=not-the-token", None), ("", wrong)):
                async with client.get(
                    serving.base + path + query, cookies=cookies, allow_redirects=False
                ) as answer:
                    body = await answer.text()
                    assert answer.status == 401, (path, query, cookies)
                    assert body == "401: Unauthorized\n"  # nothing about the batch
                    assert "Set-Cookie" not in answer.headers
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await client.ws_connect(f"{serving.base}/batch/{batch}/ws")
        assert refused.value.status == 401
    assert serving.sessions() == []  # no app was started for any of them


async def test_an_error_answer_is_never_cached_or_framed_either(
    serving: Serving, batch: str
) -> None:
    # The headers every answer carries, on the answers a route raises too (404, 405).
    async with aiohttp.ClientSession(cookies=serving.cookie) as client:
        for method, path, status in (
            ("GET", "/batch/nope", 404),
            ("GET", "/batch/nope/ws", 404),
            ("GET", "/no/such/route", 404),
            ("POST", f"/batch/{batch}", 405),
        ):
            async with client.request(method, serving.base + path) as answer:
                assert answer.status == status, path
                assert answer.headers.get("Cache-Control") == "no-store", path
                assert answer.headers.get("X-Frame-Options") == "DENY", path
                assert answer.headers.get("Referrer-Policy") == "no-referrer", path


async def test_a_plain_request_for_a_tab_s_websocket_is_answered_400(
    project: Path, batch: str
) -> None:
    # Not a websocket: the connection was dropped with no answer (no headers), two tracebacks
    # went to stderr, and a tab was logged opened and closed that never was.
    server = Serving(project)
    try:
        async with (
            aiohttp.ClientSession(cookies=server.cookie) as client,
            client.get(f"{server.base}/batch/{batch}/ws") as answer,
        ):
            assert answer.status == 400
            assert answer.headers.get("Cache-Control") == "no-store"
            assert answer.headers.get("X-Frame-Options") == "DENY"
        assert server.sessions() == []
    finally:
        err = server.stop()
    assert "Traceback" not in err and "tab opened" not in err, err


async def test_the_token_s_redirect_stays_on_this_server(serving: Serving) -> None:
    # The address the token's answer sends the browser to is a path here: `////evil.example/`
    # (or `/\\evil.example/`, which browsers read alike) was sent back as it came, another site.
    async with aiohttp.ClientSession() as client:
        for path in ("////evil.example/", "/\\evil.example/x", "/batch/b1"):
            url = f"{serving.base}{path}?token={serving.token}"
            async with client.get(url, allow_redirects=False) as answer:
                assert answer.status == 303, path
                where = answer.headers["Location"]
                assert where.startswith("/") and where[1:2] not in ("/", "\\"), (path, where)
            assert path != "/batch/b1" or where == path  # a path of its own is kept


async def test_the_token_opens_the_page_and_its_websocket_an_attached_app(
    serving: Serving, batch: str, project: Path
) -> None:
    jar = aiohttp.CookieJar(unsafe=True)  # a cookie from 127.0.0.1, as a browser keeps it
    async with aiohttp.ClientSession(cookie_jar=jar) as client:
        async with client.get(serving.url, allow_redirects=False) as first:
            # The token becomes a cookie; the browser goes on to the address without it.
            assert first.status == 303
            assert first.headers["Location"] == "/"
            cookie = first.cookies[f"flightdeck-{serving.port}"]
            assert cookie.value == serving.token
            assert cookie["httponly"] and cookie["samesite"] == "Strict"
        async with client.get(serving.base + "/") as page:
            assert page.status == 200
            html = await page.text()
        ws_url = f"ws://127.0.0.1:{serving.port}/batch/{batch}/ws"
        assert f'data-session-websocket-url="{ws_url}"' in html
        assert serving.token not in html
        # The page names no other site: its font comes from textual-serve's own files.
        assert "googleapis" not in html and "/static/fonts/RobotoMono" in html
        for path in ("/static/js/textual.js", "/static/fonts/RobotoMono-VariableFont_wght.ttf"):
            async with client.get(serving.base + path) as static:
                assert static.status == 200, path
        async with client.get(serving.base + "/batches") as listing:
            assert batch in await listing.text()

    tab = await Tab.open(serving, batch_id=batch)
    try:
        shown = await tab.until(
            lambda t: all(f"c{i}" in t for i in (1, 2, 3)) and batch in t, "the batch's rows"
        )
        assert "Steer" in shown  # the attached TUI's own footer
        [session] = serving.sessions()
        wait_until(lambda: _served(project, batch), "ls to show the open tab")
        listing = flightdeck("ls", "--state-dir", "state", cwd=project).stdout
        assert f":{serving.port}" in listing
        assert f"serving every batch of this folder on :{serving.port}" in listing
    finally:
        await tab.close()
    # Closing the tab ends its app; the batch runs on.
    wait_until(lambda: ended(session), "end")
    wait_until(lambda: not _served(project, batch), "the record to drop the closed tab")
    assert flightdeck("ls", "--state-dir", "state", cwd=project).stdout.count("running") == 1


def _served(folder: Path, batch_id: str) -> bool:
    return any(batch_id in s.open for s in served.live(folder / "state"))


async def test_two_tabs_at_once_each_its_own_app(serving: Serving, batch: str) -> None:
    first = await Tab.open(serving, batch_id=batch)
    second = await Tab.open(serving, batch_id=batch)
    try:
        for tab in (first, second):
            await tab.until(lambda t: "c3" in t, "the rows in both tabs")
        sessions = serving.sessions()
        assert len(sessions) == 2
        await first.close()
        wait_until(lambda: len(serving.sessions()) == 1, "the first tab's app to end")
        # The other goes on: `/` opens its filter, drawn in that tab.
        await second.keys("/")
        await second.until(lambda t: "filter:" in t, "the filter in the second tab")
    finally:
        await first.close()
        await second.close()


@pytest.mark.parametrize("read_only", [False, True], ids=["read-write", "read-only"])
async def test_a_crafted_steer_is_sent_unless_read_only(
    project: Path, batch: str, read_only: bool
) -> None:
    serving = Serving(project, *(["--read-only"] if read_only else []))
    before = requests_of(project, batch)
    message = f"focus on the tests ({'read-only' if read_only else 'read-write'})"
    try:
        tab = await Tab.open(serving, batch_id=batch)
        try:
            await tab.until(lambda t: "c1" in t, "the rows")
            # What a hand-made client can send: keys. `s`, a message, Enter; then `/`, whose
            # filter shows once every key before it has been handled.
            await tab.keys("s")
            if not read_only:
                await tab.until(lambda t: "message to the child" in t, "the steer dialog")
            await tab.keys(message + "\r")
            if read_only:
                # Every key that acts (x stop, p pause, X stop all, P, n nudge, L limits) too.
                await tab.keys("xpXPnL")
                await tab.until(lambda t: "read-only" in t, "the refusal")
            else:
                await tab.until(lambda t: "steer queued for 1" in t, "the dialog closed")
            await tab.keys("/")
            await tab.until(lambda t: "filter:" in t, "the last key handled")
        finally:
            await tab.close()
        if read_only:
            assert requests_of(project, batch) == before
        else:
            wait_until(
                lambda: ("steer", message) in requests_of(project, batch),
                "the steer recorded for the owner",
            )
    finally:
        serving.stop()


async def test_the_token_is_printed_once_and_kept_nowhere(project: Path, batch: str) -> None:
    serving = Serving(project)
    try:
        tab = await Tab.open(serving, batch_id=batch)
        try:
            await tab.until(lambda t: "c1" in t, "the rows")
            async with (  # the token in a URL, logged or not
                aiohttp.ClientSession() as client,
                client.get(serving.url, allow_redirects=False) as answer,
            ):
                assert answer.status == 303
            [session] = serving.sessions()
            assert session.parent().pid == serving.process.pid  # no shell between
            for process in (psutil.Process(serving.process.pid), session):
                assert not any(serving.token in part for part in process.cmdline())
                assert not any(serving.token in v for v in process.environ().values())
            record = served.record_path(project / "state", serving.process.pid)
            assert stat.S_IMODE(record.stat().st_mode) == 0o600
            assert stat.S_IMODE(record.parent.stat().st_mode) == 0o700
        finally:
            await tab.close()
    finally:
        err = serving.stop()
    assert "tab opened on batch" in err and "tab closed" in err
    assert serving.token not in err
    for path in (project / "state").rglob("*"):
        if path.is_file():
            assert serving.token.encode() not in path.read_bytes(), path
    assert not record.exists()  # a server that stops takes its record away


async def test_a_killed_server_leaves_no_tab_running(project: Path, batch: str) -> None:
    serving = Serving(project)
    try:
        tab = await Tab.open(serving, batch_id=batch)
        await tab.until(lambda t: "c1" in t, "the rows")
        [session] = serving.sessions()
        serving.process.send_signal(signal.SIGKILL)
        wait_until(lambda: ended(session), "the tab's app to end with its server")
        await tab.client.close()
        # Its record stays behind, stale: `ls` no longer shows it.
        assert served.record_path(project / "state", serving.process.pid).exists()
        listing = flightdeck("ls", "--state-dir", "state", cwd=project).stdout
        assert f":{serving.port}" not in listing
    finally:
        serving.stop()


async def test_a_tab_whose_app_died_is_closed_not_left_frozen(
    serving: Serving, batch: str, project: Path
) -> None:
    # An app that crashed or was killed: its page says "Session ended" instead of showing its
    # last frame as if live (keys going nowhere), and the tab is no longer counted open.
    tab = await Tab.open(serving, batch_id=batch)
    try:
        await tab.until(lambda t: "c1" in t, "the rows")
        [session] = serving.sessions()
        wait_until(lambda: _served(project, batch), "ls to show the open tab")
        session.kill()
        assert await tab.closed_by_server(), "the page of a killed app was left open"
        wait_until(lambda: not _served(project, batch), "the record to drop the dead tab")
    finally:
        await tab.close()


async def test_the_palette_s_screenshot_reaches_the_page_as_a_download(
    serving: Serving, batch: str
) -> None:
    # Textual's "Screenshot" hands its SVG to the page, which opens /download/KEY: served
    # as an attachment (the SVG holds children's text: never a page of this origin).
    tab = await Tab.open(serving, batch_id=batch)
    try:
        await tab.until(lambda t: "c1" in t, "the rows")
        await tab.keys("\x10")  # ctrl+p, as xterm.js sends it
        await tab.until(lambda t: "Search for commands" in t, "the palette")
        await tab.keys("Screenshot")
        await tab.until(lambda t: "Save an SVG" in t, "the screenshot command")
        await tab.keys("\r")
        key, deadline = None, asyncio.get_running_loop().time() + 30
        while key is None:
            left = deadline - asyncio.get_running_loop().time()
            message = await asyncio.wait_for(tab.ws.receive(), max(left, 0))
            if message.type is aiohttp.WSMsgType.TEXT:
                kind, data = json.loads(message.data)
                key = data if kind == "deliver_file_start" else None
        async with aiohttp.ClientSession(cookies=serving.cookie) as client:
            # A HEAD (a prefetch) is refused: it would have used up the one-time download.
            async with client.head(f"{serving.base}/download/{key}") as looked:
                assert looked.status == 405
            async with client.get(f"{serving.base}/download/{key}") as answer:
                assert answer.status == 200, await answer.text()
                assert answer.headers["Content-Disposition"].startswith("attachment;")
                assert answer.headers["Content-Security-Policy"] == "sandbox"
                assert answer.headers["Cache-Control"] == "no-store"
                assert "<svg" in await answer.text()
    finally:
        await tab.close()


async def test_a_websocket_from_another_origin_is_refused(serving: Serving, batch: str) -> None:
    async with aiohttp.ClientSession(cookies=serving.cookie) as client:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await client.ws_connect(
                f"{serving.base}/batch/{batch}/ws", headers={"Origin": "http://127.0.0.1:1"}
            )
        assert refused.value.status == 403
    assert serving.sessions() == []


async def test_a_named_batch_is_the_only_one_served(project: Path, batch: str) -> None:
    serving = Serving(project, batch)
    try:
        async with aiohttp.ClientSession(cookies=serving.cookie) as client:
            async with client.get(serving.base + "/") as page:
                assert f"/batch/{batch}/ws" in await page.text()
            for path in ("/batches", "/batch/another", "/batch/another/ws"):
                async with client.get(serving.base + path) as answer:
                    assert answer.status == 404, path
        listing = flightdeck("ls", "--state-dir", "state", cwd=project).stdout
        [row] = [line for line in listing.splitlines() if batch in line]
        assert f":{serving.port}" in row
        assert f"serving every batch of this folder on :{serving.port}" not in listing
    finally:
        serving.stop()


async def test_with_nothing_running_the_page_lists_the_batches(tmp_path: Path) -> None:
    # A batch whose name is hostile HTML: shown as text on the page, never as markup.
    name = '<script>alert("x")</script>'
    route = default_sim_route(**FAST)
    settings = Settings(routes=MappingProxyType({"sim": route}))
    batch = Batch(name, make_tasks(["Review a", "Review b"]))
    engine = Engine(batch, settings, state_dir=tmp_path / "state")
    try:
        engine.start()
        assert engine.wait(60)
    finally:
        engine.close()
    serving = Serving(tmp_path, "--read-only")
    try:
        async with aiohttp.ClientSession(cookies=serving.cookie) as client:
            async with client.get(serving.base + "/") as page:
                html = await page.text()
            assert f'<a href="/batch/{engine.batch_id}">{engine.batch_id}</a>' in html
            assert "No batch is running" in html and "read-only" in html
            assert "<script>alert" not in html and "&lt;script&gt;alert(&#34;x&#34;)" in html
            async with client.get(f"{serving.base}/batch/{engine.batch_id}") as page:
                assert f"/batch/{engine.batch_id}/ws" in await page.text()
        listing = flightdeck("ls", "--state-dir", "state", cwd=tmp_path).stdout
        assert f"on :{serving.port} read-only" in listing
    finally:
        serving.stop()
    # Served by its id, an ended batch is not said to run on.
    err = Serving(tmp_path, engine.batch_id).stop()
    assert "Ctrl+C stops (the batch has ended: completed)" in err and "runs on" not in err, err


async def test_the_page_of_batches_counts_what_a_dead_owner_left_running(
    tmp_path: Path,
) -> None:
    # A command child whose owner was killed runs on: the page says so, as `ls` does.
    sleeper = [sys.executable, "-c", "import time; time.sleep(600)"]
    config = (
        '[engine]\ndefault_route = "cli"\n\n[routes.cli]\nprovider = "command"\n'
        f"argv = {json.dumps(sleeper)}\n"
    )
    batch_id = start_batch(tmp_path, config, tasks=[{"id": "k1", "goal": "hold"}])
    db = tmp_path / "state" / "flightdeck.db"
    with StoreReader(db) as reader:
        info = reader.batch(batch_id)
    assert info is not None
    try:
        wait_until(lambda: still_running(db, batch_id) == 1, "the child's process recorded")
        os.kill(info.owner_pid, signal.SIGKILL)
        wait_until(lambda: "abandoned (1 still running)" in _ls(tmp_path), "ls to see it abandoned")
        serving = Serving(tmp_path)
        try:
            async with (
                aiohttp.ClientSession(cookies=serving.cookie) as client,
                client.get(serving.base + "/batches") as page,
            ):
                html = await page.text()
        finally:
            serving.stop()
        assert "<td>abandoned (1 still running)</td>" in html
    finally:
        for row in processes(db, batch_id):
            with contextlib.suppress(ProcessLookupError):
                os.kill(row.pid, signal.SIGKILL)


def _ls(folder: Path) -> str:
    return flightdeck("ls", "--state-dir", "state", cwd=folder).stdout


async def test_ctrl_c_ends_the_open_tabs_and_the_batch_runs_on(project: Path, batch: str) -> None:
    serving = Serving(project)
    tab = await Tab.open(serving, batch_id=batch)
    try:
        await tab.until(lambda t: "c1" in t, "the rows")
        [session] = serving.sessions()
        serving.stop()  # SIGINT
        assert serving.process.returncode == ExitCode.OK
        assert ended(session)
        assert not served.record_path(project / "state", serving.process.pid).exists()
    finally:
        await tab.client.close()
    listing = flightdeck("ls", "--state-dir", "state", cwd=project).stdout
    [row] = [line for line in listing.splitlines() if batch in line]
    assert "running" in row


async def test_a_tab_that_fails_to_start_says_why_on_stderr_not_stdout(
    project: Path, batch: str, tmp_path: Path
) -> None:
    # Each tab reads --config when it starts: one broken since the server started fails.
    config = tmp_path / "serve.toml"
    config.write_text("[tui]\n", encoding="utf-8")
    serving = Serving(project, "--config", str(config))
    config.write_text("[tui]\nbogus = 1\n", encoding="utf-8")
    assert serving.process.stderr is not None and serving.process.stdout is not None
    seen: list[str] = []
    tab = await Tab.open(serving, batch_id=batch)
    try:
        loop = asyncio.get_running_loop()
        while not any("Application failed to start" in line for line in seen):
            line = await asyncio.wait_for(
                loop.run_in_executor(None, serving.process.stderr.readline), 60
            )
            assert line, seen
            seen.append(line)
        # The page is told (its websocket closed: "Session ended"), not left at its intro.
        assert await tab.closed_by_server(), "the page of a tab whose app failed was left open"
        serving.process.send_signal(signal.SIGINT)
        serving.process.wait(HANG_S)
        out = serving.process.stdout.read()
    finally:
        await tab.close()
        err = "".join(seen) + serving.stop()
    assert out == ""  # the address, read by Serving, was all
    assert "tab: flightdeck: " in err and "tui.bogus: unknown key" in err, err


def test_bad_arguments_say_why_and_serve_nothing(project: Path) -> None:
    records = set(project.glob("state/serving/*"))  # none before a server first runs
    unknown = flightdeck("serve", "nope", "--state-dir", "state", cwd=project)
    assert unknown.returncode == ExitCode.USAGE
    assert "no batch 'nope'" in unknown.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = str(taken.getsockname()[1])
        busy = flightdeck("serve", "--port", port, "--state-dir", "state", cwd=project)
    assert busy.returncode == ExitCode.USAGE
    [line] = busy.stderr.strip().splitlines()
    assert "--port" in line and "--port 0 picks a free one" in line
    assert busy.stdout == ""  # no token printed for a server that never ran
    assert set(project.glob("state/serving/*")) == records


def test_a_host_the_network_reaches_is_warned_about(project: Path) -> None:
    serving = Serving(project, "--host", "0.0.0.0")
    assert serving.url.startswith(f"http://{socket.gethostname()}:")
    err = serving.stop()
    assert "warning: 0.0.0.0 is reachable from the network and this is plain HTTP" in err
    assert "Put TLS in front" in err


def test_what_serve_logs_reaches_stderr_sanitized(capsys: pytest.CaptureFixture[str]) -> None:
    # textual-serve's errors and the tab lines quote what a client sent (a path, a batch id
    # from the URL): an escape sequence in it must not reach the operator's terminal.
    import logging

    from flightdeck.tui.web import command

    command._log_to_stderr("the-token")
    try:
        logging.getLogger("textual-serve").error("bad path /\x1b]0;pwned\x07x\x1b[31mred")
        logging.getLogger("flightdeck.serve").info("tab opened on batch %s", "b\x1b[2Jb")
        logging.getLogger("aiohttp.server").error("bad request: GET /?token=the-token\x1b[2J")
    finally:
        for name in command.LOGGERS:
            logger = logging.getLogger(name)
            for handler in logger.handlers[:]:
                logger.removeHandler(handler)
            logger.propagate = True
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x07" not in err, repr(err)
    assert "bad path /xred" in err and "tab opened on batch bb" in err, err
    assert "bad request: GET /?token=<token>" in err and "the-token" not in err, err


def test_a_request_aiohttp_cannot_parse_is_logged_without_the_token(project: Path) -> None:
    # aiohttp logs such a request with its first line: `?token=` and all, unless redacted.
    serving = Serving(project)
    try:
        with socket.create_connection(("127.0.0.1", serving.port), timeout=30) as conn:
            # A byte no URL may hold, after the token: refused with the line quoted.
            conn.sendall(f"GET /?token={serving.token}&x=\0 HTTP/1.1\r\n\r\n".encode())
            assert conn.recv(100).startswith(b"HTTP/1.0 400")
    finally:
        err = serving.stop()
    assert "Error handling request from 127.0.0.1" in err, err
    assert serving.token not in err and "?token=<token>" in err, err
