"""HTTP plumbing shared by the SDK providers: an abortable transport and rate-limit headers.

Closing an httpx response from another thread does not wake a thread blocked in `recv` on its
socket (we measured it: the reader stays blocked until the server sends or the read timeout
fires). So each turn carries an `Abort` handle; the worker thread binds it around every blocking
SDK call, and our network backend records the socket the thread is blocked on. `Abort.fire()`
from the coordinator thread then `shutdown()`s exactly that socket, which wakes the blocked
`recv`, `send` or `connect` at once. Only a socket in use by the bound thread at that instant is
touched, so a pooled connection that another child picked up is never shut down by mistake.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

import httpcore2
import httpx2
from flightdeck.engine.providers.base import (
    FatalError,
    HeadroomEvent,
    ProviderError,
    RateLimited,
    TransientError,
)
from flightdeck.engine.sanitize import redact

try:  # not re-exported; without it a connect in progress is bounded by connect_timeout_s only
    from httpcore2._backends.sync import SyncStream as _SyncStream
except ImportError:  # pragma: no cover
    _SyncStream = None  # type: ignore[assignment,misc]

_local = threading.local()


class Abort:
    """One turn's abort handle: `fire()` from any thread wakes the turn's blocked socket call."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fired = False
        self._blocked_on: socket.socket | None = None

    @property
    def fired(self) -> bool:
        return self._fired

    def fire(self) -> None:
        with self._lock:
            self._fired = True
            sock = self._blocked_on
            # Under the lock: the worker cannot leave the call (and hand the connection back
            # to the pool) between our look and the shutdown.
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.shutdown(socket.SHUT_RDWR)

    @contextlib.contextmanager
    def blocking(self, sock: socket.socket | None) -> Iterator[None]:
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


def _current() -> Abort | None:
    abort: Abort | None = getattr(_local, "abort", None)
    return abort


