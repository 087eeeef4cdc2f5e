"""`flightdeck serve [BATCH_ID]`: the attached TUI, served to browsers until Ctrl+C.

Binds 127.0.0.1 unless `--host` says otherwise and prints the address with a fresh token once;
the token lives in this process's memory only (not on disk, in a log, on a command line or in
an environment). While it serves, `serving/<pid>.json` in the state folder tells `ls` the port
(engine/attached/served.py). The owner never depends on it: each tab is one more attached client.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import errno
import io
import ipaddress
import logging
import os
import signal
import socket
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from flightdeck.engine.model import BatchStatus
from flightdeck.engine.sanitize import one_line, sanitize
from flightdeck.tui.console import console_for
from flightdeck.tui.exitcodes import ExitCode
from flightdeck.tui.usage import UsageError, state_db, unknown_batch
from rich.text import Text

if TYPE_CHECKING:
    from flightdeck.tui.web.server import WebServer

CLOSE_TABS_S = 10.0  # at Ctrl+C, how long the open tabs' apps get to quit
WILDCARDS = ("", "0.0.0.0", "::")

log = logging.getLogger("flightdeck.serve")


def cmd_serve(args: argparse.Namespace) -> ExitCode:
    """Serve the batch (or every batch of the state folder) until interrupted."""
    import psutil
    from flightdeck.engine.apilight import load_settings
    from flightdeck.engine.attached import served
    from flightdeck.engine.attached.store import StoreReader
    from flightdeck.tui.web.auth import Token
    from flightdeck.tui.web.server import ServeOptions, WebServer

    load_settings(args.config)  # a bad [tui] table fails here, once, not in every tab
    db = state_db(args.state_dir, args.config)
    state_dir = db.parent
    runs_on = "the batch runs on"  # what Ctrl+C leaves: said once it serves
    if args.batch_id is not None:
        with StoreReader(db) as reader:
            if (info := reader.batch(args.batch_id)) is None:
                raise unknown_batch(args.batch_id, db)
        runs_on = _after_serve(info.status)
    sock = bind(args.host, args.port)
    port = int(sock.getsockname()[1])
    token = Token()
    options = ServeOptions(state_dir, args.batch_id, args.read_only, args.config)
    record = served.Served(
        pid=os.getpid(),
        start=psutil.Process().create_time(),
        port=port,
        batch_id=args.batch_id,
        read_only=args.read_only,
    )

    def tabs_changed(tabs: tuple[str, ...]) -> None:
        try:
            served.write(state_dir, dataclasses.replace(record, open=tabs))
        except OSError as exc:  # `ls` is told less; the tabs go on
            log.warning("could not update %s: %s", served.record_path(state_dir, record.pid), exc)

    server = WebServer(options, token, port, on_tabs=tabs_changed)
    served.prune(state_dir)
    served.write(state_dir, record)
    _log_to_stderr(token.value)
    stdout = sys.stdout
    try:
        asyncio.run(_serve(server, sock, lambda: _announce(args, port, token.value, runs_on)))
    finally:
        sys.stdout = stdout
        served.remove(state_dir, record.pid)
    return ExitCode.OK


async def _serve(server: WebServer, sock: socket.socket, ready: Callable[[], None]) -> None:
    """Serve on `sock` until SIGINT or SIGTERM; then end the open tabs and stop."""
    from aiohttp import web

    runner = web.AppRunner(server.app(), access_log=None)  # an access log would hold the token
    await runner.setup()
    await web.SockSite(runner, sock).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    ready()
    try:
        await stop.wait()
    finally:
        await server.close_sessions(CLOSE_TABS_S)
        await runner.cleanup()


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (0: any free port); UsageError saying why if not."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
        sock = socket.socket(family, kind, proto)
    except OSError as exc:
        raise UsageError(
            None, None, "--host", f"cannot listen on {one_line(host)}: {exc}"
        ) from None
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        hint = " (--port 0 picks a free one)" if exc.errno == errno.EADDRINUSE else ""
        where = f"{one_line(host)}:{port}"
        message = f"cannot listen on {where}: {exc.strerror}{hint}"
        raise UsageError(None, None, "--port", message) from None
    sock.setblocking(False)
    return sock


def is_local(host: str) -> bool:
    """Whether `host` is this machine's loopback only (nothing else on the network reaches it)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def url_host(host: str) -> str:
    """How a browser names `host` in a URL (a wildcard: this machine's name)."""
    if host in WILDCARDS:
        return socket.gethostname()
    return f"[{host}]" if ":" in host else host


def _after_serve(status: BatchStatus) -> str:
    """What a served batch does once `serve` stops: it runs on only if it still runs."""
    if status is BatchStatus.RUNNING:
        return "the batch runs on"
    if status is BatchStatus.ABANDONED:
        return "the batch's owner died: `flightdeck resume` runs it on"
    return f"the batch has ended: {status.value}"


def _announce(args: argparse.Namespace, port: int, token: str, runs_on: str) -> None:
    """The address with the token, printed this once, and what it serves."""
    what = f"batch {args.batch_id}" if args.batch_id else "the state folder's batches"
    mode = " read-only" if args.read_only else ""
    sys.stdout.write(f"http://{url_host(args.host)}:{port}/?token={token}\n")
    sys.stdout.flush()
    sys.stdout = _TabErrors()  # the address is all standard output carries
    err = console_for(stderr=True)
    err.print(Text(f"serving {what}{mode}; Ctrl+C stops ({runs_on})"))
    if not is_local(args.host):
        err.print(
            Text(
                f"warning: {one_line(args.host) or 'every address'} is reachable from the network "
                "and this is plain HTTP: anyone who can see the traffic reads the token, every "
                "transcript and every steer, and with the token can steer and stop children. "
                "Put TLS in front (a reverse proxy) or use an SSH tunnel; --read-only limits "
                "what a leaked token can do.",
                style="bold yellow",
            )
        )


class _TabErrors(io.TextIOBase):
    """What textual-serve prints of a tab's app that failed to start (its stderr: a bad
    `--config` since, say): it writes that to sys.stdout; here, lines of the log on stderr."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        for line in text.splitlines():
            if line.strip():
                log.warning("tab: %s", line)
        return len(text)


class _Sanitized(logging.Formatter):
    """A line as the terminal may show it, without the token: textual-serve's and aiohttp's
    errors and our tab lines quote what a client sent (a path, a batch id from the URL, a
    header; a request aiohttp could not parse, its first line and so its `?token=` too)."""

    def __init__(self, token: str) -> None:
        super().__init__("%(asctime)s %(message)s", "%H:%M:%S")
        self._token = token

    def format(self, record: logging.LogRecord) -> str:
        return sanitize(super().format(record)).replace(self._token, "<token>")


# Logger: least level shown. aiohttp's own (a request it could not parse, a handler's error)
# would otherwise reach stderr through logging's last resort, token and all.
LOGGERS = {
    "flightdeck.serve": logging.INFO,
    "textual-serve": logging.INFO,
    "aiohttp": logging.WARNING,
}


def _log_to_stderr(token: str) -> None:
    """Tabs opened and closed, and textual-serve's and aiohttp's errors, as lines on stderr."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_Sanitized(token))
    for name, level in LOGGERS.items():
        logger = logging.getLogger(name)
        logger.addHandler(handler)
        logger.setLevel(level)
        logger.propagate = False
