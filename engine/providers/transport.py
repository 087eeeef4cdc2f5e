"""An httpx client whose blocking socket calls a stop can end from another thread.

Closing an httpx response from another thread does not wake a thread blocked in `recv` on its
socket: the reader stays blocked until the server sends or the read timeout fires. So each turn
carries an `Abort` handle; the worker thread binds it around every blocking SDK call, and our
network backend records the socket the thread is blocked on. `Abort.fire()` from the controlling
thread then `shutdown()`s exactly that socket, which wakes the blocked `connect`, `recv` or `send`
at once. Only a socket in use by the bound thread at that instant is touched, so a pooled
connection that another child picked up is never shut down by mistake.

Built on the HTTP stack's public extension points only: httpcore's network backend
(`NetworkBackend` and `NetworkStream`, handed to a `ConnectionPool`) and httpx's custom transport
(`BaseTransport.handle_request`).
"""

from __future__ import annotations

import contextlib
import select
import socket
import ssl
import threading
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from typing import Any

import httpcore2
import httpx2
from flightdeck.engine.providers.base import HeadroomEvent

# Where they lived before headers.py: tests/test_retries.py still imports them from here.

DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_READ_TIMEOUT_S = 120.0
_LIMITS = httpx2.Limits(max_connections=1000, max_keepalive_connections=100, keepalive_expiry=30)

_local = threading.local()


class Abort:
    """One turn's abort handle: `fire()` from any thread wakes the turn's blocked socket call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fired = False
        self._blocked_on: socket.socket | None = None

    @property
    def fired(self) -> bool:
        """Whether `fire()` has been called."""
        return self._fired

    def fire(self) -> None:
        """End the turn: shut down the socket its thread is blocked on, and refuse new waits."""
        with self._lock:
            self._fired = True
            sock = self._blocked_on
            # Under the lock: the worker cannot leave the call (and hand the connection back
            # to the pool) between our look and the shutdown.
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    @contextlib.contextmanager
    def blocking(self, sock: socket.socket) -> Iterator[None]:
        """Mark `sock` as the one this turn's thread is blocked on for the duration."""
        with self._lock:
            if self._fired:
                raise httpcore2.ReadError("stream closed by the controlling thread")
            self._blocked_on = sock
        try:
            yield
        finally:
            with self._lock:
                self._blocked_on = None


@contextlib.contextmanager
def bound(abort: Abort) -> Iterator[None]:
    """Bind `abort` to this thread around a blocking SDK call."""
    previous = getattr(_local, "abort", None)
    _local.abort = abort
    try:
        yield
    finally:
        _local.abort = previous


def _watch(sock: socket.socket) -> contextlib.AbstractContextManager[None]:
    """Make a blocking call on `sock` abortable by the Abort bound to this thread, if any."""
    abort: Abort | None = getattr(_local, "abort", None)
    return contextlib.nullcontext() if abort is None else abort.blocking(sock)


@contextlib.contextmanager
def _socket_errors(timeout: type[Exception], failure: type[Exception]) -> Iterator[None]:
    """Socket errors as httpcore's own, which httpx and the SDKs report."""
    try:
        yield
    except TimeoutError as exc:
        raise timeout(str(exc)) from exc
    except OSError as exc:
        raise failure(str(exc)) from exc


def _readable(sock: socket.socket) -> bool:
    """Whether a `recv` would return at once: data, or the end of a connection the server closed."""
    if sock.fileno() < 0:
        return True
    if not hasattr(select, "poll"):  # Windows
        return bool(select.select([sock], [], [], 0)[0])
    poll = select.poll()
    poll.register(sock, select.POLLIN)
    return bool(poll.poll(0))


class _SocketStream(httpcore2.NetworkStream):
    """A connected socket, plain or TLS, whose every blocking call the bound Abort can wake."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        with _socket_errors(httpcore2.ReadTimeout, httpcore2.ReadError), _watch(self._sock):
            self._sock.settimeout(timeout)
            return self._sock.recv(max_bytes)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        if not buffer:
            return
        with _socket_errors(httpcore2.WriteTimeout, httpcore2.WriteError), _watch(self._sock):
            self._sock.settimeout(timeout)
            view = memoryview(buffer)
            while view:
                view = view[self._sock.send(view) :]

    def close(self) -> None:
        self._sock.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.NetworkStream:
        with _socket_errors(httpcore2.ConnectTimeout, httpcore2.ConnectError):
            try:
                with _watch(self._sock):
                    self._sock.settimeout(timeout)
                    tls = ssl_context.wrap_socket(self._sock, server_hostname=server_hostname)
            except BaseException:
                self._sock.close()
                raise
        return _SocketStream(tls)

    def get_extra_info(self, info: str) -> Any:
        if info == "ssl_object":  # read for the ALPN protocol, which an SSLSocket also answers
            return self._sock if isinstance(self._sock, ssl.SSLSocket) else None
        if info == "client_addr":
            return self._sock.getsockname()
        if info == "server_addr":
            return self._sock.getpeername()
        if info == "socket":
            return self._sock
        if info == "is_readable":
            return _readable(self._sock)
        return None


class _AbortableBackend(httpcore2.NetworkBackend):
    """httpcore's network I/O on sockets the bound Abort can wake, connecting included."""

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        # socket.create_connection, with each socket visible to the Abort while it connects.
        try:
            addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise httpcore2.ConnectError(str(exc)) from exc
        error: OSError | None = None
        for family, kind, proto, _, address in addresses:
            sock = socket.socket(family, kind, proto)
            try:
                for option in socket_options or ():
                    sock.setsockopt(*option)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(timeout)
                if local_address is not None:
                    sock.bind((local_address, 0))
                with _watch(sock):
                    sock.connect(address)
            except TimeoutError as exc:
                sock.close()
                raise httpcore2.ConnectTimeout(str(exc)) from exc
            except OSError as exc:
                sock.close()
                error = exc
                continue
            except BaseException:
                sock.close()
                raise
            return _SocketStream(sock)
        raise httpcore2.ConnectError(str(error or f"cannot resolve {host}"))


