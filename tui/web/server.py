"""The web server of `flightdeck serve`: aiohttp with textual-serve's page, script and sessions.

Routes, every one behind the token (auth.py):
  /                   the batch served: the one named at start, else the latest running one;
                      with neither, the page of batches
  /batches            every batch of the state folder, as `ls` lists them (no batch named)
  /batch/{id}         that batch's page: textual-serve's terminal, opening the websocket below
  /batch/{id}/ws      one session: textual-serve starts the attached TUI (session.py) for this
                      tab, pipes it to the browser, and ends it when the tab closes
  /static/...         textual-serve's script, styles and fonts
  /download/{key}     a file a tab's app delivered to its page (the palette's Screenshot)
"""

from __future__ import annotations

import asyncio
import logging
import re
import shlex
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp_jinja2
import jinja2
import textual_serve.server
from aiohttp import web
from flightdeck.engine.attached.store import StoreReader
from flightdeck.engine.model import BatchStatus
from flightdeck.tui.commands import LS_COLUMNS, ls_cells
from flightdeck.tui.web.auth import HEADERS, Token, guard, secure
from flightdeck.tui.web.session import session_argv
from textual_serve.app_service import AppService
from textual_serve.download_manager import DownloadManager
from textual_serve.server import Server

TEMPLATES = Path(__file__).parent  # batches.html
SERVE_FILES = Path(textual_serve.server.__file__).parent  # its static/ and templates/

log = logging.getLogger("flightdeck.serve")


@dataclass(frozen=True)
class ServeOptions:
    """What `flightdeck serve` was asked to serve."""

    state_dir: Path
    batch_id: str | None  # None: any batch of the state folder
    read_only: bool = False
    config: Path | None = None  # flightdeck.toml for the [tui] settings of each session