class _WatchedStream(httpcore2.NetworkStream):
    def __init__(self, inner: httpcore2.NetworkStream) -> None:
        self._inner = inner

    def _guard(self) -> contextlib.AbstractContextManager[None]:
        abort = _current()
        if abort is None:
            return contextlib.nullcontext()
        return abort.blocking(self._inner.get_extra_info("socket"))

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        with self._guard():
            return self._inner.read(max_bytes, timeout)

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        with self._guard():
            self._inner.write(buffer, timeout)

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.NetworkStream:
        with self._guard():
            return _WatchedStream(self._inner.start_tls(ssl_context, server_hostname, timeout))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _WatchedBackend(httpcore2.NetworkBackend):
    """httpcore's sync backend, with every blocking socket call visible to the bound Abort."""

    def __init__(self) -> None:
        self._inner = httpcore2.SyncBackend()

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        abort = _current()
        if abort is None or _SyncStream is None:
            inner = self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
            return _WatchedStream(inner)
        # socket.create_connection, but with the socket visible to `abort` while it connects.
        error: OSError | None = None
        try:
            addresses = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise httpcore2.ConnectError(str(exc)) from exc
        for family, kind, proto, _, address in addresses:
            sock = socket.socket(family, kind, proto)
            try:
                for option in socket_options or ():
                    sock.setsockopt(*option)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                sock.settimeout(timeout)
                if local_address is not None:
                    sock.bind((local_address, 0))
                with abort.blocking(sock):
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
            return _WatchedStream(_SyncStream(sock))
        raise httpcore2.ConnectError(str(error or f"cannot resolve {host}"))

    def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.NetworkStream:
        return _WatchedStream(self._inner.connect_unix_socket(path, timeout, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class AbortableTransport(httpx2.HTTPTransport):
    """httpx's HTTP transport on our watched network backend."""

    def __init__(self, *, limits: httpx2.Limits) -> None:
        super().__init__(limits=limits)
        # httpx does not expose httpcore's `network_backend`; rebuild its pool with ours.
        self._pool = httpcore2.ConnectionPool(
            ssl_context=httpx2.create_ssl_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_WatchedBackend(),
        )


DEFAULT_CONNECT_TIMEOUT_S = 10.0
DEFAULT_READ_TIMEOUT_S = 120.0
_LIMITS = httpx2.Limits(max_connections=1000, max_keepalive_connections=100, keepalive_expiry=30)


def http_client(options: Mapping[str, Any]) -> httpx2.Client:
    """An httpx client for one route: abortable, with the route's timeouts."""
    return httpx2.Client(transport=AbortableTransport(limits=_LIMITS), timeout=timeout_of(options))


def timeout_of(options: Mapping[str, Any]) -> httpx2.Timeout:
    connect = float(options.get("connect_timeout_s", DEFAULT_CONNECT_TIMEOUT_S))
    read = float(options.get("read_timeout_s", DEFAULT_READ_TIMEOUT_S))
    # A stream that stalls past `read` raises ReadTimeout, which the providers retry.
    return httpx2.Timeout(read, connect=connect, pool=connect)


# --- headers -----------------------------------------------------------------------------------


def retry_after(headers: Mapping[str, str], now: Callable[[], float] = time.time) -> float | None:
    """Seconds the server asked us to wait: `retry-after-ms`, else `retry-after` (s or a date)."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        with contextlib.suppress(ValueError):
            return max(0.0, float(ms) / 1000.0)
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - now())


def duration_s(text: str | None) -> float | None:
    """OpenAI's reset durations: "1s", "6m0s", "20ms", "1h2m3.5s"."""
    if not text:
        return None
    total, number, i = 0.0, "", 0
    units = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
    while i < len(text):
        ch = text[i]
        if ch.isdigit() or ch == ".":
            number += ch
            i += 1
            continue
        unit = "ms" if text.startswith("ms", i) else ch
        if unit not in units or not number:
            return None
        try:
            total += float(number) * units[unit]
        except ValueError:
            return None
        number, i = "", i + len(unit)
    if number:  # a bare number: seconds
        try:
            total += float(number)
        except ValueError:
            return None
    return total


def seconds_until(stamp: str | None, now: Callable[[], float] = time.time) -> float | None:
    """Anthropic's resets: an RFC 3339 time; seconds from now until then."""
    if not stamp:
        return None
    try:
        when = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return None
    return max(0.0, when.timestamp() - now())


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(float(text))
    except ValueError:
        return None


def openai_headroom(headers: Mapping[str, str]) -> HeadroomEvent | None:
    """`x-ratelimit-remaining-requests` and friends (OpenAI and many compatible servers)."""
    event = HeadroomEvent(
        remaining_requests=_int(headers.get("x-ratelimit-remaining-requests")),
        remaining_tokens=_int(headers.get("x-ratelimit-remaining-tokens")),
        reset_requests_s=duration_s(headers.get("x-ratelimit-reset-requests")),
        reset_tokens_s=duration_s(headers.get("x-ratelimit-reset-tokens")),
    )
    return event if event != HeadroomEvent() else None


def anthropic_headroom(
    headers: Mapping[str, str], now: Callable[[], float] = time.time
) -> HeadroomEvent | None:
    """`anthropic-ratelimit-requests-remaining` and friends; token figures from the tightest
    of the combined, input and output token limits."""
    tokens: list[tuple[int, float | None]] = []
    for kind in ("tokens", "input-tokens", "output-tokens"):
        left = _int(headers.get(f"anthropic-ratelimit-{kind}-remaining"))
        if left is not None:
            reset = seconds_until(headers.get(f"anthropic-ratelimit-{kind}-reset"), now)
            tokens.append((left, reset))
    tightest = min(tokens, key=lambda t: t[0]) if tokens else (None, None)
    event = HeadroomEvent(
        remaining_requests=_int(headers.get("anthropic-ratelimit-requests-remaining")),
        remaining_tokens=tightest[0],
        reset_requests_s=seconds_until(headers.get("anthropic-ratelimit-requests-reset"), now),
        reset_tokens_s=tightest[1],
    )
    return event if event != HeadroomEvent() else None


MAX_MESSAGE = 300  # an error message the operator reads in one row


def clip_message(text: str, secrets: tuple[str, ...]) -> str:
    """One line, the key redacted, at most MAX_MESSAGE characters: an error fit for the row."""
    text = redact(" ".join(text.split()), secrets)
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 1] + "…"


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


# --- errors both SDKs map alike ------------------------------------------------------------------

READ_TIMEOUT = "timeout: no data within the read timeout"


def status_error(
    status: int,
    detail: str,
    wait: float | None,
    *,
    kind: str | None = None,
    account: str | None = None,
) -> ProviderError:
    """An HTTP error status as one of our typed errors.

    `kind` is the provider's error type, named in the message when given; `account` names an
    account problem (out of credit, key revoked) that no retry can fix.
    """
    if status in (401, 403):
        return FatalError(f"{status} authentication failed (check the API key): {detail}")
    if account is not None:
        return FatalError(f"{status} {account}: {detail}")
    if status == 429:
        return RateLimited(f"429 rate limited: {detail}", retry_after=wait)
    if status == 529:
        return RateLimited(f"529 overloaded: {detail}", retry_after=wait)
    if status in (408, 409) or status >= 500:
        return TransientError(f"{status} {kind or 'server error'}: {detail}", retry_after=wait)
    return FatalError(f"{status} {kind or 'request rejected'}: {detail}")


def connection_error(exc: BaseException, message: str, secrets: tuple[str, ...]) -> ProviderError:
    """An SDK's connection error, naming the socket-level cause when there is one."""
    cause = exc.__cause__
    why = f"{type(cause).__name__}: {cause}" if cause is not None else message
    return TransientError(clip_message(f"connection error: {why}", secrets))


def transport_error(exc: BaseException, secrets: tuple[str, ...]) -> ProviderError:
    """What is left once an SDK's own errors are mapped: httpx failures and malformed data."""
    if isinstance(exc, httpx2.TimeoutException):
        return TransientError(READ_TIMEOUT)
    if isinstance(exc, httpx2.HTTPError):
        return TransientError(clip_message(f"stream broke: {type(exc).__name__}: {exc}", secrets))
    # json.JSONDecodeError (a ValueError) from a malformed event, or anything else the SDK threw.
    return TransientError(clip_message(f"malformed response: {type(exc).__name__}: {exc}", secrets))