# httpcore's errors and the httpx errors they become, the more specific first: what httpx's own
# transport raises, and so what the SDKs and our error mapping expect.
_HTTPX_ERRORS: tuple[tuple[type[Exception], type[httpx2.TransportError]], ...] = (
    (httpcore2.ConnectTimeout, httpx2.ConnectTimeout),
    (httpcore2.ReadTimeout, httpx2.ReadTimeout),
    (httpcore2.WriteTimeout, httpx2.WriteTimeout),
    (httpcore2.PoolTimeout, httpx2.PoolTimeout),
    (httpcore2.TimeoutException, httpx2.TimeoutException),
    (httpcore2.ConnectError, httpx2.ConnectError),
    (httpcore2.ReadError, httpx2.ReadError),
    (httpcore2.WriteError, httpx2.WriteError),
    (httpcore2.NetworkError, httpx2.NetworkError),
    (httpcore2.ProxyError, httpx2.ProxyError),
    (httpcore2.UnsupportedProtocol, httpx2.UnsupportedProtocol),
    (httpcore2.LocalProtocolError, httpx2.LocalProtocolError),
    (httpcore2.RemoteProtocolError, httpx2.RemoteProtocolError),
    (httpcore2.ProtocolError, httpx2.ProtocolError),
)


@contextlib.contextmanager
def _httpx_errors() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        for core, mapped in _HTTPX_ERRORS:
            if isinstance(exc, core):
                raise mapped(str(exc)) from exc
        raise


class _ResponseStream(httpx2.SyncByteStream):
    def __init__(self, stream: Iterable[bytes]) -> None:
        self._stream = stream

    def __iter__(self) -> Iterator[bytes]:
        with _httpx_errors():
            yield from self._stream

    def close(self) -> None:
        close = getattr(self._stream, "close", None)
        if close is not None:
            close()


class AbortableTransport(httpx2.BaseTransport):
    """An httpx transport on an httpcore connection pool whose sockets an Abort can wake."""

    def __init__(self, *, limits: httpx2.Limits) -> None:
        self._pool = httpcore2.ConnectionPool(
            ssl_context=httpx2.create_ssl_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_AbortableBackend(),
        )

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        """Send `request` through the pool; the response streams its body as it is read."""
        url = request.url
        core_request = httpcore2.Request(
            method=request.method,
            url=httpcore2.URL(
                scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _httpx_errors():
            response = self._pool.handle_request(core_request)
        if not isinstance(response.stream, Iterable):  # a sync pool always answers with one
            raise TypeError("httpcore returned an async stream to a sync transport")
        return httpx2.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream),
            extensions=response.extensions,
        )

    def close(self) -> None:
        self._pool.close()


def http_client(options: Mapping[str, Any]) -> httpx2.Client:
    """An httpx client for one route: abortable, with the route's timeouts."""
    return httpx2.Client(transport=AbortableTransport(limits=_LIMITS), timeout=timeout_of(options))


def timeout_of(options: Mapping[str, Any]) -> httpx2.Timeout:
    """The route's connect and read timeouts (`connect_timeout_s`, `read_timeout_s`)."""
    connect = float(options.get("connect_timeout_s", DEFAULT_CONNECT_TIMEOUT_S))
    read = float(options.get("read_timeout_s", DEFAULT_READ_TIMEOUT_S))
    # A stream that stalls past `read` raises ReadTimeout, which the providers retry.
    return httpx2.Timeout(read, connect=connect, pool=connect)


def read_stream(
    abort: Abort,
    create: Callable[[], Any],
    headroom_of: Callable[[Mapping[str, str]], HeadroomEvent | None],
) -> Generator[Any, None, None]:
    """Open an SDK stream with `create()` and yield its events, every wait abortable by `abort`.

    The first item is the route's `HeadroomEvent` when the response headers carry one; the
    stream is closed however the iteration ends.
    """
    with bound(abort):
        stream = create()
    try:
        headroom = headroom_of(stream.response.headers)
        if headroom is not None:
            yield headroom
        events = iter(stream)
        while True:
            with bound(abort):
                event = next(events, None)
            if event is None:
                return
            yield event
    finally:
        stream.close()