class WebServer:
    """The aiohttp application of one `flightdeck serve`, and the tabs it has open."""

    def __init__(
        self,
        options: ServeOptions,
        token: Token,
        port: int,
        on_tabs: Callable[[tuple[str, ...]], None] = lambda _: None,
    ) -> None:
        self.options = options
        self.token = token
        self.port = port
        self.on_tabs = on_tabs  # told the batches with a tab open, whenever that changes
        self.tabs: Counter[str] = Counter()
        self._sessions: set[asyncio.Task[Any]] = set()
        self._reader: StoreReader | None = None
        self.downloads = DownloadManager()  # every tab's, as /download/{key} finds them

    def app(self) -> web.Application:
        """The aiohttp application: the token in front of every route."""
        app = web.Application(middlewares=[guard(self.token, self.port)])
        loader = jinja2.ChoiceLoader(
            [jinja2.FileSystemLoader(TEMPLATES), jinja2.FunctionLoader(_serve_template)]
        )
        aiohttp_jinja2.setup(app, loader=loader, autoescape=True)
        app.add_routes([web.get("/", self.index), web.get("/batch/{batch_id}", self.page)])
        if self.options.batch_id is None:
            app.add_routes([web.get("/batches", self.listing)])
        app.add_routes(
            [
                web.get("/batch/{batch_id}/ws", self.session),
                # GET alone: a HEAD (a prefetch) would use up the one-time download.
                web.get("/download/{key}", self.download, allow_head=False),
                web.static("/static", SERVE_FILES / "static"),
            ]
        )
        app.on_cleanup.append(self._close_reader)
        return app

    @property
    def reader(self) -> StoreReader:
        if self._reader is None:
            self._reader = StoreReader(self.options.state_dir / "flightdeck.db")
        return self._reader

    async def _close_reader(self, _: web.Application) -> None:
        if self._reader is not None:
            self._reader.close()

    # --- pages ----------------------------------------------------------------------------------

    async def index(self, request: web.Request) -> web.StreamResponse:
        """The batch served, or the page of batches when there is none to show."""
        batch_id = self.options.batch_id
        if batch_id is None:
            running = [b for b in self.reader.batches() if b.status is BatchStatus.RUNNING]
            if not running:
                return await self.listing(request)
            batch_id = running[0].id
        return self._app_page(request, batch_id)

    async def page(self, request: web.Request) -> web.StreamResponse:
        """One batch's page."""
        return self._app_page(request, self._served(request))

    async def listing(self, request: web.Request) -> web.StreamResponse:
        """Every batch of the state folder, newest first, each a link to its page."""
        batches = self.reader.batches()
        context = {
            "columns": LS_COLUMNS,
            "rows": [(b.id, ls_cells(self.reader.path, b)) for b in batches],
            "running": any(b.status is BatchStatus.RUNNING for b in batches),
            "read_only": self.options.read_only,
        }
        return aiohttp_jinja2.render_template("batches.html", request, context)

    def _app_page(self, request: web.Request, batch_id: str) -> web.StreamResponse:
        """textual-serve's page: its terminal, connecting to this batch's websocket."""
        scheme = "wss" if secure(request) else "ws"
        title = f"flightdeck · {batch_id}" + (" · read-only" if self.options.read_only else "")
        context = {
            "font_size": _int(request.query.get("fontsize"), 16),
            "app_websocket_url": f"{scheme}://{request.host}/batch/{quote(batch_id, '')}/ws",
            "config": {"static": {"url": "/static/"}},
            "application": {"name": title},
        }
        return aiohttp_jinja2.render_template("app_index.html", request, context)

    def _served(self, request: web.Request) -> str:
        """The batch the address names, if this server shows it; 404 otherwise."""
        batch_id = request.match_info["batch_id"]
        fixed = self.options.batch_id
        if (fixed is not None and batch_id != fixed) or self.reader.batch(batch_id) is None:
            raise web.HTTPNotFound(text="404: no such batch here\n")
        return batch_id

    # --- sessions -------------------------------------------------------------------------------

    async def session(self, request: web.Request) -> web.StreamResponse:
        """One tab: its own attached TUI, started by textual-serve, ended when the tab closes."""
        batch_id = self._served(request)
        if not web.WebSocketResponse().can_prepare(request).ok:
            # A plain GET here is no tab: answered (with every answer's headers), instead of
            # the connection dropped with a traceback on stderr and a tab logged that never was.
            raise web.HTTPBadRequest(text="400: this address takes a websocket only\n")
        opts = self.options
        argv = session_argv(opts.state_dir, batch_id, read_only=opts.read_only, config=opts.config)
        # textual-serve's Server runs one command per websocket through a shell: one made for
        # this tab carries its batch (`exec`: the app, not a shell, is the server's child).
        tab = _TabServer("exec " + shlex.join(argv))
        tab.download_manager = self.downloads
        task = asyncio.current_task()
        assert task is not None
        self._sessions.add(task)
        self._count(batch_id, +1)
        log.info("tab opened on batch %s from %s", batch_id, request.remote)
        try:
            return await tab.handle_websocket(request)
        finally:
            self._sessions.discard(task)
            self._count(batch_id, -1)
            log.info("tab closed on batch %s from %s", batch_id, request.remote)

    async def download(self, request: web.Request) -> web.StreamResponse:
        """A file a tab's app delivered to its page, saved as a file: an SVG screenshot holds
        children's text, never opened as a page of this origin."""
        try:
            meta = await self.downloads.get_download_metadata(request.match_info["key"])
        except KeyError:
            raise web.HTTPNotFound(text="404: no such download\n") from None
        name = re.sub(r"[^\w.-]", "_", meta.file_name, flags=re.ASCII)
        headers = {
            **HEADERS,
            "Content-Type": meta.mime_type,
            "Content-Disposition": f'attachment; filename="{name}"',
            "Content-Security-Policy": "sandbox",
        }
        response = web.StreamResponse(headers=headers)
        await response.prepare(request)
        async for chunk in self.downloads.download(meta.delivery_key):
            await response.write(chunk)
        await response.write_eof()
        return response

    def _count(self, batch_id: str, step: int) -> None:
        self.tabs[batch_id] += step
        self.tabs = +self.tabs  # drop the batches with no tab left
        self.on_tabs(tuple(sorted(self.tabs)))

    async def close_sessions(self, timeout: float) -> None:
        """End every open tab's session (its app quits; the batch runs on)."""
        sessions = list(self._sessions)
        for task in sessions:
            task.cancel()
        if sessions:
            await asyncio.wait(sessions, timeout=timeout)


class _TabServer(Server):
    """textual-serve's session of one tab, whose page is closed once its app has ended.

    textual-serve closes the page only on the app's own exit message: an app that failed to
    start, crashed or was killed left its page frozen on the last frame (keys going nowhere)
    and the tab counted open."""

    async def _process_messages(
        self, websocket: web.WebSocketResponse, app_service: AppService
    ) -> None:
        app = app_service._task  # AppService.run: reads the app's pipe until it closes
        assert app is not None
        browser = asyncio.ensure_future(super()._process_messages(websocket, app_service))
        try:
            await asyncio.wait((browser, app), return_when=asyncio.FIRST_COMPLETED)
            if not browser.done():
                await websocket.close()  # the page says "Session ended"
            await browser
        finally:
            browser.cancel()


# textual-serve's page loads its font from Google; the same font is in its static files. The
# page sends the browser to no other site (and looks the same on a machine with no internet).
_REMOTE_FONT = re.compile(
    r'<link\s+rel="stylesheet"\s+href="https://fonts\.googleapis\.com[^"]*"\s*/?>'
)
_LOCAL_FONT = (
    "<style>@font-face { font-family: 'Roboto Mono'; "
    "src: url('/static/fonts/RobotoMono-VariableFont_wght.ttf'); }</style>"
)


def _serve_template(name: str) -> tuple[str, str, Callable[[], bool]] | None:
    """textual-serve's templates, its page's font taken from its own static files."""
    path = SERVE_FILES / "templates" / name
    if not path.is_file():
        return None
    text = _REMOTE_FONT.sub(_LOCAL_FONT, path.read_text(encoding="utf-8"))
    return text, str(path), lambda: True


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default
